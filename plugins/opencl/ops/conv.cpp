// CONV2D_FWD / BWD_DATA / BWD_FILTER. A kernel that covers its input is a Linear layer (the kit's
// conv_gemm_case, MXNet #2011): straight CLBlast GEMMs on the NCHW buffers, no scratch. The rest:
// im2col over a chunk of images (kernels/conv.cl), one CLBlast GEMM per group for the whole chunk,
// and a pass that moves the result to NCHW with the bias and activation fused. Scratch (columns +
// the [K, nb*P] matrix) comes from the stream. A pointwise (1x1) conv stays on that path: its
// im2col is one copy, and it keeps one GEMM per chunk where the direct route needs one per image.
#include <algorithm>

#include "opencl.h"

namespace xylem::opencl {

namespace {

using ll = long long;
constexpr Family kFam = Family::Conv;
// Scratch budget per chunk; a chunk holds at least one image.
constexpr int64_t kChunkFloats = 16 * 1024 * 1024;

using plugin_kit::DimStr;

struct Conv : plugin_kit::Conv2dShape {
    int64_t crs() const { return c * r * s; }
    int64_t cgrs() const { return cg * r * s; }
    cl_int16 packed() const {
        cl_int16 v{};
        const int64_t f[15] = {n, c, h, w, k, r, s, oh, ow, sh, sw, ph, pw, dh, dw};
        for (int i = 0; i < 15; ++i) v.s[i] = static_cast<cl_int>(f[i]);
        return v;
    }
    // Images per chunk so that columns and the [K, nb*P] matrix fit the budget.
    int32_t chunk() const {
        const int64_t per_image = (crs() + k) * p();
        return static_cast<int32_t>(std::clamp<int64_t>(kChunkFloats / std::max<int64_t>(per_image, 1), 1, n));
    }
};

// The kit's shape rules, then this plugin's scratch limit for one image.
Conv conv_shape(const OpArgs& a, const xylem_conv2d_attrs& at, const Tensor& x, const char* xn, const Tensor& f,
                const char* fn, const Tensor& y, const char* yn) {
    const Conv v{plugin_kit::conv2d_shape(a, at, x, xn, f, fn, y, yn)};
    if ((v.crs() + v.k) * v.p() > kChunkFloats * 8)
        a.fail("one image of %s %s needs %lld scratch floats, more than this plugin's %lld", xn, DimStr(x).s,
               ll((v.crs() + v.k) * v.p()), ll(kChunkFloats * 8));
    return v;
}

// Scratch for one chunk: columns [C*R*S, nb*P] at offset 0, then the [K, nb*P] matrix.
struct Chunks {
    cl_mem mem;
    int32_t nb, cols_off = 0, kp_off;
};

Chunks scratch_for(xylem_stream_s& s, const Conv& v) {
    Chunks c{nullptr, v.chunk(), 0, 0};
    const int64_t cols = v.crs() * c.nb * v.p(), kp = v.k * c.nb * v.p();
    c.kp_off = static_cast<int32_t>((cols + 63) / 64 * 64);
    c.mem = stream_scratch(s, static_cast<size_t>(c.kp_off + kp) * sizeof(float));
    return c;
}

void im2col(xylem_stream_s& s, const Conv& v, const Tensor& x, int32_t n0, int32_t nb, const Chunks& ch) {
    Kernel(s, kFam, "im2col").arg(v.packed()).arg(x.mem).arg(x.off).arg(n0).arg(nb).arg(ch.mem).arg(ch.cols_off)
        .run(v.crs() * nb * v.p());
}

// ---- the Linear case: X [N, C*H*W] and Y [N, K] as they lie in NCHW, one GEMM per group --------
bool is_linear(const Conv& v) { return plugin_kit::conv_gemm_case(v) == plugin_kit::ConvGemm::linear; }

int32_t i32(int64_t v) { return static_cast<int32_t>(v); }  // bounded by the operands' int32 counts

// Y[:, group] = X[:, group] * W_g^T, ld C*H*W and K.
void fwd_linear(xylem_stream_s& s, const Conv& v, const Tensor& x, const Tensor& w, Tensor* b, int act,
                const Tensor* r, const Tensor& y) {
    const int64_t in = v.cg * v.hw();
    for (int64_t g = 0; g < v.g; ++g)
        gemm(s, false, true, i32(v.n), i32(v.kg), i32(in), 1.0f, x.mem, x.off + i32(g * in), i32(v.c * v.hw()), w.mem,
             w.off + i32(g * v.kg * in), i32(in), 0.0f, y.mem, y.off + i32(g * v.kg), i32(v.k), "conv2d_fwd");
    if (!r) return bias_activate(s, act, b, y.mem, y.off, i32(v.n), i32(v.k));
    // (y + b) + r, then the activation: Y and R are [N, K] here.
    bias_activate(s, XYLEM_ACT_NONE, b, y.mem, y.off, i32(v.n), i32(v.k));
    Kernel(s, kFam, "residual_act").arg(static_cast<cl_int>(act)).arg(r->mem).arg(r->off).arg(y.mem).arg(y.off)
        .arg(y.numel).run(y.numel);
}

// dX[:, group] = dY[:, group] * W_g.
void bwd_data_linear(xylem_stream_s& s, const Conv& v, const Tensor& dy, const Tensor& w, const Tensor& dx) {
    const int64_t in = v.cg * v.hw();
    for (int64_t g = 0; g < v.g; ++g)
        gemm(s, false, false, i32(v.n), i32(in), i32(v.kg), 1.0f, dy.mem, dy.off + i32(g * v.kg), i32(v.k), w.mem,
             w.off + i32(g * v.kg * in), i32(in), 0.0f, dx.mem, dx.off + i32(g * in), i32(v.c * v.hw()),
             "conv2d_bwd_data");
}

// dW_g = beta*dW_g + dY[:, group]^T * X[:, group].
void bwd_filter_linear(xylem_stream_s& s, const Conv& v, const Tensor& x, const Tensor& dy, float beta,
                       const Tensor& dw) {
    const int64_t in = v.cg * v.hw();
    for (int64_t g = 0; g < v.g; ++g)
        gemm(s, true, false, i32(v.kg), i32(in), i32(v.n), 1.0f, dy.mem, dy.off + i32(g * v.kg), i32(v.k), x.mem,
             x.off + i32(g * in), i32(v.c * v.hw()), beta, dw.mem, dw.off + i32(g * v.kg * in), i32(in),
             "conv2d_bwd_filter");
}

}  // namespace

void op_conv2d_fwd(const xylem_op_desc& desc, xylem_stream_s& s) {
    OpArgs a(desc, 2, 4, 1);
    const auto at = a.attrs<xylem_conv2d_attrs>();
    const cl_int act = a.check_activation(at.activation);
    const Tensor x = a.in(0, "X"), w = a.in(1, "W"), y = a.out(0, "Y");
    const Conv v = conv_shape(a, at, x, "X", w, "W", y, "Y");
    Tensor b{};
    const cl_int has_bias = a.n_inputs() >= 3, has_res = a.n_inputs() == 4;
    if (has_bias) {
        b = a.in(2, "b");
        if (b.numel != v.k) a.fail("b holds %d elements for K=%lld filters", b.numel, ll(v.k));
        if (overlap(y, b)) a.fail("Y overlaps b");
    }
    Tensor r{};
    if (has_res) {  // ABI 1.10: the residual
        r = a.in(3, "R");
        plugin_kit::conv2d_residual_check(a, r, y, [](const Tensor& p, const Tensor& q) { return overlap(p, q); });
    }
    if (overlap(y, x) || overlap(y, w)) a.fail("Y overlaps X or W");
    if (is_linear(v)) return fwd_linear(s, v, x, w, has_bias ? &b : nullptr, act, has_res ? &r : nullptr, y);
    const Chunks ch = scratch_for(s, v);
    const int32_t P = static_cast<int32_t>(v.p()), K = static_cast<int32_t>(v.k);
    for (int32_t n0 = 0; n0 < v.n; n0 += ch.nb) {
        const int32_t nb = static_cast<int32_t>(std::min<int64_t>(ch.nb, v.n - n0)), cols = nb * P;
        im2col(s, v, x, n0, nb, ch);
        for (int64_t g = 0; g < v.g; ++g)  // Yt_g[Kg, cols] = W_g[Kg, CgRS] * cols_g[CgRS, cols]
            gemm(s, false, false, static_cast<int32_t>(v.kg), cols, static_cast<int32_t>(v.cgrs()), 1.0f, w.mem,
                 w.off + static_cast<int32_t>(g * v.kg * v.cgrs()), static_cast<int32_t>(v.cgrs()), ch.mem,
                 ch.cols_off + static_cast<int32_t>(g * v.cgrs() * cols), cols, 0.0f, ch.mem,
                 ch.kp_off + static_cast<int32_t>(g * v.kg * cols), cols, "conv2d_fwd");
        Kernel(s, kFam, "kp_to_nchw_bias_act").arg(K).arg(P).arg(nb).arg(n0).arg(ch.mem).arg(ch.kp_off).arg(act)
            .arg(has_bias).arg(has_bias ? b.mem : y.mem).arg(has_bias ? b.off : 0).arg(has_res)
            .arg(has_res ? r.mem : y.mem).arg(has_res ? r.off : 0).arg(y.mem).arg(y.off)
            .run(static_cast<int64_t>(nb) * K * P);
    }
}

void op_conv2d_bwd_data(const xylem_op_desc& desc, xylem_stream_s& s) {
    OpArgs a(desc, 2, 2, 1);
    const auto at = a.attrs<xylem_conv2d_attrs>();
    const Tensor dy = a.in(0, "dY"), w = a.in(1, "W"), dx = a.out(0, "dX");
    const Conv v = conv_shape(a, at, dx, "dX", w, "W", dy, "dY");
    if (overlap(dx, dy) || overlap(dx, w)) a.fail("dX overlaps dY or W");
    if (is_linear(v)) return bwd_data_linear(s, v, dy, w, dx);
    const Chunks ch = scratch_for(s, v);
    const int32_t P = static_cast<int32_t>(v.p()), K = static_cast<int32_t>(v.k);
    for (int32_t n0 = 0; n0 < v.n; n0 += ch.nb) {
        const int32_t nb = static_cast<int32_t>(std::min<int64_t>(ch.nb, v.n - n0)), cols = nb * P;
        Kernel(s, kFam, "nchw_to_kp").arg(K).arg(P).arg(nb).arg(n0).arg(dy.mem).arg(dy.off).arg(ch.mem).arg(ch.kp_off)
            .run(static_cast<int64_t>(nb) * K * P);
        for (int64_t g = 0; g < v.g; ++g)  // dcols_g[CgRS, cols] = W_g^T[CgRS, Kg] * dYt_g[Kg, cols]
            gemm(s, true, false, static_cast<int32_t>(v.cgrs()), cols, static_cast<int32_t>(v.kg), 1.0f, w.mem,
                 w.off + static_cast<int32_t>(g * v.kg * v.cgrs()), static_cast<int32_t>(v.cgrs()), ch.mem,
                 ch.kp_off + static_cast<int32_t>(g * v.kg * cols), cols, 0.0f, ch.mem,
                 ch.cols_off + static_cast<int32_t>(g * v.cgrs() * cols), cols, "conv2d_bwd_data");
        Kernel(s, kFam, "col2im").arg(v.packed()).arg(ch.mem).arg(ch.cols_off).arg(n0).arg(nb).arg(dx.mem).arg(dx.off)
            .run(static_cast<int64_t>(nb) * v.c * v.h * v.w);
    }
}

// With the optional db (ABI 1.9): the bias gradient by bias_grad's kernels, in the same op.
void op_conv2d_bwd_filter(const xylem_op_desc& desc, xylem_stream_s& s) {
    OpArgs a(desc, 2, 2, desc.n_outputs == 2 ? 2 : 1);
    const auto at = a.attrs<xylem_conv2d_attrs>();
    const Tensor x = a.in(0, "X"), dy = a.in(1, "dY"), dw = a.out(0, "dW");
    const Conv v = conv_shape(a, at, x, "X", dw, "dW", dy, "dY");
    if (overlap(dw, x) || overlap(dw, dy)) a.fail("dW overlaps X or dY");
    if (desc.n_outputs == 2) {
        const Tensor db = a.out(1, "db");
        plugin_kit::conv2d_db_check(a, v, db, x, dy, dw, [](const Tensor& p, const Tensor& q) { return overlap(p, q); });
        bias_grad(s, dy, static_cast<int32_t>(v.n), static_cast<int32_t>(v.k), static_cast<int32_t>(v.oh * v.ow),
                  at.beta, db);
    }
    if (is_linear(v)) return bwd_filter_linear(s, v, x, dy, at.beta, dw);
    const Chunks ch = scratch_for(s, v);
    const int32_t P = static_cast<int32_t>(v.p()), K = static_cast<int32_t>(v.k);
    for (int32_t n0 = 0; n0 < v.n; n0 += ch.nb) {
        const int32_t nb = static_cast<int32_t>(std::min<int64_t>(ch.nb, v.n - n0)), cols = nb * P;
        im2col(s, v, x, n0, nb, ch);
        Kernel(s, kFam, "nchw_to_kp").arg(K).arg(P).arg(nb).arg(n0).arg(dy.mem).arg(dy.off).arg(ch.mem).arg(ch.kp_off)
            .run(static_cast<int64_t>(nb) * K * P);
        const float beta = n0 == 0 ? at.beta : 1.0f;  // later chunks accumulate
        for (int64_t g = 0; g < v.g; ++g)  // dW_g[Kg, CgRS] = beta*dW_g + dYt_g[Kg, cols] * cols_g^T
            gemm(s, false, true, static_cast<int32_t>(v.kg), static_cast<int32_t>(v.cgrs()), cols, 1.0f, ch.mem,
                 ch.kp_off + static_cast<int32_t>(g * v.kg * cols), cols, ch.mem,
                 ch.cols_off + static_cast<int32_t>(g * v.cgrs() * cols), cols, beta, dw.mem,
                 dw.off + static_cast<int32_t>(g * v.kg * v.cgrs()), static_cast<int32_t>(v.cgrs()),
                 "conv2d_bwd_filter");
    }
}

}  // namespace xylem::opencl
