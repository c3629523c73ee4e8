// Internal declarations shared by the native plugin's files: handles, errors, operand access, ops.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <system_error>
#include <thread>

#include "xylem/plugin_api.h"
#include "xylem/plugin_kit/entry.h"
#include "xylem/plugin_kit/op_args.h"
#include "xylem/plugin_kit/op_list.h"
#include "xylem/plugin_kit/pointer_tensor.h"
#include "xylem/plugin_kit/shapes.h"
#include "isa.h"  // XYLEM_KERNEL: hot loops compiled per instruction-set level

namespace xylem::native {

// Scratch memory of one stream (im2col columns, transposes, per-channel sums): a bump allocator
// over one block. op_run resets it before each op; when an op needed more than the block held,
// the reset replaces the block by one of the new high-water size, so steady state never allocates.
class Arena {
public:
    Arena() = default;
    Arena(const Arena&) = delete;
    Arena& operator=(const Arena&) = delete;
    ~Arena();

    // n uninitialised elements, 64-byte aligned, valid until the next reset; throws std::bad_alloc.
    template <class T>
    T* alloc(int64_t n) {
        return static_cast<T*>(bytes(static_cast<size_t>(n) * sizeof(T)));
    }
    void reset();

private:
    void* bytes(size_t n);

    char* block_ = nullptr;
    size_t size_ = 0, used_ = 0;
    // Blocks taken this op because block_ ran out, merged at reset: with a cold arena every
    // allocation is one, and an op with per-worker scratch on 8 workers takes dozens.
    void* overflow_[128] = {};
    int n_overflow_ = 0;
    size_t overflow_used_ = 0;
};

}  // namespace xylem::native

// The ABI's opaque handles (declared by plugin_api.h in the global namespace).
struct xylem_framework_s {
    int hw_threads_;  // hardware threads of this machine (OpenBLAS runs one: blas.h)
};

// One allocation: this header, padded to 64 bytes, then the data.
struct alignas(64) xylem_buffer_s {
    uint64_t bytes_;
    void* data() { return reinterpret_cast<char*>(this) + sizeof(xylem_buffer_s); }
};

// Ops on one stream run in order on the calling thread, so its arena needs no lock, and two
// threads on two streams never share scratch.
struct xylem_stream_s {
    uint32_t device_;
    xylem::native::Arena scratch_;
};

namespace xylem::native {

// ---- errors --------------------------------------------------------------------------------
// Thrown by op kernels after the message is recorded; op_run turns it into the status.
using plugin_kit::OpError;

// ---- operands ------------------------------------------------------------------------------
// A validated operand: dtype checked, element range inside its buffer (plugin_kit).
using Tensor = plugin_kit::PointerTensor;

// What the plugin kit (xylem/plugin_kit/op_args.h) needs to know about this plugin.
struct Plugin {
    static constexpr const char* name = "native";
    static constexpr size_t error_capacity = 512;
    static constexpr const char* no_memory = "out of host memory";
    static constexpr bool index32 = false;
    using Tensor = plugin_kit::PointerTensor;
    static uint64_t buffer_bytes(xylem_buffer_t b) { return b->bytes_; }
    static Tensor tensor(const xylem_tensor_arg& a, uint64_t numel) {
        return Tensor::at(a.buffer->data(), a, numel);
    }
};

// Records a message for last_error() on the calling thread and returns status (plugin.cpp).
xylem_status set_error(xylem_status status, const char* fmt, ...) __attribute__((format(printf, 2, 3)));

// The kit's descriptor checks, plus label values on the host: ops run on the calling thread, so
// reading them costs nothing here (device plugins check them in their kernels instead).
class OpArgs : public plugin_kit::OpArgs<Plugin> {
public:
    using plugin_kit::OpArgs<Plugin>::OpArgs;

    // logits [N,C] (C >= 1 when N > 0) and i32 labels [N], each in [0,C).
    void check_classification(const Tensor& logits, const Tensor& labels) const {
        plugin_kit::OpArgs<Plugin>::check_classification(logits, labels);
        const int64_t n = logits.dims[0], c = logits.dims[1];
        const int32_t* y = labels.i32();
        for (int64_t i = 0; i < n; ++i)
            if (y[i] < 0 || y[i] >= c)
                fail("label %d at row %lld is out of range [0, %lld)", y[i], static_cast<long long>(i),
                     static_cast<long long>(c));
    }
};

// ---- shared kernels ------------------------------------------------------------------------
// Sum of f(i) for i < n. GCC vectorizes the 16 float lanes without -ffast-math (a plain float
// reduction would stay scalar); lanes flush to a double every block to bound rounding error.
template <class F>
inline double lane_sum(int64_t n, F f) {
    constexpr int64_t kLanes = 16, kBlock = 4096;
    double total = 0;
    int64_t i = 0;
    while (n - i >= kLanes) {
        float lane[kLanes] = {};
        const int64_t end = i + ((n - i < kBlock ? n - i : kBlock) / kLanes) * kLanes;
        for (; i < end; i += kLanes)
            for (int64_t l = 0; l < kLanes; ++l) lane[l] += f(i + l);
        for (int64_t l = 0; l < kLanes; ++l) total += lane[l];
    }
    for (; i < n; ++i) total += f(i);
    return total;
}

// A row's maximum, and the sum of exp(x[j] - m) over it (each exp also stored in e[j] when e is
// not null; e may be x): softmax and xent rows (ops/softmax.cpp).
float row_max(const float* x, int64_t c);

// The bias gradient (ops/reduce.cpp): db = beta*db + dy [n, c, inner] summed over n and inner,
// beta = 0 not reading db. bias_grad's, and conv2d_bwd_filter's db where its kernel does not sum dY
// itself.
void bias_grad_nc(const float* dy, int64_t n, int64_t c, int64_t inner, float beta, float* db, Arena& scratch);
double sum_exp(const float* x, int64_t c, float m, float* e);

using plugin_kit::overlap;  // true when two operands share any byte

// ---- threads for the plugin's own kernels ------------------------------------------------------
// Most kernels run on the calling thread; fused_elementwise spreads its tiles over workers.
constexpr int kMaxKernelThreads = 64;
// Workers a parallel kernel may use: XYLEM_NUM_THREADS when set, else the CPUs this process may
// run on (device.cpp), at most kMaxKernelThreads.
int kernel_threads();
// fn(ctx, worker, item) for every item in [0, n_items), on the calling thread (worker 0) and up to
// workers - 1 pool threads (workers.cpp); worker < workers. Returns when all have run. fn must
// not throw; items are claimed in order, one at a time, so an item should be some microseconds.
void run_items(int64_t n_items, int workers, void (*fn)(void* ctx, int worker, int64_t item), void* ctx);
template <class F>  // f(worker, item)
void parallel_items(int64_t n_items, int workers, const F& f) {
    run_items(n_items, workers, [](void* ctx, int w, int64_t i) { (*static_cast<const F*>(ctx))(w, i); },
              const_cast<F*>(&f));
}

// ---- splitting an op over threads ----------------------------------------------------------
// Big GEMMs (ops/gemm.cpp), convolutions (ops/conv.cpp) and memory-bound ops (ops/reduce.cpp,
// ops/gather.cpp, ...) split their work over the plugin's pool (the same one fused_elementwise
// uses). A result never depends on how many threads ran it (docs/architecture.md,
// "Determinism"): where a slice's arithmetic depends on where it was cut (an OpenBLAS call's
// result depends on its shape), the cut is fixed by the op's shape (`shape_slices`) and the
// workers share out the slices; elsewhere each output's arithmetic is the same however the work
// is cut, and an op simply takes one slice per worker (`split_workers`).
constexpr int kMaxSplit = 8;  // at most this many slices (each may take its own scratch blocks; the arena keeps 128 per op)

// Elements streamed per extra worker below which handing it a share costs more than it saves:
// for the memory-bound ops. Within a run of ops the pool's helper is spinning (workers.cpp) and
// takes a share in a microsecond or two, where 2^15 floats take 10-15 us to stream on one thread
// (a [768, 128] residual add, 98k elements: 46 us). It was 2^18 when a helper slept between ops
// (a wake-up costs ~200 us on a VM); at 2^15 the character GPT's residual adds, permutes, bias
// gradients and layer norms split in two.
constexpr int64_t kMinSplitElements = int64_t{1} << 15;

// CPUs for a split (device.cpp): the CPUs the plugin uses (XYLEM_NUM_THREADS, or the CPUs this
// process may run on), at most kMaxSplit.
int split_cpus();

// Workers for `units` slices of an op holding `work` (elements, FLOPs), each extra worker getting
// at least `min_per_worker` of it: from 1 to split_cpus(), never more than the slices. For ops
// whose results do not depend on the cut.
inline int split_workers(double work, double min_per_worker, int64_t units) {
    const double by_work = work / min_per_worker;
    const double cap = static_cast<double>(std::min<int64_t>(split_cpus(), units));
    return static_cast<int>(std::max(1.0, std::min(by_work, cap)));
}

// The most slices an op's shape may be cut into on this machine (device.cpp): the machine's
// online CPUs rounded up to a power of two, at most kMaxSplit. A property of the machine, not of
// the run: neither XYLEM_NUM_THREADS nor the process's affinity changes it.
int machine_slices();

// Slices of an op holding `work`, each at least `min_per_slice` of it, in at most `units` (and
// machine_slices()) slices: a power of two, so two or four workers share them out evenly. For
// ops whose result depends on the cut: the slices are the same for every XYLEM_NUM_THREADS, so
// the bits are too. More slices than this machine's CPUs would only cost (each OpenBLAS call
// packs the shared operand again: 8 blocks instead of 2 took char-rnn's step from 24.5 to 26 ms
// on 2 CPUs), fewer would leave CPUs idle.
inline int64_t shape_slices(double work, double min_per_slice, int64_t units) {
    const double most = std::min<double>(std::min<int64_t>(units, machine_slices()), work / min_per_slice);
    int64_t s = 1;
    while (2.0 * static_cast<double>(s) <= most) s *= 2;
    return s;
}

// body(lo, hi, w) for the workers slices [lo, hi) of [0, n), slice w on the calling thread or a
// worker of the pool (parallel_items: one set of threads for every parallel kernel). body must
// not throw.
template <class F>
void split_work(int64_t n, int workers, const F& body) {
    if (workers <= 1) return body(0, n, 0);
    parallel_items(workers, workers, [&](int, int64_t w) {
        body(n * w / workers, n * (w + 1) / workers, static_cast<int>(w));
    });
}

// body(lo, hi) over [0, n) elements of a memory-bound elementwise pass, split among the workers
// from kMinSplitElements each, at multiples of 16 elements (whole cache lines of floats, no two
// workers writing one line). Each element's result is the same however the range is cut.
// `min_per_worker` (default kMinSplitElements) is the elements an extra worker must get: less for
// passes that compute more than they stream (the GELUs, tanh, sigmoid).
template <class F>
void split_elements(int64_t n, const F& body, int64_t min_per_worker = kMinSplitElements) {
    constexpr int64_t kLine = 16;
    const int workers = split_workers(static_cast<double>(n), static_cast<double>(min_per_worker), n / kLine);
    if (workers <= 1) return body(0, n);
    const int64_t lines = (n + kLine - 1) / kLine;
    split_work(lines, workers, [&](int64_t lo, int64_t hi, int) { body(lo * kLine, std::min(n, hi * kLine)); });
}

// body(lo, hi, worker, slice) for each of `slices` slices [lo, hi) of [0, n), fixed by n and
// slices alone, run by up to slice_workers(slices) workers (worker < that, for per-worker
// scratch; slice < slices, for per-slice results). body must not throw.
inline int slice_workers(int64_t slices) { return static_cast<int>(std::min<int64_t>(slices, split_cpus())); }
template <class F>
void run_slices(int64_t n, int64_t slices, const F& body) {
    const int workers = slice_workers(slices);
    auto slice = [&](int w, int64_t s) { body(n * s / slices, n * (s + 1) / slices, w, s); };
    if (workers <= 1) {
        for (int64_t s = 0; s < slices; ++s) slice(0, s);
        return;
    }
    parallel_items(slices, workers, slice);
}

// Row-major C = alpha*op(A)*op(B) + beta*C (sizes checked against INT_MAX by the caller;
// ops/gemm.cpp). With the FLOPs to pay for waking the pool, C is cut into row blocks (column
// blocks when it is wider than tall), single-threaded sgemm calls shared out among the workers.
// The blocks are fixed by the shape (shape_slices), never by the thread count: OpenBLAS's
// result for a row depends on the call it is part of (its kernels treat a block's last rows
// differently on some CPUs), so a cut that followed the CPUs would change the bits.
// From a pool worker it runs its blocks on that thread (the pool runs one job at a time).
// With an epilogue, C = act(alpha*op(A)*op(B) + beta*C + bias): each block of C gets the bias and
// activation from the worker that computed it, while it is in that worker's cache (a linear
// layer's forward). (Starting C as the bias with beta 1, which spares OpenBLAS's zeroing of C,
// measured no faster: the copy reads each line of C in before writing it, the zeroing does not.)
struct GemmEpilogue {
    const float* bias = nullptr;  // [n], or null: no bias
    int act = XYLEM_ACT_NONE;     // ReLU, sigmoid, tanh or ReLU6 (activate() below)
};
void sgemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda, const float* b,
           int64_t ldb, float beta, float* c, int64_t ldc, const GemmEpilogue& epilogue = {});

// C = alpha*op(A)*op(B) + beta*C on the plugin's own kernel (ops/gemm_narrow.cpp): at the avx512
// level any width, in panels of 64 columns (B^T's panels packed first), where wide_gemm_available();
// at avx2 on a CPU with FMA a narrow C only (1 <= n <= 64, B not transposed), where
// narrow_gemm_available() (true at avx512 too). Each element's arithmetic depends only on its row
// and column, so blocks cut anyhow give the same bits. sgemm() uses it for the shapes where it
// measured faster than OpenBLAS.
bool narrow_gemm_available();
bool wide_gemm_available();
// Whether sgemm() (and the convolutions' per-worker GEMMs) take own_sgemm for a wide product:
// more than 64 columns, B transposed or not, where it measured faster (ops/gemm.cpp).
bool use_wide_kernel(int64_t m, int64_t n, int64_t k);
void own_sgemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
               const float* b, int64_t ldb, float beta, float* c, int64_t ldc);

// y = act(x) over n elements (y may alias x).
void activate(int act, const float* x, float* y, int64_t n);
// y[r,:] = act(y[r,:] + b) for each of rows rows (b may be null).
void bias_activate(int act, const float* b, float* y, int64_t rows, int64_t cols);
// y[r*ldy + j] = act(x[r*ldx + j] + b[r] + res[r*ldr + j]) for j < cols: a per-row (NCHW channel)
// bias and a residual (b and res may be null; x may equal y; res may not overlap y). The sums are
// made in that order: with res, the same bits as the pass without it followed by an add.
void channel_bias_activate(int act, const float* b, const float* x, int64_t ldx, float* y, int64_t ldy,
                           int64_t rows, int64_t cols, const float* res = nullptr, int64_t ldr = 0);

// What conv2d_fwd does to each output after its products, while the output is in cache:
// y = act(y + b[k] + r), the bias and the residual (ABI 1.10; in Y's layout) optional. Every
// forward path of ops/conv*.cpp finishes its blocks of outputs through finish().
struct ConvEpilogue {
    const float* b = nullptr;
    int act = XYLEM_ACT_NONE;
    const float* r = nullptr;
    const float* y = nullptr;  // Y's first element: the residual of Y's element y + i is r[i]
    bool any() const { return b || r || act != XYLEM_ACT_NONE; }
    const float* bias(int64_t k0) const { return b ? b + k0 : nullptr; }
    // Filters [k0, k0 + rows) over cols positions: computed in src (rows lds apart), written to dst
    // (ldd apart), whose values belong at `at` in Y (rows ld_at apart; dst itself by default, a
    // block buffer stored into Y later otherwise).
    void finish(int64_t k0, const float* src, int64_t lds, float* dst, int64_t ldd, int64_t rows, int64_t cols,
                const float* at = nullptr, int64_t ld_at = 0) const {
        if (!at) at = dst, ld_at = ldd;
        if (any() || src != dst)
            channel_bias_activate(act, bias(k0), src, lds, dst, ldd, rows, cols, r ? r + (at - y) : nullptr, ld_at);
    }
};

// ---- op kernels (ops/<family>.cpp); each validates its descriptor and throws OpError --------
// The reference backend implements every op of ops.h (a new op fails to link here until it has
// its kernel). The stream gives the kernel its scratch arena (reset before each op).
#define XYLEM_NATIVE_OPS(X) XYLEM_PLUGIN_KIT_OPS(X)
using OpFn = void (*)(const xylem_op_desc&, xylem_stream_s&);
#define XYLEM_DECLARE_OP(name) void op_##name(const xylem_op_desc&, xylem_stream_s&);
XYLEM_NATIVE_OPS(XYLEM_DECLARE_OP)
#undef XYLEM_DECLARE_OP

// ---- ABI entry points (wired into the table in plugin.cpp) ----------------------------------
XYLEM_PLUGIN_KIT_DECLARE_ENTRY_POINTS()
void* buffer_host_ptr(xylem_framework_t, xylem_buffer_t buffer);

}  // namespace xylem::native
