// Plugin loading. Libraries stay loaded for the life of the process (no dlclose at exit),
// and each plugin file maps to one Backend, so a plugin's framework is created only once.
// Every file passes the ELF check (elf_check.h) before dlopen sees it; a scan with
// Isolation::child loads and probes each file in a forked child (child_process.h).
#include "xylem/registry.h"

#include <dlfcn.h>

#include <algorithm>
#include <boost/dll/runtime_symbol_info.hpp>
#include <boost/dll/shared_library.hpp>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <mutex>
#include <optional>

#include "child_process.h"
#include "elf_check.h"
#include "xylem/env.h"
#include "xylem/error.h"

namespace xylem {
namespace fs = std::filesystem;

namespace {

// The plugin file naming rule: backend NAME lives in libxylem_NAME.so.
std::string plugin_file_name(const std::string& name) { return "libxylem_" + name + ".so"; }
// The backend name a file is named for, or nothing when it is no plugin file.
std::optional<std::string> backend_of_file(const fs::path& file) {
    const std::string fname = file.filename().string(), prefix = "libxylem_";
    if (fname.rfind(prefix, 0) != 0 || file.extension() != ".so") return std::nullopt;
    return fname.substr(prefix.size(), fname.size() - prefix.size() - 3);
}

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
    XYLEM_REQUIRE(probe)
    XYLEM_REQUIRE(framework_get) XYLEM_REQUIRE(last_error) XYLEM_REQUIRE(buffer_alloc) XYLEM_REQUIRE(buffer_free)
        XYLEM_REQUIRE(stream_create) XYLEM_REQUIRE(stream_destroy) XYLEM_REQUIRE(stream_sync) XYLEM_REQUIRE(copy_h2d)
            XYLEM_REQUIRE(copy_d2h) XYLEM_REQUIRE(op_supported) XYLEM_REQUIRE(op_run)
#undef XYLEM_REQUIRE
                if (!t->name || !*t->name) return "name";
    return {};
}

Loaded open_plugin(const std::string& path) {
    Loaded out;
    if (std::string why = detail::elf_problem(path); !why.empty()) {
        out.error = why;
        return out;
    }
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
    out.abi_only =
        !out.error.empty() && (t->abi_major != XYLEM_ABI_MAJOR || t->struct_size < offsetof(xylem_plugin, probe));
    if (!out.error.empty()) return out;
    out.backend = std::make_shared<Backend>(t, path);
    return out;
}

// The one Loaded of a file in this process, opening it on first use.
Loaded open_cached(const std::string& path) {
    std::lock_guard lock(g_mutex);
    auto it = loaded_files().find(path);
    if (it == loaded_files().end()) it = loaded_files().emplace(path, open_plugin(path)).first;
    return it->second;
}

bool loaded_here(const std::string& path) {
    std::lock_guard lock(g_mutex);
    return loaded_files().count(path) != 0;
}

std::string canonical_path(const std::string& file) {
    std::error_code ec;
    return fs::weakly_canonical(fs::absolute(file, ec), ec).string();
}

// Name, version and ABI from a table; only the version header of a table the core refused
// because of its major version or size.
void describe_table(PluginRecord& rec, const xylem_plugin& t, bool abi_only) {
    rec.abi = std::to_string(t.abi_major) + "." + std::to_string(t.abi_minor);
    if (abi_only) return;
    rec.name = t.name ? t.name : "";
    rec.version = t.version ? t.version : "";
}

// The probe, then the device kinds of a plugin that reports them (ABI 1.3: a table that ends
// before device_kinds, or leaves it NULL, has devices of unknown kind). The core zeroes the array
// first, so a plugin that skips a device leaves it unknown.
void run_probe(const xylem_plugin& t, xylem_probe_info& info, uint32_t (&kinds)[XYLEM_MAX_PROBE_DEVICES]) {
    t.probe(&info);
    std::fill(std::begin(kinds), std::end(kinds), uint32_t{XYLEM_DEVICE_KIND_UNKNOWN});
    if (!XYLEM_TABLE_HAS(&t, device_kinds)) return;
    const uint32_t count = std::min<uint32_t>(info.device_count, XYLEM_MAX_PROBE_DEVICES);
    t.device_kinds(kinds, count);
}

void take_probe(PluginRecord& rec, const xylem_probe_info& info, const uint32_t (&kinds)[XYLEM_MAX_PROBE_DEVICES]) {
    rec.probe = info;
    rec.probe.reason[sizeof rec.probe.reason - 1] = '\0';
    rec.probe.detail[sizeof rec.probe.detail - 1] = '\0';
    if (rec.probe.device_count > XYLEM_MAX_PROBE_DEVICES) rec.probe.device_count = XYLEM_MAX_PROBE_DEVICES;
    for (uint32_t d = 0; d < rec.probe.device_count; ++d) {
        xylem_device_info& dev = rec.probe.devices[d];
        dev.name[sizeof dev.name - 1] = '\0';
        dev.detail[sizeof dev.detail - 1] = '\0';
    }
    rec.device_kinds.assign(kinds, kinds + rec.probe.device_count);
    for (uint32_t& k : rec.device_kinds)
        if (k >= XYLEM_DEVICE_KIND_COUNT_) k = XYLEM_DEVICE_KIND_UNKNOWN;  // a kind this core does not know
    rec.available = rec.probe.available != 0;
    if (!rec.available) rec.reason = rec.probe.reason[0] ? rec.probe.reason : "the plugin found no usable device";
}

// "" or why a plugin called `name` loses to one recorded before it.
std::string shadowed_by(const Registry& registry, const std::string& name) {
    const PluginRecord* other = registry.find(name);
    return other ? "shadowed by " + other->path + " (same backend name '" + name + "')" : "";
}

// What a probing child leaves in shared memory. `stage` says how far it got, so a crash is
// placed: 'L' loading (the library's constructors, its dependencies', the entry point), 'P'
// in the probe, 'D' done. Strings are cut to their arrays.
struct ChildReport {
    char stage;
    bool accepted;  // the core accepts the table (open_plugin made a Backend)
    char name[128], version[128], abi[32];
    char error[2048];  // why open_plugin refused it
    xylem_probe_info probe;
    uint32_t kinds[XYLEM_MAX_PROBE_DEVICES];
};

template <size_t N>
void copy_to(char (&dst)[N], const std::string& src) {
    const size_t n = std::min(src.size(), N - 1);
    std::memcpy(dst, src.data(), n);
    dst[n] = '\0';
}
template <size_t N>
void terminate(char (&s)[N]) {
    s[N - 1] = '\0';
}

// The child's work: load, check the table, probe; each step published before it is taken.
void probe_in_child(const std::string& path, ChildReport& r) {
    r.stage = 'L';
    const Loaded loaded = open_plugin(path);
    if (loaded.table) {
        PluginRecord rec;
        describe_table(rec, *loaded.table, loaded.abi_only);
        copy_to(r.name, rec.name);
        copy_to(r.version, rec.version);
        copy_to(r.abi, rec.abi);
    }
    copy_to(r.error, loaded.error);
    r.accepted = loaded.backend != nullptr;
    if (r.accepted) {
        r.stage = 'P';
        run_probe(*loaded.table, r.probe, r.kinds);
    }
    r.stage = 'D';
}

// Why a probing child did not finish, naming the stage it was in.
std::string child_failure(const detail::ChildOutcome& o, char stage, std::chrono::milliseconds timeout) {
    const std::string during = stage == 'P' ? "in its probe" : "while loading";
    std::string why;
    switch (o.kind) {
        case detail::ChildOutcome::signaled:
            why = "crashed " + during + ": signal " + std::to_string(o.code) + " (" + detail::signal_name(o.code) + ")";
            break;
        case detail::ChildOutcome::exited:
            why = "exited " + during + " with status " + std::to_string(o.code);
            break;
        case detail::ChildOutcome::timed_out: {
            char secs[32];
            std::snprintf(secs, sizeof secs, "%g", static_cast<double>(timeout.count()) / 1000.0);
            why = "hung " + during + ": killed after " + secs + " s";
            break;
        }
        case detail::ChildOutcome::not_started:
            return "cannot load it in a child process: " + o.error;
        case detail::ChildOutcome::finished:
            break;
    }
    if (!o.last_output.empty()) why += " (its last output: \"" + o.last_output + "\")";
    return why;
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
    rec.path = canonical_path(file);
    for (const PluginRecord& r : plugins_)
        if (r.path == rec.path) return r;  // already recorded by this registry

    const Loaded loaded = open_cached(rec.path);
    if (loaded.table) describe_table(rec, *loaded.table, loaded.abi_only);
    if (!loaded.backend) {
        rec.reason = loaded.error;
    } else if (std::string shadow = shadowed_by(*this, rec.name); !shadow.empty()) {
        rec.reason = shadow;
    } else {
        rec.loaded = true;
        rec.backend = loaded.backend;
        xylem_probe_info info{};
        uint32_t kinds[XYLEM_MAX_PROBE_DEVICES];
        run_probe(*loaded.table, info, kinds);
        take_probe(rec, info, kinds);
    }
    plugins_.push_back(std::move(rec));
    return plugins_.back();
}

const PluginRecord& Registry::probe_file(const std::string& file) {
    const std::string path = canonical_path(file);
    for (const PluginRecord& r : plugins_)
        if (r.path == path) return r;
    if (loaded_here(path)) return load_file(path);  // in this process already: a child learns nothing new

    PluginRecord rec;
    rec.path = path;
    // A file that fails the check is never mapped, not even in a child.
    if (std::string why = detail::elf_problem(path); !why.empty()) {
        rec.reason = why;
        plugins_.push_back(std::move(rec));
        return plugins_.back();
    }
    detail::Shared<ChildReport> shared;
    const detail::ChildOutcome outcome = detail::run_in_child([&] { probe_in_child(path, *shared); }, probe_timeout_);
    ChildReport report = *shared;  // the child is gone: nothing writes it any more
    terminate(report.name);
    terminate(report.version);
    terminate(report.abi);
    terminate(report.error);
    rec.abi = report.abi;
    rec.name = report.name;
    rec.version = report.version;
    if (outcome.kind != detail::ChildOutcome::finished) {
        rec.reason = child_failure(outcome, report.stage, probe_timeout_);
    } else if (!report.accepted) {
        rec.reason = report.error;
    } else if (std::string shadow = shadowed_by(*this, rec.name); !shadow.empty()) {
        rec.reason = shadow;
    } else {
        rec.loaded = true;
        take_probe(rec, report.probe, report.kinds);
    }
    plugins_.push_back(std::move(rec));
    return plugins_.back();
}

void Registry::scan(const std::vector<std::string>& dirs, Isolation isolation, const std::vector<std::string>& only) {
    auto wanted = [&](const std::string& backend) {
        return only.empty() || std::find(only.begin(), only.end(), backend) != only.end();
    };
    for (const std::string& dir : dirs) {
        if (std::find(scanned_dirs_.begin(), scanned_dirs_.end(), dir) == scanned_dirs_.end()) scanned_dirs_.push_back(dir);
        std::error_code ec;
        std::vector<fs::path> files;
        for (const auto& entry : fs::directory_iterator(dir, ec))
            if (const auto backend = backend_of_file(entry.path()); backend && wanted(*backend))
                files.push_back(entry.path());
        std::sort(files.begin(), files.end());
        for (const fs::path& f : files) {
            std::string canon = fs::weakly_canonical(f, ec).string();
            bool seen = false;
            for (const PluginRecord& r : plugins_) seen |= r.path == canon;
            if (seen) continue;
            if (isolation == Isolation::child)
                probe_file(f.string());
            else
                load_file(f.string());
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
            if (!p.loaded && (p.name == name || backend_of_file(p.path) == name))
                throw Error("backend '" + name + "' is unavailable: " + p.path + ": " + p.reason);
        if (scanned_dirs_.empty())  // files loaded one by one (load_file): no folder to name
            throw Error("unknown backend '" + name + "' (loaded backends: " + (known.empty() ? "none" : known) + ")");
        // A named backend probes only its own file, so what was loaded says little: name the folders
        // searched and the backends whose files are there (by file name: listing runs no code).
        std::string folders, there;
        std::vector<std::string> names;
        for (const std::string& dir : scanned_dirs_) {
            folders += (folders.empty() ? "" : ", ") + dir;
            std::error_code ec;
            for (const auto& entry : fs::directory_iterator(dir, ec))
                if (auto backend = backend_of_file(entry.path())) names.push_back(std::move(*backend));
        }
        std::sort(names.begin(), names.end());
        names.erase(std::unique(names.begin(), names.end()), names.end());
        for (const std::string& n : names) there += (there.empty() ? "" : ", ") + n;
        throw Error("unknown backend '" + name + "': no plugin file " + plugin_file_name(name) + " in " + folders +
                    (there.empty() ? " (no plugin files there)" : " (backends there: " + there + ")"));
    }
    if (!r->available) throw Error("backend '" + name + "' is unavailable: " + r->reason);
    if (r->backend) {
        r->backend->record_probe(r->probe, r->device_kinds);
        return r->backend;
    }
    // Probed in a child: this is the one plugin that gets loaded into this process.
    const Loaded loaded = open_cached(r->path);
    if (!loaded.backend) throw Error("backend '" + name + "' is unavailable: " + r->path + ": " + loaded.error);
    if (loaded.backend->name() != name)
        throw Error("backend '" + name + "' is unavailable: " + r->path + " changed since it was probed (now '" +
                    loaded.backend->name() + "')");
    loaded.backend->record_probe(r->probe, r->device_kinds);  // the child's probe: never again in here
    return loaded.backend;
}

std::shared_ptr<Backend> Registry::select_first(const std::vector<std::string>& preference) const {
    return choose(preference).backend;
}

const char* device_kind_name(uint32_t kind) {
    switch (kind) {
        case XYLEM_DEVICE_DISCRETE_GPU: return "discrete GPU";
        case XYLEM_DEVICE_INTEGRATED_GPU: return "integrated GPU";
        case XYLEM_DEVICE_ACCELERATOR: return "accelerator";
        case XYLEM_DEVICE_CPU: return "CPU";
        default: return "unknown kind";
    }
}

namespace {

// auto's order, best first. A CPU is best used through the native backend (OpenBLAS and its own
// kernels); the same CPU behind OpenCL (PoCL) trained the MLP 12x slower here. A device whose plugin
// does not say what it is ranks last: it may be anything.
enum Rank { kDiscreteGpu, kIntegratedOrAccelerator, kNativeCpu, kOtherCpu, kUnknown };

Rank rank_of(const PluginRecord& r, uint32_t d) {
    switch (r.device_kind(d)) {
        case XYLEM_DEVICE_DISCRETE_GPU: return kDiscreteGpu;
        case XYLEM_DEVICE_INTEGRATED_GPU:
        case XYLEM_DEVICE_ACCELERATOR: return kIntegratedOrAccelerator;
        case XYLEM_DEVICE_CPU: return r.name == "native" ? kNativeCpu : kOtherCpu;
        default: return kUnknown;
    }
}

// An available plugin that reports no device still has device 0 (the one select() runs on).
uint32_t devices_of(const PluginRecord& r) { return std::max<uint32_t>(r.probe.device_count, 1); }

std::string label(const PluginRecord& r) { return r.name.empty() ? fs::path(r.path).filename().string() : r.name; }

// "device 0 (NVIDIA H100, discrete GPU)"
std::string describe_device(const PluginRecord& r, uint32_t d) {
    std::string s = "device " + std::to_string(d) + " (";
    if (d < r.probe.device_count && r.probe.devices[d].name[0]) s += std::string(r.probe.devices[d].name) + ", ";
    return s + device_kind_name(r.device_kind(d)) + ")";
}

// Why the pick is not a better kind of device.
std::string pick_reason(Rank best) {
    switch (best) {
        case kDiscreteGpu: return "";
        case kIntegratedOrAccelerator: return ": no discrete GPU available";
        case kNativeCpu:
        case kOtherCpu: return ": no GPU or accelerator available";
        default: return ": no device of a known kind available";
    }
}

// Why an available plugin's best device `d` lost to the pick's device `pd`.
std::string lost_because(const PluginRecord& r, uint32_t d, const PluginRecord& pick, uint32_t pd) {
    const std::string dev = describe_device(r, d);
    const Rank rank = rank_of(r, d), pick_rank = rank_of(pick, pd);
    if (rank == pick_rank)
        return dev + " ranks with " + pick.name + "'s " + device_kind_name(pick.device_kind(pd)) +
               " and comes later in the plugin search order";
    if (rank == kOtherCpu && pick_rank == kNativeCpu)
        return dev + " is a CPU: a CPU runs on the native backend unless this backend is named";
    if (rank == kUnknown) return dev + ": a device whose plugin does not say what it is ranks last";
    return dev + " ranks below " + pick.name + "'s " + device_kind_name(pick.device_kind(pd));
}

}  // namespace

AutoPick rank_devices(const std::vector<PluginRecord>& records) {
    AutoPick out;
    Rank best_rank = kUnknown;
    for (const PluginRecord& r : records) {
        if (!r.available) continue;
        for (uint32_t d = 0; d < devices_of(r); ++d)
            if (!out.record || rank_of(r, d) < best_rank) {  // strictly better: ties keep the search order
                out.record = &r;
                out.device = d;
                best_rank = rank_of(r, d);
            }
    }
    for (const PluginRecord& r : records) {
        if (&r == out.record) continue;
        if (!r.available) {
            out.skipped.push_back({label(r), r.reason, false});
            continue;
        }
        uint32_t best = 0;
        for (uint32_t d = 1; d < devices_of(r); ++d)
            if (rank_of(r, d) < rank_of(r, best)) best = d;
        out.skipped.push_back({label(r), lost_because(r, best, *out.record, out.device), true});
    }
    if (out.record)
        out.why = "auto picks " + out.record->name + " " + describe_device(*out.record, out.device) +
                  pick_reason(best_rank);
    return out;
}

BackendChoice Registry::choose(const std::vector<std::string>& preference) const {
    BackendChoice out;
    auto list_text = [&] {
        std::string s;
        for (const std::string& n : preference) s += (s.empty() ? "" : ", ") + n;
        return "[" + s + "]";
    };
    for (const std::string& name : preference) {
        if (name == "auto") {
            AutoPick pick = auto_pick();
            if (!pick.record) {
                std::string why;
                for (const Skipped& s : pick.skipped) why += (why.empty() ? "" : "; ") + s.text();
                if (why.empty()) why = "no plugin file was found in the plugin search path";
                if (preference.size() == 1) throw Error("backend \"auto\" found no available device: " + why);
                out.skipped.push_back({"auto", "no available device (" + why + ")", false});
                continue;
            }
            out.backend = select(pick.record->name);
            out.device = pick.device;
            out.why = pick.why;
            if (preference.size() > 1) out.why += " (entry \"auto\" of the backend list " + list_text() + ")";
            out.skipped.insert(out.skipped.end(), pick.skipped.begin(), pick.skipped.end());
            return out;
        }
        try {
            out.backend = select(name);
        } catch (const Error& e) {
            out.skipped.push_back({name, e.what(), false});
            continue;
        }
        out.why = "backend " + name + (preference.size() > 1 ? ": the first available of the backend list " + list_text()
                                                             : ": the one the backend list names");
        return out;
    }
    std::string why;
    for (const Skipped& s : out.skipped) why += (why.empty() ? "" : "; ") + s.why;
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
    const env::Value<std::string> env_dirs = env::text("XYLEM_PLUGIN_PATH");  // xylem/env.h: empty is unset
    for (const std::string& d : split_path_list(env_dirs.set ? env_dirs.value.c_str() : nullptr)) dirs.push_back(d);
    dirs.insert(dirs.end(), config_dirs.begin(), config_dirs.end());
    for (const std::string& d : default_plugin_dirs()) dirs.push_back(d);
    return dirs;
}

}  // namespace xylem
