// ATTENTION_FWD / ATTENTION_BWD kernels (ABI 1.7): scaled dot-product attention, flash-attention
// style in fp32 on the CUDA cores, never holding the [Tq, L] scores in global memory.
//
// Forward: one block per (batch*head, tile of 32 query rows); 8 warps of 4 rows each. The block
// walks the key tiles (K and V staged in shared memory) with an online softmax: a running row
// maximum m and sum l, the output accumulator rescaled by exp(m_old - m_new) when the maximum grows.
// Backward: D_i = dO_i . O_i first (one warp per row); then dQ per query tile, looping over the key
// tiles, and dK/dV per key tile, looping over the query tiles; both recompute P from the saved LSE.
// Every sum has an order fixed by the shape (per-thread loops and fixed shuffle trees, no atomics):
// the same inputs give the same bits on a device.
//
// Inside a tile a warp holds R = 4 rows (queries, or keys for dK/dV) and scores them against the
// tile's N "other" rows, lane t taking others t, t+32, ... (row_dots); the weighted sums then put
// lane t on head dimensions t, t+32, ... (rows_times_tile). The warp's own rows are read from
// shared memory as broadcasts (float4); the other rows are stored with a stride of D + 1 floats,
// so lane t's row and lane t's dimension both fall in distinct banks. Head sizes are compiled in
// three buckets (D = 32, 64, 128 >= max(Dk, Dv); zero padding contributes nothing); the plugin
// declines larger ones through op_accepts (plugin.cpp) and the core composes them.
#include <cmath>

#include "common.cuh"
#include "xylem/ops.h"

namespace xylem::cuda::kernels {

namespace {

constexpr int kWarps = 8, kRows = 4;       // a warp's rows
constexpr int kTile = kWarps * kRows;      // a block's own rows (queries, or keys for dK/dV)
constexpr int kAttThreads = kWarps * 32;
// The other tile: keys per tile (forward, dQ) or queries per tile (dK/dV). Smaller at D = 128 to
// keep shared memory near 50-75 KB, so that two or three blocks fit on an SM.
template <int D>
constexpr int other_tile() {
    return D <= 64 ? 64 : 32;
}

// ---- the contract's pieces ------------------------------------------------------------------
__device__ inline bool visible(const AttnGeom& g, int64_t i, int64_t j) {
    return i < g.tq && j < g.l && (!g.causal || j <= i + g.l - g.tq);
}
// Keys visible to query i are [0, visible_end(i)).
__device__ inline int64_t visible_end(const AttnGeom& g, int64_t i) {
    if (!g.causal) return g.l;
    const int64_t e = i + g.l - g.tq + 1;
    return e < 0 ? 0 : e > g.l ? g.l : e;
}
__device__ inline float mask_at(const AttnGeom& g, int64_t bh, int64_t i, int64_t j) {
    return g.mask ? g.mask[(bh / g.h) * g.msb + (bh % g.h) * g.msh + i * g.msq + j] : 0.0f;
}
// Dropout's multiplier of P_ij: keep/(1-p) on the mask stream of P's flat index (ops.h).
__device__ inline float dropout_mult(const AttnGeom& g, int64_t bh, int64_t i, int64_t j) {
    const uint64_t index = static_cast<uint64_t>((bh * g.tq + i) * g.l + j);
    return xylem_dropout_keep(g.seed, index, g.dropout_p) ? g.keep_scale : 0.0f;
}

__device__ inline float warp_sum_all(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

// ---- tiles in shared memory -------------------------------------------------------------------
// Rows [r0, r0 + ROWS) of a head's [rows, width] block into dst (row stride STRIDE, D columns),
// zero past `valid` rows and past `width` columns; the whole block cooperates.
template <int D, int ROWS, int STRIDE>
__device__ inline void load_tile(float* dst, const float* src, int64_t r0, int64_t valid, int64_t width) {
    for (int e = threadIdx.x; e < ROWS * D; e += blockDim.x) {
        const int r = e / D, c = e % D;
        const int64_t row = r0 + r;
        dst[r * STRIDE + c] = row < valid && c < width ? src[row * width + c] : 0.0f;
    }
}

// out[r][t] = a_r . b_(lane + 32t): a = the warp's R rows [R][D] (broadcast reads), b = the other
// tile [N][D + 1].
template <int D, int N>
__device__ inline void row_dots(const float* a, const float* b, int lane, float (&out)[kRows][N / 32]) {
    constexpr int SP = D + 1, PER = N / 32;
#pragma unroll
    for (int r = 0; r < kRows; ++r)
#pragma unroll
        for (int t = 0; t < PER; ++t) out[r][t] = 0.0f;
#pragma unroll 2
    for (int d = 0; d < D; d += 4) {
        float4 av[kRows];
#pragma unroll
        for (int r = 0; r < kRows; ++r) av[r] = *reinterpret_cast<const float4*>(a + r * D + d);
#pragma unroll
        for (int t = 0; t < PER; ++t) {
            const float* bt = b + (lane + 32 * t) * SP + d;
            const float b0 = bt[0], b1 = bt[1], b2 = bt[2], b3 = bt[3];
#pragma unroll
            for (int r = 0; r < kRows; ++r) {
                float s = out[r][t];
                s += av[r].x * b0;
                s += av[r].y * b1;
                s += av[r].z * b2;
                s += av[r].w * b3;
                out[r][t] = s;
            }
        }
    }
}

// acc[r][u] += sum over n < N of w[r][n] * rows[n][lane + 32u]: w = the warp's weights [R][N]
// (broadcast reads), rows = the other tile [N][D + 1].
template <int D, int N>
__device__ inline void rows_times_tile(float (&acc)[kRows][D / 32], const float* w, const float* rows, int lane) {
    constexpr int SP = D + 1, DPL = D / 32;
#pragma unroll 2
    for (int n = 0; n < N; n += 4) {
        float4 wv[kRows];
#pragma unroll
        for (int r = 0; r < kRows; ++r) wv[r] = *reinterpret_cast<const float4*>(w + r * N + n);
#pragma unroll
        for (int k = 0; k < 4; ++k) {
            float tv[DPL];
#pragma unroll
            for (int u = 0; u < DPL; ++u) tv[u] = rows[(n + k) * SP + lane + 32 * u];
#pragma unroll
            for (int r = 0; r < kRows; ++r) {
                const float p = k == 0 ? wv[r].x : k == 1 ? wv[r].y : k == 2 ? wv[r].z : wv[r].w;
#pragma unroll
                for (int u = 0; u < DPL; ++u) acc[r][u] += p * tv[u];
            }
        }
    }
}

// Floats of shared memory per kernel (every array a whole number of float4s: see the layouts).
template <int D>
constexpr int fwd_floats() {
    return kTile * D + 2 * other_tile<D>() * (D + 1) + kTile * other_tile<D>();
}
template <int D>
constexpr int dq_floats() {
    return 2 * kTile * D + 2 * other_tile<D>() * (D + 1) + kTile * other_tile<D>();
}
template <int D>
constexpr int dkdv_floats() {
    return 2 * kTile * D + 2 * other_tile<D>() * (D + 1) + 2 * other_tile<D>() + 2 * kTile * other_tile<D>();
}

// ---- forward ---------------------------------------------------------------------------------
template <int D>
__global__ void __launch_bounds__(kAttThreads) attention_fwd_k(AttnGeom g, const float* q, const float* k,
                                                               const float* v, float* o, float* lse) {
    constexpr int BC = other_tile<D>(), KPL = BC / 32, DPL = D / 32, SP = D + 1;
    extern __shared__ float4 smem4[];
    float* qs = reinterpret_cast<float*>(smem4);  // [kTile][D]
    float* ks = qs + kTile * D;                    // [BC][SP]
    float* vs = ks + BC * SP;                      // [BC][SP]
    float* ps = vs + BC * SP;                      // [kTile][BC]: each warp's P rows
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int64_t qtiles = (g.tq + kTile - 1) / kTile, bh = blockIdx.x / qtiles;
    const int64_t i0 = blockIdx.x % qtiles * kTile, row0 = i0 + warp * kRows;
    load_tile<D, kTile, D>(qs, q + bh * g.tq * g.dk, i0, g.tq, g.dk);
    const float* qw = qs + warp * kRows * D;
    float* pw = ps + warp * kRows * BC;

    float acc[kRows][DPL], m[kRows], l[kRows];
    bool nan_seen[kRows];
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
        m[r] = -INFINITY;
        l[r] = 0.0f;
        nan_seen[r] = false;
#pragma unroll
        for (int u = 0; u < DPL; ++u) acc[r][u] = 0.0f;
    }
    const int64_t last = i0 + kTile < g.tq ? i0 + kTile - 1 : g.tq - 1;
    const int64_t keys = visible_end(g, last);  // the tile's last row sees the most keys
    for (int64_t j0 = 0; j0 < keys; j0 += BC) {
        __syncthreads();  // the previous tile's K and V are no longer read
        load_tile<D, BC, SP>(ks, k + bh * g.tk * g.dk, j0, g.l, g.dk);
        load_tile<D, BC, SP>(vs, v + bh * g.tk * g.dv, j0, g.l, g.dv);
        __syncthreads();
        float s[kRows][KPL];
        row_dots<D, BC>(qw, ks, lane, s);
#pragma unroll
        for (int r = 0; r < kRows; ++r) {
            const int64_t i = row0 + r;
            float tile_max = -INFINITY;
            bool has_nan = false;
#pragma unroll
            for (int t = 0; t < KPL; ++t) {
                const int64_t j = j0 + lane + 32 * t;
                s[r][t] = visible(g, i, j) ? g.scale * s[r][t] + mask_at(g, bh, i, j) : -INFINITY;
                has_nan = has_nan || s[r][t] != s[r][t];
                tile_max = fmaxf(tile_max, s[r][t]);
            }
            nan_seen[r] = nan_seen[r] || __any_sync(0xffffffffu, has_nan);
            const float m_new = fmaxf(m[r], warp_max(tile_max));  // the same in every lane
            if (m_new == -INFINITY) {  // nothing visible so far: no weight
#pragma unroll
                for (int t = 0; t < KPL; ++t) pw[r * BC + lane + 32 * t] = 0.0f;
                continue;
            }
            const float alpha = expf(m[r] - m_new);  // 0 from m = -inf, exactly 1 when m stays
            float sum = 0.0f;
#pragma unroll
            for (int t = 0; t < KPL; ++t) {
                float p = expf(s[r][t] - m_new);  // 0 at the hidden keys
                sum += p;
                // after the sum: LSE and the normaliser are taken before dropout
                if (g.dropout_p > 0.0f && p != 0.0f) p *= dropout_mult(g, bh, i, j0 + lane + 32 * t);
                pw[r * BC + lane + 32 * t] = p;
            }
            l[r] = l[r] * alpha + warp_sum_all(sum);
            m[r] = m_new;
#pragma unroll
            for (int u = 0; u < DPL; ++u) acc[r][u] *= alpha;
        }
        __syncwarp();  // the warp's P rows are written before any lane reads them
        rows_times_tile<D, BC>(acc, pw, vs, lane);
        __syncwarp();
    }
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
        const int64_t i = row0 + r;
        if (i >= g.tq) continue;
        float* orow = o + (bh * g.tq + i) * g.dv;
        const bool none = l[r] == 0.0f;  // no visible key, or only -inf scores
        const float nan = __int_as_float(0x7fc00000), inv = none ? 0.0f : 1.0f / l[r];
#pragma unroll
        for (int u = 0; u < DPL; ++u) {
            const int d = lane + 32 * u;
            if (d < g.dv) orow[d] = nan_seen[r] ? nan : none ? 0.0f : acc[r][u] * inv;
        }
        if (lane == 0) lse[bh * g.tq + i] = nan_seen[r] ? nan : none ? -INFINITY : m[r] + logf(l[r]);
    }
}

// ---- backward --------------------------------------------------------------------------------
// D_i = dO_i . O_i, one warp per row.
__global__ void attention_delta_k(const float* dout, const float* o, float* delta, int64_t rows, int64_t dv) {
    const int64_t r = blockIdx.x * static_cast<int64_t>(kAttThreads / 32) + (threadIdx.x >> 5);
    if (r >= rows) return;
    const int lane = threadIdx.x & 31;
    float acc = 0.0f;
    for (int64_t d = lane; d < dv; d += 32) acc += dout[r * dv + d] * o[r * dv + d];
    acc = warp_sum(acc);
    if (lane == 0) delta[r] = acc;
}

// dS_ij = scale * P_ij * (M_ij * dP_ij - D_i) and P_ij * M_ij (M: dropout's multiplier, else 1), with
// P_ij = exp(s_ij - LSE_i) recomputed; both 0 where j is hidden from i or the row saw no key.
struct Grads {
    float pm, ds;
};
__device__ inline Grads score_grads(const AttnGeom& g, int64_t bh, int64_t i, int64_t j, float dot, float dp,
                                    float lse_i, float delta_i) {
    if (!visible(g, i, j) || lse_i == -INFINITY) return {0.0f, 0.0f};
    const float p = expf(g.scale * dot + mask_at(g, bh, i, j) - lse_i);
    const float mult = g.dropout_p > 0.0f ? dropout_mult(g, bh, i, j) : 1.0f;
    return {p * mult, g.scale * (p * (mult * dp - delta_i))};
}

// dQ of a tile of 32 query rows: dQ_i = sum over the key tiles, in order, of dS_ij K_j.
template <int D>
__global__ void __launch_bounds__(kAttThreads) attention_dq_k(AttnGeom g, const float* dout, const float* q,
                                                              const float* k, const float* v, const float* lse,
                                                              const float* delta, float* dq) {
    constexpr int BC = other_tile<D>(), KPL = BC / 32, DPL = D / 32, SP = D + 1;
    extern __shared__ float4 smem4[];
    float* qs = reinterpret_cast<float*>(smem4);  // [kTile][D]
    float* dos = qs + kTile * D;                   // [kTile][D]
    float* ks = dos + kTile * D;                   // [BC][SP]
    float* vs = ks + BC * SP;                      // [BC][SP]
    float* ws = vs + BC * SP;                      // [kTile][BC]: each warp's dS rows
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int64_t qtiles = (g.tq + kTile - 1) / kTile, bh = blockIdx.x / qtiles;
    const int64_t i0 = blockIdx.x % qtiles * kTile, row0 = i0 + warp * kRows;
    load_tile<D, kTile, D>(qs, q + bh * g.tq * g.dk, i0, g.tq, g.dk);
    load_tile<D, kTile, D>(dos, dout + bh * g.tq * g.dv, i0, g.tq, g.dv);
    float* ww = ws + warp * kRows * BC;
    float lse_r[kRows], delta_r[kRows], acc[kRows][DPL];
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
        const int64_t i = row0 + r;
        lse_r[r] = i < g.tq ? lse[bh * g.tq + i] : -INFINITY;
        delta_r[r] = i < g.tq ? delta[bh * g.tq + i] : 0.0f;
#pragma unroll
        for (int u = 0; u < DPL; ++u) acc[r][u] = 0.0f;
    }
    const int64_t last = i0 + kTile < g.tq ? i0 + kTile - 1 : g.tq - 1;
    const int64_t keys = visible_end(g, last);
    for (int64_t j0 = 0; j0 < keys; j0 += BC) {
        __syncthreads();
        load_tile<D, BC, SP>(ks, k + bh * g.tk * g.dk, j0, g.l, g.dk);
        load_tile<D, BC, SP>(vs, v + bh * g.tk * g.dv, j0, g.l, g.dv);
        __syncthreads();
        float s[kRows][KPL], dp[kRows][KPL];
        row_dots<D, BC>(qs + warp * kRows * D, ks, lane, s);
        row_dots<D, BC>(dos + warp * kRows * D, vs, lane, dp);
#pragma unroll
        for (int r = 0; r < kRows; ++r)
#pragma unroll
            for (int t = 0; t < KPL; ++t) {
                const int64_t j = j0 + lane + 32 * t;
                ww[r * BC + lane + 32 * t] = score_grads(g, bh, row0 + r, j, s[r][t], dp[r][t], lse_r[r], delta_r[r]).ds;
            }
        __syncwarp();
        rows_times_tile<D, BC>(acc, ww, ks, lane);
        __syncwarp();
    }
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
        const int64_t i = row0 + r;
        if (i >= g.tq) continue;
#pragma unroll
        for (int u = 0; u < DPL; ++u) {
            const int d = lane + 32 * u;
            if (d < g.dk) dq[(bh * g.tq + i) * g.dk + d] = acc[r][u];
        }
    }
}

// dK and dV of a tile of 32 key rows: sums over the query tiles, in order, of dS_ij q_i and
// P_ij M_ij dO_i. The grid covers all Tk keys: rows j >= L see no query and are written as 0.
template <int D>
__global__ void __launch_bounds__(kAttThreads) attention_dkdv_k(AttnGeom g, const float* dout, const float* q,
                                                                const float* k, const float* v, const float* lse,
                                                                const float* delta, float* dk, float* dv) {
    constexpr int BQ = other_tile<D>(), QPL = BQ / 32, DPL = D / 32, SP = D + 1;
    extern __shared__ float4 smem4[];
    float* ks = reinterpret_cast<float*>(smem4);  // [kTile][D]: the block's keys
    float* vs = ks + kTile * D;                    // [kTile][D]
    float* qs = vs + kTile * D;                    // [BQ][SP]
    float* dos = qs + BQ * SP;                     // [BQ][SP]
    float* ls = dos + BQ * SP;                     // [BQ]: LSE of the query tile
    float* dl = ls + BQ;                           // [BQ]: D of the query tile
    float* pw = dl + BQ;                           // [kTile][BQ]: each warp's P*M rows
    float* ww = pw + kTile * BQ;                   // [kTile][BQ]: each warp's dS rows
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int64_t ktiles = (g.tk + kTile - 1) / kTile, bh = blockIdx.x / ktiles;
    const int64_t j0 = blockIdx.x % ktiles * kTile, key0 = j0 + warp * kRows;
    load_tile<D, kTile, D>(ks, k + bh * g.tk * g.dk, j0, g.l, g.dk);
    load_tile<D, kTile, D>(vs, v + bh * g.tk * g.dv, j0, g.l, g.dv);
    float* pwarp = pw + warp * kRows * BQ;
    float* wwarp = ww + warp * kRows * BQ;
    float acc_k[kRows][DPL], acc_v[kRows][DPL];
#pragma unroll
    for (int r = 0; r < kRows; ++r)
#pragma unroll
        for (int u = 0; u < DPL; ++u) acc_k[r][u] = acc_v[r][u] = 0.0f;
    // The first query that sees key j0 (causal: j0 <= i + L - Tq); none when the tile is past L.
    int64_t first = g.causal ? j0 - g.l + g.tq : 0;
    first = first < 0 ? 0 : first;
    for (int64_t i0 = j0 < g.l ? first / BQ * BQ : g.tq; i0 < g.tq; i0 += BQ) {
        __syncthreads();
        load_tile<D, BQ, SP>(qs, q + bh * g.tq * g.dk, i0, g.tq, g.dk);
        load_tile<D, BQ, SP>(dos, dout + bh * g.tq * g.dv, i0, g.tq, g.dv);
        for (int e = threadIdx.x; e < BQ; e += blockDim.x) {
            const int64_t i = i0 + e;
            ls[e] = i < g.tq ? lse[bh * g.tq + i] : -INFINITY;
            dl[e] = i < g.tq ? delta[bh * g.tq + i] : 0.0f;
        }
        __syncthreads();
        float s[kRows][QPL], dp[kRows][QPL];
        row_dots<D, BQ>(ks + warp * kRows * D, qs, lane, s);    // k_j . q_i
        row_dots<D, BQ>(vs + warp * kRows * D, dos, lane, dp);  // v_j . dO_i
#pragma unroll
        for (int r = 0; r < kRows; ++r)
#pragma unroll
            for (int t = 0; t < QPL; ++t) {
                const int n = lane + 32 * t;
                const Grads gr = score_grads(g, bh, i0 + n, key0 + r, s[r][t], dp[r][t], ls[n], dl[n]);
                pwarp[r * BQ + n] = gr.pm;
                wwarp[r * BQ + n] = gr.ds;
            }
        __syncwarp();
        rows_times_tile<D, BQ>(acc_v, pwarp, dos, lane);  // dV_j += (P*M)_ij dO_i
        rows_times_tile<D, BQ>(acc_k, wwarp, qs, lane);   // dK_j += dS_ij q_i
        __syncwarp();
    }
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
        const int64_t j = key0 + r;
        if (j >= g.tk) continue;
#pragma unroll
        for (int u = 0; u < DPL; ++u) {
            const int d = lane + 32 * u;
            if (d < g.dk) dk[(bh * g.tk + j) * g.dk + d] = acc_k[r][u];
            if (d < g.dv) dv[(bh * g.tk + j) * g.dv + d] = acc_v[r][u];
        }
    }
}

// Every shared array starts on a float4: the broadcast reads are 16-byte loads.
template <int D>
constexpr bool float4_layout() {
    constexpr int BC = other_tile<D>();
    return (kTile * D) % 4 == 0 && (BC * (D + 1)) % 4 == 0 && BC % 4 == 0 && (kTile * BC) % 4 == 0;
}
static_assert(float4_layout<32>() && float4_layout<64>() && float4_layout<128>(), "shared layout");

// A kernel's dynamic shared memory, raised past the default 48 KB where it needs more (a host call,
// allowed during the plugin's relaxed stream capture).
template <class Kernel>
cudaError_t shared_bytes(Kernel kernel, int floats) {
    const int bytes = floats * static_cast<int>(sizeof(float));
    return bytes > 48 * 1024 ? cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes)
                             : cudaSuccess;
}

unsigned blocks(int64_t heads, int64_t rows) { return static_cast<unsigned>(heads * ((rows + kTile - 1) / kTile)); }

template <int D>
cudaError_t fwd(const AttnGeom& g, const float* q, const float* k, const float* v, float* o, float* lse,
                cudaStream_t s) {
    if (const cudaError_t e = shared_bytes(attention_fwd_k<D>, fwd_floats<D>())) return e;
    attention_fwd_k<D><<<blocks(g.b * g.h, g.tq), kAttThreads, fwd_floats<D>() * sizeof(float), s>>>(g, q, k, v, o,
                                                                                                      lse);
    return cudaSuccess;
}

template <int D>
cudaError_t bwd(const AttnGeom& g, const float* dout, const float* q, const float* k, const float* v,
                const float* lse, const float* delta, float* dq, float* dk, float* dv, cudaStream_t s) {
    if (const cudaError_t e = shared_bytes(attention_dq_k<D>, dq_floats<D>())) return e;
    if (const cudaError_t e = shared_bytes(attention_dkdv_k<D>, dkdv_floats<D>())) return e;
    const int64_t heads = g.b * g.h;
    attention_dq_k<D><<<blocks(heads, g.tq), kAttThreads, dq_floats<D>() * sizeof(float), s>>>(g, dout, q, k, v, lse,
                                                                                               delta, dq);
    attention_dkdv_k<D><<<blocks(heads, g.tk), kAttThreads, dkdv_floats<D>() * sizeof(float), s>>>(
        g, dout, q, k, v, lse, delta, dk, dv);
    return cudaSuccess;
}

int bucket(const AttnGeom& g) {
    const int64_t d = g.dk > g.dv ? g.dk : g.dv;
    return d <= 32 ? 32 : d <= 64 ? 64 : 128;
}

}  // namespace

cudaError_t attention_fwd(const AttnGeom& g, const float* q, const float* k, const float* v, float* o, float* lse,
                          cudaStream_t s) {
    if (g.b * g.h == 0) return cudaSuccess;
    switch (bucket(g)) {
    case 32: return fwd<32>(g, q, k, v, o, lse, s);
    case 64: return fwd<64>(g, q, k, v, o, lse, s);
    default: return fwd<128>(g, q, k, v, o, lse, s);
    }
}

cudaError_t attention_bwd(const AttnGeom& g, const float* dout, const float* q, const float* k, const float* v,
                          const float* o, const float* lse, float* dq, float* dk, float* dv, float* delta,
                          cudaStream_t s) {
    const int64_t rows = g.b * g.h * g.tq;
    if (!rows) return cudaSuccess;
    const int per_block = kAttThreads / 32;
    attention_delta_k<<<static_cast<unsigned>((rows + per_block - 1) / per_block), kAttThreads, 0, s>>>(dout, o, delta,
                                                                                                       rows, g.dv);
    switch (bucket(g)) {
    case 32: return bwd<32>(g, dout, q, k, v, lse, delta, dq, dk, dv, s);
    case 64: return bwd<64>(g, dout, q, k, v, lse, delta, dq, dk, dv, s);
    default: return bwd<128>(g, dout, q, k, v, lse, delta, dq, dk, dv, s);
    }
}

}  // namespace xylem::cuda::kernels
