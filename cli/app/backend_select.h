// Backend selection: --backend beats XYLEM_BACKEND beats the config's preference list.
#pragma once

#include <memory>
#include <string>

#include "xylem/config.h"
#include "xylem/registry.h"

namespace xylem::app {

// Applies the config's native thread count (unless XYLEM_NUM_THREADS is already set),
// probes the plugin files in child processes and loads only the selected backend into this
// one. A backend named explicitly (flag or environment) must be available: there is no
// silent fallback.
std::shared_ptr<Backend> select_backend(Registry& registry, const RunConfig& config, const std::string& flag_backend,
                                        const std::vector<std::string>& flag_plugin_dirs);

}  // namespace xylem::app
