// Fused optimizer updates: SGD (momentum, dampening, Nesterov, weight decay) and Adam, PyTorch
// semantics, the same per-element formulas as the native plugin.
#include "common.cuh"

namespace xylem::cuda::kernels {

namespace {

__global__ void sgd_k(float* p, float* v, const float* g, int64_t n, SgdParams c) {
    XYLEM_GRID_STRIDE(i, n) {
        const float gi = g[i] + c.wd * p[i];
        if (!v) {
            p[i] -= c.lr * gi;
            continue;
        }
        const float vi = c.mom * v[i] + c.keep * gi;
        v[i] = vi;
        p[i] -= c.lr * (c.nesterov ? gi + c.mom * vi : vi);
    }
}

__global__ void adam_k(float* p, float* m, float* v, const float* g, int64_t n, AdamParams c) {
    XYLEM_GRID_STRIDE(i, n) {
        const float gi = g[i] + c.wd * p[i];
        const float mi = c.b1 * m[i] + (1.0f - c.b1) * gi;
        const float vi = c.b2 * v[i] + (1.0f - c.b2) * gi * gi;
        m[i] = mi;
        v[i] = vi;
        p[i] -= c.step * mi / (sqrtf(vi) * c.inv_sqrt_bc2 + c.eps);
    }
}

}  // namespace

void sgd(float* p, float* v, const float* g, int64_t n, SgdParams c, cudaStream_t s) {
    if (n) sgd_k<<<grid_for(n), kThreads, 0, s>>>(p, v, g, n, c);
}

void adam(float* p, float* m, float* v, const float* g, int64_t n, AdamParams c, cudaStream_t s) {
    if (n) adam_k<<<grid_for(n), kThreads, 0, s>>>(p, m, v, g, n, c);
}

}  // namespace xylem::cuda::kernels
