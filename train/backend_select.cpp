// Backend selection order and plugin search path.
#include "xylem/train/backend_select.h"

#include <cstdlib>

namespace xylem::train {

namespace {

// One name from the flag or the environment: "auto" ranks the devices, any other name must be
// available (Registry::select's error otherwise).
BackendChoice named(const Registry& registry, const std::string& name, const std::string& source) {
    if (name == "auto") {
        BackendChoice c = registry.choose({"auto"});
        c.why += " (" + source + (source.rfind("--", 0) == 0 ? " " : "=") + "auto)";
        return c;
    }
    BackendChoice c;
    c.backend = registry.select(name);
    c.why = "backend " + name + ": named by " + source;
    return c;
}

}  // namespace

BackendChoice select_backend(Registry& registry, const RunConfig& config, const std::string& flag_backend,
                             const std::vector<std::string>& flag_plugin_dirs) {
    if (config.threads > 0 && !std::getenv("XYLEM_NUM_THREADS"))
        setenv("XYLEM_NUM_THREADS", std::to_string(config.threads).c_str(), 0);
    // Probed in child processes: only the backend returned here is loaded into this process,
    // so a plugin that crashes while loading cannot stop a run on another backend.
    registry.scan(Registry::search_path(flag_plugin_dirs, config.plugin_path), Isolation::child);
    if (!flag_backend.empty()) return named(registry, flag_backend, "--backend");
    if (const char* env = std::getenv("XYLEM_BACKEND"); env && *env) return named(registry, env, "XYLEM_BACKEND");
    return registry.choose(config.backend);
}

std::string describe_choice(const BackendChoice& choice) {
    std::string s = choice.why + "\n";
    for (const Skipped& k : choice.skipped) s += "  skipped " + k.text() + "\n";
    return s;
}

}  // namespace xylem::train
