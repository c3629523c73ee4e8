// Probe (platforms and devices), the plugin's single framework instance, and the per-device
// program cache (one program per kernel family, one per fused_elementwise program structure, each
// built on first use).
#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <new>

#include "opencl.h"
#include "xylem/env.h"

#ifndef XYLEM_CLBLAST_VERSION
#define XYLEM_CLBLAST_VERSION "unknown version"
#endif

namespace xylem::opencl {

namespace {

std::string platform_string(cl_platform_id p, cl_platform_info what) {
    size_t size = 0;
    if (clGetPlatformInfo(p, what, 0, nullptr, &size) != CL_SUCCESS || size == 0) return "?";
    std::string s(size, '\0');
    if (clGetPlatformInfo(p, what, size, s.data(), nullptr) != CL_SUCCESS) return "?";
    s.resize(std::strlen(s.c_str()));
    return s;
}

std::string device_string(cl_device_id d, cl_device_info what) {
    size_t size = 0;
    if (clGetDeviceInfo(d, what, 0, nullptr, &size) != CL_SUCCESS || size == 0) return "?";
    std::string s(size, '\0');
    if (clGetDeviceInfo(d, what, size, s.data(), nullptr) != CL_SUCCESS) return "?";
    s.resize(std::strlen(s.c_str()));
    return s;
}

template <class T>
T device_value(cl_device_id d, cl_device_info what) {
    T v{};
    if (clGetDeviceInfo(d, what, sizeof v, &v, nullptr) != CL_SUCCESS) return T{};
    return v;
}

// GPUs and accelerators come first, so on a machine with a GPU driver and PoCL side by side
// device 0 is the GPU.
int device_rank(cl_device_id d) {
    const auto type = device_value<cl_device_type>(d, CL_DEVICE_TYPE);
    return (type & (CL_DEVICE_TYPE_GPU | CL_DEVICE_TYPE_ACCELERATOR)) ? 0 : 1;
}

// XYLEM_OPENCL_KERNELS by the env rule: auto (CPU-shaped kernels on a CPU device, GPU-shaped on
// the others), cpu, gpu. Read once; a bad value makes the plugin unavailable, naming it.
const env::Value<std::string>& kernels_variable() {
    static const env::Value<std::string> v = env::opencl_kernels();
    return v;
}

bool use_cpu_kernels(cl_device_id id) {
    const env::Value<std::string>& v = kernels_variable();
    if (v.set && v.value == "gpu") return false;
    if (v.set && v.value == "cpu") return true;
    return (device_value<cl_device_type>(id, CL_DEVICE_TYPE) & CL_DEVICE_TYPE_CPU) != 0;
}

std::unique_ptr<DeviceContext> make_context(cl_platform_id platform, cl_device_id id) {
    auto dev = std::make_unique<DeviceContext>();
    dev->platform = platform;
    dev->id = id;
    dev->name = device_string(id, CL_DEVICE_NAME);
    dev->platform_name = platform_string(platform, CL_PLATFORM_NAME);
    dev->version = device_string(id, CL_DEVICE_VERSION);
    dev->max_work_group = std::max<size_t>(1, device_value<size_t>(id, CL_DEVICE_MAX_WORK_GROUP_SIZE));
    dev->compute_units = std::max<cl_uint>(1, device_value<cl_uint>(id, CL_DEVICE_MAX_COMPUTE_UNITS));
    dev->memory = device_value<cl_ulong>(id, CL_DEVICE_GLOBAL_MEM_SIZE);
    dev->cpu_kernels = use_cpu_kernels(id);
    const cl_context_properties props[] = {CL_CONTEXT_PLATFORM, reinterpret_cast<cl_context_properties>(platform), 0};
    cl_int err = CL_SUCCESS;
    dev->context = clCreateContext(props, 1, &id, nullptr, nullptr, &err);
    check_cl(err, ("clCreateContext for " + dev->name).c_str());
    return dev;
}

}  // namespace

DeviceList enumerate_devices() {
    cl_uint n_platforms = 0;
    cl_int err = clGetPlatformIDs(0, nullptr, &n_platforms);
    if (err != CL_SUCCESS || n_platforms == 0)
        throw OpError{set_error(XYLEM_E_UNAVAILABLE, "no OpenCL platform (clGetPlatformIDs: %s, %d)",
                                err == CL_SUCCESS ? "0 platforms" : cl_error_name(err), err)};
    std::vector<cl_platform_id> platforms(n_platforms);
    check_cl(clGetPlatformIDs(n_platforms, platforms.data(), nullptr), "clGetPlatformIDs");
    DeviceList list;
    for (cl_platform_id p : platforms) {
        cl_uint n = 0;
        if (clGetDeviceIDs(p, CL_DEVICE_TYPE_ALL, 0, nullptr, &n) != CL_SUCCESS || n == 0) continue;
        std::vector<cl_device_id> ids(n);
        if (clGetDeviceIDs(p, CL_DEVICE_TYPE_ALL, n, ids.data(), nullptr) != CL_SUCCESS) continue;
        for (cl_device_id d : ids)
            if (device_value<cl_bool>(d, CL_DEVICE_AVAILABLE) && device_value<cl_bool>(d, CL_DEVICE_COMPILER_AVAILABLE))
                list.devices.emplace_back(p, d);
    }
    if (list.devices.empty())
        throw OpError{set_error(XYLEM_E_UNAVAILABLE, "no OpenCL device with a compiler on %u platform(s)", n_platforms)};
    std::stable_sort(list.devices.begin(), list.devices.end(),
                     [](const auto& a, const auto& b) { return device_rank(a.second) < device_rank(b.second); });
    return list;
}

void probe(xylem_probe_info* out) {
    if (!out) return;
    std::memset(out, 0, sizeof *out);
    const char* cache = std::getenv("POCL_CACHE_DIR");
    const int used = std::snprintf(out->detail, sizeof out->detail,
                                   "CLBlast %s for GEMM on GPUs, own OpenCL C kernels (CPU-shaped ones and GEMM on a "
                                   "CPU device; XYLEM_OPENCL_KERNELS=%s); POCL_CACHE_DIR=%.160s",
                                   XYLEM_CLBLAST_VERSION, kernels_variable().set && kernels_variable().error.empty() ? kernels_variable().value.c_str() : "auto",
                                   cache && *cache ? cache : "unset (PoCL's default)");
    // Only a process that ran fused programs has a count; tests read it to see the cache work.
    if (const uint64_t built = fused_builds(); built && used > 0 && static_cast<size_t>(used) < sizeof out->detail)
        std::snprintf(out->detail + used, sizeof out->detail - used, "; fused programs built: %llu",
                      static_cast<unsigned long long>(built));
    if (const env::Value<std::string>& v = kernels_variable(); !v.error.empty()) {
        std::snprintf(out->reason, sizeof out->reason, "%s", v.error.c_str());
        return;
    }
    DeviceList list;
    try {
        list = enumerate_devices();
    } catch (const OpError&) {
        std::snprintf(out->reason, sizeof out->reason, "%s", last_error());
        return;
    } catch (const std::exception& e) {
        std::snprintf(out->reason, sizeof out->reason, "probe failed: %s", e.what());
        return;
    }
    out->available = 1;
    out->device_count = static_cast<uint32_t>(std::min<size_t>(list.devices.size(), XYLEM_MAX_PROBE_DEVICES));
    for (uint32_t i = 0; i < out->device_count; ++i) {
        const auto [platform, id] = list.devices[i];
        xylem_device_info& dev = out->devices[i];
        std::snprintf(dev.name, sizeof dev.name, "%s", device_string(id, CL_DEVICE_NAME).c_str());
        std::snprintf(dev.detail, sizeof dev.detail, "platform %s (%s); %s; driver %s",
                      platform_string(platform, CL_PLATFORM_NAME).c_str(),
                      platform_string(platform, CL_PLATFORM_VERSION).c_str(),
                      device_string(id, CL_DEVICE_VERSION).c_str(), device_string(id, CL_DRIVER_VERSION).c_str());
        dev.memory_bytes = device_value<cl_ulong>(id, CL_DEVICE_GLOBAL_MEM_SIZE);
        dev.compute_units = device_value<cl_uint>(id, CL_DEVICE_MAX_COMPUTE_UNITS);
    }
}

namespace {
// CL_DEVICE_TYPE as a xylem_device_kind: a GPU that shares the host's memory is integrated. PoCL's
// host device is CL_DEVICE_TYPE_CPU, so `auto` ranks it below the native backend.
uint32_t kind_of(cl_device_id d) {
    const auto type = device_value<cl_device_type>(d, CL_DEVICE_TYPE);
    if (type & CL_DEVICE_TYPE_GPU)
        return device_value<cl_bool>(d, CL_DEVICE_HOST_UNIFIED_MEMORY) ? XYLEM_DEVICE_INTEGRATED_GPU
                                                                      : XYLEM_DEVICE_DISCRETE_GPU;
    if (type & CL_DEVICE_TYPE_ACCELERATOR) return XYLEM_DEVICE_ACCELERATOR;
    if (type & CL_DEVICE_TYPE_CPU) return XYLEM_DEVICE_CPU;
    return XYLEM_DEVICE_KIND_UNKNOWN;  // CL_DEVICE_TYPE_CUSTOM, or the query failed
}
}  // namespace

// The same list, in the same order, as probe() reports; on failure the kinds stay as the core set them.
void device_kinds(uint32_t* kinds, uint32_t count) {
    if (!kinds || count == 0) return;
    try {
        const DeviceList list = enumerate_devices();
        for (uint32_t i = 0; i < count && i < list.devices.size(); ++i) kinds[i] = kind_of(list.devices[i].second);
    } catch (...) {  // no platform now: nothing to report, and nothing may cross the ABI
    }
}

xylem_status framework_get(xylem_framework_t* out) {
    if (!out) return set_error(XYLEM_E_INVALID, "opencl: framework_get: out is NULL");
    *out = nullptr;
    // The one instance, made on first success. A failed attempt (no platform) is retried on the
    // next call rather than remembered, so installing a driver needs no restart of the caller.
    static std::mutex mutex;
    static std::unique_ptr<xylem_framework_s> framework;
    std::lock_guard<std::mutex> lock(mutex);
    if (const env::Value<std::string>& v = kernels_variable(); !v.error.empty())
        return set_error(XYLEM_E_UNAVAILABLE, "opencl: %s", v.error.c_str());
    if (!framework) {
        try {
            auto fw = std::make_unique<xylem_framework_s>();
            for (const auto& [platform, id] : enumerate_devices().devices)
                fw->devices_.push_back(make_context(platform, id));
            framework = std::move(fw);
        } catch (const OpError& e) {
            return e.status;
        } catch (const std::bad_alloc&) {
            return set_error(XYLEM_E_NO_MEMORY, "opencl: framework_get: out of host memory");
        }
    }
    *out = framework.get();
    return XYLEM_OK;
}

DeviceContext::~DeviceContext() {
    for (cl_program p : programs)
        if (p) clReleaseProgram(p);
    for (auto& [key, p] : fused_programs) clReleaseProgram(p);
    if (context) clReleaseContext(context);
}

cl_program DeviceContext::program(Family f) {
    std::lock_guard<std::mutex> lock(mutex);
    cl_program& slot = programs[static_cast<int>(f)];
    if (slot) return slot;
    const std::string what = std::string("kernels/") + family_name(f) + ".cl";
    slot = build(family_source(f), what.c_str());
    return slot;
}

namespace {
std::atomic<uint64_t> g_fused_builds{0};
}

uint64_t fused_builds() { return g_fused_builds.load(); }

cl_program DeviceContext::fused_program(uint64_t key, const char* what, const std::function<std::string()>& source) {
    std::lock_guard<std::mutex> lock(fused_mutex);
    const auto it = fused_programs.find(key);
    if (it != fused_programs.end()) return it->second;
    const std::string text = source();
    const cl_program p = build(text.c_str(), what);
    ++g_fused_builds;
    try {
        fused_programs.emplace(key, p);
    } catch (...) {
        clReleaseProgram(p);
        throw;
    }
    return p;
}

cl_program DeviceContext::build(const char* source, const char* what) {
    cl_int err = CL_SUCCESS;
    cl_program p = clCreateProgramWithSource(context, 1, &source, nullptr, &err);
    check_cl(err, "clCreateProgramWithSource");
    // No fast-math flags by default: results stay within float rounding of the native
    // backend's. XYLEM_OPENCL_BUILD_OPTIONS appends options (e.g. -cl-mad-enable) for a user
    // who wants to trade that for speed.
    std::string options = "-cl-std=CL1.2";
    if (const env::Value<std::string> extra = env::text("XYLEM_OPENCL_BUILD_OPTIONS"); extra.set) options += " " + extra.value;
    err = clBuildProgram(p, 1, &id, options.c_str(), nullptr, nullptr);
    if (err != CL_SUCCESS) {
        std::string log = "(no build log)";
        size_t size = 0;
        if (clGetProgramBuildInfo(p, id, CL_PROGRAM_BUILD_LOG, 0, nullptr, &size) == CL_SUCCESS && size > 1) {
            log.assign(size, '\0');
            clGetProgramBuildInfo(p, id, CL_PROGRAM_BUILD_LOG, size, log.data(), nullptr);
            log.resize(std::strlen(log.c_str()));
        }
        clReleaseProgram(p);
        // The log's head: the first errors say what went wrong, and the message has a fixed capacity.
        throw OpError{set_error(XYLEM_E_DEVICE, "opencl: building %s for %s with options '%s' failed: %s (%d); build log:\n%.1200s",
                                what, name.c_str(), options.c_str(), cl_error_name(err), err, log.c_str())};
    }
    return p;
}

}  // namespace xylem::opencl
