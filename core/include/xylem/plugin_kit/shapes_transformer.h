// Plugin kit: the shape and attribute rules of the ABI 1.7 ops (layer_norm_fwd/bwd, attention_fwd/bwd,
// gemm_batched, permute, masked_softmax), one home for the core, every plugin and the layers, as
// shapes.h is for the older ops. Header-only C++17; the same Args/tensor conventions as shapes.h.
#pragma once

#include <cmath>
#include <cstdint>

#include "xylem/plugin_kit/shapes.h"

namespace xylem::plugin_kit {

// ---- layer_norm ------------------------------------------------------------------------------
// X [..., D] seen as [rows, D]; gamma [D], beta [D] optional; mean and rstd hold rows elements.
struct LayerNormShape {
    int64_t rows, d;
};

template <class Args, class T>
LayerNormShape layer_norm_shape(const Args& a, const xylem_layer_norm_attrs& at, const T& x, const T& gamma,
                                const T* beta, const T& mean, const T& rstd) {
    using ll = long long;
    if (!(at.eps >= 0.0f) || !std::isfinite(at.eps)) a.fail("eps = %g must be finite and >= 0", at.eps);
    if (x.ndim < 1) a.fail("X %s needs at least 1 dim (the normalised axis)", DimStr(x).s);
    LayerNormShape s{1, x.dims[x.ndim - 1]};
    for (uint32_t d = 0; d + 1 < x.ndim; ++d) s.rows *= x.dims[d];
    if (s.d < 1) a.fail("X %s has an empty last axis", DimStr(x).s);
    if (gamma.numel != s.d)
        a.fail("gamma holds %lld elements for X %s's last axis of %lld", ll(gamma.numel), DimStr(x).s, ll(s.d));
    if (beta && beta->numel != s.d)
        a.fail("beta holds %lld elements for X %s's last axis of %lld", ll(beta->numel), DimStr(x).s, ll(s.d));
    if (mean.numel != s.rows || rstd.numel != s.rows)
        a.fail("mean and rstd hold %lld and %lld elements for X %s's %lld rows", ll(mean.numel), ll(rstd.numel),
               DimStr(x).s, ll(s.rows));
    return s;
}

// `t` (named tn) must have `like`'s shape (named ln).
template <class Args, class T>
void same_shape(const Args& a, const T& t, const char* tn, const T& like, const char* ln) {
    bool same = t.ndim == like.ndim;
    for (uint32_t d = 0; same && d < t.ndim; ++d) same = t.dims[d] == like.dims[d];
    if (!same) a.fail("%s %s must have %s's shape %s", tn, DimStr(t).s, ln, DimStr(like).s);
}

// ---- attention -------------------------------------------------------------------------------
// The mask's broadcast, as element strides: mask(b, h, i, j) = mask[b*sb + h*sh + i*sq + j].
struct MaskStrides {
    bool present = false;
    int64_t sb = 0, sh = 0, sq = 0;
};

// A mask over scores [B, H, Tq, L]: [Tq, L], or [B|1, H|1, Tq|1, L] (rank 4 only when the scores
// are). b_h_known: false for masked_softmax's scores of another rank (then only [Tq, L]).
template <class Args, class T>
MaskStrides mask_strides(const Args& a, const T* mask, int64_t b, int64_t h, int64_t tq, int64_t l, bool rank4_ok) {
    using ll = long long;
    MaskStrides m;
    if (!mask) return m;
    m.present = true;
    if (mask->ndim == 2) {
        if (mask->dims[0] != tq || mask->dims[1] != l)
            a.fail("mask %s must be [Tq, L] = [%lld, %lld] (or [B|1, H|1, Tq|1, L] for 4-D scores)", DimStr(*mask).s,
                   ll(tq), ll(l));
        m.sq = l;
        return m;
    }
    if (mask->ndim != 4 || !rank4_ok)
        a.fail("mask %s must be [Tq, L] = [%lld, %lld]%s", DimStr(*mask).s, ll(tq), ll(l),
               rank4_ok ? " or [B|1, H|1, Tq|1, L]" : "");
    const int64_t* d = mask->dims;
    if ((d[0] != 1 && d[0] != b) || (d[1] != 1 && d[1] != h) || (d[2] != 1 && d[2] != tq) || d[3] != l)
        a.fail("mask %s does not broadcast over the scores [%lld, %lld, %lld, %lld]: each of its first three dims "
               "must be 1 or the scores', the last L = %lld",
               DimStr(*mask).s, ll(b), ll(h), ll(tq), ll(l), ll(l));
    m.sq = d[2] == 1 ? 0 : l;
    m.sh = d[1] == 1 ? 0 : d[2] * l;
    m.sb = d[0] == 1 ? 0 : d[1] * d[2] * l;
    return m;
}

struct AttentionShape {
    int64_t b, h, tq, tk, l, dk, dv;  // l: keys used (kv_length or Tk)
    MaskStrides mask;
    // Whether key j is visible to query i (causal: bottom-right aligned, ops.h's attention_fwd).
    bool visible(int64_t i, int64_t j, bool causal) const { return j < l && (!causal || j <= i + l - tq); }
    // Keys visible to query i are [0, visible_end(i)).
    int64_t visible_end(int64_t i, bool causal) const {
        if (!causal) return l;
        const int64_t e = i + l - tq + 1;
        return e < 0 ? 0 : (e > l ? l : e);
    }
};

template <class Args>
void check_attention_attrs(const Args& a, const xylem_attention_attrs& at) {
    if (!std::isfinite(at.scale)) a.fail("scale = %g must be finite", at.scale);
    if (at.causal != 0 && at.causal != 1) a.fail("causal = %d must be 0 or 1", at.causal);
    if (!(at.dropout_p >= 0.0f && at.dropout_p < 1.0f)) a.fail("dropout p = %g must be in [0, 1)", at.dropout_p);
}

// Q [B, H, Tq, Dk], K [B, H, Tk, Dk], V [B, H, Tk, Dv], mask optional: everything but the outputs.
template <class Args, class T>
AttentionShape attention_shape(const Args& a, const xylem_attention_attrs& at, const T& q, const T& k, const T& v,
                               const T* mask) {
    using ll = long long;
    check_attention_attrs(a, at);
    if (q.ndim != 4 || k.ndim != 4 || v.ndim != 4)
        a.fail("Q %s, K %s and V %s must be 4-D [batch, heads, time, head_dim]", DimStr(q).s, DimStr(k).s,
               DimStr(v).s);
    AttentionShape s{q.dims[0], q.dims[1], q.dims[2], k.dims[2], k.dims[2], q.dims[3], v.dims[3], {}};
    if (k.dims[0] != s.b || v.dims[0] != s.b || k.dims[1] != s.h || v.dims[1] != s.h)
        a.fail("Q %s, K %s and V %s must share batch and heads", DimStr(q).s, DimStr(k).s, DimStr(v).s);
    if (k.dims[3] != s.dk) a.fail("K %s must have Q %s's head_dim %lld", DimStr(k).s, DimStr(q).s, ll(s.dk));
    if (v.dims[2] != s.tk) a.fail("V %s must have K %s's time %lld", DimStr(v).s, DimStr(k).s, ll(s.tk));
    if (s.tq < 1 || s.tk < 1 || s.dk < 1 || s.dv < 1)
        a.fail("Q %s, K %s and V %s need time and head_dim >= 1", DimStr(q).s, DimStr(k).s, DimStr(v).s);
    if (at.kv_length < 0 || at.kv_length > s.tk)
        a.fail("kv_length = %d must be in [0, Tk = %lld] (0: all keys)", at.kv_length, ll(s.tk));
    if (at.kv_length) s.l = at.kv_length;
    s.mask = mask_strides(a, mask, s.b, s.h, s.tq, s.l, true);
    return s;
}

// attention_fwd's outputs O [B, H, Tq, Dv] and LSE [B, H, Tq].
template <class Args, class T>
void attention_outputs(const Args& a, const AttentionShape& s, const T& o, const char* on, const T& lse) {
    using ll = long long;
    if (o.ndim != 4 || o.dims[0] != s.b || o.dims[1] != s.h || o.dims[2] != s.tq || o.dims[3] != s.dv)
        a.fail("%s %s must be [B, H, Tq, Dv] = [%lld, %lld, %lld, %lld]", on, DimStr(o).s, ll(s.b), ll(s.h), ll(s.tq),
               ll(s.dv));
    if (lse.ndim != 3 || lse.dims[0] != s.b || lse.dims[1] != s.h || lse.dims[2] != s.tq)
        a.fail("LSE %s must be [B, H, Tq] = [%lld, %lld, %lld]", DimStr(lse).s, ll(s.b), ll(s.h), ll(s.tq));
}

// ---- gemm_batched ----------------------------------------------------------------------------
// C [batch..., M, N]; A [batch..., M, K] or [M, K] (stride_a = 0: one matrix for all), likewise B;
// the transposed layouts when trans_*. Strides are in elements between consecutive matrices.
struct GemmBatchedShape {
    int64_t batch, m, n, k;
    int64_t stride_a, stride_b, stride_c;
};

template <class Args, class T>
GemmBatchedShape gemm_batched_shape(const Args& a, const xylem_gemm_attrs& at, const T& ta, const T& tb,
                                    const T& c) {
    if (c.ndim < 3) a.fail("C %s must have rank >= 3 [batch..., M, N] (gemm takes 2-D)", DimStr(c).s);
    GemmBatchedShape s{1, c.dims[c.ndim - 2], c.dims[c.ndim - 1], 0, 0, 0, 0};
    for (uint32_t d = 0; d + 2 < c.ndim; ++d) s.batch *= c.dims[d];
    s.stride_c = s.m * s.n;
    auto operand = [&](const T& t, const char* name) {
        if (t.ndim == 2) return false;
        bool lead = t.ndim == c.ndim;
        for (uint32_t d = 0; lead && d + 2 < c.ndim; ++d) lead = t.dims[d] == c.dims[d];
        if (!lead)
            a.fail("%s %s must be 2-D or have C %s's leading (batch) dims", name, DimStr(t).s, DimStr(c).s);
        return true;
    };
    const bool batched_a = operand(ta, "A"), batched_b = operand(tb, "B");
    const int64_t a_rows = ta.dims[ta.ndim - 2], a_cols = ta.dims[ta.ndim - 1];
    const int64_t b_rows = tb.dims[tb.ndim - 2], b_cols = tb.dims[tb.ndim - 1];
    const int64_t am = at.trans_a ? a_cols : a_rows, ak = at.trans_a ? a_rows : a_cols;
    const int64_t bk = at.trans_b ? b_cols : b_rows, bn = at.trans_b ? b_rows : b_cols;
    if (am != s.m || bn != s.n || ak != bk)
        a.fail("A %s%s and B %s%s do not give C %s (op(A) [M, K] * op(B) [K, N] = C [M, N] per batch)", DimStr(ta).s,
               at.trans_a ? "^T" : "", DimStr(tb).s, at.trans_b ? "^T" : "", DimStr(c).s);
    s.k = ak;
    s.stride_a = batched_a ? a_rows * a_cols : 0;
    s.stride_b = batched_b ? b_rows * b_cols : 0;
    return s;
}

// ---- permute ---------------------------------------------------------------------------------
// Y's dims and, for each of Y's axes, the stride (in elements) of the X axis it walks.
struct PermuteShape {
    uint32_t ndim;
    int64_t out_dims[XYLEM_MAX_DIMS];
    int64_t in_strides[XYLEM_MAX_DIMS];  // X's stride along axis perm[i]
    int64_t numel;
};

template <class Args, class T>
PermuteShape permute_shape(const Args& a, const xylem_permute_attrs& at, const T& x, const T& y) {
    using ll = long long;
    PermuteShape s{x.ndim, {}, {}, x.numel};
    if (x.ndim < 1 || x.ndim > XYLEM_MAX_DIMS) a.fail("X %s must have 1 to %d dims", DimStr(x).s, XYLEM_MAX_DIMS);
    int64_t x_strides[XYLEM_MAX_DIMS];
    int64_t stride = 1;
    for (uint32_t d = x.ndim; d-- > 0;) x_strides[d] = stride, stride *= x.dims[d];
    bool seen[XYLEM_MAX_DIMS] = {};
    for (uint32_t i = 0; i < x.ndim; ++i) {
        const int32_t p = at.perm[i];
        if (p < 0 || p >= static_cast<int32_t>(x.ndim) || seen[p])
            a.fail("perm is not a permutation of 0..%u (entry %u is %d)", x.ndim - 1, i, p);
        seen[p] = true;
        s.out_dims[i] = x.dims[p];
        s.in_strides[i] = x_strides[p];
    }
    bool ok = y.ndim == x.ndim;
    for (uint32_t i = 0; ok && i < x.ndim; ++i) ok = y.dims[i] == s.out_dims[i];
    if (!ok) {
        ll dims[XYLEM_MAX_DIMS];
        for (uint32_t i = 0; i < x.ndim; ++i) dims[i] = s.out_dims[i];
        char want[160];
        int len = std::snprintf(want, sizeof want, "[");
        for (uint32_t i = 0; i < x.ndim; ++i) len += std::snprintf(want + len, sizeof want - len, i ? ", %lld" : "%lld", dims[i]);
        std::snprintf(want + len, sizeof want - len, "]");
        a.fail("Y %s must be X %s permuted: %s", DimStr(y).s, DimStr(x).s, want);
    }
    return s;
}

// ---- masked_softmax --------------------------------------------------------------------------
// X [..., Tq, L] seen as [batch, Tq, L] (batch = B*H for 4-D X); the mask as attention's.
struct MaskedSoftmaxShape {
    int64_t batch, heads, tq, l;  // heads: X's dim 1 when 4-D (for the mask's broadcast), else 1
    MaskStrides mask;
    bool visible(int64_t i, int64_t j, bool causal) const { return !causal || j <= i + l - tq; }
};

template <class Args, class T>
MaskedSoftmaxShape masked_softmax_shape(const Args& a, const xylem_attention_attrs& at, const T& x, const T* mask,
                                        const T& y, const T* lse) {
    check_attention_attrs(a, at);
    if (at.kv_length != 0) a.fail("kv_length = %d must be 0 (every key of X's last axis is used)", at.kv_length);
    if (x.ndim < 2) a.fail("X %s must have rank >= 2 [..., Tq, L]", DimStr(x).s);
    same_shape(a, y, "Y", x, "X");
    if (lse && lse->numel * x.dims[x.ndim - 1] != x.numel)
        a.fail("LSE holds %lld elements for X %s's %lld rows", static_cast<long long>(lse->numel), DimStr(x).s,
               static_cast<long long>(x.dims[x.ndim - 1] ? x.numel / x.dims[x.ndim - 1] : 0));
    MaskedSoftmaxShape s{1, x.ndim == 4 ? x.dims[1] : 1, x.dims[x.ndim - 2], x.dims[x.ndim - 1], {}};
    for (uint32_t d = 0; d + 2 < x.ndim; ++d) s.batch *= x.dims[d];
    const int64_t b = x.ndim == 4 ? x.dims[0] : s.batch;
    s.mask = mask_strides(a, mask, b, s.heads, s.tq, s.l, x.ndim == 4);
    return s;
}

}  // namespace xylem::plugin_kit
