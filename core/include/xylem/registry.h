// The plugin registry: finds plugin files, loads each with Boost.DLL, records why a file did
// not load or cannot run, and hands out backends. One bad file never stops the others: every
// file is checked before it is mapped (a truncated ELF file would crash dlopen), and a scan
// may load and probe each file in a child process, so that a plugin whose own initialisation
// crashes or hangs is listed with the reason instead of ending this process.
#pragma once

#include <chrono>
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
    // The xylem_device_kind of each probed device (probe.device_count entries): what the plugin's
    // device_kinds reported, XYLEM_DEVICE_KIND_UNKNOWN where it has none (built before ABI 1.3).
    std::vector<uint32_t> device_kinds;
    uint32_t device_kind(uint32_t d) const {
        return d < device_kinds.size() ? device_kinds[d] : uint32_t{XYLEM_DEVICE_KIND_UNKNOWN};
    }
    // The loaded plugin, when it was loaded into this process (Isolation::in_process). After a
    // scan in child processes it stays empty: select() loads the one chosen file here.
    std::shared_ptr<Backend> backend;
};

// "discrete GPU", "integrated GPU", "accelerator", "CPU", or "unknown kind".
const char* device_kind_name(uint32_t kind);

// A backend or device that a choice passed over, and why ("cuda: no CUDA device: ...").
struct Skipped {
    std::string backend;     // the backend's name (the file's name when it has none)
    std::string why;
    bool available = false;  // it could have run: it lost on rank or came later in a list
    std::string text() const { return backend + ": " + why; }
};

// What `backend = "auto"` picks: the best-ranked available device, ties in search order.
// Ranks: discrete GPU > integrated GPU = accelerator > a CPU through the native backend > a CPU
// through any other backend (OpenCL on PoCL, a third-party CPU plugin) > a device of unknown kind.
struct AutoPick {
    const PluginRecord* record = nullptr;  // null: no plugin has an available device
    uint32_t device = 0;
    std::string why;                       // one line: "auto picks native device 0 (..., CPU): no GPU or accelerator available"
    std::vector<Skipped> skipped;          // every other record, in search order, with its reason
};
// The ranking itself, over records as a scan leaves them (tests pass synthetic ones).
AutoPick rank_devices(const std::vector<PluginRecord>& records);
AutoPick rank_devices(std::vector<PluginRecord>&&) = delete;  // the pick points into the records: keep them

// A backend chosen to run on: which one, which device, and why (for the training banner).
struct BackendChoice {
    std::shared_ptr<Backend> backend;  // loaded into this process
    uint32_t device = 0;
    std::string why;                   // one line saying how it was chosen
    std::vector<Skipped> skipped;      // what was passed over on the way, with reasons
    std::vector<std::string> notes;    // lines about the search itself (a plugin_path left out)
};

// Where scan() loads and probes the plugin files.
enum class Isolation {
    in_process,  // dlopen here: for tests and tools that load plugins on purpose
    child,       // a forked child per file loads and probes it and reports back; a crash, an
                 // exit or a hang there is recorded as the file's reason. Only select() loads
                 // a plugin into this process, and only the one it returns.
};

class Registry {
public:
    // Loads every libxylem_*.so in each folder, folders in order; for two files with the
    // same backend name the first wins and the second records that it was shadowed. A file
    // that failed to load, or whose probe crashed, shadows nothing. With `only`, just the files
    // of those backends (libxylem_<name>.so) are looked at: loading a file runs its code, so a run
    // that names its backend probes nothing else.
    void scan(const std::vector<std::string>& dirs, Isolation isolation = Isolation::in_process,
              const std::vector<std::string>& only = {});
    // Loads one file (absolute or relative path) into this process and records the outcome.
    const PluginRecord& load_file(const std::string& path);
    // Loads and probes one file in a child process and records the outcome (no backend). A
    // file this process has loaded already is recorded as load_file() would.
    const PluginRecord& probe_file(const std::string& path);
    // How long a child may take to load and probe one file before it is killed (default 30 s).
    void set_probe_timeout(std::chrono::milliseconds timeout) { probe_timeout_ = timeout; }

    const std::vector<PluginRecord>& plugins() const { return plugins_; }
    const PluginRecord* find(const std::string& name) const;

    // The backend called `name`; an unknown or unavailable one is an Error saying why. A
    // plugin probed in a child is loaded into this process now (once per process; the record
    // keeps no backend, a later select() gets the same one).
    std::shared_ptr<Backend> select(const std::string& name) const;
    // The first available backend of a preference list; Error listing every reason if none.
    std::shared_ptr<Backend> select_first(const std::vector<std::string>& preference) const;
    // The same rule with the device and the reasons: entries in order, the first available wins,
    // and the entry "auto" stands for auto_pick()'s device (available when any device is). The
    // list {"auto"} alone is an Error saying why each plugin file has no device to offer.
    BackendChoice choose(const std::vector<std::string>& preference) const;
    // rank_devices() over this registry's records.
    AutoPick auto_pick() const { return rank_devices(plugins_); }

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
    std::vector<std::string> scanned_dirs_;  // every folder scan() looked in, in order: named by select()'s error
    std::chrono::milliseconds probe_timeout_{30000};
};

}  // namespace xylem
