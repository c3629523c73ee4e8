// SOFTMAX_FWD / SOFTMAX_BWD over the last axis: one warp per row, max-shifted for stability.
#include "common.cuh"

namespace xylem::cuda::kernels {

namespace {

constexpr int kRowsPerBlock = kThreads / 32;

__device__ inline int64_t warp_row() { return blockIdx.x * static_cast<int64_t>(kRowsPerBlock) + (threadIdx.x >> 5); }

// y may alias x: each lane writes y[j] only after it read x[j] itself.
__global__ void softmax_fwd_k(const float* x, float* y, int64_t rows, int64_t c, bool log) {
    const int64_t r = warp_row();
    if (r >= rows) return;
    const int lane = threadIdx.x & 31;
    const float* xr = x + r * c;
    float* yr = y + r * c;
    float m = -INFINITY;
    for (int64_t j = lane; j < c; j += 32) m = fmaxf(m, xr[j]);
    m = warp_max(m);
    float sum = 0.0f;
    for (int64_t j = lane; j < c; j += 32) sum += expf(xr[j] - m);
    sum = __shfl_sync(0xffffffffu, warp_sum(sum), 0);
    if (log) {
        // (x - m) - log(sum): m + log(sum) would round at the size of m (4e-3 for logits near 1e5).
        const float lse = logf(sum);
        for (int64_t j = lane; j < c; j += 32) yr[j] = (xr[j] - m) - lse;
    } else {
        const float inv = 1.0f / sum;
        for (int64_t j = lane; j < c; j += 32) yr[j] = expf(xr[j] - m) * inv;
    }
}

// softmax: dx = y*(dy - sum(dy*y)); log_softmax: dx = dy - exp(y)*sum(dy).
__global__ void softmax_bwd_k(const float* dy, const float* y, float* dx, int64_t rows, int64_t c, bool log) {
    const int64_t r = warp_row();
    if (r >= rows) return;
    const int lane = threadIdx.x & 31;
    const float *g = dy + r * c, *yr = y + r * c;
    float* d = dx + r * c;
    float acc = 0.0f;
    for (int64_t j = lane; j < c; j += 32) acc += log ? g[j] : g[j] * yr[j];
    acc = __shfl_sync(0xffffffffu, warp_sum(acc), 0);
    for (int64_t j = lane; j < c; j += 32) d[j] = log ? g[j] - expf(yr[j]) * acc : yr[j] * (g[j] - acc);
}

unsigned row_blocks(int64_t rows) { return static_cast<unsigned>((rows + kRowsPerBlock - 1) / kRowsPerBlock); }

}  // namespace

void softmax_fwd(const float* x, float* y, int64_t rows, int64_t c, bool log, cudaStream_t s) {
    if (rows && c) softmax_fwd_k<<<row_blocks(rows), kThreads, 0, s>>>(x, y, rows, c, log);
}

void softmax_bwd(const float* dy, const float* y, float* dx, int64_t rows, int64_t c, bool log, cudaStream_t s) {
    if (rows && c) softmax_bwd_k<<<row_blocks(rows), kThreads, 0, s>>>(dy, y, dx, rows, c, log);
}

}  // namespace xylem::cuda::kernels
