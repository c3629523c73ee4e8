// Plugin kit: the one home of the ops' shape and attribute rules (conv2d, pool2d, batch norm,
// gather_rows, gemm, linear_fwd, adam/adamw, add, reduce, scatter_add_rows), with the messages every
// backend gives.
// Header-only C++17. Each rule takes an Args with fail(fmt, ...) (a plugin's OpArgs, op_args.h, or
// the core's own, core/src/op_call_util.h) and tensors with ndim, dims and numel, and returns a
// plain struct. The core runs the same rule before it builds a descriptor, every plugin when the
// descriptor arrives, and the layers get their output shapes from it, so the three cannot differ.
// Overlap checks and backend limits (BLAS int sizes, scratch) stay with the plugin.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <type_traits>

#include "xylem/ops.h"
#include "xylem/plugin_api.h"

namespace xylem::plugin_kit {

// "[a, b, c, d]" for messages (the core's to_string form).
struct DimStr {
    char s[160];
    DimStr(uint32_t ndim, const int64_t* dims) {
        int len = std::snprintf(s, sizeof s, "[");
        for (uint32_t d = 0; d < ndim && len < 140; ++d)
            len += std::snprintf(s + len, sizeof s - len, d ? ", %lld" : "%lld", static_cast<long long>(dims[d]));
        std::snprintf(s + len, sizeof s - len, "]");
    }
    template <class T>
    explicit DimStr(const T& t) : DimStr(t.ndim, t.dims) {}
};

// ---- conv2d --------------------------------------------------------------------------------
struct Conv2dShape {
    int64_t n, c, h, w;  // input
    int64_t k, r, s;     // filters
    int64_t oh, ow;      // output
    int64_t g, cg, kg;   // groups; channels and filters per group
    int64_t sh, sw, ph, pw, dh, dw;

    int64_t hw() const { return h * w; }
    int64_t p() const { return oh * ow; }
};

// X (or dX) and W (or dW) against the attributes: the whole rule but the output's shape.
template <class Args, class T>
Conv2dShape conv2d_out(const Args& a, const xylem_conv2d_attrs& at, const T& x, const char* xn, const T& f,
                       const char* fn) {
    using ll = long long;
    if (at.stride_h < 1 || at.stride_w < 1) a.fail("stride %dx%d must be >= 1", at.stride_h, at.stride_w);
    if (at.dilation_h < 1 || at.dilation_w < 1) a.fail("dilation %dx%d must be >= 1", at.dilation_h, at.dilation_w);
    if (at.pad_h < 0 || at.pad_w < 0) a.fail("padding %dx%d must be >= 0", at.pad_h, at.pad_w);
    if (at.groups < 1) a.fail("groups = %d must be >= 1", at.groups);
    if (x.ndim != 4) a.fail("%s %s must be 4-D [N,C,H,W]", xn, DimStr(x).s);
    if (f.ndim != 4) a.fail("%s %s must be 4-D [K,C/groups,R,S]", fn, DimStr(f).s);
    Conv2dShape v{};
    v.n = x.dims[0], v.c = x.dims[1], v.h = x.dims[2], v.w = x.dims[3];
    v.k = f.dims[0], v.r = f.dims[2], v.s = f.dims[3];
    v.g = at.groups, v.sh = at.stride_h, v.sw = at.stride_w, v.ph = at.pad_h, v.pw = at.pad_w;
    v.dh = at.dilation_h, v.dw = at.dilation_w;
    if (v.c < 1 || v.h < 1 || v.w < 1) a.fail("%s %s has an empty channel or spatial axis", xn, DimStr(x).s);
    if (v.k < 1 || v.r < 1 || v.s < 1) a.fail("%s %s has an empty axis", fn, DimStr(f).s);
    if (v.c % v.g || v.k % v.g)
        a.fail("%s %s has %lld channels and %s %s %lld filters: both must divide by groups = %lld", xn, DimStr(x).s,
               ll(v.c), fn, DimStr(f).s, ll(v.k), ll(v.g));
    v.cg = v.c / v.g, v.kg = v.k / v.g;
    if (f.dims[1] != v.cg)
        a.fail("%s is %s but %s %s with groups = %lld needs [%lld,%lld,R,S]", fn, DimStr(f).s, xn, DimStr(x).s, ll(v.g),
               ll(v.k), ll(v.cg));
    const int64_t span_h = v.dh * (v.r - 1) + 1, span_w = v.dw * (v.s - 1) + 1;  // dilated kernel
    if (v.h + 2 * v.ph < span_h || v.w + 2 * v.pw < span_w)
        a.fail("%s %s padded by %lldx%lld is smaller than the kernel [%lld, %lld] (dilated [%lld, %lld])", xn,
               DimStr(x).s, ll(v.ph), ll(v.pw), ll(v.r), ll(v.s), ll(span_h), ll(span_w));
    v.oh = (v.h + 2 * v.ph - span_h) / v.sh + 1;
    v.ow = (v.w + 2 * v.pw - span_w) / v.sw + 1;
    return v;
}

// X (or dX), W (or dW), Y (or dY) against the attributes; every mismatch names the shapes.
template <class Args, class T>
Conv2dShape conv2d_shape(const Args& a, const xylem_conv2d_attrs& at, const T& x, const char* xn, const T& f,
                         const char* fn, const T& y, const char* yn) {
    using ll = long long;
    const Conv2dShape v = conv2d_out(a, at, x, xn, f, fn);
    if (y.ndim != 4 || y.dims[0] != v.n || y.dims[1] != v.k || y.dims[2] != v.oh || y.dims[3] != v.ow)
        a.fail("%s is %s but %s %s and %s %s give [%lld,%lld,%lld,%lld]", yn, DimStr(y).s, xn, DimStr(x).s, fn,
               DimStr(f).s, ll(v.n), ll(v.k), ll(v.oh), ll(v.ow));
    return v;
}

// conv2d_bwd_filter's optional second output db (ABI 1.9): one value per filter of v, and no
// overlap with X, dY or dW. `overlap(p, q)` is the plugin's own test of two of its tensors.
template <class Args, class T, class Overlap>
void conv2d_db_check(const Args& a, const Conv2dShape& v, const T& db, const T& x, const T& dy, const T& dw,
                     const Overlap& overlap) {
    using ll = long long;
    if (static_cast<int64_t>(db.numel) != v.k) a.fail("db holds %lld elements for %lld filters", ll(db.numel), ll(v.k));
    if (overlap(db, x) || overlap(db, dy) || overlap(db, dw)) a.fail("db overlaps X, dY or dW");
}

// conv2d_fwd's optional fourth input R (ABI 1.10), the residual added before the activation: Y's
// shape, and no overlap with Y (each output is written once R's element has been read, but a
// plugin may write Y in blocks before it reads the rest of R).
template <class Args, class T, class Overlap>
void conv2d_residual_check(const Args& a, const T& r, const T& y, const Overlap& overlap) {
    bool same = r.ndim == y.ndim;
    for (uint32_t d = 0; same && d < y.ndim; ++d) same = r.dims[d] == y.dims[d];
    if (!same) a.fail("R is %s but Y is %s: the residual has the output's shape", DimStr(r).s, DimStr(y).s);
    if (overlap(r, y)) a.fail("Y overlaps R");
}

// MXNet #2011: a convolution whose kernel covers its unpadded input is a Linear layer, and a 1x1
// convolution with stride 1 and no padding is one GEMM per image. Every plugin asks this once and
// runs the first two cases through its GEMM (a plugin may still prefer its general path for a
// pointwise conv on tiny planes, where one GEMM per image costs more than it saves).
enum class ConvGemm {
    linear,     // Y [N, K] = X [N, C*H*W] * W [K, C*H*W]^T per group: the output is 1x1
    pointwise,  // Y[n] [K, H*W] = W [K, C] * X[n] [C, H*W] per image and group
    none,       // im2col or the plugin's own kernels
};

inline ConvGemm conv_gemm_case(const Conv2dShape& v) {
    // The kernel covers the input: dilation is irrelevant along an axis of kernel size 1 only.
    if (v.r == v.h && v.s == v.w && v.ph == 0 && v.pw == 0 && (v.dh == 1 || v.r == 1) && (v.dw == 1 || v.s == 1))
        return ConvGemm::linear;
    if (v.r == 1 && v.s == 1 && v.sh == 1 && v.sw == 1 && v.ph == 0 && v.pw == 0) return ConvGemm::pointwise;
    return ConvGemm::none;
}

// ---- pool2d --------------------------------------------------------------------------------
struct Pool2dShape {
    int64_t n, c, planes, h, w, oh, ow;  // planes = N*C
    int64_t kh, kw, sh, sw, ph, pw;
    bool max, include_pad;
};

// X against the attributes: the whole rule but the output's shape. Padding is at most half the
// kernel (PyTorch's rule, pad <= kernel/2), so every window holds an input element.
template <class Args, class T>
Pool2dShape pool2d_out(const Args& a, const xylem_pool2d_attrs& at, const T& x, const char* xn) {
    using ll = long long;
    if (at.mode != XYLEM_POOL_MAX && at.mode != XYLEM_POOL_AVG) a.fail("unknown pooling mode %d", at.mode);
    if (at.kernel_h < 1 || at.kernel_w < 1) a.fail("kernel %dx%d must be >= 1", at.kernel_h, at.kernel_w);
    if (at.stride_h < 1 || at.stride_w < 1) a.fail("stride %dx%d must be >= 1", at.stride_h, at.stride_w);
    if (at.pad_h < 0 || at.pad_w < 0) a.fail("padding %dx%d must be >= 0", at.pad_h, at.pad_w);
    if (2 * int64_t{at.pad_h} > at.kernel_h || 2 * int64_t{at.pad_w} > at.kernel_w)
        a.fail("padding %dx%d must be at most half the %dx%d kernel", at.pad_h, at.pad_w, at.kernel_h, at.kernel_w);
    if (x.ndim != 4) a.fail("%s %s must be 4-D [N,C,H,W]", xn, DimStr(x).s);
    Pool2dShape p{};
    p.n = x.dims[0], p.c = x.dims[1], p.planes = p.n * p.c, p.h = x.dims[2], p.w = x.dims[3];
    p.kh = at.kernel_h, p.kw = at.kernel_w, p.sh = at.stride_h, p.sw = at.stride_w, p.ph = at.pad_h, p.pw = at.pad_w;
    p.max = at.mode == XYLEM_POOL_MAX;
    p.include_pad = at.count_include_pad != 0;
    if (p.h + 2 * p.ph < p.kh || p.w + 2 * p.pw < p.kw)
        a.fail("%s %s padded by %lldx%lld is smaller than the window [%lld, %lld]", xn, DimStr(x).s, ll(p.ph),
               ll(p.pw), ll(p.kh), ll(p.kw));
    p.oh = (p.h + 2 * p.ph - p.kh) / p.sh + 1;
    p.ow = (p.w + 2 * p.pw - p.kw) / p.sw + 1;
    return p;
}

template <class Args, class T>
Pool2dShape pool2d_shape(const Args& a, const xylem_pool2d_attrs& at, const T& x, const char* xn, const T& y,
                         const char* yn) {
    using ll = long long;
    const Pool2dShape p = pool2d_out(a, at, x, xn);
    if (y.ndim != 4 || y.dims[0] != p.n || y.dims[1] != p.c || y.dims[2] != p.oh || y.dims[3] != p.ow)
        a.fail("%s is %s but %s %s pools to [%lld,%lld,%lld,%lld]", yn, DimStr(y).s, xn, DimStr(x).s, ll(p.n),
               ll(p.c), ll(p.oh), ll(p.ow));
    return p;
}

// ---- batch norm over axis 1 of [N,C] or [N,C,H,W,...] --------------------------------------
struct BatchnormShape {
    int64_t n, c, inner;
    int64_t count() const { return n * inner; }  // values per channel
};

template <class Args, class T>
BatchnormShape batchnorm_shape(const Args& a, const T& x, const char* xn) {
    if (x.ndim < 2) a.fail("%s must be [N,C] or [N,C,H,W,...], got %u dims", xn, x.ndim);
    BatchnormShape b{x.dims[0], x.dims[1], 1};
    for (uint32_t d = 2; d < x.ndim; ++d) b.inner *= x.dims[d];
    return b;
}

template <class Args, class T>
void check_channels(const Args& a, const BatchnormShape& b, const T& t, const char* name) {
    if (t.numel != b.c)
        a.fail("%s holds %lld elements for C=%lld channels", name, static_cast<long long>(t.numel),
               static_cast<long long>(b.c));
}

// The batch norm's activation (ABI 1.11): none, or ReLU on Y.
template <class Args>
void batchnorm_activation_check(const Args& a, const xylem_batchnorm_attrs& at) {
    if (at.activation != XYLEM_ACT_NONE && at.activation != XYLEM_ACT_RELU)
        a.fail("activation %d: a batch norm applies none (0) or relu (%d)", static_cast<int>(at.activation),
               static_cast<int>(XYLEM_ACT_RELU));
}

// For a plugin's op_accepts (ABI 1.11): whether a batchnorm_fwd/bwd descriptor asks for an activation
// the plugin's batch norm applies (none or ReLU). The core sends the ReLU only to a plugin that says
// yes, so a plugin that runs these ops through the kit and applies attrs.activation answers with this.
inline bool batchnorm_activation_accepted(const xylem_op_desc& d) {
    if (d.op != XYLEM_OP_BATCHNORM_FWD && d.op != XYLEM_OP_BATCHNORM_BWD) return true;
    if (!d.attrs || d.attrs_size < sizeof(xylem_batchnorm_attrs)) return true;  // op_run reports it
    xylem_batchnorm_attrs at;
    std::memcpy(&at, d.attrs, sizeof at);
    return at.activation == XYLEM_ACT_NONE || at.activation == XYLEM_ACT_RELU;
}

// BATCHNORM_FWD's operands, attributes and shape, all checked (overlaps are the caller's).
template <class Tensor>
struct BatchnormFwd {
    xylem_batchnorm_attrs attrs;
    Tensor x, gamma, beta, y, running_mean, running_var, saved_mean, saved_invstd;
    BatchnormShape shape;
};

template <class Args>
BatchnormFwd<typename Args::Tensor> batchnorm_fwd_operands(const Args& a) {
    BatchnormFwd<typename Args::Tensor> o{a.template attrs<xylem_batchnorm_attrs>(),
                                          a.in(0, "X"),
                                          a.in(1, "gamma"),
                                          a.in(2, "beta"),
                                          a.out(0, "Y"),
                                          a.out(1, "running_mean"),
                                          a.out(2, "running_var"),
                                          a.out(3, "saved_mean"),
                                          a.out(4, "saved_invstd"),
                                          {}};
    o.shape = batchnorm_shape(a, o.x, "X");
    a.same_numel(o.x, "X", o.y, "Y");
    check_channels(a, o.shape, o.gamma, "gamma");
    check_channels(a, o.shape, o.beta, "beta");
    check_channels(a, o.shape, o.running_mean, "running_mean");
    check_channels(a, o.shape, o.running_var, "running_var");
    check_channels(a, o.shape, o.saved_mean, "saved_mean");
    check_channels(a, o.shape, o.saved_invstd, "saved_invstd");
    if (!(o.attrs.eps >= 0.0f)) a.fail("eps = %g must be >= 0", o.attrs.eps);
    if (!(o.attrs.momentum >= 0.0f && o.attrs.momentum <= 1.0f))
        a.fail("momentum = %g must be in [0, 1]", o.attrs.momentum);
    if (o.attrs.training && o.shape.count() < 2)
        a.fail("training needs more than 1 value per channel, X [%lld,%lld,...] has %lld",
               static_cast<long long>(o.shape.n), static_cast<long long>(o.shape.c),
               static_cast<long long>(o.shape.count()));
    batchnorm_activation_check(a, o.attrs);
    return o;
}

// BATCHNORM_BWD's operands and shape, all checked (overlaps are the caller's). With the ReLU
// (`relu`), y is the forward's output, whose positives pass dY through; otherwise y is empty.
// The plugin's OpArgs takes 5 or 6 inputs.
template <class Tensor>
struct BatchnormBwd {
    Tensor dy, x, gamma, saved_mean, saved_invstd, dx, dgamma, dbeta, y;
    BatchnormShape shape;
    bool relu = false;
};

template <class Args>
BatchnormBwd<typename Args::Tensor> batchnorm_bwd_operands(const Args& a) {
    // eps and momentum are baked into saved_invstd; the activation says whether Y comes
    const xylem_batchnorm_attrs at = a.template attrs<xylem_batchnorm_attrs>();
    batchnorm_activation_check(a, at);
    BatchnormBwd<typename Args::Tensor> o{a.in(0, "dY"),          a.in(1, "X"),  a.in(2, "gamma"),
                                          a.in(3, "saved_mean"),  a.in(4, "saved_invstd"),
                                          a.out(0, "dX"),         a.out(1, "dgamma"),
                                          a.out(2, "dbeta"),      {}, {}};
    o.relu = at.activation == XYLEM_ACT_RELU;
    if (a.n_inputs() != (o.relu ? 6u : 5u))
        a.fail("%u inputs: the gradient takes 5 (dY, X, gamma, saved_mean, saved_invstd), and Y after them "
               "with the relu only", static_cast<unsigned>(a.n_inputs()));
    o.shape = batchnorm_shape(a, o.x, "X");
    a.same_numel(o.x, "X", o.dy, "dY");
    a.same_numel(o.x, "X", o.dx, "dX");
    if (o.relu) {
        o.y = a.in(5, "Y");
        a.same_numel(o.x, "X", o.y, "Y");
    }
    check_channels(a, o.shape, o.gamma, "gamma");
    check_channels(a, o.shape, o.saved_mean, "saved_mean");
    check_channels(a, o.shape, o.saved_invstd, "saved_invstd");
    check_channels(a, o.shape, o.dgamma, "dgamma");
    check_channels(a, o.shape, o.dbeta, "dbeta");
    return o;
}

// ---- rmsprop_update --------------------------------------------------------------------------
// Outputs (param, square_avg[, momentum_buffer if momentum > 0][, grad_avg if centered]), input
// grad, every one of param's element count. The optional buffers the attributes do not ask for
// are bound to square_avg (never touched), so kernels can take them unconditionally.
template <class Tensor>
struct Rmsprop {
    xylem_rmsprop_attrs attrs;
    bool has_buffer, centered;
    Tensor param, square_avg, grad, momentum_buffer, grad_avg;
};

template <class Args>
Rmsprop<typename Args::Tensor> rmsprop_operands(const Args& a, uint32_t n_outputs) {
    const auto attrs = a.template attrs<xylem_rmsprop_attrs>();
    const bool has_buffer = attrs.momentum > 0.0f, centered = attrs.centered != 0;
    const uint32_t want = 2u + has_buffer + centered;
    if (n_outputs != want)
        a.fail("momentum %g and centered %d need %u outputs, got %u", attrs.momentum, attrs.centered, want, n_outputs);
    Rmsprop<typename Args::Tensor> o{attrs, has_buffer, centered, a.out(0, "param"), a.out(1, "square_avg"),
                                     a.in(0, "grad"), a.out(1, "square_avg"), a.out(1, "square_avg")};
    a.same_numel(o.param, "param", o.grad, "grad");
    a.same_numel(o.param, "param", o.square_avg, "square_avg");
    if (has_buffer) {
        o.momentum_buffer = a.out(2, "momentum_buffer");
        a.same_numel(o.param, "param", o.momentum_buffer, "momentum_buffer");
    }
    if (centered) {
        o.grad_avg = a.out(2 + has_buffer, "grad_avg");
        a.same_numel(o.param, "param", o.grad_avg, "grad_avg");
    }
    return o;
}

// ---- gather_rows ---------------------------------------------------------------------------
// src [rows, ...] (f32 or i32), idx i32 [n], out [n, ...] of src's dtype. Index values are the
// plugin's to check.
template <class Tensor>
struct GatherRows {
    Tensor src, idx, out;
    xylem_dtype dtype;
    int64_t rows, row_len;  // src's rows and elements per row (from the trailing dims)
};

template <class Args>
GatherRows<typename Args::Tensor> gather_rows_operands(const Args& a) {
    using ll = long long;
    const xylem_op_desc& desc = a.desc();
    if (desc.inputs[0].dtype != desc.outputs[0].dtype) a.fail("src and out must have the same dtype");
    const auto dtype = static_cast<xylem_dtype>(desc.inputs[0].dtype);
    if (dtype != XYLEM_F32 && dtype != XYLEM_I32) a.fail("src must be f32 or i32");
    GatherRows<typename Args::Tensor> g{a.in(0, "src", dtype), a.in(1, "idx", XYLEM_I32), a.out(0, "out", dtype),
                                        dtype, 0, 1};
    if (g.src.ndim < 1 || g.out.ndim != g.src.ndim)
        a.fail("src and out need the same rank >= 1, got %u and %u", g.src.ndim, g.out.ndim);
    if (g.idx.ndim != 1 || g.out.dims[0] != g.idx.numel)
        a.fail("out has %lld rows for %lld indices", ll(g.out.dims[0]), ll(g.idx.numel));
    for (uint32_t d = 1; d < g.src.ndim; ++d)
        if (g.out.dims[d] != g.src.dims[d])
            a.fail("out's dim %u is %lld but src's is %lld", d, ll(g.out.dims[d]), ll(g.src.dims[d]));
    g.rows = g.src.dims[0];
    for (uint32_t d = 1; d < g.src.ndim; ++d) g.row_len *= g.src.dims[d];
    return g;
}

// ---- gemm and linear_fwd -------------------------------------------------------------------
struct GemmShape {
    int64_t m, n, k;  // C [m,n] = op(A) [m,k] * op(B) [k,n]
    bool trans_a, trans_b;
};

template <class Args, class T>
GemmShape gemm_shape(const Args& a, const xylem_gemm_attrs& at, const T& ta, const T& tb, const T& tc) {
    using ll = long long;
    if (ta.ndim != 2 || tb.ndim != 2 || tc.ndim != 2)
        a.fail("A %s, B %s and C %s must be 2-D", DimStr(ta).s, DimStr(tb).s, DimStr(tc).s);
    GemmShape g{};
    g.trans_a = at.trans_a != 0, g.trans_b = at.trans_b != 0;
    g.m = ta.dims[g.trans_a ? 1 : 0], g.k = ta.dims[g.trans_a ? 0 : 1];
    const int64_t kb = tb.dims[g.trans_b ? 1 : 0];
    g.n = tb.dims[g.trans_b ? 0 : 1];
    if (g.k != kb || tc.dims[0] != g.m || tc.dims[1] != g.n)
        a.fail("A %s, B %s and C %s do not fit C = op(A)*op(B) (trans_a = %d, trans_b = %d): op(A)*op(B) is "
               "[%lld, %lld] x [%lld, %lld]",
               DimStr(ta).s, DimStr(tb).s, DimStr(tc).s, int(g.trans_a), int(g.trans_b), ll(g.m), ll(g.k), ll(kb),
               ll(g.n));
    return g;
}

struct LinearShape {
    int64_t rows, out, in;  // Y [rows, out] = X [rows, in] * W^T, W [out, in]
};

// X [..., in], W [out, in], Y [..., out] with X's rows, and b [out] when b is not null.
template <class Args, class T>
LinearShape linear_shape(const Args& a, const T& x, const T& w, const T& y,
                         const std::common_type_t<T>* b = nullptr) {  // not deduced: nullptr works
    using ll = long long;
    if (w.ndim != 2) a.fail("W %s must be 2-D [out, in]", DimStr(w).s);
    if (x.ndim < 1 || y.ndim < 1) a.fail("X and Y need at least 1 dim");
    LinearShape s{1, w.dims[0], w.dims[1]};
    for (uint32_t d = 0; d + 1 < x.ndim; ++d) s.rows *= x.dims[d];
    int64_t y_rows = 1;
    for (uint32_t d = 0; d + 1 < y.ndim; ++d) y_rows *= y.dims[d];
    const int64_t x_cols = x.dims[x.ndim - 1], y_cols = y.dims[y.ndim - 1];
    if (x_cols != s.in || y_cols != s.out || y_rows != s.rows)
        a.fail("X %s, W %s and Y %s do not fit Y [..., out] = X [..., in] * W^T (W [out, in]; Y holds X's rows)",
               DimStr(x).s, DimStr(w).s, DimStr(y).s);
    if (b && b->numel != s.out)
        a.fail("b holds %lld elements for W %s's %lld outputs", static_cast<long long>(b->numel), DimStr(w).s, ll(s.out));
    return s;
}

// ---- adam_update and adamw_update --------------------------------------------------------------
// The bias corrections 1 - beta^t, which the op divides by.
template <class Args, class Attrs>
void check_bias_corrections(const Args& a, const Attrs& at) {
    if (!(at.bias_correction1 > 0.0f && at.bias_correction2 > 0.0f))
        a.fail("bias corrections must be > 0, got %g and %g", at.bias_correction1, at.bias_correction2);
}

// Outputs (param, m, v), input grad, all of param's element count; and the step as PyTorch
// evaluates it: p -= step * m / (sqrt(v) * inv_sqrt_bc2 + eps), step = lr / bias_correction1.
template <class Tensor, class Attrs>
struct AdamOperands {
    Attrs attrs;
    Tensor param, m, v, grad;
    float step, inv_sqrt_bc2;
};

template <class Attrs, class Args>
AdamOperands<typename Args::Tensor, Attrs> adam_operands(const Args& a) {
    const Attrs at = a.template attrs<Attrs>();
    check_bias_corrections(a, at);
    AdamOperands<typename Args::Tensor, Attrs> o{at,           a.out(0, "param"), a.out(1, "m"),
                                                 a.out(2, "v"), a.in(0, "grad"),  at.lr / at.bias_correction1,
                                                 1.0f / std::sqrt(at.bias_correction2)};
    a.same_numel(o.param, "param", o.grad, "grad");
    a.same_numel(o.param, "param", o.m, "m");
    a.same_numel(o.param, "param", o.v, "v");
    return o;
}

// ---- add -------------------------------------------------------------------------------------
// a and out [..., cols] seen as [rows, cols]; b broadcast as ops.h's ADD says.
enum class Broadcast : int32_t { elementwise = 0, row = 1, column = 2 };

struct AddShape {
    int64_t rows, cols;
    Broadcast b;
};

template <class Args, class T>
AddShape add_shape(const Args& a, const T& ta, const T& tb, const T& out) {
    if (ta.ndim < 1) a.fail("a must have at least 1 dim");
    if (out.ndim != ta.ndim) a.fail("out %s must have a's shape %s", DimStr(out).s, DimStr(ta).s);
    for (uint32_t d = 0; d < ta.ndim; ++d)
        if (out.dims[d] != ta.dims[d]) a.fail("out %s must have a's shape %s", DimStr(out).s, DimStr(ta).s);
    AddShape s{1, ta.dims[ta.ndim - 1], Broadcast::elementwise};
    for (uint32_t d = 0; d + 1 < ta.ndim; ++d) s.rows *= ta.dims[d];
    bool same = tb.ndim == ta.ndim, column = tb.ndim == ta.ndim && tb.dims[tb.ndim - 1] == 1;
    for (uint32_t d = 0; d < tb.ndim && d < ta.ndim; ++d) {
        same = same && tb.dims[d] == ta.dims[d];
        column = column && (d + 1 == tb.ndim || tb.dims[d] == ta.dims[d]);
    }
    if (same) return s;
    if (tb.numel == s.cols && tb.ndim >= 1 && tb.dims[tb.ndim - 1] == s.cols) return {s.rows, s.cols, Broadcast::row};
    if (column) return {s.rows, s.cols, Broadcast::column};
    a.fail("b %s broadcasts over a %s neither as a's shape, a row [%lld] nor a column [...,1]", DimStr(tb).s,
           DimStr(ta).s, static_cast<long long>(s.cols));
}

// ---- reduce ----------------------------------------------------------------------------------
// x viewed as [outer, n, inner] around attrs.axis (axis -1: every element, outer = inner = 1);
// out holds outer*inner elements, in any shape. Output t = o*inner + j reduces
// x[(o*n + k)*inner + j] over k < n.
struct ReduceShape {
    int64_t outer, n, inner;
    int64_t outputs() const { return outer * inner; }
};

template <class Args, class T>
ReduceShape reduce_shape(const Args& a, const xylem_reduce_attrs& at, const T& x, const T& out) {
    using ll = long long;
    if (at.mode != XYLEM_REDUCE_SUM && at.mode != XYLEM_REDUCE_MEAN && at.mode != XYLEM_REDUCE_MAX)
        a.fail("unknown reduce mode %d (sum 0, mean 1, max 2)", at.mode);
    ReduceShape r{1, static_cast<int64_t>(x.numel), 1};
    if (at.axis != -1) {
        if (at.axis < 0 || static_cast<uint32_t>(at.axis) >= x.ndim)
            a.fail("axis %d is out of range for x %s of rank %u (-1 reduces every element)", at.axis, DimStr(x).s,
                   x.ndim);
        r.n = x.dims[at.axis];
        for (int32_t d = 0; d < at.axis; ++d) r.outer *= x.dims[d];
        for (uint32_t d = static_cast<uint32_t>(at.axis) + 1; d < x.ndim; ++d) r.inner *= x.dims[d];
    }
    if (static_cast<int64_t>(out.numel) != r.outputs())
        a.fail("out %s holds %lld elements but x %s reduced over axis %d leaves %lld", DimStr(out).s,
               ll(out.numel), DimStr(x).s, at.axis, ll(r.outputs()));
    return r;
}

// ---- bias_grad -------------------------------------------------------------------------------
// dy [N, C, ...] (rank >= 2) and db [C]; inner is the product of the dims after C.
struct BiasGradShape {
    int64_t n, c, inner;
};

template <class Args, class T>
BiasGradShape bias_grad_shape(const Args& a, const T& dy, const T& db) {
    using ll = long long;
    if (dy.ndim < 2) a.fail("dy must be [N,C,...], got %u dims", dy.ndim);
    BiasGradShape s{dy.dims[0], dy.dims[1], 1};
    for (uint32_t d = 2; d < dy.ndim; ++d) s.inner *= dy.dims[d];
    if (db.numel != s.c) a.fail("db holds %lld elements for %lld channels", ll(db.numel), ll(s.c));
    return s;
}

// ---- scatter_add_rows ------------------------------------------------------------------------
// src [N, ...], idx [N], out [R, ...] with src's trailing dims: out[idx[i], ...] += src[i, ...].
// Index values are the plugin's to check.
struct ScatterRowsShape {
    int64_t n, rows, row_len;  // source rows, out's rows, elements per row (from the trailing dims)
};

template <class Args, class T>
ScatterRowsShape scatter_add_rows_shape(const Args& a, const T& src, const T& idx, const T& out) {
    using ll = long long;
    if (src.ndim < 1) a.fail("src %s must have rank >= 1 ([N, ...])", DimStr(src).s);
    if (idx.ndim != 1 || idx.dims[0] != src.dims[0])
        a.fail("idx %s must be [%lld]: one index per row of src %s", DimStr(idx).s, ll(src.dims[0]), DimStr(src).s);
    bool fits = out.ndim == src.ndim;
    for (uint32_t d = 1; fits && d < src.ndim; ++d) fits = out.dims[d] == src.dims[d];
    if (!fits) a.fail("out %s must be [R, ...] with the trailing dims of src %s", DimStr(out).s, DimStr(src).s);
    ScatterRowsShape s{src.dims[0], out.dims[0], 1};
    for (uint32_t d = 1; d < src.ndim; ++d) s.row_len *= src.dims[d];
    return s;
}

}  // namespace xylem::plugin_kit
