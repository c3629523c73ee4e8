// Gradient clipping: clamp by value, the squared global norm as a two-pass reduction into a device
// scalar (per-block partials in double, then one block adds them in a fixed order: no float
// atomics, so the same bits every run), and the scale by min(1, max_norm / (norm + eps)) that every
// thread computes from that scalar.
#include "common.cuh"

namespace xylem::cuda::kernels {

namespace {

// NaN stays NaN (both comparisons are false), as torch.clamp.
__global__ void clamp_k(float* x, int64_t n, float lo, float hi) {
    XYLEM_GRID_STRIDE(i, n) {
        const float v = x[i];
        x[i] = v < lo ? lo : v > hi ? hi : v;
    }
}

__global__ void sum_squares_partial_k(const float* x, int64_t n, double* partials) {
    double acc = 0.0;
    XYLEM_GRID_STRIDE(i, n) {
        const float v = x[i];
        acc += v * v;
    }
    acc = block_sum(acc);
    if (threadIdx.x == 0) partials[blockIdx.x] = acc;
}

__global__ void sum_squares_finish_k(const double* partials, int64_t blocks, float* acc, float beta) {
    double total = 0.0;
    for (int64_t b = threadIdx.x; b < blocks; b += blockDim.x) total += partials[b];
    total = block_sum(total);
    if (threadIdx.x == 0) acc[0] = beta == 0.0f ? static_cast<float>(total) : static_cast<float>(beta * acc[0] + total);
}

__global__ void clip_by_norm_k(const float* sumsq, float* x, int64_t n, float max_norm, float eps) {
    float coef = max_norm / (sqrtf(sumsq[0]) + eps);
    coef = coef > 1.0f ? 1.0f : coef;  // a NaN norm keeps coef NaN, as torch's clamp(max=1)
    if (coef == 1.0f) return;
    XYLEM_GRID_STRIDE(i, n) x[i] *= coef;
}

}  // namespace

void clamp(float* x, int64_t n, float lo, float hi, cudaStream_t s) {
    if (n) clamp_k<<<grid_for(n), kThreads, 0, s>>>(x, n, lo, hi);
}

int64_t sum_squares_blocks(int64_t n) {
    const int64_t b = (n + kThreads * 8 - 1) / (kThreads * 8);  // 8 elements per thread at least
    return b < 1 ? 1 : b > 1024 ? 1024 : b;
}

void sum_squares(const float* x, int64_t n, float* acc, float beta, double* partials, cudaStream_t s) {
    const int64_t blocks = sum_squares_blocks(n);
    sum_squares_partial_k<<<static_cast<unsigned>(blocks), kThreads, 0, s>>>(x, n, partials);
    sum_squares_finish_k<<<1, kThreads, 0, s>>>(partials, blocks, acc, beta);
}

void clip_by_norm(const float* sumsq, float* x, int64_t n, float max_norm, float eps, cudaStream_t s) {
    if (n) clip_by_norm_k<<<grid_for(n), kThreads, 0, s>>>(sumsq, x, n, max_norm, eps);
}

}  // namespace xylem::cuda::kernels
