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
// R rows x C vectors of C, summed over k in order (each element's sum in the same order however
// the blocks are laid out): c[r][v] = (accumulate ? c : 0) + sum_kk a(r, kk) * b(kk, v).
template <class S, int R, int C>
__attribute__((always_inline)) inline void mm_tile(int64_t k, const float* __restrict a, int64_t a_rs, int64_t a_cs,
                                                   const float* __restrict b, int64_t ldb, float* __restrict c,
                                                   int64_t ldc, bool accumulate) {
    using V = typename S::V;
    using Vu = typename S::Vu;
    V acc[R][C];
    for (int r = 0; r < R; ++r)
        for (int v = 0; v < C; ++v)
            acc[r][v] = accumulate ? V(*reinterpret_cast<const Vu*>(c + r * ldc + v * S::L)) : V{};
    for (int64_t kk = 0; kk < k; ++kk) {
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

template <class S, int C>
__attribute__((always_inline)) inline void mm_rows(int64_t m, int64_t k, const float* a, int64_t a_rs, int64_t a_cs,
                                                   const float* b, int64_t ldb, float* c, int64_t ldc, bool accumulate) {
    constexpr int R = 4;
    int64_t r = 0;
    for (; r + R <= m; r += R) mm_tile<S, R, C>(k, a + r * a_rs, a_rs, a_cs, b, ldb, c + r * ldc, ldc, accumulate);
    for (; r < m; ++r) mm_tile<S, 1, C>(k, a + r * a_rs, a_rs, a_cs, b, ldb, c + r * ldc, ldc, accumulate);
}

// C[m, n] (+)= A[m, k] * B[k, n]: a(r, kk) = a[r*a_rs + kk*a_cs]; B row-major (ldb), n a multiple
// of kPad, B and C readable and writable that far.
XYLEM_KERNEL_LEVELS(void, block_gemm,
                    (int64_t m, int64_t n, int64_t k, const float* a, int64_t a_rs, int64_t a_cs, const float* b,
                     int64_t ldb, float* c, int64_t ldc, bool accumulate),
                    (m, n, k, a, a_rs, a_cs, b, ldb, c, ldc, accumulate)) {
    constexpr int C = S::kRegisters >= 32 ? 4 : 2;  // vectors per tile row: 4 x C accumulators
    const int64_t nv = n / S::L;
    int64_t v = 0;
    for (; v + C <= nv; v += C)
        mm_rows<S, C>(m, k, a, a_rs, a_cs, b + v * S::L, ldb, c + v * S::L, ldc, accumulate);
    for (; v < nv; ++v) mm_rows<S, 1>(m, k, a, a_rs, a_cs, b + v * S::L, ldb, c + v * S::L, ldc, accumulate);
}

// ---- rows of a score block ------------------------------------------------------------------
// s[j] = scale*s[j] + mask[j] for j < visible, -inf after (mask may be null); returns the largest
// visible score (-inf when none).
XYLEM_KERNEL(float, score_row, (float* __restrict s, const float* __restrict mask, int64_t n, int64_t visible,
                                float scale),
             (s, mask, n, visible, scale)) {
    if (mask)
        for (int64_t j = 0; j < visible; ++j) s[j] = scale * s[j] + mask[j];
    else
        for (int64_t j = 0; j < visible; ++j) s[j] = scale * s[j];
    for (int64_t j = visible; j < n; ++j) s[j] = -kInf;
    return visible > 0 ? row_max(s, visible) : -kInf;
}

// p[j] = exp(scale*s[j] + mask[j] - lse) for j < visible, 0 after (lse finite).
XYLEM_KERNEL(void, prob_row, (float* __restrict s, const float* __restrict mask, int64_t n, int64_t visible,
                              float scale, float lse),
             (s, mask, n, visible, scale, lse)) {
    if (mask)
        for (int64_t j = 0; j < visible; ++j) s[j] = vecmath::exp(scale * s[j] + mask[j] - lse);
    else
        for (int64_t j = 0; j < visible; ++j) s[j] = vecmath::exp(scale * s[j] - lse);
    for (int64_t j = visible; j < n; ++j) s[j] = 0.0f;
}

// ds[j] = k * p[j] * (dp[j] - d) (no dropout: pm is p).
XYLEM_KERNEL(void, ds_row, (const float* __restrict p, float* __restrict ds, int64_t n, float d, float k),
             (p, ds, n, d, k)) {
    for (int64_t j = 0; j < n; ++j) ds[j] = k * (p[j] * (ds[j] - d));
}

XYLEM_KERNEL(void, scale_row, (float* y, int64_t n, float k), (y, n, k)) {
    for (int64_t j = 0; j < n; ++j) y[j] *= k;
}

// Dropout's multipliers of row i of P, keys [j0, j0 + n): keep/(1-p) on the mask stream of P's flat
// index ((b*H + h)*Tq + i)*L + j (ops.h).
void dropout_row(float* m, int64_t n, uint64_t seed, uint64_t first, float p, float inv) {
    for (int64_t j = 0; j < n; ++j) m[j] = xylem_dropout_keep(seed, first + static_cast<uint64_t>(j), p) ? inv : 0.0f;
}

// ---- operands --------------------------------------------------------------------------------
struct Problem {
    AttentionShape s;
    xylem_attention_attrs at;
    const float *q, *k, *v, *mask;
    int64_t dkp, dvp;  // head sizes padded to kPad
    float keep_scale;  // 1/(1-p)

    const float* q_row(int64_t bh, int64_t i) const { return q + (bh * s.tq + i) * s.dk; }
    const float* k_row(int64_t bh, int64_t j) const { return k + (bh * s.tk + j) * s.dk; }
    const float* v_row(int64_t bh, int64_t j) const { return v + (bh * s.tk + j) * s.dv; }
    // The mask's row for query i from key j0 on, or null.
    const float* mask_row(int64_t bh, int64_t i, int64_t j0) const {
        if (!mask) return nullptr;
        return mask + (bh / s.h) * s.mask.sb + (bh % s.h) * s.mask.sh + i * s.mask.sq + j0;
    }
    uint64_t p_index(int64_t bh, int64_t i, int64_t j0) const {
        return static_cast<uint64_t>((bh * s.tq + i) * s.l + j0);
    }
    bool dropout() const { return at.dropout_p > 0.0f; }
    bool causal() const { return at.causal != 0; }
    // Keys visible to query i, as [0, end).
    int64_t end(int64_t i) const { return s.visible_end(i, causal()); }
};

Problem problem(const OpArgs& a, const xylem_attention_attrs& at, const Tensor& q, const Tensor& k, const Tensor& v,
                const Tensor* mask) {
    Problem p{plugin_kit::attention_shape(a, at, q, k, v, mask), at, q.f32(), k.f32(), v.f32(),
              mask ? mask->f32() : nullptr, 0, 0, 1.0f};
    p.dkp = padded(p.s.dk);
    p.dvp = padded(p.s.dv);
    p.keep_scale = 1.0f / (1.0f - at.dropout_p);
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

// ---- forward ---------------------------------------------------------------------------------
struct FwdScratch {
    float *kt, *vp, *sc, *acc;
    double *m, *l;
};

// Query rows [i0, i0 + br) of head bh: O and LSE.
void forward_block(const Problem& p, int64_t bh, int64_t i0, int64_t br, const FwdScratch& w, float* o, float* lse) {
    const AttentionShape& s = p.s;
    std::fill_n(w.acc, br * p.dvp, 0.0f);
    std::fill_n(w.m, br, -static_cast<double>(kInf));
    std::fill_n(w.l, br, 0.0);
    const int64_t keys = p.end(i0 + br - 1);  // the block's last row sees the most keys
    for (int64_t j0 = 0; j0 < keys; j0 += kBc) {
        const int64_t bc = std::min(kBc, keys - j0);
        pack_keys(p, bh, j0, bc, w.kt, nullptr, w.vp, nullptr);
        block_gemm(br, padded(bc), s.dk, p.q_row(bh, i0), s.dk, 1, w.kt, kBc, w.sc, kBc, false);
        for (int64_t r = 0; r < br; ++r) {
            const int64_t i = i0 + r, visible = std::clamp<int64_t>(p.end(i) - j0, 0, bc);
            float* sr = w.sc + r * kBc;
            const float mx = score_row(sr, p.mask_row(bh, i, j0), bc, visible, p.at.scale);
            const double m_new = std::max<double>(w.m[r], mx);
            if (m_new == -static_cast<double>(kInf) || m_new != m_new) {  // nothing seen yet: no weight
                std::fill_n(sr, bc, 0.0f);
                if (m_new != m_new) w.m[r] = m_new;
                continue;
            }
            const float mf = static_cast<float>(m_new);
            const double sum = sum_exp(sr, bc, mf, sr);  // exp(-inf) = 0 at the hidden keys
            const double alpha = w.m[r] == m_new ? 1.0 : std::exp(w.m[r] - m_new);
            if (alpha != 1.0) scale_row(w.acc + r * p.dvp, p.dvp, static_cast<float>(alpha));
            w.l[r] = w.l[r] * alpha + sum;
            w.m[r] = m_new;
            if (p.dropout()) {  // after the sum: LSE and the normaliser are taken before dropout
                float mult[kBc];
                dropout_row(mult, bc, p.at.seed, p.p_index(bh, i, j0), p.at.dropout_p, p.keep_scale);
                for (int64_t j = 0; j < bc; ++j) sr[j] *= mult[j];
            }
        }
        block_gemm(br, p.dvp, bc, w.sc, kBc, 1, w.vp, p.dvp, w.acc, p.dvp, true);
    }
    for (int64_t r = 0; r < br; ++r) {
        float* orow = o + (bh * s.tq + i0 + r) * s.dv;
        float& lrow = lse[bh * s.tq + i0 + r];
        if (w.m[r] != w.m[r]) {  // a NaN score
            std::fill_n(orow, s.dv, static_cast<float>(w.m[r]));
            lrow = static_cast<float>(w.m[r]);
        } else if (w.l[r] == 0.0) {  // no visible key, or only -inf scores
            std::fill_n(orow, s.dv, 0.0f);
            lrow = -kInf;
        } else {
            const float inv = static_cast<float>(1.0 / w.l[r]);
            const float* ar = w.acc + r * p.dvp;
            for (int64_t d = 0; d < s.dv; ++d) orow[d] = ar[d] * inv;
            lrow = static_cast<float>(w.m[r] + std::log(w.l[r]));
        }
    }
}

// ---- backward --------------------------------------------------------------------------------
struct BwdScratch {
    float *kt, *kp, *vt, *qp, *dop, *pr, *pm, *ds, *dk, *dv, *dq;
    float* mult;  // one row of dropout multipliers
};

// Query rows [i0, i0 + br) against keys [j0, j0 + bc) of head bh (keys packed in w): P (pr), P
// with dropout's multipliers (pm, or pr itself without dropout) and dS times scale (ds).
// delta: D_i = dO_i . O_i of the head's rows.
void block_grads(const Problem& p, int64_t bh, int64_t i0, int64_t br, int64_t j0, int64_t bc, const float* dout,
                 const float* lse, const float* delta, const BwdScratch& w) {
    const AttentionShape& s = p.s;
    const int64_t n = padded(bc);
    block_gemm(br, n, s.dk, p.q_row(bh, i0), s.dk, 1, w.kt, kBc, w.pr, kBc, false);
    block_gemm(br, n, s.dv, dout + (bh * s.tq + i0) * s.dv, s.dv, 1, w.vt, kBc, w.ds, kBc, false);
    for (int64_t r = 0; r < br; ++r) {
        const int64_t i = i0 + r;
        const float l = lse[bh * s.tq + i];
        const int64_t visible = l == -kInf ? 0 : std::clamp<int64_t>(p.end(i) - j0, 0, bc);
        float *pr = w.pr + r * kBc, *ds = w.ds + r * kBc;
        prob_row(pr, p.mask_row(bh, i, j0), bc, visible, p.at.scale, l);
        const float d = delta[bh * s.tq + i];
        if (!p.dropout()) {
            ds_row(pr, ds, bc, d, p.at.scale);
            continue;
        }
        float* pm = w.pm + r * kBc;
        dropout_row(w.mult, bc, p.at.seed, p.p_index(bh, i, j0), p.at.dropout_p, p.keep_scale);
        for (int64_t j = 0; j < bc; ++j) {
            pm[j] = pr[j] * w.mult[j];
            ds[j] = p.at.scale * (pr[j] * (w.mult[j] * ds[j] - d));
        }
    }
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
    // The first query that sees key j0 (causal: j0 <= i + L - Tq).
    const int64_t first = p.causal() ? std::max<int64_t>(0, j0 - s.l + s.tq) : 0;
    for (int64_t i0 = first / kBr * kBr; i0 < s.tq; i0 += kBr) {
        const int64_t br = std::min(kBr, s.tq - i0);
        block_grads(p, bh, i0, br, j0, bc, dout, lse, delta, w);
        pack_rows(dout + (bh * s.tq + i0) * s.dv, s.dv, br, s.dv, w.dop, p.dvp);
        pack_rows(p.q_row(bh, i0), s.dk, br, s.dk, w.qp, p.dkp);
        block_gemm(bc, p.dvp, br, pm, 1, kBc, w.dop, p.dvp, w.dv, p.dvp, true);    // dV += (P*M)^T dO
        block_gemm(bc, p.dkp, br, w.ds, 1, kBc, w.qp, p.dkp, w.dk, p.dkp, true);   // dK += scale dS^T Q
        if (dq) block_gemm(br, p.dkp, bc, w.ds, kBc, 1, w.kp, p.dkp, dq + i0 * p.dkp, p.dkp, true);  // dQ += scale dS K
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
        block_gemm(br, p.dkp, bc, w.ds, kBc, 1, w.kp, p.dkp, w.dq, p.dkp, true);
    }
    for (int64_t r = 0; r < br; ++r) std::copy_n(w.dq + r * p.dkp, s.dk, dq_out + (bh * s.tq + i0 + r) * s.dk);
}

// Floats of one worker's backward scratch (dq_rows: rows of its dQ accumulator).
int64_t bwd_floats(const Problem& p, int64_t dq_rows) {
    const int64_t blk = kBr * kBc;
    return p.s.dk * kBc + kBc * p.dkp + p.s.dv * kBc + kBr * p.dkp + kBr * p.dvp + 3 * blk + kBc * p.dkp +
           kBc * p.dvp + dq_rows * p.dkp + kBc;
}

BwdScratch carve_bwd(const Problem& p, float* f, int64_t dq_rows) {
    BwdScratch w;
    auto take = [&](int64_t n) { float* r = f; f += n; return r; };
    w.kt = take(p.s.dk * kBc);
    w.kp = take(kBc * p.dkp);
    w.vt = take(p.s.dv * kBc);
    w.qp = take(kBr * p.dkp);
    w.dop = take(kBr * p.dvp);
    w.pr = take(kBr * kBc);
    w.pm = take(kBr * kBc);
    w.ds = take(kBr * kBc);
    w.dk = take(kBc * p.dkp);
    w.dv = take(kBc * p.dvp);
    w.dq = take(dq_rows * p.dkp);
    w.mult = take(kBc);
    return w;
}

// Rounds a scratch size up to whole cache lines, so workers' blocks do not share one.
int64_t lines(int64_t floats) { return (floats + 15) / 16 * 16; }

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
    const int64_t per = lines(s.dk * kBc + kBc * p.dvp + kBr * kBc + kBr * p.dvp + 4 * kBr);
    float* scratch = stream.scratch_.alloc<float>(per * workers);  // before the threads: the arena has no lock
    float *o = to.f32(), *lse = tl.f32();
    parallel_items(items, workers, [&](int worker, int64_t item) {
        float* f = scratch + worker * per;
        FwdScratch w;
        w.kt = f;
        w.vp = w.kt + s.dk * kBc;
        w.sc = w.vp + kBc * p.dvp;
        w.acc = w.sc + kBr * kBc;
        w.m = reinterpret_cast<double*>(w.acc + kBr * p.dvp);  // 8-byte aligned: every size above is even
        w.l = w.m + kBr;
        const int64_t bh = item / qblocks, i0 = item % qblocks * kBr;
        forward_block(p, bh, i0, std::min(kBr, s.tq - i0), w, o, lse);
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
    // Rows j >= L of dK and dV: no query sees them.
    if (s.l < s.tk)
        for (int64_t bh = 0; bh < heads; ++bh) {
            std::fill(dk + (bh * s.tk + s.l) * s.dk, dk + (bh + 1) * s.tk * s.dk, 0.0f);
            std::fill(dv + (bh * s.tk + s.l) * s.dv, dv + (bh + 1) * s.tk * s.dv, 0.0f);
        }
    // D_i = dO_i . O_i, every row first.
    float* delta = stream.scratch_.alloc<float>(heads * s.tq);
    for (int64_t r = 0; r < heads * s.tq; ++r) {
        const float *g = dout + r * s.dv, *y = o + r * s.dv;
        delta[r] = static_cast<float>(lane_sum(s.dv, [g, y](int64_t d) { return g[d] * y[d]; }));
    }
    const double flops = 4.0 * static_cast<double>(heads * s.tq * s.l) * static_cast<double>(s.dk + s.dv);
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
    const int workers_k = split_workers(flops, 1e6, heads * kblocks), workers_q = split_workers(flops, 1e6, heads * qblocks);
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
