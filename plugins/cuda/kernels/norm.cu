// BATCHNORM kernels over axis 1, PyTorch semantics: one block per channel accumulates its
// statistics in double (two passes, like the CPU), elementwise kernels apply them.
#include "common.cuh"

namespace xylem::cuda::kernels {

namespace {

constexpr int kBnThreads = 512;

// Sum of f(index) over the elements of channel ch.
template <class F>
__device__ double channel_sum(const BnGeom& b, int64_t ch, F f) {
    double acc = 0.0;
    const int64_t count = b.n * b.inner;
    for (int64_t k = threadIdx.x; k < count; k += blockDim.x) {
        const int64_t n = k / b.inner, i = k % b.inner;
        acc += f((n * b.c + ch) * b.inner + i);
    }
    return block_sum(acc);
}

__global__ void bn_train_stats_k(BnGeom b, const float* x, const float* gamma, float* rm, float* rv, float* saved_mean,
                                 float* saved_invstd, float* shift, float* scale, float eps, float momentum) {
    const int64_t ch = blockIdx.x;
    const double count = static_cast<double>(b.n * b.inner);
    __shared__ double mean;
    const double sum = channel_sum(b, ch, [x](int64_t i) { return static_cast<double>(x[i]); });
    if (threadIdx.x == 0) mean = sum / count;
    __syncthreads();
    const double mu = mean;
    const double sq = channel_sum(b, ch, [x, mu](int64_t i) {
        const double d = x[i] - mu;
        return d * d;
    });
    if (threadIdx.x != 0) return;
    const double v = sq / count, invstd = 1.0 / sqrt(v + eps), m = momentum;
    saved_mean[ch] = shift[ch] = static_cast<float>(mu);
    saved_invstd[ch] = static_cast<float>(invstd);
    scale[ch] = static_cast<float>(gamma[ch] * invstd);
    rm[ch] = static_cast<float>((1.0 - m) * rm[ch] + m * mu);
    rv[ch] = static_cast<float>((1.0 - m) * rv[ch] + m * v * (count / (count - 1.0)));
}

__global__ void bn_eval_coeffs_k(int64_t c, const float* gamma, const float* rm, const float* rv, float* shift,
                                 float* scale, float eps) {
    XYLEM_GRID_STRIDE(ch, c) {
        shift[ch] = rm[ch];
        scale[ch] = static_cast<float>(gamma[ch] / sqrt(static_cast<double>(rv[ch]) + eps));
    }
}

__global__ void bn_normalize_k(BnGeom b, const float* x, float* y, const float* shift, const float* scale,
                               const float* offset, bool relu) {
    XYLEM_GRID_STRIDE(i, b.n * b.c * b.inner) {
        const int64_t ch = i / b.inner % b.c;
        const float v = (x[i] - shift[ch]) * scale[ch] + offset[ch];
        y[i] = relu ? (v > 0.0f ? v : 0.0f) : v;
    }
}

// The gradient the batch norm sees: dY, or with the ReLU (y: its output) dY where y > 0.
__device__ inline float bn_gradient(const float* dy, const float* y, int64_t i) {
    return y && !(y[i] > 0.0f) ? 0.0f : dy[i];
}

// dbeta = sum g; dgamma = sum g*xhat; dX = k*g + kx*(x - mean) + k0 per channel (g: bn_gradient).
__global__ void bn_bwd_coeffs_k(BnGeom b, const float* dy, const float* y, const float* x, const float* gamma,
                                const float* mean, const float* invstd, float* dgamma, float* dbeta, float* k,
                                float* kx, float* k0) {
    const int64_t ch = blockIdx.x;
    const double mc = mean[ch];
    const double sum_dy = channel_sum(b, ch, [dy, y](int64_t i) { return static_cast<double>(bn_gradient(dy, y, i)); });
    const double sum_dyxc = channel_sum(b, ch, [dy, y, x, mc](int64_t i) {
        return static_cast<double>(bn_gradient(dy, y, i)) * (static_cast<double>(x[i]) - mc);
    });
    if (threadIdx.x != 0) return;
    const double is = invstd[ch], dg = sum_dyxc * is, g = gamma[ch] * is;
    const double per = 1.0 / static_cast<double>(b.n * b.inner);
    dgamma[ch] = static_cast<float>(dg);
    dbeta[ch] = static_cast<float>(sum_dy);
    k[ch] = static_cast<float>(g);
    kx[ch] = static_cast<float>(-g * is * dg * per);
    k0[ch] = static_cast<float>(-g * sum_dy * per);
}

__global__ void bn_bwd_apply_k(BnGeom b, const float* dy, const float* y, const float* x, const float* mean,
                               const float* k, const float* kx, const float* k0, float* dx) {
    XYLEM_GRID_STRIDE(i, b.n * b.c * b.inner) {
        const int64_t ch = i / b.inner % b.c;
        dx[i] = k[ch] * bn_gradient(dy, y, i) + kx[ch] * (x[i] - mean[ch]) + k0[ch];
    }
}

}  // namespace

void bn_train_stats(const BnGeom& b, const float* x, const float* gamma, float* running_mean, float* running_var,
                    float* saved_mean, float* saved_invstd, float* shift, float* scale, float eps, float momentum,
                    cudaStream_t s) {
    if (b.c)
        bn_train_stats_k<<<static_cast<unsigned>(b.c), kBnThreads, 0, s>>>(
            b, x, gamma, running_mean, running_var, saved_mean, saved_invstd, shift, scale, eps, momentum);
}

void bn_eval_coeffs(const BnGeom& b, const float* gamma, const float* running_mean, const float* running_var,
                    float* shift, float* scale, float eps, cudaStream_t s) {
    if (b.c) bn_eval_coeffs_k<<<grid_for(b.c), kThreads, 0, s>>>(b.c, gamma, running_mean, running_var, shift, scale, eps);
}

void bn_normalize(const BnGeom& b, const float* x, float* y, const float* shift, const float* scale,
                  const float* offset, bool relu, cudaStream_t s) {
    const int64_t n = b.n * b.c * b.inner;
    if (n) bn_normalize_k<<<grid_for(n), kThreads, 0, s>>>(b, x, y, shift, scale, offset, relu);
}

void bn_backward(const BnGeom& b, const float* dy, const float* y, const float* x, const float* gamma,
                 const float* mean, const float* invstd, float* dx, float* dgamma, float* dbeta, float* k, float* kx,
                 float* k0, cudaStream_t s) {
    if (!b.c) return;
    bn_bwd_coeffs_k<<<static_cast<unsigned>(b.c), kBnThreads, 0, s>>>(b, dy, y, x, gamma, mean, invstd, dgamma, dbeta,
                                                                       k, kx, k0);
    const int64_t n = b.n * b.c * b.inner;
    if (n) bn_bwd_apply_k<<<grid_for(n), kThreads, 0, s>>>(b, dy, y, x, mean, k, kx, k0, dx);
}

}  // namespace xylem::cuda::kernels
