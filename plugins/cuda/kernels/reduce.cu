// Reductions whose result stays on the device: the bias gradient, the accuracy count and REDUCE
// (sum, mean or max over an axis, accumulated in double).
#include <cmath>

#include "common.cuh"

namespace xylem::cuda::kernels {

namespace {

// db = beta*db + acc, without reading db when beta == 0 (it may hold NaN).
__device__ inline float blend(float beta, float db, double acc) {
    return beta == 0.0f ? static_cast<float>(acc) : static_cast<float>(beta * db + acc);
}

// [N,C]: one thread per column walks the rows; neighbouring threads read neighbouring floats.
__global__ void bias_grad_cols_k(const float* dy, float* db, int64_t n, int64_t c, float beta) {
    XYLEM_GRID_STRIDE(j, c) {
        double acc = 0.0;
        for (int64_t r = 0; r < n; ++r) acc += dy[r * c + j];
        db[j] = blend(beta, db[j], acc);
    }
}

// [N,C,H,W...]: one block per channel sums its N contiguous planes (the Flux #558 reduction).
__global__ void bias_grad_planes_k(const float* dy, float* db, int64_t n, int64_t c, int64_t inner, float beta) {
    const int64_t ch = blockIdx.x;
    double acc = 0.0;
    for (int64_t r = 0; r < n; ++r) {
        const float* plane = dy + (r * c + ch) * inner;
        for (int64_t i = threadIdx.x; i < inner; i += blockDim.x) acc += plane[i];
    }
    acc = block_sum(acc);
    if (threadIdx.x == 0) db[ch] = blend(beta, db[ch], acc);
}

// One thread per row; ties keep the first maximum, as on the CPU. A bad label counts as wrong.
__global__ void accuracy_k(const float* x, const int32_t* labels, float* correct, int64_t n, int64_t c,
                           unsigned* flags, unsigned bit) {
    unsigned hits = 0;
    for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
         i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
        const float* row = x + i * c;
        int64_t best = 0;
        for (int64_t j = 1; j < c; ++j)
            if (row[j] > row[best]) best = j;
        const int32_t label = labels[i];
        if (label < 0 || label >= c) atomicOr(flags, bit);
        hits += best == label;
    }
    hits = block_sum(hits);
    if (threadIdx.x == 0 && hits) atomicAdd(correct, static_cast<float>(hits));  // integer counts add exactly
}

// ---- REDUCE: x seen as [outer, n, inner]; output t = o*inner + j reduces x[(o*n + k)*inner + j] ----
// Every path reduces an output in an order fixed by the shape alone: sequential per thread, or a
// fixed shuffle tree per warp or block, with slices combined in order. No atomics: the same bits
// every run.

// max that propagates NaN (a NaN on either side wins), as torch.amax; fmax would drop it.
__device__ inline double max_nan(double a, double b) { return a > b || a != a ? a : b; }
__device__ inline double combine(int mode, double a, double b) {
    return mode == XYLEM_REDUCE_MAX ? max_nan(a, b) : a + b;
}
__device__ inline double identity(int mode) {
    return mode == XYLEM_REDUCE_MAX ? -static_cast<double>(INFINITY) : 0.0;
}

// The warp's reduction, valid in lane 0.
__device__ inline double warp_reduce(int mode, double v) {
    for (int o = 16; o > 0; o >>= 1) v = combine(mode, v, __shfl_down_sync(0xffffffffu, v, o));
    return v;
}

// The block's reduction (blockDim.x a multiple of 32), valid in thread 0.
__device__ inline double block_reduce(int mode, double v) {
    __shared__ double partial[32];
    v = warp_reduce(mode, v);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    if (lane == 0) partial[warp] = v;
    __syncthreads();
    v = threadIdx.x < (blockDim.x >> 5) ? partial[threadIdx.x] : identity(mode);
    if (warp == 0) v = warp_reduce(mode, v);
    return v;
}

// out[t] = beta*out[t] + v, a mean dividing v by n first (0/0 is NaN); out not read when beta == 0.
__device__ inline void reduce_store(float* out, int64_t t, const ReduceGeom& g, double v) {
    if (g.mode == XYLEM_REDUCE_MEAN) v /= static_cast<double>(g.n);
    out[t] = g.beta == 0.0f ? static_cast<float>(v) : static_cast<float>(g.beta * out[t] + v);
}

__device__ inline const float* run_start(const float* x, const ReduceGeom& g, int64_t t) {
    const int64_t o = t / g.inner, j = t % g.inner;
    return x + o * g.n * g.inner + j;
}

// One thread per output (short runs, or inner > 1: neighbouring threads read neighbouring floats).
__global__ void reduce_each_k(const float* x, float* out, ReduceGeom g) {
    XYLEM_GRID_STRIDE(t, g.outputs) {
        const float* p = run_start(x, g, t);
        double v = identity(g.mode);
        for (int64_t k = 0; k < g.n; ++k) v = combine(g.mode, v, p[k * g.inner]);
        reduce_store(out, t, g, v);
    }
}

// One warp per output of many contiguous runs (inner == 1): the lanes read a run together.
__global__ void reduce_warps_k(const float* x, float* out, ReduceGeom g) {
    const int64_t warps = static_cast<int64_t>(gridDim.x) * (blockDim.x >> 5);
    const int lane = threadIdx.x & 31;
    for (int64_t t = blockIdx.x * static_cast<int64_t>(blockDim.x >> 5) + (threadIdx.x >> 5); t < g.outputs;
         t += warps) {
        const float* p = x + t * g.n;
        double v = identity(g.mode);
        for (int64_t k = lane; k < g.n; k += 32) v = combine(g.mode, v, p[k]);
        v = warp_reduce(g.mode, v);
        if (lane == 0) reduce_store(out, t, g, v);
    }
}

// Block b reduces slice b % slices of output b / slices: stores the output when there is one slice,
// else its partial for reduce_finish_k.
__global__ void reduce_blocks_k(const float* x, float* out, ReduceGeom g, int64_t slices, double* partials) {
    const int64_t b = blockIdx.x, t = b / slices, slice = b % slices;
    const int64_t lo = slice * g.n / slices, hi = (slice + 1) * g.n / slices;
    const float* p = run_start(x, g, t);
    double v = identity(g.mode);
    for (int64_t k = lo + threadIdx.x; k < hi; k += blockDim.x) v = combine(g.mode, v, p[k * g.inner]);
    v = block_reduce(g.mode, v);
    if (threadIdx.x != 0) return;
    if (slices == 1) reduce_store(out, t, g, v);
    else partials[b] = v;
}

__global__ void reduce_finish_k(const double* partials, float* out, ReduceGeom g, int64_t slices) {
    XYLEM_GRID_STRIDE(t, g.outputs) {
        double v = partials[t * slices];
        for (int64_t s = 1; s < slices; ++s) v = combine(g.mode, v, partials[t * slices + s]);
        reduce_store(out, t, g, v);
    }
}

constexpr int64_t kShortRun = 32, kManyOutputs = 1024, kMaxSliceBlocks = 1024;

// Blocks per output for reduce_blocks_k, or 0 for the thread- and warp-per-output kernels.
int64_t slices_for(const ReduceGeom& g) {
    if (g.n <= kShortRun || g.outputs >= kManyOutputs) return 0;
    const int64_t per_block = kThreads * 8;  // at least 8 elements per thread
    const int64_t most = kMaxSliceBlocks / g.outputs;
    const int64_t want = (g.n + per_block - 1) / per_block;
    return want < 1 ? 1 : want > most ? (most < 1 ? 1 : most) : want;
}

}  // namespace

int64_t reduce_partials(const ReduceGeom& g) {
    const int64_t slices = slices_for(g);
    return slices > 1 ? g.outputs * slices : 0;
}

void reduce(const float* x, float* out, const ReduceGeom& g, double* partials, cudaStream_t s) {
    if (!g.outputs) return;
    const int64_t slices = slices_for(g);
    if (slices == 0) {
        if (g.inner == 1 && g.n > kShortRun)
            reduce_warps_k<<<grid_for(g.outputs * 32), kThreads, 0, s>>>(x, out, g);
        else
            reduce_each_k<<<grid_for(g.outputs), kThreads, 0, s>>>(x, out, g);
        return;
    }
    reduce_blocks_k<<<static_cast<unsigned>(g.outputs * slices), kThreads, 0, s>>>(x, out, g, slices, partials);
    if (slices > 1) reduce_finish_k<<<grid_for(g.outputs), kThreads, 0, s>>>(partials, out, g, slices);
}

void bias_grad(const float* dy, float* db, int64_t n, int64_t c, int64_t inner, float beta, cudaStream_t s) {
    if (!c) return;
    if (inner == 1) bias_grad_cols_k<<<grid_for(c), kThreads, 0, s>>>(dy, db, n, c, beta);
    else bias_grad_planes_k<<<static_cast<unsigned>(c), kThreads, 0, s>>>(dy, db, n, c, inner, beta);
}

void accuracy(const float* logits, const int32_t* labels, float* correct, int64_t n, int64_t c, unsigned* flags,
              unsigned bit, cudaStream_t s) {
    if (n) accuracy_k<<<grid_for(n), kThreads, 0, s>>>(logits, labels, correct, n, c, flags, bit);
}

}  // namespace xylem::cuda::kernels
