// xylem.Tensor: a core tensor (shape, dtype, one buffer per device that holds it) from Python.
// Backends are loaded once per process by name, as a run loads its backend (train/backend_select.h).
#include <cstring>
#include <map>
#include <memory>

#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include "binding.h"
#include "xylem/backend.h"
#include "xylem/registry.h"
#include "xylem/tensor.h"

namespace xylem::python {
namespace {

// "native", "native:0", "opencl:1": a device of a backend, which must be available (RuntimeError why not).
std::shared_ptr<Device> device_named(const std::string& spec) {
    static Registry registry;  // one per process: a plugin is loaded into it once
    static std::map<std::string, std::shared_ptr<Backend>> loaded;
    const size_t colon = spec.find(':');
    const std::string name = spec.substr(0, colon);
    uint32_t index = 0;
    if (colon != std::string::npos) {
        const std::string i = spec.substr(colon + 1);
        if (i.empty() || i.find_first_not_of("0123456789") != std::string::npos || i.size() > 6)
            throw nb::value_error(("device '" + spec + "': expected NAME or NAME:INDEX, e.g. native:0").c_str());
        index = static_cast<uint32_t>(std::stoul(i));
    }
    auto it = loaded.find(name);
    if (it == loaded.end()) {
        {
            nb::gil_scoped_release unlocked;
            registry.scan(Registry::search_path({}, {}), Isolation::child, {name});
        }
        it = loaded.emplace(name, registry.select(name)).first;
    }
    const PluginRecord* record = registry.find(name);
    const uint32_t count = record ? record->probe.device_count : 0;
    if (index >= count) throw Error("device '" + spec + "': backend " + name + " has " + std::to_string(count) + " device(s)");
    return it->second->device(index);
}

struct PyTensor {
    Tensor t;
    std::shared_ptr<Device> dev;  // where it lives
};

PyTensor from_numpy(const HostArray& a, const std::string& device) {
    if (!is_f32(a) && !is_i32(a)) throw nb::value_error("xylem.tensor takes float32 or int32 arrays");
    PyTensor p{Tensor(array_shape(a), is_f32(a) ? DType::F32 : DType::I32), device_named(device)};
    p.t = Tensor(array_shape(a), p.t.dtype(), *p.dev);
    if (p.t.numel()) {
        p.t.upload_from(*p.dev, a.data());
        p.dev->sync();  // the copy may read `a` asynchronously; `a` may die after this call
    }
    return p;
}

nb::object to_numpy(const PyTensor& p) {
    std::vector<size_t> dims(p.t.shape().begin(), p.t.shape().end());
    const size_t bytes = p.t.bytes();
    auto* buf = new uint8_t[bytes ? bytes : 1];
    nb::capsule owner(buf, [](void* q) noexcept { delete[] static_cast<uint8_t*>(q); });
    if (bytes) std::memcpy(buf, p.t.dtype() == DType::F32 ? static_cast<const void*>(p.t.host_read<float>())
                                                          : static_cast<const void*>(p.t.host_read<int32_t>()), bytes);
    const nb::dlpack::dtype dt = p.t.dtype() == DType::F32 ? nb::dtype<float>() : nb::dtype<int32_t>();
    return nb::cast(nb::ndarray<nb::numpy>(buf, dims.size(), dims.data(), owner, nullptr, dt));
}

PyTensor to_device(const PyTensor& p, const std::string& device) {
    PyTensor q{Tensor(), device_named(device)};
    q.t = Tensor(p.t.shape(), p.t.dtype(), *q.dev);
    if (p.t.numel()) {
        const void* host = p.t.dtype() == DType::F32 ? static_cast<const void*>(p.t.host_read<float>())
                                                     : static_cast<const void*>(p.t.host_read<int32_t>());
        q.t.upload_from(*q.dev, host);
        q.dev->sync();
    }
    return q;
}

}  // namespace

void bind_tensor(nb::module_& m) {
    nb::class_<PyTensor>(m, "Tensor",
                         "A tensor on one device: shape, dtype (float32 or int32) and its values. numpy() copies "
                         "them to a new array (a device read; never a view, even on native).")
        .def_prop_ro("shape", [](const PyTensor& p) { return nb::tuple(nb::cast(p.t.shape())); })
        .def_prop_ro("dtype", [](const PyTensor& p) { return std::string(p.t.dtype() == DType::F32 ? "float32" : "int32"); })
        .def_prop_ro("device", [](const PyTensor& p) { return p.dev->name(); })
        .def("numpy", &to_numpy, "The values as a new NumPy array (a copy from the device).")
        .def("to", &to_device, nb::arg("device"), "A copy on another device (\"native\", \"opencl:0\", ...).")
        // DLPack (torch.from_dlpack, np.from_dlpack, ...): the capsule of numpy()'s host copy, so the
        // consumer owns memory no device can change under it; the copy is the one numpy() makes.
        // Keyword arguments (stream, max_version, dl_device, copy) go to NumPy's __dlpack__, which
        // knows the protocol version it speaks.
        .def(
            "__dlpack__", [](const PyTensor& p, nb::kwargs kw) { return to_numpy(p).attr("__dlpack__")(**kw); },
            "A DLPack capsule of a host copy of the values (as numpy() makes; the device is the CPU).")
        .def(
            "__dlpack_device__", [](const PyTensor&) { return nb::make_tuple(1, 0); },
            "(1, 0): kDLCPU, device 0. __dlpack__ hands out a host copy whatever the tensor's device.")
        .def("__repr__", [](const PyTensor& p) {
            return "xylem.Tensor(shape=" + to_string(p.t.shape()) + ", dtype=" +
                   (p.t.dtype() == DType::F32 ? "float32" : "int32") + ", device=" + p.dev->name() + ")";
        });
    m.def("_tensor", &from_numpy, nb::arg("array"), nb::arg("device"));
}

}  // namespace xylem::python
