// FUSED_ELEMENTWISE: the program becomes one CUDA kernel (fused/codegen.h), compiled by NVRTC for
// the device's architecture (fused/nvrtc.h), kept in the process and on disk (fused/disk_cache.h),
// loaded with cudaLibraryLoadData and launched with cudaLaunchKernel on the op's stream, so a
// capture records it like any other kernel (its argument block, params included, is copied into
// the graph). No libcuda: the runtime's library API reaches the driver itself.
#include <cstdarg>
#include <cstdio>
#include <map>
#include <mutex>
#include <tuple>

#include "cuda_plugin.h"
#include "fused/codegen.h"
#include "fused/disk_cache.h"
#include "fused/nvrtc.h"
#include "kernels/kernels.h"
#include "xylem/plugin_kit/fused.h"

namespace xylem::cuda {

namespace {

namespace pk = plugin_kit;

static_assert(fused::kThreadsPerBlock == kernels::kThreads, "the generated __launch_bounds__ is the launch's block");

[[noreturn]] __attribute__((format(printf, 1, 2))) void fail_device(const char* fmt, ...) {
    char msg[440];
    va_list args;
    va_start(args, fmt);
    std::vsnprintf(msg, sizeof msg, fmt, args);
    va_end(args);
    cudaGetLastError();  // else the next op would report a failed library call again
    throw OpError{set_error(XYLEM_E_DEVICE, "cuda: fused_elementwise: %s", msg)};
}

// The first `lines` lines of an NVRTC log, joined with " | ", at most `cap` characters.
std::string log_head(const std::string& log, int lines = 3, size_t cap = 200) {
    std::string s;
    size_t at = 0;
    for (int l = 0; l < lines && at < log.size(); ++l) {
        size_t end = log.find('\n', at);
        if (end == std::string::npos) end = log.size();
        s += (s.empty() ? "" : " | ") + log.substr(at, end - at);
        at = end + 1;
    }
    return s.size() > cap ? s.substr(0, cap - 3) + "..." : s;
}

// What the generated code depends on, in full: fused_program_key's fields (the key may collide;
// this may not). Params are not in it: they are kernel arguments.
std::string program_signature(const xylem_fused_attrs& at, uint32_t n_inputs, uint32_t n_outputs) {
    std::string s;
    const uint32_t head[5] = {at.version, at.n_instrs, at.n_regs, n_inputs, n_outputs};
    s.append(reinterpret_cast<const char*>(head), sizeof head);
    s.append(reinterpret_cast<const char*>(at.input_modes), n_inputs);
    for (uint32_t i = 0; i < at.n_instrs; ++i) {
        const xylem_fused_instr& in = at.code[i];
        const char f[5] = {static_cast<char>(in.op), static_cast<char>(in.dst), static_cast<char>(in.a),
                           static_cast<char>(in.b), static_cast<char>(in.c)};
        s.append(f, sizeof f);
        if (in.op == XYLEM_FUSED_CONST) s.append(reinterpret_cast<const char*>(&in.imm), sizeof in.imm);
    }
    return s;
}

struct KernelKey {
    uint64_t key;  // fused_program_key
    int arch;      // 10*major + minor of the device
    std::string signature;
    bool operator<(const KernelKey& o) const {  // the signature is compared only when keys tie
        return std::tie(key, arch, signature) < std::tie(o.key, o.arch, o.signature);
    }
};

struct LoadedKernel {
    cudaLibrary_t library = nullptr;
    cudaKernel_t kernel = nullptr;
    uint64_t devices_ready = 0;  // bit d: loaded into device d's context (see ready_on)
};

// The process's kernels: never unloaded (like the framework), never destroyed (a static map's
// destructor would run after the CUDA runtime's teardown at exit).
std::mutex& kernels_mutex() {
    static std::mutex* m = new std::mutex();
    return *m;
}
std::map<KernelKey, LoadedKernel>& loaded_kernels() {
    static auto* m = new std::map<KernelKey, LoadedKernel>();
    return *m;
}

int device_arch(const OpArgs& a, int device) {
    int major = 0, minor = 0;
    a.check_cuda(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device),
                 "cudaDeviceGetAttribute(compute capability major)");
    a.check_cuda(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device),
                 "cudaDeviceGetAttribute(compute capability minor)");
    return 10 * major + minor;
}

// The cubin or PTX of the program: from the disk cache, else from NVRTC (then written there).
// With read_disk false the cached file is not read, only replaced.
std::vector<char> build_image(const std::string& name, const std::string& source, const fused::Target& target,
                              const std::string& what, bool read_disk, bool* from_disk) {
    const fused::NvrtcInfo& nv = fused::nvrtc_info();
    const std::string recipe = fused::cache_recipe(fused::compile_options(target), source);
    const std::string dir = fused::cache_dir();
    const std::string file = fused::cache_file_name(name, target.arch_option, nv.major, nv.minor);
    std::vector<char> image;
    *from_disk = read_disk && !dir.empty() && fused::cache_read(dir + "/" + file, recipe, target.cubin, &image);
    if (*from_disk) return image;
    fused::Compiled c = fused::compile(source, name, target);
    if (!c.ok)
        fail_device("NVRTC %d.%d could not compile program %s (%s) for %s: %s", nv.major, nv.minor, name.c_str(),
                    what.c_str(), target.arch_option.c_str(), log_head(c.log).c_str());
    fused::cache_write(dir, file, recipe, target.cubin, c.image);  // failing only costs a later compile
    return std::move(c.image);
}

LoadedKernel load(const xylem_fused_attrs& at, uint32_t n_inputs, uint32_t n_outputs, uint64_t key, int arch) {
    const std::string name = fused::kernel_name(key);
    const std::string what = fused::describe(at, n_inputs, n_outputs, 120);
    const fused::NvrtcInfo& nv = fused::nvrtc_info();
    if (!nv.error.empty()) fail_device("program %s (%s): %s", name.c_str(), what.c_str(), nv.error.c_str());
    fused::Target target;
    std::string why;
    if (!fused::choose_target(arch, nv.archs, &target, &why))
        fail_device("program %s (%s): %s", name.c_str(), what.c_str(), why.c_str());
    const std::string source = fused::kernel_source(at, n_inputs, n_outputs, name);
    LoadedKernel k;
    cudaError_t e = cudaErrorUnknown;
    for (bool read_disk : {true, false}) {  // a cached image the driver refuses is rebuilt once
        bool from_disk = false;
        const std::vector<char> image = build_image(name, source, target, what, read_disk, &from_disk);
        e = cudaLibraryLoadData(&k.library, image.data(), nullptr, nullptr, 0, nullptr, nullptr, 0);
        if (e == cudaSuccess || !from_disk) break;
        cudaGetLastError();
    }
    if (e != cudaSuccess)
        fail_device("cudaLibraryLoadData of program %s (%s) for %s failed: %s", name.c_str(), what.c_str(),
                    target.arch_option.c_str(), cudaGetErrorString(e));
    e = cudaLibraryGetKernel(&k.kernel, k.library, name.c_str());
    if (e != cudaSuccess) {
        cudaLibraryUnload(k.library);
        fail_device("cudaLibraryGetKernel(%s) failed: %s", name.c_str(), cudaGetErrorString(e));
    }
    return k;
}

// The kernel of `at` for `device`, compiled and loaded on first use. The kernel is loaded into the
// device's context here, before the launch (cudaFuncGetAttributes does that): never lazily in the
// middle of a stream capture.
cudaKernel_t kernel_for(const OpArgs& a, const xylem_fused_attrs& at, uint32_t n_inputs, uint32_t n_outputs,
                        int device) {
    KernelKey kk{pk::fused_program_key(at, n_inputs, n_outputs), device_arch(a, device),
                 program_signature(at, n_inputs, n_outputs)};
    std::lock_guard<std::mutex> lock(kernels_mutex());  // one compile at a time; lookups are short
    auto& kernels = loaded_kernels();
    auto it = kernels.find(kk);
    if (it == kernels.end()) {
        const LoadedKernel k = load(at, n_inputs, n_outputs, kk.key, kk.arch);
        it = kernels.emplace(std::move(kk), k).first;
    }
    LoadedKernel& k = it->second;
    const uint64_t bit = device < 64 ? uint64_t{1} << device : 0;
    if (!(k.devices_ready & bit)) {
        cudaFuncAttributes attrs{};
        a.check_cuda(cudaFuncGetAttributes(&attrs, reinterpret_cast<const void*>(k.kernel)),
                     "cudaFuncGetAttributes (loading the fused kernel)");
        if (attrs.maxThreadsPerBlock < kernels::kThreads)
            fail_device("program %s runs at most %d threads per block on device %d (it needs %d)",
                        fused::kernel_name(it->first.key).c_str(), attrs.maxThreadsPerBlock, device, kernels::kThreads);
        k.devices_ready |= bit;
    }
    return k.kernel;
}

}  // namespace

void op_fused_elementwise(const xylem_op_desc& desc, xylem_stream_s& s, xylem_framework_s&) {
    OpArgs a(desc, 0, XYLEM_FUSED_MAX_INPUTS, desc.n_outputs);  // the program rule checks the counts
    const auto at = a.attrs<xylem_fused_attrs>();
    const uint32_t n_in = desc.n_inputs, n_out = desc.n_outputs;
    pk::fused_program_check(a, at, n_in, n_out);
    Tensor ins[XYLEM_FUSED_MAX_INPUTS] = {}, outs[XYLEM_FUSED_MAX_OUTPUTS] = {};
    for (uint32_t i = 0; i < n_in; ++i) ins[i] = a.in(i, pk::fused_mode_name(at.input_modes[i]));
    for (uint32_t o = 0; o < n_out; ++o) outs[o] = a.out(o, "output");
    const pk::FusedShape shape = pk::fused_check(a, at, ins, n_in, outs, n_out);
    pk::fused_check_sharing(a, at, ins, n_in, outs, n_out, overlap,
                            [](const Tensor& x, const Tensor& y) { return x.data == y.data; });
    if (shape.numel() == 0) return;

    const cudaKernel_t kernel = kernel_for(a, at, n_in, n_out, static_cast<int>(s.device_));
    fused::KernelArgs args{};
    for (uint32_t i = 0; i < n_in; ++i) args.in[i] = ins[i].f32();
    for (uint32_t o = 0; o < n_out; ++o) args.out[o] = outs[o].f32();
    args.rows = shape.rows;
    args.cols = shape.cols;
    for (uint32_t p = 0; p < at.n_params; ++p) args.param[p] = at.params[p];
    void* argv[] = {&args};
    a.check_cuda(cudaLaunchKernel(reinterpret_cast<const void*>(kernel), dim3(kernels::grid_for(shape.numel())),
                                  dim3(kernels::kThreads), argv, 0, s.stream_),
                 "cudaLaunchKernel (fused kernel)");
}

}  // namespace xylem::cuda
