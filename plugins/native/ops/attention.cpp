// ATTENTION_FWD / ATTENTION_BWD (ABI 1.7): scaled dot-product attention, flash-attention style.
// Forward: each item is one query block of one (batch, head); it walks the key blocks with an
// online softmax (a running row maximum and sum, the output accumulator rescaled when the maximum
// grows), so the [Tq, L] scores are never held: a block of kBr x kBc scores lives in L1/L2.
// Backward: P is recomputed from the saved LSE block by block; dV and dK of a key block are summed
// over the query blocks in order, dQ of a query block over the key blocks in order. Every sum's
// order is fixed by the shape alone, so the bits never depend on the thread count.
//
// The block products are one small kernel (block_gemm): C[m, n] (+)= A[m, k] * B[k, n], B and C
// padded to whole vectors, A read with any strides (so P^T and dS^T need no transpose), compiled
// per instruction-set level with FMA where the level has it (simd.h), like the direct convolutions.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "lane_sum.h"
#include "native.h"
#include "simd.h"
#include "vecmath.h"
#include "xylem/plugin_kit/shapes_transformer.h"

namespace xylem::native {

namespace {

using plugin_kit::AttentionShape;
constexpr float kInf = std::numeric_limits<float>::infinity();

// Query rows and keys per block: a 64 x 64 score block (16 KB) and the packed key and value
// blocks stay in L2 at head sizes to 128.
constexpr int64_t kBr = 64, kBc = 64;
// B and C of block_gemm are padded to this many floats, a whole vector at every level.
constexpr int64_t kPad = 16;
inline int64_t padded(int64_t n) { return (n + kPad - 1) / kPad * kPad; }

// ---- the block product ---------------------------------------------------------------------
// A causal mask leaves part of each block product on the diagonal zero; `Band` says which part a
// group of rows may skip (off: the band's offset in the block, see each use):
//   k_end:   rows r need k < r + off + 1 (P V and dS K: query rows, key columns of A);
//   k_begin: rows r need k >= r + off (P^T dO and dS^T Q: key rows, query columns of A);
//   n_end:   rows r need columns n < r + off + 1 (the scores Q K^T and dO V^T); the rest of C is
//            left unwritten (the row kernels never read it).
// A group of rows takes its widest need, so a row may sum a few more terms: zeros, which leave
// its sum as it was. The skipped terms depend on the shape alone.
enum class Band : int { none, k_end, k_begin, n_end };

// R rows x C vectors of C, summed over k in [k0, k1) in order (each element's sum in the same
// order however the blocks are laid out): c[r][v] = (accumulate ? c : 0) + sum_kk a(r, kk) * b(kk, v).
template <class S, int R, int C>
__attribute__((always_inline)) inline void mm_tile(int64_t k0, int64_t k1, const float* __restrict a, int64_t a_rs,
                                                   int64_t a_cs, const float* __restrict b, int64_t ldb,
                                                   float* __restrict c, int64_t ldc, bool accumulate) {
    using V = typename S::V;
    using Vu = typename S::Vu;
    V acc[R][C];
    for (int r = 0; r < R; ++r)
        for (int v = 0; v < C; ++v)
            acc[r][v] = accumulate ? V(*reinterpret_cast<const Vu*>(c + r * ldc + v * S::L)) : V{};
    for (int64_t kk = k0; kk < k1; ++kk) {
        V bv[C];
        for (int v = 0; v < C; ++v) bv[v] = *reinterpret_cast<const Vu*>(b + kk * ldb + v * S::L);
        for (int r = 0; r < R; ++r) {
            const V av = S::splat(a[r * a_rs + kk * a_cs]);
            for (int v = 0; v < C; ++v) acc[r][v] = S::fma(av, bv[v], acc[r][v]);
        }
    }
    for (int r = 0; r < R; ++r)
        for (int v = 0; v < C; ++v) *reinterpret_cast<Vu*>(c + r * ldc + v * S::L) = acc[r][v];
}

// The row groups of one column chunk starting at column c0 of C.
template <class S, int RR, int C>
__attribute__((always_inline)) inline void mm_group(int64_t r, int64_t k, int64_t c0, const float* a, int64_t a_rs,
                                                    int64_t a_cs, const float* b, int64_t ldb, float* c, int64_t ldc,
                                                    bool accumulate, Band band, int64_t off) {
    int64_t k0 = 0, k1 = k;
    const int64_t need = r + RR + off;  // the group's last row's need: (r + RR - 1) + off + 1
    if (band == Band::k_end) k1 = std::clamp<int64_t>(need, 0, k);
    if (band == Band::k_begin) k0 = std::clamp<int64_t>(r + off, 0, k);
    if (band == Band::n_end && c0 >= need) return;
    mm_tile<S, RR, C>(k0, k1, a + r * a_rs, a_rs, a_cs, b, ldb, c + r * ldc, ldc, accumulate);
}

// Row groups of R rows, then of 4 (where R is more) and of 1.
template <class S, int C, int R>
__attribute__((always_inline)) inline void mm_rows(int64_t m, int64_t k, int64_t c0, const float* a, int64_t a_rs,
                                                   int64_t a_cs, const float* b, int64_t ldb, float* c, int64_t ldc,
                                                   bool accumulate, Band band, int64_t off) {
    int64_t r = 0;
    for (; r + R <= m; r += R) mm_group<S, R, C>(r, k, c0, a, a_rs, a_cs, b, ldb, c, ldc, accumulate, band, off);
    if constexpr (R > 4)
        for (; r + 4 <= m; r += 4) mm_group<S, 4, C>(r, k, c0, a, a_rs, a_cs, b, ldb, c, ldc, accumulate, band, off);
    for (; r < m; ++r) mm_group<S, 1, C>(r, k, c0, a, a_rs, a_cs, b, ldb, c, ldc, accumulate, band, off);
}

// C[m, n] (+)= A[m, k] * B[k, n]: a(r, kk) = a[r*a_rs + kk*a_cs]; B row-major (ldb), n a multiple
// of kPad, B and C readable and writable that far; less where the band allows. Tiles of 4 rows x
// 4 vectors where 32 registers hold them (x 2 vectors with 16). Where fewer vectors remain (a
// head of 32 at avx512: O += P V, and dV, dK and dQ in the backward), tiles of 8 rows x 2 or 1
// vectors: 16 or 8 independent accumulators, where 4 x 1 had left chains of dependent FMAs
// waiting on each other. Each element's sum is the same however the tiles fall.
XYLEM_KERNEL_LEVELS(void, block_gemm,
                    (int64_t m, int64_t n, int64_t k, const float* a, int64_t a_rs, int64_t a_cs, const float* b,
                     int64_t ldb, float* c, int64_t ldc, bool accumulate, Band band, int64_t off),
                    (m, n, k, a, a_rs, a_cs, b, ldb, c, ldc, accumulate, band, off)) {
    constexpr bool wide = S::kRegisters >= 32;
    constexpr int C = wide ? 4 : 2;
    const int64_t nv = n / S::L;
    int64_t v = 0;
    for (; v + C <= nv; v += C)
        mm_rows<S, C, 4>(m, k, v * S::L, a, a_rs, a_cs, b + v * S::L, ldb, c + v * S::L, ldc, accumulate, band, off);
    if constexpr (wide) {
        if (v + 2 <= nv) {
            mm_rows<S, 2, 8>(m, k, v * S::L, a, a_rs, a_cs, b + v * S::L, ldb, c + v * S::L, ldc, accumulate, band,
                             off);
            v += 2;
        }
        for (; v < nv; ++v)
            mm_rows<S, 1, 8>(m, k, v * S::L, a, a_rs, a_cs, b + v * S::L, ldb, c + v * S::L, ldc, accumulate, band,
                             off);
    } else {
        for (; v < nv; ++v)
            mm_rows<S, 1, 4>(m, k, v * S::L, a, a_rs, a_cs, b + v * S::L, ldb, c + v * S::L, ldc, accumulate, band,
                             off);
    }
}

// ---- the rows of a score block ---------------------------------------------------------------
// Keys of row r visible in a block of bc keys: causal, those below r + off + 1 (off = i0 + L - Tq
// - j0 for query rows from i0 against keys from j0), else all.
inline int64_t visible_in_block(int64_t r, int64_t bc, bool causal, int64_t off) {
    return causal ? std::clamp<int64_t>(r + off + 1, 0, bc) : bc;
}

// Lanes of the row reductions: whole AVX-512 vectors, two AVX2 ones, four SSE ones.
constexpr int64_t kLanes = 16;

// The largest of x[0, n), n a multiple of kLanes (padding -inf), in kLanes running maxima (one
// compare chain per lane vectorises; NaN never wins, as row_max), then the lanes pairwise: a
// chain of 16 dependent compares cost as much as the row's scores at a head's 64 keys.
__attribute__((always_inline)) inline float lanes_max(const float* x, int64_t n) {
    float lane[kLanes];
    for (int64_t l = 0; l < kLanes; ++l) lane[l] = -kInf;
    for (int64_t j = 0; j < n; j += kLanes)
        for (int64_t l = 0; l < kLanes; ++l) lane[l] = x[j + l] > lane[l] ? x[j + l] : lane[l];
    for (int64_t w = kLanes / 2; w >= 1; w /= 2)
        for (int64_t l = 0; l < w; ++l) lane[l] = lane[l + w] > lane[l] ? lane[l + w] : lane[l];
    return lane[0];
}

// x[j] = exp(x[j] - m) for j < n, n a multiple of kLanes (padding -inf gives 0), returning their
// sum: kLanes float lanes, then the lanes in double, pairwise (in a fixed order, shorter than a
// chain of 16 dependent adds).
__attribute__((always_inline)) inline double lanes_exp_sum(float* x, int64_t n, float m) {
    float lane[kLanes] = {};
    for (int64_t j = 0; j < n; j += kLanes)
        for (int64_t l = 0; l < kLanes; ++l) {
            const float e = vecmath::exp(x[j + l] - m);
            x[j + l] = e;
            lane[l] += e;
        }
    double sum[kLanes];
    for (int64_t l = 0; l < kLanes; ++l) sum[l] = lane[l];
    return pairwise_sum<kLanes>(sum);
}

// The forward pass over one block of scores (rows of ld floats, ld a multiple of kLanes, br rows,
// bc keys): each row's
// scores scale*s + mask, the online softmax's running maximum m and sum l (the accumulator rows
// rescaled when the maximum grows), then P in place, times dropout's multipliers (mult, or null),
// 0 at the hidden keys. mask: row 0's mask from the block's first key, msq its row stride.
XYLEM_KERNEL(void, forward_rows,
             (float* sc, int64_t ld, int64_t br, int64_t bc, const float* mask, int64_t msq, bool causal, int64_t off,
              float scale, const float* mult, double* m, double* l, float* acc, int64_t ldacc),
             (sc, ld, br, bc, mask, msq, causal, off, scale, mult, m, l, acc, ldacc)) {
    for (int64_t r = 0; r < br; ++r) {
        float* s = sc + r * ld;
        const int64_t visible = visible_in_block(r, bc, causal, off);
        if (mask) {
            const float* mr = mask + r * msq;
            for (int64_t j = 0; j < visible; ++j) s[j] = scale * s[j] + mr[j];
        } else {
            for (int64_t j = 0; j < visible; ++j) s[j] = scale * s[j];
        }
        // Whole vectors: the hidden keys up to the next multiple of kLanes (ld is one) are -inf,
        // which no maximum takes and whose exp is 0.
        const int64_t n = (visible + kLanes - 1) / kLanes * kLanes;
        for (int64_t j = visible; j < n; ++j) s[j] = -kInf;
        float mx = lanes_max(s, n);
        if (mx == -kInf)  // no maximum taken: a NaN must still reach O, not be read as "all hidden"
            for (int64_t j = 0; j < visible; ++j)
                if (s[j] != s[j]) mx = s[j];
        const double m_new = mx != mx ? static_cast<double>(mx) : std::max<double>(m[r], mx);
        if (m_new == -static_cast<double>(kInf)) {  // nothing seen yet (or only -inf): no weight
            for (int64_t j = 0; j < bc; ++j) s[j] = 0.0f;
            continue;
        }
        const double sum = lanes_exp_sum(s, n, static_cast<float>(m_new));
        for (int64_t j = n; j < bc; ++j) s[j] = 0.0f;
        // The maximum grew: what was summed so far is rescaled. Not the first time a row sees a
        // key (m -inf): its accumulator and sum are still zero.
        if (m[r] != m_new && m[r] != -static_cast<double>(kInf)) {
            const float alpha = static_cast<float>(std::exp(m[r] - m_new));
            float* ar = acc + r * ldacc;
            for (int64_t d = 0; d < ldacc; ++d) ar[d] *= alpha;
            l[r] *= static_cast<double>(alpha);
        }
        l[r] += sum;
        m[r] = m_new;
        if (mult) {  // after the sum: LSE and the normaliser are taken before dropout
            const float* mr = mult + r * ld;
            for (int64_t j = 0; j < visible; ++j) s[j] *= mr[j];
        }
    }
}

// The backward pass over one block: pr holds the raw scores Q K^T, ds the products dO V^T; they
// become P = exp(scale*s + mask - LSE) (0 at the hidden keys and in rows whose LSE is -inf), pm =
// P times dropout's multipliers (when mult is not null), and ds = scale * P*(M*dP - D).
XYLEM_KERNEL(void, backward_rows,
             (float* pr, float* pm, float* ds, int64_t ld, int64_t br, int64_t bc, const float* mask, int64_t msq,
              bool causal, int64_t off, float scale, const float* lse, const float* delta, const float* mult),
             (pr, pm, ds, ld, br, bc, mask, msq, causal, off, scale, lse, delta, mult)) {
    for (int64_t r = 0; r < br; ++r) {
        float *p = pr + r * ld, *g = ds + r * ld;
        const float lr = lse[r], d = delta[r];
        const int64_t visible = lr == -kInf ? 0 : visible_in_block(r, bc, causal, off);
        if (mask) {
            const float* mr = mask + r * msq;
            for (int64_t j = 0; j < visible; ++j) p[j] = vecmath::exp(scale * p[j] + mr[j] - lr);
        } else {
            for (int64_t j = 0; j < visible; ++j) p[j] = vecmath::exp(scale * p[j] - lr);
        }
        if (mult) {
            const float* mr = mult + r * ld;
            float* q = pm + r * ld;
            for (int64_t j = 0; j < visible; ++j) {
                q[j] = p[j] * mr[j];
                g[j] = scale * (p[j] * (mr[j] * g[j] - d));
            }
            for (int64_t j = visible; j < bc; ++j) q[j] = 0.0f;
        } else {
            for (int64_t j = 0; j < visible; ++j) g[j] = scale * (p[j] * (g[j] - d));
        }
        for (int64_t j = visible; j < bc; ++j) p[j] = g[j] = 0.0f;
    }
}

// Dropout's multipliers for rows [0, br) and keys [0, bc) of a block: keep/(1-p) with keep =
// xylem_dropout_keep(seed, first + r*stride + j, p) (ops.h), its hash here in integers so that the
// loop vectorises: (float)(z >> 40) / 2^24 >= p holds exactly when z >> 40 >= ceil(p * 2^24)
// (both sides exact: 24-bit integers, a power-of-two scaling), the threshold passed in.
XYLEM_KERNEL(void, keep_rows,
             (float* mult, int64_t ld, int64_t br, int64_t bc, uint64_t seed, uint64_t first, uint64_t stride,
              uint64_t threshold, float inv),
             (mult, ld, br, bc, seed, first, stride, threshold, inv)) {
    for (int64_t r = 0; r < br; ++r) {
        float* m = mult + r * ld;
        const uint64_t base = first + static_cast<uint64_t>(r) * stride;
        for (int64_t j = 0; j < bc; ++j) {
            uint64_t z = seed + (base + static_cast<uint64_t>(j) + 1) * 0x9E3779B97F4A7C15ull;
            z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
            z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
            z ^= z >> 31;
            m[j] = (z >> 40) >= threshold ? inv : 0.0f;
        }
    }
}

// ---- operands --------------------------------------------------------------------------------
struct Problem {
    AttentionShape s;
    xylem_attention_attrs at;
    const float *q, *k, *v, *mask;
    int64_t dkp, dvp;    // head sizes padded to kPad
    float keep_scale;    // 1/(1-p)
    uint64_t threshold;  // dropout keeps hash >> 40 at or above it (keep_rows)

    const float* q_row(int64_t bh, int64_t i) const { return q + (bh * s.tq + i) * s.dk; }
    const float* k_row(int64_t bh, int64_t j) const { return k + (bh * s.tk + j) * s.dk; }
    const float* v_row(int64_t bh, int64_t j) const { return v + (bh * s.tk + j) * s.dv; }
    // The mask's row for query i from key j0 on, or null.
    const float* mask_row(int64_t bh, int64_t i, int64_t j0) const {
        if (!mask) return nullptr;
        return mask + (bh / s.h) * s.mask.sb + (bh % s.h) * s.mask.sh + i * s.mask.sq + j0;
    }
    bool dropout() const { return at.dropout_p > 0.0f; }
    bool causal() const { return at.causal != 0; }
    // Keys visible to query i, as [0, end).
    int64_t end(int64_t i) const { return s.visible_end(i, causal()); }
    // The band offset of query rows from i0 against keys from j0 (visible_in_block, Band).
    int64_t band_offset(int64_t i0, int64_t j0) const { return i0 + s.l - s.tq - j0; }
    // Dropout's multipliers of query rows [i0, i0 + br) and keys [j0, j0 + bc) into mult (rows of kBc).
    void keep(float* mult, int64_t bh, int64_t i0, int64_t br, int64_t j0, int64_t bc) const {
        keep_rows(mult, kBc, br, bc, at.seed, static_cast<uint64_t>((bh * s.tq + i0) * s.l + j0),
                  static_cast<uint64_t>(s.l), threshold, keep_scale);
    }
};

Problem problem(const OpArgs& a, const xylem_attention_attrs& at, const Tensor& q, const Tensor& k, const Tensor& v,
                const Tensor* mask) {
    Problem p{plugin_kit::attention_shape(a, at, q, k, v, mask), at, q.f32(), k.f32(), v.f32(),
              mask ? mask->f32() : nullptr, 0, 0, 1.0f, 0};
    p.dkp = padded(p.s.dk);
    p.dvp = padded(p.s.dv);
    p.keep_scale = 1.0f / (1.0f - at.dropout_p);
    p.threshold = static_cast<uint64_t>(std::ceil(static_cast<double>(at.dropout_p) * 16777216.0));
    return p;
}

// Keys [j0, j0 + bc) packed: kt as K^T [dk, kBc] (scores), kp as K [kBc, dkp] (dQ), vp as V
// [kBc, dvp] (forward's output) or vt as V^T [dv, kBc] (dP); any may be null. Padding is zero.
void pack_keys(const Problem& p, int64_t bh, int64_t j0, int64_t bc, float* kt, float* kp, float* vp, float* vt) {
    const AttentionShape& s = p.s;
    if (kt) {
        std::fill_n(kt, s.dk * kBc, 0.0f);
        for (int64_t j = 0; j < bc; ++j) {
            const float* kr = p.k_row(bh, j0 + j);
            for (int64_t d = 0; d < s.dk; ++d) kt[d * kBc + j] = kr[d];
        }
    }
    if (kp)
        for (int64_t j = 0; j < kBc; ++j) {
            float* row = kp + j * p.dkp;
            if (j < bc) std::copy_n(p.k_row(bh, j0 + j), s.dk, row);
            std::fill(row + (j < bc ? s.dk : 0), row + p.dkp, 0.0f);
        }
    if (vp)
        for (int64_t j = 0; j < kBc; ++j) {
            float* row = vp + j * p.dvp;
            if (j < bc) std::copy_n(p.v_row(bh, j0 + j), s.dv, row);
            std::fill(row + (j < bc ? s.dv : 0), row + p.dvp, 0.0f);
        }
    if (vt) {
        std::fill_n(vt, s.dv * kBc, 0.0f);
        for (int64_t j = 0; j < bc; ++j) {
            const float* vr = p.v_row(bh, j0 + j);
            for (int64_t d = 0; d < s.dv; ++d) vt[d * kBc + j] = vr[d];
        }
    }
}

// rows [0, n) of src (row stride ld, width w) into dst [n, wp], zero-padded.
void pack_rows(const float* src, int64_t ld, int64_t n, int64_t w, float* dst, int64_t wp) {
    for (int64_t r = 0; r < n; ++r) {
        std::copy_n(src + r * ld, w, dst + r * wp);
        std::fill(dst + r * wp + w, dst + (r + 1) * wp, 0.0f);
    }
}

// Rounds a scratch size up to whole cache lines, so workers' blocks do not share one.
int64_t lines(int64_t floats) { return (floats + 15) / 16 * 16; }

// ---- forward ---------------------------------------------------------------------------------
struct FwdScratch {
    float *kt, *vp, *sc, *mult, *acc;
    double *m, *l;
};

int64_t fwd_floats(const Problem& p) {
    return lines(p.s.dk * kBc) + lines(kBc * p.dvp) + 2 * kBr * kBc + kBr * p.dvp + 4 * kBr;
}

FwdScratch carve_fwd(const Problem& p, float* f) {
    FwdScratch w;
    w.kt = f;
    w.vp = w.kt + lines(p.s.dk * kBc);
    w.sc = w.vp + lines(kBc * p.dvp);
    w.mult = w.sc + kBr * kBc;
    w.acc = w.mult + kBr * kBc;
    w.m = reinterpret_cast<double*>(w.acc + kBr * p.dvp);  // 8-byte aligned: every size above is even
    w.l = w.m + kBr;
    return w;
}

// Query rows [i0, i0 + br) of head bh: O and LSE.
void forward_block(const Problem& p, int64_t bh, int64_t i0, int64_t br, const FwdScratch& w, float* o, float* lse) {
    const AttentionShape& s = p.s;
    std::fill_n(w.acc, br * p.dvp, 0.0f);
    std::fill_n(w.m, br, -static_cast<double>(kInf));
    std::fill_n(w.l, br, 0.0);
    const bool causal = p.causal();
    const int64_t keys = p.end(i0 + br - 1);  // the block's last row sees the most keys
    for (int64_t j0 = 0; j0 < keys; j0 += kBc) {
        const int64_t bc = std::min(kBc, keys - j0), off = p.band_offset(i0, j0);
        pack_keys(p, bh, j0, bc, w.kt, nullptr, w.vp, nullptr);
        block_gemm(br, padded(bc), s.dk, p.q_row(bh, i0), s.dk, 1, w.kt, kBc, w.sc, kBc, false,
                   causal ? Band::n_end : Band::none, off);
        if (p.dropout()) p.keep(w.mult, bh, i0, br, j0, bc);
        forward_rows(w.sc, kBc, br, bc, p.mask_row(bh, i0, j0), s.mask.sq, causal, off, p.at.scale,
                     p.dropout() ? w.mult : nullptr, w.m, w.l, w.acc, p.dvp);
        block_gemm(br, p.dvp, bc, w.sc, kBc, 1, w.vp, p.dvp, w.acc, p.dvp, true, causal ? Band::k_end : Band::none,
                   off);
    }
    for (int64_t r = 0; r < br; ++r) {
        float* orow = o + (bh * s.tq + i0 + r) * s.dv;
        float& lrow = lse[bh * s.tq + i0 + r];
        if (w.l[r] == 0.0) {  // no visible key, or only -inf scores
            std::fill_n(orow, s.dv, 0.0f);
            lrow = -kInf;
            continue;
        }
        const float inv = static_cast<float>(1.0 / w.l[r]);
        const float* ar = w.acc + r * p.dvp;
        for (int64_t d = 0; d < s.dv; ++d) orow[d] = ar[d] * inv;
        lrow = static_cast<float>(w.m[r] + std::log(w.l[r]));
    }
}

// ---- backward --------------------------------------------------------------------------------
struct BwdScratch {
    float *kt, *kp, *vt, *qp, *dop, *pr, *pm, *ds, *mult, *dk, *dv, *dq;
};

// Floats of one worker's backward scratch (dq_rows: rows of its dQ accumulator).
int64_t bwd_floats(const Problem& p, int64_t dq_rows) {
    const int64_t blk = kBr * kBc;
    return lines(p.s.dk * kBc) + kBc * p.dkp + lines(p.s.dv * kBc) + kBr * p.dkp + kBr * p.dvp + 4 * blk +
           kBc * p.dkp + kBc * p.dvp + dq_rows * p.dkp;
}

BwdScratch carve_bwd(const Problem& p, float* f, int64_t dq_rows) {
    BwdScratch w;
    auto take = [&](int64_t n) { float* r = f; f += n; return r; };
    w.kt = take(lines(p.s.dk * kBc));
    w.kp = take(kBc * p.dkp);
    w.vt = take(lines(p.s.dv * kBc));
    w.qp = take(kBr * p.dkp);
    w.dop = take(kBr * p.dvp);
    w.pr = take(kBr * kBc);
    w.pm = take(kBr * kBc);
    w.ds = take(kBr * kBc);
    w.mult = take(kBr * kBc);
    w.dk = take(kBc * p.dkp);
    w.dv = take(kBc * p.dvp);
    w.dq = take(dq_rows * p.dkp);
    return w;
}

// Query rows [i0, i0 + br) against keys [j0, j0 + bc) of head bh (keys packed in w): P (pr), P
// with dropout's multipliers (pm; without dropout P itself is used) and dS times scale (ds).
// delta: D_i = dO_i . O_i of every row.
void block_grads(const Problem& p, int64_t bh, int64_t i0, int64_t br, int64_t j0, int64_t bc, const float* dout,
                 const float* lse, const float* delta, const BwdScratch& w) {
    const AttentionShape& s = p.s;
    const int64_t n = padded(bc), off = p.band_offset(i0, j0);
    const Band band = p.causal() ? Band::n_end : Band::none;
    block_gemm(br, n, s.dk, p.q_row(bh, i0), s.dk, 1, w.kt, kBc, w.pr, kBc, false, band, off);
    block_gemm(br, n, s.dv, dout + (bh * s.tq + i0) * s.dv, s.dv, 1, w.vt, kBc, w.ds, kBc, false, band, off);
    if (p.dropout()) p.keep(w.mult, bh, i0, br, j0, bc);
    backward_rows(w.pr, w.pm, w.ds, kBc, br, bc, p.mask_row(bh, i0, j0), s.mask.sq, p.causal(), off, p.at.scale,
                  lse + bh * s.tq + i0, delta + bh * s.tq + i0, p.dropout() ? w.mult : nullptr);
}

// The first query block that sees key j0 (causal: j0 <= i + L - Tq), as its first row.
int64_t first_query_block(const Problem& p, int64_t j0) {
    const int64_t first = p.causal() ? std::max<int64_t>(0, j0 - p.s.l + p.s.tq) : 0;
    return first / kBr * kBr;
}

// dK and dV of keys [j0, j0 + bc) of head bh, summed over the query blocks in order; with dq (a
// head's [Tq, dkp] accumulator) also each query block's dQ terms.
void key_block_grads(const Problem& p, int64_t bh, int64_t j0, int64_t bc, const float* dout, const float* lse,
                     const float* delta, const BwdScratch& w, float* dq, float* dk_out, float* dv_out) {
    const AttentionShape& s = p.s;
    pack_keys(p, bh, j0, bc, w.kt, dq ? w.kp : nullptr, nullptr, w.vt);
    std::fill_n(w.dk, kBc * p.dkp, 0.0f);
    std::fill_n(w.dv, kBc * p.dvp, 0.0f);
    const float* pm = p.dropout() ? w.pm : w.pr;
    const bool causal = p.causal();
    for (int64_t i0 = first_query_block(p, j0); i0 < s.tq; i0 += kBr) {
        const int64_t br = std::min(kBr, s.tq - i0), off = p.band_offset(i0, j0);
        block_grads(p, bh, i0, br, j0, bc, dout, lse, delta, w);
        pack_rows(dout + (bh * s.tq + i0) * s.dv, s.dv, br, s.dv, w.dop, p.dvp);
        pack_rows(p.q_row(bh, i0), s.dk, br, s.dk, w.qp, p.dkp);
        // Key rows r are seen from query r - off on (Band::k_begin).
        const Band kb = causal ? Band::k_begin : Band::none;
        block_gemm(bc, p.dvp, br, pm, 1, kBc, w.dop, p.dvp, w.dv, p.dvp, true, kb, -off);    // dV += (P*M)^T dO
        block_gemm(bc, p.dkp, br, w.ds, 1, kBc, w.qp, p.dkp, w.dk, p.dkp, true, kb, -off);   // dK += scale dS^T Q
        if (dq)  // dQ += scale dS K
            block_gemm(br, p.dkp, bc, w.ds, kBc, 1, w.kp, p.dkp, dq + i0 * p.dkp, p.dkp, true,
                       causal ? Band::k_end : Band::none, off);
    }
    for (int64_t j = 0; j < bc; ++j) {
        std::copy_n(w.dk + j * p.dkp, s.dk, dk_out + (bh * s.tk + j0 + j) * s.dk);
        std::copy_n(w.dv + j * p.dvp, s.dv, dv_out + (bh * s.tk + j0 + j) * s.dv);
    }
}

// dQ of query rows [i0, i0 + br) of head bh, summed over the key blocks in order (the second pass
// of the split backward): the same terms in the same order as key_block_grads adds them.
void query_block_grads(const Problem& p, int64_t bh, int64_t i0, int64_t br, const float* dout, const float* lse,
                       const float* delta, const BwdScratch& w, float* dq_out) {
    const AttentionShape& s = p.s;
    std::fill_n(w.dq, br * p.dkp, 0.0f);
    const int64_t keys = p.end(i0 + br - 1);
    for (int64_t j0 = 0; j0 < keys; j0 += kBc) {
        const int64_t bc = std::min(kBc, s.l - j0);
        pack_keys(p, bh, j0, bc, w.kt, w.kp, nullptr, w.vt);
        block_grads(p, bh, i0, br, j0, bc, dout, lse, delta, w);
        block_gemm(br, p.dkp, bc, w.ds, kBc, 1, w.kp, p.dkp, w.dq, p.dkp, true,
                   p.causal() ? Band::k_end : Band::none, p.band_offset(i0, j0));
    }
    for (int64_t r = 0; r < br; ++r) std::copy_n(w.dq + r * p.dkp, s.dk, dq_out + (bh * s.tq + i0 + r) * s.dk);
}

}  // namespace

void op_attention_fwd(const xylem_op_desc& desc, xylem_stream_s& stream) {
    OpArgs a(desc, 3, 4, 2);
    const auto at = a.attrs<xylem_attention_attrs>();
    const Tensor tq = a.in(0, "Q"), tk = a.in(1, "K"), tv = a.in(2, "V"), to = a.out(0, "O"), tl = a.out(1, "LSE");
    const Tensor tm = a.n_inputs() == 4 ? a.in(3, "mask") : Tensor{};
    const Tensor* mask = a.n_inputs() == 4 ? &tm : nullptr;
    const Problem p = problem(a, at, tq, tk, tv, mask);
    plugin_kit::attention_outputs(a, p.s, to, "O", tl);
    for (const Tensor* in : {&tq, &tk, &tv, mask})
        if (in && (overlap(*in, to) || overlap(*in, tl))) a.fail("O or LSE overlaps an input");
    if (overlap(to, tl)) a.fail("O overlaps LSE");
    const AttentionShape& s = p.s;
    const int64_t qblocks = (s.tq + kBr - 1) / kBr, items = s.b * s.h * qblocks;
    if (items == 0) return;
    const double flops = 2.0 * static_cast<double>(s.b * s.h * s.tq * s.l) * static_cast<double>(s.dk + s.dv);
    const int workers = split_workers(flops, 1e6, items);
    const int64_t per = lines(fwd_floats(p));
    float* scratch = stream.scratch_.alloc<float>(per * workers);  // before the threads: the arena has no lock
    float *o = to.f32(), *lse = tl.f32();
    parallel_items(items, workers, [&](int worker, int64_t item) {
        const int64_t bh = item / qblocks, i0 = item % qblocks * kBr;
        forward_block(p, bh, i0, std::min(kBr, s.tq - i0), carve_fwd(p, scratch + worker * per), o, lse);
    });
}

void op_attention_bwd(const xylem_op_desc& desc, xylem_stream_s& stream) {
    OpArgs a(desc, 6, 7, 3);
    const auto at = a.attrs<xylem_attention_attrs>();
    const Tensor tdo = a.in(0, "dO"), tq = a.in(1, "Q"), tk = a.in(2, "K"), tv = a.in(3, "V"), to = a.in(4, "O"),
                 tl = a.in(5, "LSE");
    const Tensor tm = a.n_inputs() == 7 ? a.in(6, "mask") : Tensor{};
    const Tensor* mask = a.n_inputs() == 7 ? &tm : nullptr;
    const Tensor tdq = a.out(0, "dQ"), tdk = a.out(1, "dK"), tdv = a.out(2, "dV");
    const Problem p = problem(a, at, tq, tk, tv, mask);
    plugin_kit::attention_outputs(a, p.s, to, "O", tl);
    plugin_kit::attention_outputs(a, p.s, tdo, "dO", tl);
    plugin_kit::same_shape(a, tdq, "dQ", tq, "Q");
    plugin_kit::same_shape(a, tdk, "dK", tk, "K");
    plugin_kit::same_shape(a, tdv, "dV", tv, "V");
    for (const Tensor* out : {&tdq, &tdk, &tdv}) {
        for (const Tensor* in : {&tdo, &tq, &tk, &tv, &to, &tl, mask})
            if (in && overlap(*in, *out)) a.fail("dQ, dK or dV overlaps an input");
    }
    if (overlap(tdq, tdk) || overlap(tdq, tdv) || overlap(tdk, tdv)) a.fail("dQ, dK and dV overlap");
    const AttentionShape& s = p.s;
    const int64_t heads = s.b * s.h;
    float *dq = tdq.f32(), *dk = tdk.f32(), *dv = tdv.f32();
    const float *dout = tdo.f32(), *o = to.f32(), *lse = tl.f32();
    if (heads == 0) return;
    const double flops = 4.0 * static_cast<double>(heads * s.tq * s.l) * static_cast<double>(s.dk + s.dv);
    // D_i = dO_i . O_i of every row first, head by head; rows j >= L of dK and dV (no query sees
    // them) are zero.
    float* delta = stream.scratch_.alloc<float>(heads * s.tq);
    parallel_items(heads, split_workers(static_cast<double>(heads * s.tq * s.dv), kMinSplitElements, heads),
                   [&](int, int64_t bh) {
                       for (int64_t r = bh * s.tq; r < (bh + 1) * s.tq; ++r) {
                           const float *g = dout + r * s.dv, *y = o + r * s.dv;
                           delta[r] = static_cast<float>(lane_sum(s.dv, [g, y](int64_t d) { return g[d] * y[d]; }));
                       }
                       std::fill(dk + (bh * s.tk + s.l) * s.dk, dk + (bh + 1) * s.tk * s.dk, 0.0f);
                       std::fill(dv + (bh * s.tk + s.l) * s.dv, dv + (bh + 1) * s.tk * s.dv, 0.0f);
                   });
    const int64_t kblocks = (s.l + kBc - 1) / kBc, qblocks = (s.tq + kBr - 1) / kBr;
    // One pass, each head one worker's (dQ summed as the key blocks go), when the heads keep the
    // workers busy; else two passes that recompute the scores: key blocks (dK, dV), then query
    // blocks (dQ). Both add the same terms in the same order: the same bits either way.
    const bool split = heads < 2 * static_cast<int64_t>(split_cpus()) && kblocks * qblocks > 1;
    if (!split) {
        const int workers = split_workers(flops, 1e6, heads);
        const int64_t per = lines(bwd_floats(p, s.tq));
        float* scratch = stream.scratch_.alloc<float>(per * workers);
        parallel_items(heads, workers, [&](int worker, int64_t bh) {
            const BwdScratch w = carve_bwd(p, scratch + worker * per, s.tq);
            std::fill_n(w.dq, s.tq * p.dkp, 0.0f);
            for (int64_t j0 = 0; j0 < s.l; j0 += kBc)
                key_block_grads(p, bh, j0, std::min(kBc, s.l - j0), dout, lse, delta, w, w.dq, dk, dv);
            for (int64_t i = 0; i < s.tq; ++i) std::copy_n(w.dq + i * p.dkp, s.dk, dq + (bh * s.tq + i) * s.dk);
        });
        return;
    }
    const int64_t per = lines(bwd_floats(p, kBr));
    const int workers_k = split_workers(flops, 1e6, heads * kblocks);
    const int workers_q = split_workers(flops, 1e6, heads * qblocks);
    float* scratch = stream.scratch_.alloc<float>(per * std::max(workers_k, workers_q));
    parallel_items(heads * kblocks, workers_k, [&](int worker, int64_t item) {
        const BwdScratch w = carve_bwd(p, scratch + worker * per, kBr);
        const int64_t bh = item / kblocks, j0 = item % kblocks * kBc;
        key_block_grads(p, bh, j0, std::min(kBc, s.l - j0), dout, lse, delta, w, nullptr, dk, dv);
    });
    parallel_items(heads * qblocks, workers_q, [&](int worker, int64_t item) {
        const BwdScratch w = carve_bwd(p, scratch + worker * per, kBr);
        const int64_t bh = item / qblocks, i0 = item % qblocks * kBr;
        query_block_grads(p, bh, i0, std::min(kBr, s.tq - i0), dout, lse, delta, w, dq);
    });
}

}  // namespace xylem::native
