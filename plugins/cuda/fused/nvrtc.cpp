// NVRTC calls for fused_elementwise (nvrtc.h).
#include "fused/nvrtc.h"

#include <nvrtc.h>

#include <algorithm>

namespace xylem::cuda::fused {

const NvrtcInfo& nvrtc_info() {
    static const NvrtcInfo info = [] {
        NvrtcInfo i;
        nvrtcResult r = nvrtcVersion(&i.major, &i.minor);
        int n = 0;
        if (r == NVRTC_SUCCESS) r = nvrtcGetNumSupportedArchs(&n);
        if (r == NVRTC_SUCCESS && n > 0) {
            i.archs.resize(static_cast<size_t>(n));
            r = nvrtcGetSupportedArchs(i.archs.data());
        }
        if (r != NVRTC_SUCCESS) {
            i = NvrtcInfo{};
            i.error = std::string("NVRTC does not answer: ") + nvrtcGetErrorString(r);
        } else if (i.archs.empty()) {
            i.error = "NVRTC supports no architecture";
        }
        std::sort(i.archs.begin(), i.archs.end());
        return i;
    }();
    return info;
}

bool choose_target(int device_arch, const std::vector<int>& supported, Target* out, std::string* why) {
    int below = 0;  // the newest supported architecture under the device's
    for (int a : supported) {
        if (a == device_arch) {
            *out = Target{"sm_" + std::to_string(a), true};
            return true;
        }
        if (a < device_arch && a > below) below = a;
    }
    if (below) {
        *out = Target{"compute_" + std::to_string(below), false};
        return true;
    }
    std::string list;
    for (int a : supported) {
        if (!list.empty()) list += ' ';
        list += std::to_string(a);
    }
    *why = "NVRTC cannot compile for compute capability " + std::to_string(device_arch / 10) + "." +
           std::to_string(device_arch % 10) + " (it supports " + (list.empty() ? "none" : list) + ")";
    return false;
}

// IEEE division and square root, no flush to zero, and no contraction of a*b+c into one rounding:
// the opcodes then round as plugin_kit/fused.h's fused_apply<float> does on the CPU.
std::vector<std::string> compile_options(const Target& t) {
    return {"--gpu-architecture=" + t.arch_option, "--std=c++17", "--fmad=false", "--ftz=false",
            "--prec-div=true", "--prec-sqrt=true"};
}

Compiled compile(const std::string& source, const std::string& name, const Target& t) {
    Compiled c;
    nvrtcProgram prog = nullptr;
    nvrtcResult r = nvrtcCreateProgram(&prog, source.c_str(), (name + ".cu").c_str(), 0, nullptr, nullptr);
    if (r != NVRTC_SUCCESS) {
        c.log = std::string("nvrtcCreateProgram: ") + nvrtcGetErrorString(r);
        return c;
    }
    const std::vector<std::string> options = compile_options(t);
    std::vector<const char*> argv;
    for (const std::string& o : options) argv.push_back(o.c_str());
    const nvrtcResult compiled = nvrtcCompileProgram(prog, static_cast<int>(argv.size()), argv.data());
    size_t log_size = 0;
    if (nvrtcGetProgramLogSize(prog, &log_size) == NVRTC_SUCCESS && log_size > 1) {
        c.log.resize(log_size);
        if (nvrtcGetProgramLog(prog, &c.log[0]) != NVRTC_SUCCESS) c.log.clear();
        while (!c.log.empty() && (c.log.back() == '\0' || c.log.back() == '\n')) c.log.pop_back();
    }
    if (compiled != NVRTC_SUCCESS) {
        if (c.log.empty()) c.log = nvrtcGetErrorString(compiled);
    } else {
        size_t size = 0;
        r = t.cubin ? nvrtcGetCUBINSize(prog, &size) : nvrtcGetPTXSize(prog, &size);
        if (r == NVRTC_SUCCESS && size > 0) {
            c.image.resize(size);
            r = t.cubin ? nvrtcGetCUBIN(prog, c.image.data()) : nvrtcGetPTX(prog, c.image.data());
        }
        if (r != NVRTC_SUCCESS) c.log = std::string(t.cubin ? "nvrtcGetCUBIN: " : "nvrtcGetPTX: ") + nvrtcGetErrorString(r);
        else if (c.image.empty()) c.log = "NVRTC returned an empty image";
        else c.ok = true;
    }
    nvrtcDestroyProgram(&prog);
    return c;
}

}  // namespace xylem::cuda::fused
