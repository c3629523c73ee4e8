// Backend selection order and plugin search path.
#include "xylem/train/backend_select.h"

#include <algorithm>
#include <cstdlib>

#include "xylem/env.h"
#include "xylem/error.h"

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
                             const std::vector<std::string>& flag_plugin_dirs, bool trust_config_plugin_path) {
    // The native plugin's variables are checked here, before the plugins are probed: a bad value is one
    // line naming the variable, not a native backend that auto passes over.
    env::value_or(env::native_isa(), std::string());
    if (!env::value_or(env::num_threads(), int64_t{0}) && config.threads > 0)
        setenv("XYLEM_NUM_THREADS", std::to_string(config.threads).c_str(), 0);
    std::vector<std::string> notes;
    if (!config.plugin_path.empty() && !trust_config_plugin_path) {
        std::string dirs;
        for (const std::string& d : config.plugin_path) dirs += (dirs.empty() ? "" : ", ") + d;
        notes.push_back("note: the config's plugin_path [" + dirs + "] was not searched: a config may not make xylem "
                        "load plugin files (their code runs); name the folder with --plugin-path or XYLEM_PLUGIN_PATH, "
                        "or pass --trust-config-plugins with a --config file you trust");
    }
    const env::Value<std::string> env_backend = env::text("XYLEM_BACKEND");  // empty: unset
    const std::string source = !flag_backend.empty() ? "--backend" : env_backend.set ? "XYLEM_BACKEND" : "";
    const std::vector<std::string> names = !flag_backend.empty() ? std::vector<std::string>{flag_backend}
                                          : !source.empty()      ? std::vector<std::string>{env_backend.value}
                                                                 : config.backend;
    // Only the named backends' files are probed; "auto" ranks every device, so it probes them all.
    const bool any = std::find(names.begin(), names.end(), "auto") != names.end();
    // Probed in child processes: only the backend returned here is loaded into this process,
    // so a plugin that crashes while loading cannot stop a run on another backend.
    registry.scan(Registry::search_path(flag_plugin_dirs, trust_config_plugin_path ? config.plugin_path
                                                                                   : std::vector<std::string>{}),
                  Isolation::child, any ? std::vector<std::string>{} : names);
    BackendChoice choice;
    try {
        choice = !source.empty() ? named(registry, names[0], source) : registry.choose(config.backend);
    } catch (const Error& e) {
        if (notes.empty()) throw;
        throw Error(std::string(e.what()) + " (" + notes[0].substr(6) + ")");
    }
    choice.notes = notes;
    return choice;
}

std::string describe_choice(const BackendChoice& choice) {
    std::string s;
    for (const std::string& n : choice.notes) s += n + "\n";
    s += choice.why + "\n";
    for (const Skipped& k : choice.skipped) s += "  skipped " + k.text() + "\n";
    return s;
}

}  // namespace xylem::train
