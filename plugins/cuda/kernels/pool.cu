// POOL2D_FWD / POOL2D_BWD, NCHW f32, with the native plugin's exact rules: max takes the first
// maximum in row-major window order (a NaN wins once), padding never wins, average divides by
// the full window or the in-bounds part. cuDNN documents neither tie rule, hence own kernels.
#include "common.cuh"

namespace xylem::cuda::kernels {

namespace {

// One window, clipped to the input, and the average's divisor: ops.h's xylem_pool2d_window, the
// function the native plugin calls too.
struct Window {
    int64_t hs, he, ws, we;
    float count;
};

__device__ inline Window window(const PoolGeom& p, int64_t i, int64_t j) {
    Window w;
    const int64_t rows = xylem_pool2d_window(i, p.h, p.kh, p.sh, p.ph, p.include_pad, &w.hs, &w.he);
    const int64_t cols = xylem_pool2d_window(j, p.w, p.kw, p.sw, p.pw, p.include_pad, &w.ws, &w.we);
    w.count = static_cast<float>(rows * cols);
    return w;
}

// v takes over the running maximum m: strictly larger, or the first NaN.
__device__ inline bool wins(float v, float m) { return v > m || (v != v && m == m); }

__device__ inline int64_t argmax(const PoolGeom& p, const float* plane, const Window& win) {
    int64_t best = win.hs * p.w + win.ws;
    for (int64_t ih = win.hs; ih < win.he; ++ih)
        for (int64_t iw = win.ws; iw < win.we; ++iw)
            if (wins(plane[ih * p.w + iw], plane[best])) best = ih * p.w + iw;
    return best;
}


__global__ void pool_fwd_k(PoolGeom p, const float* x, float* y) {
    XYLEM_GRID_STRIDE(o, p.planes * p.oh * p.ow) {
        const int64_t j = o % p.ow, i = o / p.ow % p.oh, pl = o / (p.ow * p.oh);
        const float* plane = x + pl * p.h * p.w;
        const Window win = window(p, i, j);
        if (p.max) {
            y[o] = plane[argmax(p, plane, win)];
            continue;
        }
        float sum = 0.0f;
        for (int64_t ih = win.hs; ih < win.he; ++ih)
            for (int64_t iw = win.ws; iw < win.we; ++iw) sum += plane[ih * p.w + iw];
        y[o] = sum / win.count;
    }
}

// One thread per input element gathers from the windows that cover it: no atomics, and every
// dX element is written exactly once (zero where no window routes to it).
__global__ void pool_bwd_k(PoolGeom p, const float* dy, const float* x, float* dx) {
    XYLEM_GRID_STRIDE(e, p.planes * p.h * p.w) {
        const int64_t iw = e % p.w, ih = e / p.w % p.h, pl = e / (p.w * p.h);
        const float* plane = x + pl * p.h * p.w;
        const float* g = dy + pl * p.oh * p.ow;
        // Output rows i with i*sh - ph <= ih < i*sh - ph + kh, likewise columns.
        const int64_t i_lo = ih + p.ph - p.kh + 1 > 0 ? (ih + p.ph - p.kh + 1 + p.sh - 1) / p.sh : 0;
        const int64_t i_hi = (ih + p.ph) / p.sh < p.oh - 1 ? (ih + p.ph) / p.sh : p.oh - 1;
        const int64_t j_lo = iw + p.pw - p.kw + 1 > 0 ? (iw + p.pw - p.kw + 1 + p.sw - 1) / p.sw : 0;
        const int64_t j_hi = (iw + p.pw) / p.sw < p.ow - 1 ? (iw + p.pw) / p.sw : p.ow - 1;
        const int64_t here = ih * p.w + iw;
        float acc = 0.0f;
        for (int64_t i = i_lo; i <= i_hi; ++i)
            for (int64_t j = j_lo; j <= j_hi; ++j) {
                const Window win = window(p, i, j);
                if (p.max) {
                    if (argmax(p, plane, win) == here) acc += g[i * p.ow + j];
                } else {
                    acc += g[i * p.ow + j] / win.count;
                }
            }
        dx[e] = acc;
    }
}

}  // namespace

void pool_fwd(const PoolGeom& p, const float* x, float* y, cudaStream_t s) {
    const int64_t n = p.planes * p.oh * p.ow;
    if (n) pool_fwd_k<<<grid_for(n), kThreads, 0, s>>>(p, x, y);
}

void pool_bwd(const PoolGeom& p, const float* dy, const float* x, float* dx, cudaStream_t s) {
    const int64_t n = p.planes * p.h * p.w;
    if (n) pool_bwd_k<<<grid_for(n), kThreads, 0, s>>>(p, dy, x, dx);
}

}  // namespace xylem::cuda::kernels
