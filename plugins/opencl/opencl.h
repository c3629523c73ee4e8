// Internal declarations shared by the OpenCL plugin's files: handles, the per-device program
// cache, kernel launches, operand validation, and the op kernels' host glue.
#pragma once

// CMakeLists.txt sets CL_TARGET_OPENCL_VERSION=120 for every file (clblast.h includes CL/cl.h
// too): OpenCL 1.2 is what NVIDIA, AMD, Intel and PoCL all implement.
#include <CL/cl.h>

#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "xylem/plugin_api.h"
#include "xylem/plugin_kit/entry.h"
#include "xylem/plugin_kit/op_args.h"
#include "xylem/plugin_kit/op_list.h"
#include "xylem/plugin_kit/shapes.h"

namespace xylem::opencl {

// Kernel families: one OpenCL C file each (kernels/<file>.cl, embedded at build time: CMake embeds
// every kernels/*.cl, and a family here without its file fails to compile), built into one
// program per device the first time an op of that family runs, then cached. This is the one list.
#define XYLEM_OPENCL_FAMILIES(X)                                                                   \
    X(Elementwise, elementwise) X(Reduce, reduce) X(Softmax, softmax) X(Loss, loss)                \
    X(Optimizer, optimizer) X(Conv, conv) X(Pool, pool) X(Norm, norm) X(Gather, gather) X(Clip, clip)          \
    X(Transformer, transformer) X(Gemm, gemm)
enum class Family {
#define XYLEM_OPENCL_FAMILY_ENUM_(Enum, file) Enum,
    XYLEM_OPENCL_FAMILIES(XYLEM_OPENCL_FAMILY_ENUM_)
#undef XYLEM_OPENCL_FAMILY_ENUM_
    Count_
};
constexpr int kFamilies = static_cast<int>(Family::Count_);
const char* family_name(Family f);
const char* family_source(Family f);  // kernels_embedded.cpp, generated from kernels/*.cl

// ---- errors --------------------------------------------------------------------------------
xylem_status set_error(xylem_status status, const char* fmt, ...) __attribute__((format(printf, 2, 3)));
const char* cl_error_name(cl_int err);

// Thrown inside the plugin after set_error(); op_run and the ABI entry points turn it into the
// status (it never crosses the ABI).
using plugin_kit::OpError;
// set_error + throw, with the OpenCL error's name appended.
[[noreturn]] void throw_cl(cl_int err, const char* what);
inline void check_cl(cl_int err, const char* what) {
    if (err != CL_SUCCESS) throw_cl(err, what);
}

// ---- devices -------------------------------------------------------------------------------
// One OpenCL device the framework can run on: its context and its program cache.
struct DeviceContext {
    cl_platform_id platform = nullptr;
    cl_device_id id = nullptr;
    cl_context context = nullptr;
    std::string name, platform_name, version;
    size_t max_work_group = 1;
    cl_uint compute_units = 1;
    cl_ulong memory = 0;
    // CPU-shaped kernels: a CPU device (PoCL) unless XYLEM_OPENCL_KERNELS says otherwise. GEMMs
    // then run on the plugin's own kernels (kernels/gemm.cl) rather than CLBlast, and the ops
    // with two layouts (layer norm's rows) take one work-item per row in float16 vectors rather
    // than a work-group per row: PoCL runs a work-group as a loop over its items, split at every
    // barrier, and vectorizes little of it.
    bool cpu_kernels = false;

    std::mutex mutex;  // guards programs (streams on two threads may build at once)
    cl_program programs[kFamilies] = {};
    // fused_elementwise's generated programs by plugin_kit::fused_program_key, kept for the
    // process (a model has a handful; PoCL keeps the binaries on disk across processes).
    std::mutex fused_mutex;  // guards fused_programs; a build holds it, family builds do not wait
    std::unordered_map<uint64_t, cl_program> fused_programs;

    DeviceContext() = default;
    DeviceContext(const DeviceContext&) = delete;
    DeviceContext& operator=(const DeviceContext&) = delete;
    ~DeviceContext();

    // The family's program, built on first use; a failed build throws with the build log.
    cl_program program(Family f);
    // The fused program of `key`, built from source() on first use; a failed build throws an
    // error naming `what` (the program) with the build log's head.
    cl_program fused_program(uint64_t key, const char* what, const std::function<std::string()>& source);

private:
    // Compiles and links source for this device (options: CL 1.2 plus XYLEM_OPENCL_BUILD_OPTIONS).
    cl_program build(const char* source, const char* what);
};

// fused_elementwise programs this process has compiled (all devices): the cache's test hook,
// reported by probe's detail once nonzero.
uint64_t fused_builds();

// Every OpenCL device on every platform, in platform order (what probe lists, what device
// indices mean). Throws OpError with "no OpenCL platform" when the ICD loader finds none.
struct DeviceList {
    std::vector<std::pair<cl_platform_id, cl_device_id>> devices;
};
DeviceList enumerate_devices();

}  // namespace xylem::opencl

// The ABI's opaque handles (declared by plugin_api.h in the global namespace).
struct xylem_framework_s {
    std::vector<std::unique_ptr<xylem::opencl::DeviceContext>> devices_;
};

struct xylem_buffer_s {
    cl_mem mem_;
    uint64_t bytes_;
    uint32_t device_;
};

// One in-order command queue. Ops are enqueued without waiting; the host blocks only in
// stream_sync (and copy_d2h is read after it). Kernel objects are per stream because
// clSetKernelArg is not safe on one cl_kernel from two threads.
struct xylem_stream_s {
    uint32_t device_ = 0;
    xylem::opencl::DeviceContext* dev_ = nullptr;
    cl_command_queue queue_ = nullptr;
    std::vector<std::pair<std::string, cl_kernel>> kernels_;
    // fused_elementwise's kernels by plugin_kit::fused_program_key (programs: DeviceContext).
    struct FusedKernel {
        cl_kernel kernel;
        uint32_t param_slots;  // float arguments after the operands (fused_codegen.h)
        std::string name;
    };
    std::unordered_map<uint64_t, FusedKernel> fused_kernels_;

    // Scratch: one device block that grows to the high-water mark (a released block is freed
    // by the runtime once the commands that use it finish), so steady state never allocates.
    cl_mem scratch_ = nullptr;
    size_t scratch_bytes_ = 0;
    cl_mem gemm_temp_ = nullptr;  // CLBlast's GEMM temporary, same policy
    size_t gemm_temp_bytes_ = 0;

    // Errors only the data can reveal (a label or index out of range) are detected by kernels
    // without a host round trip: they record the first one here; stream_sync reports it.
    cl_mem error_word_ = nullptr;

    ~xylem_stream_s();
};

namespace xylem::opencl {

// ---- kernel launches -----------------------------------------------------------------------
cl_kernel stream_kernel(xylem_stream_s& s, Family f, const char* name);
cl_mem stream_scratch(xylem_stream_s& s, size_t bytes);  // at least `bytes`, valid for this op
cl_mem stream_gemm_temp(xylem_stream_s& s, size_t bytes);

// Binds arguments in order and enqueues: Kernel(s, Family::Elementwise, "fill").arg(..)...run(n).
class Kernel {
public:
    Kernel(xylem_stream_s& s, Family f, const char* name);
    Kernel(xylem_stream_s& s, cl_kernel k, const char* name) : s_(s), k_(k), name_(name) {}  // a generated one
    template <class T>
    Kernel& arg(const T& v) {
        set(sizeof(T), &v);
        return *this;
    }
    Kernel& local(size_t bytes);  // a __local buffer argument
    // 1-D over n items with a grid-stride loop in the kernel: the global size is capped so that
    // small devices (PoCL on a CPU) run few, long work-groups.
    void run(int64_t n);
    // n_groups work-groups of `group` items (reductions: one group per output).
    void run_groups(int64_t n_groups, size_t group);
    // A 3-D grid: global[d] (a multiple of local[d]) items in groups of local.
    void run_nd(const size_t global[3], const size_t local[3]);
    // The largest work-group this kernel can run with on the stream's device: the device's limit,
    // lowered by the kernel's own (CL_KERNEL_WORK_GROUP_SIZE: registers and local memory on a GPU).
    size_t group_limit() const;
    const char* name() const { return name_; }

private:
    void set(size_t size, const void* value);
    void enqueue(size_t global, size_t local);
    void enqueue(cl_uint dims, const size_t* global, const size_t* local);

    xylem_stream_s& s_;
    cl_kernel k_;
    const char* name_;
    cl_uint next_ = 0;
};

// Items for a kernel that takes 16 elements per step (FOR_EACH16 in kernels/common.cl).
inline int64_t chunks16(int64_t n) { return (n + 15) / 16; }

// Work-group size for reductions on this device (a power of two, at most 256).
size_t reduce_group(const xylem_stream_s& s);

// ---- operands ------------------------------------------------------------------------------
// A validated operand: dtype checked, element range inside its buffer. Offsets and counts fit
// in an int (kernels index with 32-bit ints; larger tensors are rejected with a message).
struct Tensor {
    cl_mem mem;
    int32_t off;  // in elements
    int32_t numel;
    uint32_t ndim;
    const int64_t* dims;

    int32_t cols() const { return ndim ? static_cast<int32_t>(dims[ndim - 1]) : 1; }
    int32_t rows() const { return cols() ? numel / cols() : 0; }
};

// What the plugin kit (xylem/plugin_kit/op_args.h) needs to know about this plugin.
struct Plugin {
    static constexpr const char* name = "opencl";
    static constexpr size_t error_capacity = 2048;  // large enough for a short build log
    static constexpr const char* no_memory = "out of host memory";
    static constexpr bool index32 = true;
    using Tensor = opencl::Tensor;
    static uint64_t buffer_bytes(xylem_buffer_t b) { return b->bytes_; }
    static Tensor tensor(const xylem_tensor_arg& a, uint64_t numel) {
        return Tensor{a.buffer->mem_, static_cast<int32_t>(a.offset), static_cast<int32_t>(numel), a.ndim, a.dims};
    }
};

// The kit's descriptor checks; label and index values are checked by the kernels (see
// stream.cpp's error word): reading them here would wait for the queue on every loss.
using OpArgs = plugin_kit::OpArgs<Plugin>;

// True when the two operands share any element.
inline bool overlap(const Tensor& a, const Tensor& b) {
    return a.mem == b.mem && a.numel && b.numel && a.off < b.off + b.numel && b.off < a.off + a.numel;
}

// ---- shared launches (used by several families) -------------------------------------------
// y[r,c] = act(y[r,c] + b[c]) (b may be null)
void bias_activate(xylem_stream_s& s, int act, const Tensor* b, cl_mem y, int32_t y_off, int32_t rows, int32_t cols);
// C = alpha*op(A)*op(B) + beta*C, row-major, leading dims are the row lengths: through the
// plugin's kernels on a CPU device (kernels/gemm.cl), else CLBlast. With `bias` and `act`,
// C = act(... + bias[col]) in the same pass (CLBlast: bias_activate after).
void gemm(xylem_stream_s& s, bool trans_a, bool trans_b, int32_t m, int32_t n, int32_t k, float alpha, cl_mem a,
          int32_t a_off, int32_t lda, cl_mem b, int32_t b_off, int32_t ldb, float beta, cl_mem c, int32_t c_off,
          int32_t ldc, const char* op, const Tensor* bias = nullptr, int act = XYLEM_ACT_NONE);
// The same over `batch` products at element strides stride_a/b/c apart (0: one operand for all).
void gemm_batched(xylem_stream_s& s, bool trans_a, bool trans_b, int32_t batch, int32_t m, int32_t n, int32_t k,
                  float alpha, cl_mem a, int32_t a_off, int32_t lda, int32_t stride_a, cl_mem b, int32_t b_off,
                  int32_t ldb, int32_t stride_b, float beta, cl_mem c, int32_t c_off, int32_t ldc, int32_t stride_c,
                  const char* op);
// y = scale*x over n elements (the beta of an accumulating op), in place when x == y
void scale(xylem_stream_s& s, float factor, cl_mem y, int32_t y_off, int32_t n);
// db = beta*db + dy [n, c, inner] summed over n and inner (ops/reduce.cpp: bias_grad's kernels, and
// conv2d_bwd_filter's optional bias output).
void bias_grad(xylem_stream_s& s, const Tensor& dy, int32_t n, int32_t c, int32_t inner, float beta, const Tensor& db);

// ---- op kernels (ops/<family>.cpp); each validates its descriptor and throws OpError -------
// Every op of ops.h: the kit's cases run this plugin on PoCL in CI, so a new op comes with its kernel.
#define XYLEM_OPENCL_OPS(X) XYLEM_PLUGIN_KIT_OPS(X)
using OpFn = void (*)(const xylem_op_desc&, xylem_stream_s&);
#define XYLEM_DECLARE_OP(name) void op_##name(const xylem_op_desc&, xylem_stream_s&);
XYLEM_OPENCL_OPS(XYLEM_DECLARE_OP)
#undef XYLEM_DECLARE_OP

// ---- ABI entry points (wired into the table in plugin.cpp) ---------------------------------
XYLEM_PLUGIN_KIT_DECLARE_ENTRY_POINTS()

}  // namespace xylem::opencl
