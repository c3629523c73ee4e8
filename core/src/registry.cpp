// Plugin loading. Libraries stay loaded for the life of the process (no dlclose at exit),
// and each plugin file maps to one Backend, so a plugin's framework is created only once.
#include "xylem/registry.h"

#include <dlfcn.h>

#include <algorithm>
#include <boost/dll/runtime_symbol_info.hpp>
#include <boost/dll/shared_library.hpp>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <mutex>

#include "xylem/error.h"

namespace xylem {
namespace fs = std::filesystem;

namespace {

struct Loaded {
    std::shared_ptr<boost::dll::shared_library> library;  // held by the never-destroyed map: never unloaded
    const xylem_plugin* table = nullptr;
    bool abi_only = false;  // only the table's version header may be read
    std::shared_ptr<Backend> backend;
    std::string error;
};

std::mutex g_mutex;
std::map<std::string, Loaded>& loaded_files() {
    static auto* files = new std::map<std::string, Loaded>();  // never destroyed: no unload at exit
    return *files;
}

// Boost.DLL clears dlerror() on failure, so ask the dynamic loader once more for its reason.
std::string loader_message(const std::string& path) {
    void* h = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (h) {
        dlclose(h);
        return "the library could not be loaded";
    }
    const char* msg = dlerror();
    return msg ? msg : "unknown loader error";
}

// Checks that every ABI 1.0 member is inside the table and set.
std::string missing_member(const xylem_plugin* t) {
#define XYLEM_REQUIRE(m) \
    if (!XYLEM_TABLE_HAS(t, m)) return #m;
    XYLEM_REQUIRE(probe) XYLEM_REQUIRE(framework_get) XYLEM_REQUIRE(last_error) XYLEM_REQUIRE(buffer_alloc)
    XYLEM_REQUIRE(buffer_free) XYLEM_REQUIRE(stream_create) XYLEM_REQUIRE(stream_destroy) XYLEM_REQUIRE(stream_sync)
    XYLEM_REQUIRE(copy_h2d) XYLEM_REQUIRE(copy_d2h) XYLEM_REQUIRE(op_supported) XYLEM_REQUIRE(op_run)
#undef XYLEM_REQUIRE
    if (!t->name || !*t->name) return "name";
    return {};
}

Loaded open_plugin(const std::string& path) {
    Loaded out;
    boost::system::error_code ec;
    auto lib = std::make_shared<boost::dll::shared_library>();
    lib->load(path, boost::dll::load_mode::rtld_now | boost::dll::load_mode::rtld_local, ec);
    if (ec) {
        out.error = "cannot load: " + loader_message(path);
        return out;
    }
    out.library = lib;
    if (!lib->has(XYLEM_PLUGIN_ENTRY_NAME)) {
        out.error = std::string("not a xylem plugin: no exported '") + XYLEM_PLUGIN_ENTRY_NAME + "' symbol";
        return out;
    }
    auto entry = lib->get<const xylem_plugin*()>(XYLEM_PLUGIN_ENTRY_NAME);
    const xylem_plugin* t = entry();
    if (!t) {
        out.error = "the plugin's entry point returned no table";
        return out;
    }
    out.table = t;
    out.error = Registry::check_table(t);
    // A table of another major version, or too short, may only be read up to its version header.
    out.abi_only = !out.error.empty() && (t->abi_major != XYLEM_ABI_MAJOR || t->struct_size < offsetof(xylem_plugin, probe));
    if (!out.error.empty()) return out;
    out.backend = std::make_shared<Backend>(t, path);
    return out;
}

std::vector<std::string> split_path_list(const char* s) {
    std::vector<std::string> out;
    if (!s) return out;
    std::string cur;
    for (const char* p = s;; ++p) {
        if (*p == ':' || *p == '\0') {
            if (!cur.empty()) out.push_back(cur);
            cur.clear();
            if (!*p) break;
        } else {
            cur += *p;
        }
    }
    return out;
}

}  // namespace

std::string Registry::check_table(const xylem_plugin* t) {
    // Only {abi_major, abi_minor, struct_size} are common to every ABI version.
    if (t->abi_major != XYLEM_ABI_MAJOR)
        return "ABI mismatch: plugin built for ABI " + std::to_string(t->abi_major) + "." +
               std::to_string(t->abi_minor) + ", this xylem uses ABI " + std::to_string(XYLEM_ABI_MAJOR) + "." +
               std::to_string(XYLEM_ABI_MINOR);
    if (t->struct_size < offsetof(xylem_plugin, probe))
        return "plugin table too short (struct_size " + std::to_string(t->struct_size) + ")";
    if (std::string m = missing_member(t); !m.empty())
        return "plugin table lacks required member '" + m + "' (struct_size " + std::to_string(t->struct_size) + ")";
    return {};
}

const PluginRecord& Registry::load_file(const std::string& file) {
    PluginRecord rec;
    std::error_code ec;
    fs::path abs = fs::weakly_canonical(fs::absolute(file, ec), ec);
    rec.path = abs.string();
    for (const PluginRecord& r : plugins_)
        if (r.path == rec.path) return r;  // already recorded by this registry

    Loaded loaded;
    {
        std::lock_guard lock(g_mutex);
        auto it = loaded_files().find(rec.path);
        if (it == loaded_files().end()) it = loaded_files().emplace(rec.path, open_plugin(rec.path)).first;
        loaded = it->second;
    }
    if (loaded.table) {
        rec.abi = std::to_string(loaded.table->abi_major) + "." + std::to_string(loaded.table->abi_minor);
        if (!loaded.abi_only) {
            rec.name = loaded.table->name ? loaded.table->name : "";
            rec.version = loaded.table->version ? loaded.table->version : "";
        }
    }
    if (!loaded.backend) {
        rec.reason = loaded.error;
    } else if (const PluginRecord* other = find(rec.name); other && other->loaded) {
        rec.reason = "shadowed by " + other->path + " (same backend name '" + rec.name + "')";
    } else {
        rec.loaded = true;
        rec.backend = loaded.backend;
        loaded.table->probe(&rec.probe);
        rec.probe.reason[sizeof rec.probe.reason - 1] = '\0';
        rec.probe.detail[sizeof rec.probe.detail - 1] = '\0';
        if (rec.probe.device_count > XYLEM_MAX_PROBE_DEVICES) rec.probe.device_count = XYLEM_MAX_PROBE_DEVICES;
        rec.available = rec.probe.available != 0;
        if (!rec.available) rec.reason = rec.probe.reason[0] ? rec.probe.reason : "the plugin found no usable device";
    }
    plugins_.push_back(std::move(rec));
    return plugins_.back();
}

void Registry::scan(const std::vector<std::string>& dirs) {
    for (const std::string& dir : dirs) {
        std::error_code ec;
        std::vector<fs::path> files;
        for (const auto& entry : fs::directory_iterator(dir, ec)) {
            std::string fname = entry.path().filename().string();
            if (fname.rfind("libxylem_", 0) == 0 && entry.path().extension() == ".so") files.push_back(entry.path());
        }
        std::sort(files.begin(), files.end());
        for (const fs::path& f : files) {
            std::string canon = fs::weakly_canonical(f, ec).string();
            bool seen = false;
            for (const PluginRecord& r : plugins_) seen |= r.path == canon;
            if (!seen) load_file(f.string());
        }
    }
}

const PluginRecord* Registry::find(const std::string& name) const {
    for (const PluginRecord& r : plugins_)
        if (r.loaded && r.name == name) return &r;
    return nullptr;
}

std::shared_ptr<Backend> Registry::select(const std::string& name) const {
    const PluginRecord* r = find(name);
    if (!r) {
        std::string known;
        for (const PluginRecord& p : plugins_)
            if (p.loaded) known += (known.empty() ? "" : ", ") + p.name;
        // A file that failed to load might be the one the user meant: say why it failed.
        for (const PluginRecord& p : plugins_)
            if (!p.loaded && fs::path(p.path).filename() == "libxylem_" + name + ".so")
                throw Error("backend '" + name + "' is unavailable: " + p.path + ": " + p.reason);
        throw Error("unknown backend '" + name + "' (loaded backends: " + (known.empty() ? "none" : known) + ")");
    }
    if (!r->available) throw Error("backend '" + name + "' is unavailable: " + r->reason);
    return r->backend;
}

std::shared_ptr<Backend> Registry::select_first(const std::vector<std::string>& preference) const {
    std::string why;
    for (const std::string& name : preference) {
        try {
            return select(name);
        } catch (const Error& e) {
            why += std::string(why.empty() ? "" : "; ") + e.what();
        }
    }
    throw Error("no backend of the preference list is available: " + (why.empty() ? "the list is empty" : why));
}

std::vector<std::string> Registry::default_plugin_dirs() {
    std::vector<std::string> dirs;
    std::error_code ec;
    boost::system::error_code bec;
    // Build tree: build/bin/<program> next to build/plugins. Installed: <libdir>/libxylem_core.so
    // next to <libdir>/xylem/plugins, found from this library's own location, so any program
    // linking the installed core (not only bin/xylem) finds the installed plugins.
    fs::path exe_dir = boost::dll::program_location(bec).parent_path().string();
    fs::path lib_dir = boost::dll::this_line_location(bec).parent_path().string();
    for (fs::path candidate : {exe_dir / ".." / "plugins", lib_dir / "xylem" / "plugins"})
        if (fs::is_directory(candidate, ec)) dirs.push_back(fs::weakly_canonical(candidate, ec).string());
#ifdef XYLEM_DEFAULT_PLUGIN_DIR
    if (dirs.empty() && fs::is_directory(XYLEM_DEFAULT_PLUGIN_DIR, ec)) dirs.push_back(XYLEM_DEFAULT_PLUGIN_DIR);
#endif
    return dirs;
}

std::vector<std::string> Registry::search_path(const std::vector<std::string>& flag_dirs,
                                               const std::vector<std::string>& config_dirs) {
    std::vector<std::string> dirs = flag_dirs;
    for (const std::string& d : split_path_list(std::getenv("XYLEM_PLUGIN_PATH"))) dirs.push_back(d);
    dirs.insert(dirs.end(), config_dirs.begin(), config_dirs.end());
    for (const std::string& d : default_plugin_dirs()) dirs.push_back(d);
    return dirs;
}

}  // namespace xylem
