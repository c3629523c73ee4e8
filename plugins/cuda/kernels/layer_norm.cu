// LAYER_NORM_FWD / LAYER_NORM_BWD kernels (ABI 1.7), torch.nn.LayerNorm over the last axis. One
// block per row: its statistics in double (two passes, as the native plugin, so the squared
// deviations do not cancel), reduced by the fixed shuffle tree of block_sum. The parameter
// gradients are sums over rows: partial sums over chunks of rows fixed by the shape (one thread per
// column and chunk), then a second kernel adds each column's chunks in order. No atomics anywhere:
// the same inputs give the same bits on a device.
#include <cmath>

#include "common.cuh"

namespace xylem::cuda::kernels {

namespace {

// Threads per row: about 4 elements a thread, a whole number of warps, 32 to 256 (short rows
// such as nanoGPT's 384 would leave most of a 256-thread block idle).
unsigned row_threads(int64_t d) {
    const int64_t t = ((d + 3) / 4 + 31) / 32 * 32;
    return static_cast<unsigned>(t < 32 ? 32 : t > 256 ? 256 : t);
}

// Blocks for one block per row, the rest by a grid-stride loop over rows.
unsigned row_blocks(int64_t rows) { return static_cast<unsigned>(rows < (1 << 20) ? rows : (1 << 20)); }

// Rows per partial sum of dgamma/dbeta: at most kMaxChunks chunks, each at least kMinChunkRows
// rows; fixed by the shape alone.
constexpr int64_t kMaxChunks = 128, kMinChunkRows = 32;
int64_t chunk_rows(int64_t rows) {
    const int64_t per = (rows + kMaxChunks - 1) / kMaxChunks;
    return per < kMinChunkRows ? kMinChunkRows : per;
}
int64_t chunks_for(int64_t rows) { return rows ? (rows + chunk_rows(rows) - 1) / chunk_rows(rows) : 0; }

__global__ void ln_fwd_k(const float* x, const float* gamma, const float* beta, float* y, float* mean, float* rstd,
                         int64_t rows, int64_t d, float eps) {
    __shared__ double mean_d;
    __shared__ float stat[2];
    const double n = static_cast<double>(d);
    for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
        const float* xr = x + r * d;
        float* yr = y + r * d;  // may be xr: each thread writes only what it read, after both passes
        double sum = 0.0;
        for (int64_t j = threadIdx.x; j < d; j += blockDim.x) sum += xr[j];
        sum = block_sum(sum);
        if (threadIdx.x == 0) mean_d = sum / n;
        __syncthreads();
        const double m = mean_d;
        double sq = 0.0;
        for (int64_t j = threadIdx.x; j < d; j += blockDim.x) {
            const double dev = xr[j] - m;
            sq += dev * dev;
        }
        sq = block_sum(sq);  // its first barrier: every thread has read mean_d
        if (threadIdx.x == 0) {
            const float mf = static_cast<float>(m), rf = static_cast<float>(1.0 / sqrt(sq / n + eps));
            mean[r] = stat[0] = mf;
            rstd[r] = stat[1] = rf;
        }
        __syncthreads();
        const float mf = stat[0], rf = stat[1];
        for (int64_t j = threadIdx.x; j < d; j += blockDim.x) {
            const float v = (xr[j] - mf) * rf * gamma[j];
            yr[j] = beta ? v + beta[j] : v;
        }
        // The next row's block_sum starts with a barrier: stat is read before it is rewritten.
    }
}

// dx = rstd*(g - mean(g) - xhat*mean(g*xhat)), g = dy*gamma, xhat = (x - mean)*rstd (native's
// formula, its sums in double). dx may be dy: each thread rewrites only its own elements, after the
// sums.
__global__ void ln_bwd_dx_k(const float* dy, const float* x, const float* gamma, const float* mean, const float* rstd,
                            float* dx, int64_t rows, int64_t d) {
    __shared__ float coef[2];
    const double n = static_cast<double>(d);
    for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
        const float *dyr = dy + r * d, *xr = x + r * d;
        float* dxr = dx + r * d;
        const float mu = mean[r], rs = rstd[r];
        double sg = 0.0, sgx = 0.0;
        for (int64_t j = threadIdx.x; j < d; j += blockDim.x) {
            const double g = dyr[j] * gamma[j];
            sg += g;
            sgx += g * ((xr[j] - mu) * rs);
        }
        sg = block_sum(sg);
        sgx = block_sum(sgx);
        if (threadIdx.x == 0) {
            coef[0] = static_cast<float>(sg / n);
            coef[1] = static_cast<float>(sgx / n);
        }
        __syncthreads();
        const float mg = coef[0], mgx = coef[1];
        for (int64_t j = threadIdx.x; j < d; j += blockDim.x) {
            const float xhat = (xr[j] - mu) * rs;
            // __fmul_rn: g rounded as the sums saw it. Contracted into one fma with - mg (nvcc's
            // default), g - mean(g) keeps dy*gamma's rounding error where it should cancel, and rs
            // (316 when a row's variance is 0, e.g. d = 1) magnifies it: NVIDIA's OpenCL failed the
            // kit's d = 1 case that way on the H100 (docs/gpu-results.md); this kernel passed there.
            dxr[j] = rs * (__fmul_rn(dyr[j], gamma[j]) - mg - xhat * mgx);
        }
    }
}

// Chunk c = blockIdx.y, column j: partials[c*width + j] = sum of dy*xhat over the chunk's rows,
// partials[c*width + d + j] = sum of dy (with dbeta). Neighbouring threads read neighbouring floats.
__global__ void ln_param_partials_k(const float* dy, const float* x, const float* mean, const float* rstd,
                                    int64_t rows, int64_t d, int64_t per, bool with_dbeta, double* partials) {
    const int64_t j = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
    if (j >= d) return;
    const int64_t c = blockIdx.y, lo = c * per, hi = lo + per < rows ? lo + per : rows;
    double g = 0.0, b = 0.0;
    for (int64_t r = lo; r < hi; ++r) {
        const float v = dy[r * d + j];
        g += v * ((x[r * d + j] - mean[r]) * rstd[r]);
        b += v;
    }
    const int64_t width = with_dbeta ? 2 * d : d;
    partials[c * width + j] = g;
    if (with_dbeta) partials[c * width + d + j] = b;
}

// The chunks in order; beta = 0 never reads the old values (they may be NaN).
__global__ void ln_param_finish_k(const double* partials, int64_t chunks, int64_t d, float beta, float* dgamma,
                                  float* dbeta) {
    const int64_t width = dbeta ? 2 * d : d;
    XYLEM_GRID_STRIDE(j, d) {
        double g = 0.0, b = 0.0;
        for (int64_t c = 0; c < chunks; ++c) {
            g += partials[c * width + j];
            if (dbeta) b += partials[c * width + d + j];
        }
        dgamma[j] = static_cast<float>(beta == 0.0f ? g : beta * static_cast<double>(dgamma[j]) + g);
        if (dbeta) dbeta[j] = static_cast<float>(beta == 0.0f ? b : beta * static_cast<double>(dbeta[j]) + b);
    }
}

}  // namespace

void layer_norm_fwd(const float* x, const float* gamma, const float* beta, float* y, float* mean, float* rstd,
                    int64_t rows, int64_t d, float eps, cudaStream_t s) {
    if (rows && d) ln_fwd_k<<<row_blocks(rows), row_threads(d), 0, s>>>(x, gamma, beta, y, mean, rstd, rows, d, eps);
}

int64_t layer_norm_partials(int64_t rows, int64_t d, bool with_dbeta) {
    return chunks_for(rows) * (with_dbeta ? 2 * d : d);
}

void layer_norm_bwd(const float* dy, const float* x, const float* gamma, const float* mean, const float* rstd,
                    float* dx, float* dgamma, float* dbeta, int64_t rows, int64_t d, float beta, double* partials,
                    cudaStream_t s) {
    if (!d) return;
    const int64_t chunks = chunks_for(rows);
    if (rows) {
        // The partials first: dx may be dy, and they read dy.
        const dim3 grid(static_cast<unsigned>((d + kThreads - 1) / kThreads), static_cast<unsigned>(chunks));
        ln_param_partials_k<<<grid, kThreads, 0, s>>>(dy, x, mean, rstd, rows, d, chunk_rows(rows), dbeta != nullptr,
                                                     partials);
        ln_bwd_dx_k<<<row_blocks(rows), row_threads(d), 0, s>>>(dy, x, gamma, mean, rstd, dx, rows, d);
    }
    ln_param_finish_k<<<grid_for(d), kThreads, 0, s>>>(partials, chunks, d, beta, dgamma, dbeta);
}

}  // namespace xylem::cuda::kernels
