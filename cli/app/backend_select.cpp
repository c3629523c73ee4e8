// Backend selection order and plugin search path.
#include "app/backend_select.h"

#include <cstdlib>

namespace xylem::app {

std::shared_ptr<Backend> select_backend(Registry& registry, const RunConfig& config, const std::string& flag_backend,
                                        const std::vector<std::string>& flag_plugin_dirs) {
    if (config.threads > 0 && !std::getenv("XYLEM_NUM_THREADS"))
        setenv("XYLEM_NUM_THREADS", std::to_string(config.threads).c_str(), 0);
    // Probed in child processes: only the backend returned here is loaded into this process,
    // so a plugin that crashes while loading cannot stop a run on another backend.
    registry.scan(Registry::search_path(flag_plugin_dirs, config.plugin_path), Isolation::child);
    if (!flag_backend.empty()) return registry.select(flag_backend);
    if (const char* env = std::getenv("XYLEM_BACKEND"); env && *env) return registry.select(env);
    return registry.select_first(config.backend);
}

}  // namespace xylem::app
