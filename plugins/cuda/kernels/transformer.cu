// PERMUTE and MASKED_SOFTMAX kernels (ABI 1.7): the head split and merge around attention, and the
// softmax the core composes attention from when attention_fwd declines a shape.
#include <cmath>

#include "common.cuh"

namespace xylem::cuda::kernels {

namespace {

// ---- permute ---------------------------------------------------------------------------------
// One thread per element of Y (written in order, so the stores coalesce); its coordinates, last
// axis first, give X's offset. I is uint32_t when every index fits: the divisions per axis are
// then 32-bit, several times cheaper than 64-bit ones on the GPU.
// The axis loops are unrolled over XYLEM_MAX_DIMS, so the dims and strides stay in registers (a
// loop to ndim would index them at run time and put them in local memory).
template <class I>
__global__ void permute_k(const float* x, float* y, PermuteGeom g) {
    I out_dims[XYLEM_MAX_DIMS], in_strides[XYLEM_MAX_DIMS];
#pragma unroll
    for (int d = 0; d < XYLEM_MAX_DIMS; ++d) {
        out_dims[d] = d < g.ndim ? static_cast<I>(g.out_dims[d]) : 1;
        in_strides[d] = d < g.ndim ? static_cast<I>(g.in_strides[d]) : 0;
    }
    const I n = static_cast<I>(g.numel);
    for (I i = blockIdx.x * static_cast<I>(blockDim.x) + threadIdx.x; i < n; i += static_cast<I>(gridDim.x) * blockDim.x) {
        I rest = i, from = 0;
#pragma unroll
        for (int d = XYLEM_MAX_DIMS - 1; d > 0; --d) {
            if (d >= g.ndim) continue;
            const I q = rest / out_dims[d];
            from += (rest - q * out_dims[d]) * in_strides[d];
            rest = q;
        }
        y[i] = x[from + rest * in_strides[0]];
    }
}

// ---- masked_softmax --------------------------------------------------------------------------
constexpr int kRowsPerBlock = kThreads / 32;

// max that propagates NaN (a NaN score makes the row NaN, as on the CPU); fmaxf would drop it.
__device__ inline float max_nan(float a, float b) { return a > b || a != a ? a : b; }

__device__ inline float warp_max_nan(float v) {
    for (int o = 16; o > 0; o >>= 1) v = max_nan(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

// One warp per row of scores: Y = softmax over the visible j of scale*x + mask, 0 at hidden j, LSE
// the log-sum-exp; a row with nothing visible (or only -inf) gives zeros and -inf. The sum is in
// double, as on the CPU. y may be x: lane k reads and writes only the elements j = k mod 32.
__global__ void masked_softmax_k(const float* x, MaskGeom m, float* y, float* lse, int64_t rows, int64_t tq,
                                 int64_t l, float scale, bool causal) {
    const int64_t r = blockIdx.x * static_cast<int64_t>(kRowsPerBlock) + (threadIdx.x >> 5);
    if (r >= rows) return;
    const int lane = threadIdx.x & 31;
    const int64_t bh = r / tq, i = r % tq;
    int64_t e = l;  // keys [0, e) are visible
    if (causal) {
        e = i + l - tq + 1;
        e = e < 0 ? 0 : e > l ? l : e;
    }
    const float* xr = x + r * l;
    float* yr = y + r * l;
    const float* mr = m.p ? m.p + (bh / m.heads) * m.sb + (bh % m.heads) * m.sh + i * m.sq : nullptr;
    auto score = [&](int64_t j) { return mr ? scale * xr[j] + mr[j] : scale * xr[j]; };
    float mx = -INFINITY;
    for (int64_t j = lane; j < e; j += 32) mx = max_nan(mx, score(j));
    mx = warp_max_nan(mx);
    if (mx == -INFINITY || mx != mx) {
        for (int64_t j = lane; j < l; j += 32) yr[j] = mx != mx ? mx : 0.0f;
        if (lse && lane == 0) lse[r] = mx != mx ? mx : -INFINITY;
        return;
    }
    double sum = 0.0;
    for (int64_t j = lane; j < e; j += 32) sum += expf(score(j) - mx);
    sum = __shfl_sync(0xffffffffu, warp_sum(sum), 0);
    const float inv = static_cast<float>(1.0 / sum);
    for (int64_t j = lane; j < l; j += 32) yr[j] = j < e ? expf(score(j) - mx) * inv : 0.0f;
    if (lse && lane == 0) lse[r] = mx + static_cast<float>(log(sum));
}

}  // namespace

void permute(const float* x, float* y, const PermuteGeom& g, cudaStream_t s) {
    if (!g.numel) return;
    // Every index below numel and every offset into X (< numel too) must fit the 32-bit variant.
    if (g.numel <= static_cast<int64_t>(UINT32_MAX) - static_cast<int64_t>(kThreads) * 65535 * 8)
        permute_k<uint32_t><<<grid_for(g.numel), kThreads, 0, s>>>(x, y, g);
    else
        permute_k<uint64_t><<<grid_for(g.numel), kThreads, 0, s>>>(x, y, g);
}

void masked_softmax(const float* x, const MaskGeom& m, float* y, float* lse, int64_t rows, int64_t tq, int64_t l,
                    float scale, bool causal, cudaStream_t s) {
    if (!rows || !l) return;
    const unsigned blocks = static_cast<unsigned>((rows + kRowsPerBlock - 1) / kRowsPerBlock);
    masked_softmax_k<<<blocks, kThreads, 0, s>>>(x, m, y, lse, rows, tq, l, scale, causal);
}

}  // namespace xylem::cuda::kernels
