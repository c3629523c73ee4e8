// Backend selection: --backend beats XYLEM_BACKEND beats the config's preference list; any of
// them may say "auto" (the examples' default): the best-ranked device (Registry::auto_pick).
#pragma once

#include <memory>
#include <string>

#include "xylem/config.h"
#include "xylem/registry.h"

namespace xylem::train {

// Applies the config's native thread count (unless XYLEM_NUM_THREADS is already set),
// probes the plugin files in child processes and loads only the selected backend into this
// one. A backend named explicitly (flag or environment) must be available: there is no
// silent fallback. The choice says which device to run on, how it was chosen and what was
// passed over (print it with describe_choice).
BackendChoice select_backend(Registry& registry, const RunConfig& config, const std::string& flag_backend,
                             const std::vector<std::string>& flag_plugin_dirs);

// The lines a run prints about its backend choice: how it was chosen, then one "  skipped NAME:
// why" per backend or device passed over.
std::string describe_choice(const BackendChoice& choice);

}  // namespace xylem::train
