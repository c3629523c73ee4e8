// Losses: forward kernels sum into the device loss scalar (double accumulation, one block, so the
// result is deterministic); backward kernels write the prediction gradient. A label outside
// [0, C) flags the stream and turns its row's loss and gradient into NaN.
#include "common.cuh"

namespace xylem::cuda::kernels {

namespace {

constexpr int kLossThreads = 1024;

// acc = 0 overwrites without reading the old loss (it may hold NaN).
__device__ inline void store_loss(float* loss, float scale, float acc, double sum) {
    const double add = static_cast<double>(scale) * sum;
    loss[0] = static_cast<float>(acc == 0.0f ? add : acc * static_cast<double>(loss[0]) + add);
}

__device__ inline bool bad_label(int32_t label, int64_t c, unsigned* flags, unsigned bit) {
    if (label >= 0 && label < c) return false;
    atomicOr(flags, bit);
    return true;
}

__global__ void xent_fwd_k(const float* x, const int32_t* labels, float* loss, int64_t n, int64_t c, float scale,
                           float acc, unsigned* flags, unsigned bit) {
    double total = 0.0;
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
        const float* row = x + i * c;
        float m = row[0];
        for (int64_t j = 1; j < c; ++j) m = row[j] > m ? row[j] : m;
        double s = 0.0;
        for (int64_t j = 0; j < c; ++j) s += exp(static_cast<double>(row[j] - m));
        const int32_t label = labels[i];
        total += bad_label(label, c, flags, bit) ? NAN : (static_cast<double>(m) - row[label]) + log(s);
    }
    total = block_sum(total);
    if (threadIdx.x == 0) store_loss(loss, scale, acc, total);
}

// One warp per row; dx may alias x (each lane reads x[j] before writing dx[j]).
__global__ void xent_bwd_k(const float* x, const int32_t* labels, float* dx, int64_t n, int64_t c, float scale,
                           unsigned* flags, unsigned bit) {
    const int64_t r = blockIdx.x * static_cast<int64_t>(kThreads / 32) + (threadIdx.x >> 5);
    if (r >= n) return;
    const int lane = threadIdx.x & 31;
    const float* row = x + r * c;
    float* d = dx + r * c;
    float m = -INFINITY;
    for (int64_t j = lane; j < c; j += 32) m = fmaxf(m, row[j]);
    m = warp_max(m);
    float sum = 0.0f;
    for (int64_t j = lane; j < c; j += 32) sum += expf(row[j] - m);
    sum = __shfl_sync(0xffffffffu, warp_sum(sum), 0);
    const int32_t label = labels[r];
    const bool bad = label < 0 || label >= c;
    if (bad && lane == 0) atomicOr(flags, bit);
    const float k = scale / sum;
    for (int64_t j = lane; j < c; j += 32) d[j] = bad ? NAN : expf(row[j] - m) * k - (j == label ? scale : 0.0f);
}

__global__ void nll_fwd_k(const float* logp, const int32_t* labels, float* loss, int64_t n, int64_t c, float scale,
                          float acc, unsigned* flags, unsigned bit) {
    double total = 0.0;
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
        const int32_t label = labels[i];
        total -= bad_label(label, c, flags, bit) ? NAN : logp[i * c + label];
    }
    total = block_sum(total);
    if (threadIdx.x == 0) store_loss(loss, scale, acc, total);
}

__global__ void nll_bwd_k(const int32_t* labels, float* dx, int64_t n, int64_t c, float scale, unsigned* flags,
                          unsigned bit) {
    XYLEM_GRID_STRIDE(i, n * c) {
        const int64_t r = i / c, j = i % c;
        const int32_t label = labels[r];
        const bool bad = label < 0 || label >= c;
        if (bad && j == 0) atomicOr(flags, bit);
        dx[i] = bad ? NAN : j == label ? -scale : 0.0f;
    }
}

__global__ void mse_partial_k(const float* p, const float* t, int64_t n, double* partials) {
    double acc = 0.0;
    XYLEM_GRID_STRIDE(i, n) {
        const float d = p[i] - t[i];
        acc += d * d;
    }
    acc = block_sum(acc);
    if (threadIdx.x == 0) partials[blockIdx.x] = acc;
}

__global__ void mse_finish_k(const double* partials, int64_t blocks, float* loss, float scale, float acc) {
    double total = 0.0;
    for (int64_t b = threadIdx.x; b < blocks; b += blockDim.x) total += partials[b];
    total = block_sum(total);
    if (threadIdx.x == 0) store_loss(loss, scale, acc, total);
}

__global__ void mse_bwd_k(const float* p, const float* t, float* dp, int64_t n, float k) {
    XYLEM_GRID_STRIDE(i, n) dp[i] = k * (p[i] - t[i]);
}

}  // namespace

void xent_fwd(const float* logits, const int32_t* labels, float* loss, int64_t n, int64_t c, float scale, float acc,
              unsigned* flags, unsigned bit, cudaStream_t s) {
    xent_fwd_k<<<1, kLossThreads, 0, s>>>(logits, labels, loss, n, c, scale, acc, flags, bit);
}

void xent_bwd(const float* logits, const int32_t* labels, float* dx, int64_t n, int64_t c, float scale,
              unsigned* flags, unsigned bit, cudaStream_t s) {
    const int64_t rows_per_block = kThreads / 32;
    if (n && c)
        xent_bwd_k<<<static_cast<unsigned>((n + rows_per_block - 1) / rows_per_block), kThreads, 0, s>>>(
            logits, labels, dx, n, c, scale, flags, bit);
}

void nll_fwd(const float* logp, const int32_t* labels, float* loss, int64_t n, int64_t c, float scale, float acc,
             unsigned* flags, unsigned bit, cudaStream_t s) {
    nll_fwd_k<<<1, kLossThreads, 0, s>>>(logp, labels, loss, n, c, scale, acc, flags, bit);
}

void nll_bwd(const int32_t* labels, float* dx, int64_t n, int64_t c, float scale, unsigned* flags, unsigned bit,
             cudaStream_t s) {
    if (n > 0 && c > 0) nll_bwd_k<<<grid_for(n * c), kThreads, 0, s>>>(labels, dx, n, c, scale, flags, bit);
}

int64_t mse_blocks(int64_t n) {
    const int64_t b = (n + kThreads * 8 - 1) / (kThreads * 8);  // 8 elements per thread at least
    return b < 1 ? 1 : b > 1024 ? 1024 : b;
}

void mse_fwd(const float* p, const float* t, float* loss, int64_t n, float scale, float acc, double* partials,
             cudaStream_t s) {
    const int64_t blocks = mse_blocks(n);
    mse_partial_k<<<static_cast<unsigned>(blocks), kThreads, 0, s>>>(p, t, n, partials);
    mse_finish_k<<<1, kLossThreads, 0, s>>>(partials, blocks, loss, scale, acc);
}

void mse_bwd(const float* p, const float* t, float* dp, int64_t n, float scale, cudaStream_t s) {
    if (n) mse_bwd_k<<<grid_for(n), kThreads, 0, s>>>(p, t, dp, n, 2.0f * scale);
}

}  // namespace xylem::cuda::kernels
