// Fused optimizer updates: SGD (momentum, dampening, Nesterov, weight decay), Adam, AdamW and
// RMSprop, PyTorch semantics, the same per-element formulas as the native plugin.
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

__global__ void adamw_k(float* p, float* m, float* v, const float* g, int64_t n, AdamParams c, float decay) {
    XYLEM_GRID_STRIDE(i, n) {
        const float gi = g[i];
        const float mi = c.b1 * m[i] + (1.0f - c.b1) * gi;
        const float vi = c.b2 * v[i] + (1.0f - c.b2) * gi * gi;
        m[i] = mi;
        v[i] = vi;
        p[i] = p[i] * decay - c.step * mi / (sqrtf(vi) * c.inv_sqrt_bc2 + c.eps);
    }
}

__global__ void rmsprop_k(float* p, float* sq, float* buf, float* ga, const float* g, int64_t n, RmspropParams c) {
    const float keep = 1.0f - c.alpha;
    XYLEM_GRID_STRIDE(i, n) {
        const float gi = g[i] + c.wd * p[i];
        const float si = c.alpha * sq[i] + keep * (gi * gi);
        sq[i] = si;
        float avg;
        if (ga) {
            const float ai = ga[i] + keep * (gi - ga[i]);
            ga[i] = ai;
            avg = sqrtf(si - ai * ai) + c.eps;
        } else {
            avg = sqrtf(si) + c.eps;
        }
        if (buf) {
            const float bi = c.mom * buf[i] + gi / avg;
            buf[i] = bi;
            p[i] -= c.lr * bi;
        } else {
            p[i] -= c.lr * (gi / avg);
        }
    }
}

}  // namespace

void sgd(float* p, float* v, const float* g, int64_t n, SgdParams c, cudaStream_t s) {
    if (n) sgd_k<<<grid_for(n), kThreads, 0, s>>>(p, v, g, n, c);
}

void adam(float* p, float* m, float* v, const float* g, int64_t n, AdamParams c, cudaStream_t s) {
    if (n) adam_k<<<grid_for(n), kThreads, 0, s>>>(p, m, v, g, n, c);
}

void adamw(float* p, float* m, float* v, const float* g, int64_t n, AdamParams c, float decay, cudaStream_t s) {
    if (n) adamw_k<<<grid_for(n), kThreads, 0, s>>>(p, m, v, g, n, c, decay);
}

void rmsprop(float* p, float* sq, float* buf, float* ga, const float* g, int64_t n, RmspropParams c, cudaStream_t s) {
    if (n) rmsprop_k<<<grid_for(n), kThreads, 0, s>>>(p, sq, buf, ga, g, n, c);
}

}  // namespace xylem::cuda::kernels
