// Elementwise kernels: fill, copy, axpby, scale, mul, add (broadcast), activations, dropout, bias epilogues.
#include "common.cuh"
#include "xylem/ops.h"

namespace xylem::cuda::kernels {

namespace {

__global__ void fill_k(uint32_t* y, int64_t n, uint32_t bits) {
    XYLEM_GRID_STRIDE(i, n) y[i] = bits;
}

__global__ void copy_k(const uint32_t* x, uint32_t* y, int64_t n) {
    XYLEM_GRID_STRIDE(i, n) y[i] = x[i];
}

__global__ void axpby_k(const float* a, const float* b, float* out, int64_t n, float alpha, float beta) {
    XYLEM_GRID_STRIDE(i, n) {
        const float other = b ? b[i] : (beta == 0.0f ? 0.0f : out[i]);  // BLAS: beta = 0 never reads out
        out[i] = b || beta != 0.0f ? alpha * a[i] + beta * other : alpha * a[i];
    }
}

__global__ void scale_k(float* y, int64_t n, float beta) {
    XYLEM_GRID_STRIDE(i, n) y[i] = beta == 0.0f ? 0.0f : beta * y[i];
}

__global__ void mul_k(const float* a, const float* b, float* out, int64_t n) {
    XYLEM_GRID_STRIDE(i, n) out[i] = a[i] * b[i];
}

// out = alpha*a + beta*b over [rows, cols], b broadcast by mode (plugin_kit::Broadcast: 0
// elementwise, 1 a row vector [cols], 2 a column vector [rows]). out may be a (same index).
__global__ void add_k(const float* a, const float* b, float* out, int64_t rows, int64_t cols, int mode, float alpha,
                      float beta) {
    XYLEM_GRID_STRIDE(i, rows * cols) {
        const float other = mode == 0 ? b[i] : mode == 1 ? b[i % cols] : b[i / cols];
        out[i] = alpha * a[i] + beta * other;
    }
}

__global__ void act_fwd_k(int act, const float* x, float* y, int64_t n) {
    XYLEM_GRID_STRIDE(i, n) y[i] = apply_act(act, x[i]);
}

// v is y = act(x), or x itself for the GELUs (their gradient needs the input). dx may alias dy.
__global__ void act_bwd_k(int act, const float* dy, const float* y, float* dx, int64_t n) {
    XYLEM_GRID_STRIDE(i, n) {
        const float d = dy[i], v = y[i];
        switch (act) {
        case XYLEM_ACT_RELU: dx[i] = v > 0.0f ? d : 0.0f; break;
        case XYLEM_ACT_SIGMOID: dx[i] = d * v * (1.0f - v); break;
        case XYLEM_ACT_TANH: dx[i] = d * (1.0f - v * v); break;
        case XYLEM_ACT_GELU: dx[i] = d * gelu_derivative(v); break;
        case XYLEM_ACT_GELU_TANH: dx[i] = d * gelu_tanh_derivative(v); break;
        case XYLEM_ACT_RELU6: dx[i] = v > 0.0f && 6.0f - v > 0.0f ? d : 0.0f; break;
        default: dx[i] = d;
        }
    }
}

// The keep decision is ops.h's xylem_dropout_keep, so the mask equals the CPU's bit for bit.
__global__ void dropout_k(const float* x, float* y, float* mask, int64_t n, float p, uint64_t seed) {
    const float scale = 1.0f / (1.0f - p);
    XYLEM_GRID_STRIDE(i, n) {
        const float m = p == 0.0f ? 1.0f : xylem_dropout_keep(seed, static_cast<uint64_t>(i), p) ? scale : 0.0f;
        mask[i] = m;
        y[i] = p == 0.0f ? x[i] : x[i] * m;
    }
}

__global__ void row_bias_act_k(int act, const float* b, float* y, int64_t rows, int64_t cols) {
    XYLEM_GRID_STRIDE(i, rows * cols) y[i] = apply_act(act, y[i] + (b ? b[i % cols] : 0.0f));
}

__global__ void channel_bias_act_k(int act, const float* b, float* y, int64_t total, int64_t c, int64_t inner) {
    XYLEM_GRID_STRIDE(i, total) y[i] = apply_act(act, y[i] + (b ? b[(i / inner) % c] : 0.0f));
}

}  // namespace

void fill_u32(uint32_t* y, int64_t n, uint32_t bits, cudaStream_t s) {
    if (n) fill_k<<<grid_for(n), kThreads, 0, s>>>(y, n, bits);
}
void copy_u32(const uint32_t* x, uint32_t* y, int64_t n, cudaStream_t s) {
    if (n) copy_k<<<grid_for(n), kThreads, 0, s>>>(x, y, n);
}
void axpby(const float* a, const float* b, float* out, int64_t n, float alpha, float beta, cudaStream_t s) {
    if (n) axpby_k<<<grid_for(n), kThreads, 0, s>>>(a, b, out, n, alpha, beta);
}
void scale(float* y, int64_t n, float beta, cudaStream_t s) {
    if (n && beta != 1.0f) scale_k<<<grid_for(n), kThreads, 0, s>>>(y, n, beta);
}
void mul(const float* a, const float* b, float* out, int64_t n, cudaStream_t s) {
    if (n) mul_k<<<grid_for(n), kThreads, 0, s>>>(a, b, out, n);
}
void add(const float* a, const float* b, float* out, int64_t rows, int64_t cols, int mode, float alpha, float beta,
         cudaStream_t s) {
    const int64_t n = rows * cols;
    if (n) add_k<<<grid_for(n), kThreads, 0, s>>>(a, b, out, rows, cols, mode, alpha, beta);
}
void act_fwd(int act, const float* x, float* y, int64_t n, cudaStream_t s) {
    if (n) act_fwd_k<<<grid_for(n), kThreads, 0, s>>>(act, x, y, n);
}
void act_bwd(int act, const float* dy, const float* y, float* dx, int64_t n, cudaStream_t s) {
    if (n) act_bwd_k<<<grid_for(n), kThreads, 0, s>>>(act, dy, y, dx, n);
}
void dropout(const float* x, float* y, float* mask, int64_t n, float p, uint64_t seed, cudaStream_t s) {
    if (n) dropout_k<<<grid_for(n), kThreads, 0, s>>>(x, y, mask, n, p, seed);
}
void row_bias_act(int act, const float* b, float* y, int64_t rows, int64_t cols, cudaStream_t s) {
    if (rows > 0 && cols > 0) row_bias_act_k<<<grid_for(rows * cols), kThreads, 0, s>>>(act, b, y, rows, cols);
}
void channel_bias_act(int act, const float* b, float* y, int64_t n, int64_t c, int64_t inner, cudaStream_t s) {
    const int64_t total = n * c * inner;
    if (total) channel_bias_act_k<<<grid_for(total), kThreads, 0, s>>>(act, b, y, total, c, inner);
}

}  // namespace xylem::cuda::kernels
