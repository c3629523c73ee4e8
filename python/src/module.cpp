// The _xylem extension module: error translation, the backend list, and the model and tensor
// classes (model.cpp, tensor.cpp). The public API is the `xylem` package around it (python/xylem).
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include "binding.h"
#include "xylem/registry.h"

namespace xylem::python {

Shape array_shape(const HostArray& a) {
    Shape s(a.ndim());
    for (size_t i = 0; i < a.ndim(); ++i) s[i] = static_cast<int64_t>(a.shape(i));
    return s;
}

std::string shape_text(const Shape& s) {
    std::string t = "(";
    for (size_t i = 0; i < s.size(); ++i) t += (i ? ", " : "") + std::to_string(s[i]);
    return t + (s.size() == 1 ? ",)" : ")");
}

bool is_f32(const HostArray& a) { return a.dtype() == nb::dtype<float>(); }
bool is_i32(const HostArray& a) { return a.dtype() == nb::dtype<int32_t>(); }

NumpyF32 numpy_f32(std::vector<float>&& values, const Shape& shape) {
    auto* owned = new std::vector<float>(std::move(values));
    nb::capsule owner(owned, [](void* p) noexcept { delete static_cast<std::vector<float>*>(p); });
    std::vector<size_t> dims(shape.begin(), shape.end());
    return NumpyF32(owned->data(), dims.size(), dims.data(), owner);
}

namespace {

// `xylem backends` as data: every plugin file of the search path, probed in a child process.
nb::list backends(const std::vector<std::string>& plugin_path) {
    Registry registry;
    {
        nb::gil_scoped_release unlocked;  // probing forks and waits for children
        registry.scan(Registry::search_path(plugin_path, {}), Isolation::child);
    }
    const AutoPick pick = registry.auto_pick();
    nb::list out;
    for (const PluginRecord& r : registry.plugins()) {
        nb::dict b;
        b["name"] = r.name;
        b["version"] = r.version;
        b["abi"] = r.abi;
        b["available"] = r.available;
        b["reason"] = r.reason;
        b["path"] = r.path;
        b["detail"] = std::string(r.loaded ? r.probe.detail : "");
        nb::list devices;
        for (uint32_t d = 0; d < r.probe.device_count; ++d) {
            const xylem_device_info& info = r.probe.devices[d];
            nb::dict dev;
            dev["index"] = d;
            dev["name"] = std::string(info.name);
            dev["kind"] = std::string(device_kind_name(r.device_kind(d)));
            dev["compute_units"] = info.compute_units;
            dev["memory_bytes"] = info.memory_bytes;
            dev["detail"] = std::string(info.detail);
            dev["auto"] = pick.record == &r && pick.device == d;
            devices.append(dev);
        }
        b["devices"] = devices;
        out.append(b);
    }
    return out;
}

std::string auto_choice(const std::vector<std::string>& plugin_path) {
    Registry registry;
    {
        nb::gil_scoped_release unlocked;
        registry.scan(Registry::search_path(plugin_path, {}), Isolation::child);
    }
    const AutoPick pick = registry.auto_pick();
    if (!pick.record) return "auto: no available device";
    std::string s = pick.why;
    for (const Skipped& k : pick.skipped)
        if (k.available) s += "\n  passed over " + k.text();
    return s;
}

}  // namespace

NB_MODULE(_xylem, m) {
    m.doc() = "xylem's C++ library: models, training, backends (use the `xylem` package, not this module)";
    nb::register_exception_translator([](const std::exception_ptr& p, void*) {
        try {
            std::rethrow_exception(p);
        } catch (const Error& e) {
            PyErr_SetString(PyExc_RuntimeError, e.what());
        }
    });
    m.def("backends", &backends, nb::arg("plugin_path") = std::vector<std::string>{},
          "Every plugin file found (plugin_path, then XYLEM_PLUGIN_PATH, then the package's own plugins), "
          "each probed in a child process: name, version, abi, available, reason, path, devices.");
    m.def("auto_choice", &auto_choice, nb::arg("plugin_path") = std::vector<std::string>{},
          "What backend=\"auto\" would run on and why, as `xylem backends` says it.");
    bind_model(m);
    bind_tensor(m);
}

}  // namespace xylem::python
