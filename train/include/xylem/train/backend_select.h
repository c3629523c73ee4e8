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
//
// Loading a plugin file runs its code, and a config (or the config a checkpoint embeds) is data a
// user may have downloaded, so (docs/architecture.md, "Security"):
// - the config's plugin_path is searched only with `trust_config_plugin_path` (the command line's
//   --trust-config-plugins); otherwise it is left out and a note says so;
// - when the backend is named (flag, XYLEM_BACKEND, or a config list without "auto"), only those
//   backends' files (libxylem_<name>.so) are probed; "auto" probes every file of the search path.
BackendChoice select_backend(Registry& registry, const RunConfig& config, const std::string& flag_backend,
                             const std::vector<std::string>& flag_plugin_dirs, bool trust_config_plugin_path = false);

// The lines a run prints about its backend choice: how it was chosen, then one "  skipped NAME:
// why" per backend or device passed over.
std::string describe_choice(const BackendChoice& choice);

}  // namespace xylem::train
