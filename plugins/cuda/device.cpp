// Probe (devices, driver and library versions) and the plugin's single framework instance.
#include <cstdio>
#include <cstring>
#include <string>

#include "cuda_plugin.h"
#include "fused/nvrtc.h"

namespace xylem::cuda {

namespace {

// "no CUDA device: cudaGetDeviceCount returned <name> (<text>)", or "" when devices exist.
std::string no_device_reason(int* count) {
    *count = 0;
    const cudaError_t e = cudaGetDeviceCount(count);
    if (e != cudaSuccess) {
        cudaGetLastError();  // clear the runtime's last-error state so later calls start clean
        *count = 0;
        return std::string("no CUDA device: cudaGetDeviceCount returned ") + cudaGetErrorName(e) + " (" +
               cudaGetErrorString(e) + ")";
    }
    if (*count <= 0) return "no CUDA device: cudaGetDeviceCount found 0 devices";
    return {};
}

// "CUDA driver 13.0, runtime 13.0, cuBLAS 13.0.2, cuDNN 9.13.0, NVRTC 13.0".
std::string versions() {
    int driver = 0, runtime = 0, major = 0, minor = 0, patch = 0;
    cudaDriverGetVersion(&driver);
    cudaRuntimeGetVersion(&runtime);
    cublasGetProperty(MAJOR_VERSION, &major);
    cublasGetProperty(MINOR_VERSION, &minor);
    cublasGetProperty(PATCH_LEVEL, &patch);
    const size_t dnn = cudnnGetVersion();  // major*10000 + minor*100 + patch since cuDNN 9
    const fused::NvrtcInfo& nv = fused::nvrtc_info();
    char s[200];
    std::snprintf(s, sizeof s, "CUDA driver %d.%d, runtime %d.%d, cuBLAS %d.%d.%d, cuDNN %zu.%zu.%zu, NVRTC %d.%d%s",
                  driver / 1000, driver % 1000 / 10, runtime / 1000, runtime % 1000 / 10, major, minor, patch,
                  dnn / 10000, dnn % 10000 / 100, dnn % 100, nv.major, nv.minor,
                  nv.error.empty() ? "" : " (unusable)");
    return s;
}

struct FrameworkResult {
    xylem_framework_s* framework = nullptr;
    std::string error;  // why framework_get fails, when framework is null
};

FrameworkResult make_framework() {
    FrameworkResult r;
    int count = 0;
    const std::string reason = no_device_reason(&count);
    if (!reason.empty()) {
        r.error = reason;
        return r;
    }
    auto* fw = new xylem_framework_s();  // never destroyed: handles outlive every caller
    fw->device_count_ = count;
    fw->conv_cache_ = make_conv_cache();
    r.framework = fw;
    return r;
}

// The one framework of this process, made on the first call (a failure is remembered too).
const FrameworkResult& the_framework() {
    static const FrameworkResult result = make_framework();
    return result;
}

}  // namespace

void probe(xylem_probe_info* out) {
    if (!out) return;
    std::memset(out, 0, sizeof *out);
    int count = 0;
    const std::string reason = no_device_reason(&count);
    const std::string vers = versions();
    std::snprintf(out->detail, sizeof out->detail,
                  "%s; cuBLAS GEMM, cuDNN convolutions, own kernels (sm_90 + PTX), fused kernels by NVRTC", vers.c_str());
    if (!reason.empty()) {
        std::snprintf(out->reason, sizeof out->reason, "%s", reason.c_str());
        return;
    }
    out->available = 1;
    out->device_count = static_cast<uint32_t>(count < XYLEM_MAX_PROBE_DEVICES ? count : XYLEM_MAX_PROBE_DEVICES);
    for (uint32_t d = 0; d < out->device_count; ++d) {
        xylem_device_info& dev = out->devices[d];
        cudaDeviceProp p{};
        if (cudaGetDeviceProperties(&p, static_cast<int>(d)) != cudaSuccess) {
            cudaGetLastError();
            std::snprintf(dev.name, sizeof dev.name, "CUDA device %u (properties unavailable)", d);
            continue;
        }
        std::snprintf(dev.name, sizeof dev.name, "%.127s", p.name);
        std::snprintf(dev.detail, sizeof dev.detail, "compute capability %d.%d, %d SMs, PCI %04x:%02x:%02x; %s",
                      p.major, p.minor, p.multiProcessorCount, p.pciDomainID, p.pciBusID, p.pciDeviceID, vers.c_str());
        dev.memory_bytes = p.totalGlobalMem;
        dev.compute_units = static_cast<uint32_t>(p.multiProcessorCount);
    }
}

// A CUDA device is a discrete GPU unless it shares the host's memory (Jetson, GB10: `integrated`).
void device_kinds(uint32_t* kinds, uint32_t count) {
    if (!kinds || count == 0) return;
    int n = 0;
    if (!no_device_reason(&n).empty()) return;
    for (uint32_t d = 0; d < count && d < static_cast<uint32_t>(n); ++d) {
        cudaDeviceProp p{};
        if (cudaGetDeviceProperties(&p, static_cast<int>(d)) != cudaSuccess) {
            cudaGetLastError();
            continue;  // stays unknown, as probe names it "properties unavailable"
        }
        kinds[d] = p.integrated ? XYLEM_DEVICE_INTEGRATED_GPU : XYLEM_DEVICE_DISCRETE_GPU;
    }
}

xylem_status framework_get(xylem_framework_t* out) {
    if (!out) return set_error(XYLEM_E_INVALID, "cuda: framework_get: out is NULL");
    const FrameworkResult& r = the_framework();
    *out = r.framework;
    if (!r.framework) return set_error(XYLEM_E_UNAVAILABLE, "cuda: framework_get: %s", r.error.c_str());
    return XYLEM_OK;
}

xylem_status check_framework(xylem_framework_t fw, const char* what) {
    const FrameworkResult& r = the_framework();
    if (!r.framework)
        return set_error(XYLEM_E_UNAVAILABLE, "cuda: %s: the CUDA backend is unavailable (%s)", what, r.error.c_str());
    if (fw != r.framework) return set_error(XYLEM_E_INVALID, "cuda: %s: not this plugin's framework", what);
    return XYLEM_OK;
}

}  // namespace xylem::cuda
