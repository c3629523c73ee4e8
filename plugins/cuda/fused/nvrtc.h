// NVRTC for fused_elementwise: which target a device gets, and the compile itself. NVRTC runs
// without a GPU, so all of this is tested on machines that have none.
#pragma once

#include <string>
#include <vector>

namespace xylem::cuda::fused {

// The linked NVRTC: its version and the architectures it can emit SASS for (75 = sm_75, ...).
// `error` is non-empty when NVRTC cannot be asked (then the other fields are zero/empty).
struct NvrtcInfo {
    int major = 0, minor = 0;
    std::vector<int> archs;
    std::string error;
};
const NvrtcInfo& nvrtc_info();  // asked once per process

// What one device gets: SASS for its own architecture ("sm_90", a cubin) when NVRTC knows it,
// else PTX for the newest architecture below it that NVRTC knows ("compute_90"), which the
// driver compiles for the device when it loads.
struct Target {
    std::string arch_option;  // "sm_90" or "compute_90"
    bool cubin = false;
};
// `device_arch` is 10*major + minor of the device's compute capability. False with `why` when
// NVRTC knows no architecture at or below it.
bool choose_target(int device_arch, const std::vector<int>& supported, Target* out, std::string* why);

// The options every fused kernel is compiled with (the disk cache records them).
std::vector<std::string> compile_options(const Target& t);

struct Compiled {
    bool ok = false;
    std::vector<char> image;  // the cubin, or the PTX with its terminating NUL
    std::string log;          // NVRTC's log (the error when !ok)
};
// Compiles `source` (file name `name`.cu in the log) for `t`.
Compiled compile(const std::string& source, const std::string& name, const Target& t);

}  // namespace xylem::cuda::fused
