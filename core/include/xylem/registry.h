// The plugin registry: finds plugin files, loads each with Boost.DLL, records why a file did
// not load or cannot run, and hands out backends. One bad file never stops the others.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "xylem/backend.h"

namespace xylem {

struct PluginRecord {
    std::string path;               // absolute path of the file
    std::string name, version;      // from the plugin's table, when it loaded
    std::string abi;                // "major.minor" the plugin was built for
    bool loaded = false;            // the entry point was found and the ABI accepted
    bool available = false;         // loaded, and its probe found a usable device
    std::string reason;             // why not loaded / not available
    xylem_probe_info probe{};       // what the probe reported, when loaded
    std::shared_ptr<Backend> backend;
};

class Registry {
public:
    // Loads every libxylem_*.so in each folder, folders in order; for two files with the
    // same backend name the first wins and the second records that it was shadowed.
    void scan(const std::vector<std::string>& dirs);
    // Loads one file (absolute or relative path) and records the outcome.
    const PluginRecord& load_file(const std::string& path);

    const std::vector<PluginRecord>& plugins() const { return plugins_; }
    const PluginRecord* find(const std::string& name) const;

    // The backend called `name`; an unknown or unavailable one is an Error saying why.
    std::shared_ptr<Backend> select(const std::string& name) const;
    // The first available backend of a preference list; Error listing every reason if none.
    std::shared_ptr<Backend> select_first(const std::vector<std::string>& preference) const;

    // Folders searched, in order: the --plugin-path flag, XYLEM_PLUGIN_PATH (':'-separated),
    // the config's plugin_path, then the plugin folder of the build or install tree.
    static std::vector<std::string> search_path(const std::vector<std::string>& flag_dirs,
                                                const std::vector<std::string>& config_dirs);
    static std::vector<std::string> default_plugin_dirs();
    // Why the core refuses a plugin table ("" when it accepts it): another ABI major version
    // (the message names both versions), a table too short, or a required member missing.
    static std::string check_table(const xylem_plugin* table);

private:
    std::vector<PluginRecord> plugins_;
};

}  // namespace xylem
