// LAYER_NORM_FWD/BWD, ATTENTION_FWD/BWD, MASKED_SOFTMAX, PERMUTE (kernels/transformer.cl) and
// GEMM_BATCHED (ops/gemm.cpp's batched products). Shapes and attributes are the plugin kit's rules
// (plugin_kit/shapes_transformer.h), checked before anything is enqueued.
#include <algorithm>
#include <cmath>
#include <initializer_list>
#include <utility>

#include "opencl.h"
#include "xylem/plugin_kit/shapes_transformer.h"

namespace xylem::opencl {

namespace {

constexpr Family kFam = Family::Transformer;

// Operands were checked to fit an int (Plugin::index32), so every extent and product of them does.
int32_t i32(int64_t v) { return static_cast<int32_t>(v); }

using Named = std::pair<const Tensor*, const char*>;

// `out` may share no element with any of `others` (skipping absent ones: mem == nullptr).
void disjoint(const OpArgs& a, const Tensor& out, const char* out_name, std::initializer_list<Named> others) {
    for (const Named& o : others)
        if (o.first->mem && overlap(out, *o.first)) a.fail("%s overlaps %s", out_name, o.second);
}

// A power-of-two group for a row reduction over d elements (the kernels' __local arrays hold 256),
// within the kernel's limit on this device.
size_t row_group(xylem_stream_s& s, const Kernel& k, int64_t d) {
    size_t g = reduce_group(s);
    while (g > k.group_limit()) g /= 2;
    while (g > 1 && static_cast<int64_t>(g / 2) >= d) g /= 2;
    return g;
}

// ---- attention launches --------------------------------------------------------------------

// Rows per work-group in the attention kernels (one work-item per row); each group stages tiles
// of 16 rows x DC floats, twice, in local memory (8 KiB at DC = 64), so any device's limit fits.
// 32 and 64 ran alike on PoCL (B=12, H=4, T=64); 32 gives short sequences twice the groups and a
// causal block fewer tiles to stage.
constexpr size_t kAttentionGroup = 32;

struct Attention {
    plugin_kit::AttentionShape sh;
    xylem_attention_attrs at;
    const Tensor* mask;
    int32_t dc;  // head-dim chunk: the kernel variant (_32 or _64)
};

// The kernels' shared tail of arguments (transformer.cl's ATT_SHAPE_ARGS).
Kernel& shape_args(Kernel& k, const Attention& t, const Tensor& fallback) {
    const plugin_kit::AttentionShape& sh = t.sh;
    const cl_ulong seed = t.at.seed;
    const cl_int causal = t.at.causal, has_mask = t.mask ? 1 : 0;
    const Tensor& m = t.mask ? *t.mask : fallback;  // any valid buffer when there is no mask
    return k.arg(i32(sh.h)).arg(i32(sh.tq)).arg(i32(sh.tk)).arg(i32(sh.l)).arg(i32(sh.dk)).arg(i32(sh.dv))
        .arg(t.at.scale).arg(causal).arg(t.at.dropout_p).arg(seed).arg(m.mem).arg(t.mask ? m.off : 0).arg(has_mask)
        .arg(i32(sh.mask.sb)).arg(i32(sh.mask.sh)).arg(i32(sh.mask.sq));
}

// Rows per group for this kernel on this device.
size_t attention_group(const Kernel& k) { return std::min(kAttentionGroup, k.group_limit()); }

int32_t blocks(int64_t rows, size_t group) { return i32((rows + static_cast<int64_t>(group) - 1) / static_cast<int64_t>(group)); }

Attention attention_setup(const OpArgs& a, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor* mask) {
    Attention t{};
    t.at = a.attrs<xylem_attention_attrs>();
    t.sh = plugin_kit::attention_shape(a, t.at, q, k, v, mask);
    t.mask = mask;
    // The smaller variant when both head dims fit it: no padded half of every tile.
    t.dc = std::max(t.sh.dk, t.sh.dv) <= 32 ? 32 : 64;
    return t;
}

}  // namespace

// ---- layer norm ----------------------------------------------------------------------------

void op_layer_norm_fwd(const xylem_op_desc& desc, xylem_stream_s& s) {
    OpArgs a(desc, 2, 3, 3);
    const auto at = a.attrs<xylem_layer_norm_attrs>();
    const Tensor x = a.in(0, "X"), gamma = a.in(1, "gamma");
    const bool has_beta = a.n_inputs() == 3;
    const Tensor beta = has_beta ? a.in(2, "beta") : Tensor{};
    const Tensor y = a.out(0, "Y"), mean = a.out(1, "mean"), rstd = a.out(2, "rstd");
    const plugin_kit::LayerNormShape sh =
        plugin_kit::layer_norm_shape(a, at, x, gamma, has_beta ? &beta : nullptr, mean, rstd);
    plugin_kit::same_shape(a, y, "Y", x, "X");
    if (overlap(y, x) && y.off != x.off) a.fail("Y partly overlaps X (in place is fine)");
    disjoint(a, y, "Y", {{&gamma, "gamma"}, {&beta, "beta"}, {&mean, "mean"}, {&rstd, "rstd"}});
    for (const Named& o : {Named{&mean, "mean"}, Named{&rstd, "rstd"}})
        disjoint(a, *o.first, o.second, {{&x, "X"}, {&gamma, "gamma"}, {&beta, "beta"}});
    disjoint(a, mean, "mean", {{&rstd, "rstd"}});
    if (sh.rows == 0) return;
    const cl_int has_b = has_beta ? 1 : 0;
    if (s.dev_->cpu_kernels) {
        Kernel(s, kFam, "ln_fwd_rows").arg(x.mem).arg(x.off).arg(i32(sh.rows)).arg(i32(sh.d)).arg(at.eps)
            .arg(gamma.mem).arg(gamma.off).arg(has_b).arg(has_beta ? beta.mem : gamma.mem).arg(has_beta ? beta.off : 0)
            .arg(y.mem).arg(y.off).arg(mean.mem).arg(mean.off).arg(rstd.mem).arg(rstd.off).run(sh.rows);
        return;
    }
    Kernel k(s, kFam, "ln_fwd");
    const size_t group = row_group(s, k, sh.d);
    k.arg(x.mem).arg(x.off).arg(i32(sh.d)).arg(at.eps).arg(gamma.mem).arg(gamma.off).arg(has_b)
        .arg(has_beta ? beta.mem : gamma.mem).arg(has_beta ? beta.off : 0).arg(y.mem).arg(y.off).arg(mean.mem)
        .arg(mean.off).arg(rstd.mem).arg(rstd.off).run_groups(sh.rows, group);
}

void op_layer_norm_bwd(const xylem_op_desc& desc, xylem_stream_s& s) {
    OpArgs a(desc, 5, 5, desc.n_outputs == 3 ? 3 : 2);
    const auto at = a.attrs<xylem_layer_norm_attrs>();
    const Tensor dy = a.in(0, "dY"), x = a.in(1, "X"), gamma = a.in(2, "gamma"), mean = a.in(3, "mean"),
                 rstd = a.in(4, "rstd");
    const bool has_dbeta = desc.n_outputs == 3;
    const Tensor dx = a.out(0, "dX"), dgamma = a.out(1, "dgamma"), dbeta = has_dbeta ? a.out(2, "dbeta") : Tensor{};
    const plugin_kit::LayerNormShape sh =
        plugin_kit::layer_norm_shape(a, at, x, gamma, has_dbeta ? &dbeta : nullptr, mean, rstd);
    plugin_kit::same_shape(a, dy, "dY", x, "X");
    plugin_kit::same_shape(a, dx, "dX", x, "X");
    a.same_numel(dgamma, "dgamma", gamma, "gamma");
    if (overlap(dx, dy) && dx.off != dy.off) a.fail("dX partly overlaps dY (in place is fine)");
    const std::initializer_list<Named> inputs = {{&x, "X"}, {&gamma, "gamma"}, {&mean, "mean"}, {&rstd, "rstd"}};
    disjoint(a, dx, "dX", inputs);
    disjoint(a, dgamma, "dgamma", inputs);
    disjoint(a, dgamma, "dgamma", {{&dy, "dY"}, {&dx, "dX"}, {&dbeta, "dbeta"}});
    if (has_dbeta) {
        disjoint(a, dbeta, "dbeta", inputs);
        disjoint(a, dbeta, "dbeta", {{&dy, "dY"}, {&dx, "dX"}});
    }
    const int32_t rows = i32(sh.rows), d = i32(sh.d);
    // dgamma and dbeta: fixed chunks of rows (a function of the shape only), each chunk's column
    // sums into scratch, then one ordered pass per column. Before dX: dX may be dY itself.
    const int32_t n_chunks = std::max<int32_t>(1, std::min<int32_t>(rows, 64));
    const int32_t chunk_rows = rows ? (rows + n_chunks - 1) / n_chunks : 1;
    const int32_t chunks = rows ? (rows + chunk_rows - 1) / chunk_rows : 1;
    cl_mem part = stream_scratch(s, sizeof(float) * 2 * static_cast<size_t>(chunks) * d);
    Kernel(s, kFam, "ln_bwd_partials").arg(dy.mem).arg(dy.off).arg(x.mem).arg(x.off).arg(mean.mem).arg(mean.off)
        .arg(rstd.mem).arg(rstd.off).arg(rows).arg(d).arg(chunk_rows).arg(chunks).arg(part)
        .run(static_cast<int64_t>(chunks) * chunks16(d));
    if (rows > 0 && s.dev_->cpu_kernels) {
        Kernel(s, kFam, "ln_bwd_dx_rows").arg(dy.mem).arg(dy.off).arg(x.mem).arg(x.off).arg(rows).arg(d)
            .arg(gamma.mem).arg(gamma.off).arg(mean.mem).arg(mean.off).arg(rstd.mem).arg(rstd.off).arg(dx.mem)
            .arg(dx.off).run(rows);
    } else if (rows > 0) {
        Kernel k(s, kFam, "ln_bwd_dx");
        const size_t group = row_group(s, k, d);
        k.arg(dy.mem).arg(dy.off).arg(x.mem).arg(x.off).arg(d).arg(gamma.mem).arg(gamma.off).arg(mean.mem)
            .arg(mean.off).arg(rstd.mem).arg(rstd.off).arg(dx.mem).arg(dx.off).run_groups(rows, group);
    }
    const cl_int has_db = has_dbeta ? 1 : 0;
    Kernel(s, kFam, "ln_bwd_combine").arg(part).arg(chunks).arg(d).arg(at.beta).arg(dgamma.mem).arg(dgamma.off)
        .arg(has_db).arg(has_dbeta ? dbeta.mem : dgamma.mem).arg(has_dbeta ? dbeta.off : 0).run(chunks16(d));
}

// ---- attention -----------------------------------------------------------------------------

void op_attention_fwd(const xylem_op_desc& desc, xylem_stream_s& s) {
    OpArgs a(desc, 3, 4, 2);
    const Tensor q = a.in(0, "Q"), k = a.in(1, "K"), v = a.in(2, "V");
    const bool has_mask = a.n_inputs() == 4;
    const Tensor mask = has_mask ? a.in(3, "mask") : Tensor{};
    const Tensor o = a.out(0, "O"), lse = a.out(1, "LSE");
    const Attention t = attention_setup(a, q, k, v, has_mask ? &mask : nullptr);
    plugin_kit::attention_outputs(a, t.sh, o, "O", lse);
    const std::initializer_list<Named> inputs = {{&q, "Q"}, {&k, "K"}, {&v, "V"}, {&mask, "mask"}};
    disjoint(a, o, "O", inputs);
    disjoint(a, lse, "LSE", inputs);
    disjoint(a, o, "O", {{&lse, "LSE"}});
    if (o.numel == 0 && lse.numel == 0) return;
    const char* name = t.dc == 32 ? "attn_fwd_32" : "attn_fwd_64";
    const size_t group = attention_group(Kernel(s, kFam, name));
    const int32_t n_blocks = blocks(t.sh.tq, group);
    // One launch per DC columns of O; each recomputes the scores (one launch up to Dv = 64).
    for (int32_t dv0 = 0; dv0 < t.sh.dv; dv0 += t.dc) {
        Kernel kern(s, kFam, name);
        kern.arg(q.mem).arg(q.off).arg(k.mem).arg(k.off).arg(v.mem).arg(v.off).arg(o.mem).arg(o.off).arg(lse.mem)
            .arg(lse.off).arg(dv0).arg(n_blocks);
        shape_args(kern, t, q).run_groups(t.sh.b * t.sh.h * n_blocks, group);
    }
}

void op_attention_bwd(const xylem_op_desc& desc, xylem_stream_s& s) {
    OpArgs a(desc, 6, 7, 3);
    const Tensor dout = a.in(0, "dO"), q = a.in(1, "Q"), k = a.in(2, "K"), v = a.in(3, "V"), o = a.in(4, "O"),
                 lse = a.in(5, "LSE");
    const bool has_mask = a.n_inputs() == 7;
    const Tensor mask = has_mask ? a.in(6, "mask") : Tensor{};
    const Tensor dq = a.out(0, "dQ"), dk = a.out(1, "dK"), dv = a.out(2, "dV");
    const Attention t = attention_setup(a, q, k, v, has_mask ? &mask : nullptr);
    plugin_kit::attention_outputs(a, t.sh, o, "O", lse);
    plugin_kit::same_shape(a, dout, "dO", o, "O");
    plugin_kit::same_shape(a, dq, "dQ", q, "Q");
    plugin_kit::same_shape(a, dk, "dK", k, "K");
    plugin_kit::same_shape(a, dv, "dV", v, "V");
    const std::initializer_list<Named> inputs = {{&dout, "dO"}, {&q, "Q"}, {&k, "K"},      {&v, "V"},
                                                 {&o, "O"},     {&lse, "LSE"}, {&mask, "mask"}};
    for (const Named& out : {Named{&dq, "dQ"}, Named{&dk, "dK"}, Named{&dv, "dV"}}) disjoint(a, *out.first, out.second, inputs);
    disjoint(a, dq, "dQ", {{&dk, "dK"}, {&dv, "dV"}});
    disjoint(a, dk, "dK", {{&dv, "dV"}});
    const int64_t bh = t.sh.b * t.sh.h;
    if (bh == 0) return;

    // D_i = dO_i . O_i, into scratch (B*H*Tq floats), read by both gradient kernels.
    const int32_t rows = i32(bh * t.sh.tq);
    cl_mem dsum = stream_scratch(s, sizeof(float) * static_cast<size_t>(rows));
    Kernel(s, kFam, "attn_bwd_rowdot").arg(dout.mem).arg(dout.off).arg(o.mem).arg(o.off).arg(rows)
        .arg(i32(t.sh.dv)).arg(dsum).run(rows);

    // dQ by query rows, then dK and dV by key rows; one launch per DC columns of the output.
    const char* dq_name = t.dc == 32 ? "attn_bwd_dq_32" : "attn_bwd_dq_64";
    const size_t dq_group = attention_group(Kernel(s, kFam, dq_name));
    const int32_t q_blocks = blocks(t.sh.tq, dq_group);
    for (int32_t c = 0; c < t.sh.dk; c += t.dc) {
        Kernel kern(s, kFam, dq_name);
        kern.arg(dout.mem).arg(dout.off).arg(q.mem).arg(q.off).arg(k.mem).arg(k.off).arg(v.mem).arg(v.off)
            .arg(lse.mem).arg(lse.off).arg(dsum).arg(dq.mem).arg(dq.off).arg(c).arg(q_blocks);
        shape_args(kern, t, q).run_groups(bh * q_blocks, dq_group);
    }

    const char* kv_name = t.dc == 32 ? "attn_bwd_dkdv_32" : "attn_bwd_dkdv_64";
    const size_t kv_group = attention_group(Kernel(s, kFam, kv_name));
    const int32_t k_blocks = blocks(t.sh.tk, kv_group);
    for (int32_t c = 0; c < std::max(t.sh.dk, t.sh.dv); c += t.dc) {
        Kernel kern(s, kFam, kv_name);
        kern.arg(dout.mem).arg(dout.off).arg(q.mem).arg(q.off).arg(k.mem).arg(k.off).arg(v.mem).arg(v.off)
            .arg(lse.mem).arg(lse.off).arg(dsum).arg(dk.mem).arg(dk.off).arg(dv.mem).arg(dv.off).arg(c)
            .arg(k_blocks);
        shape_args(kern, t, q).run_groups(bh * k_blocks, kv_group);
    }
}

void op_masked_softmax(const xylem_op_desc& desc, xylem_stream_s& s) {
    OpArgs a(desc, 1, 2, desc.n_outputs == 2 ? 2 : 1);
    const auto at = a.attrs<xylem_attention_attrs>();
    const Tensor x = a.in(0, "X");
    const bool has_mask = a.n_inputs() == 2, has_lse = desc.n_outputs == 2;
    const Tensor mask = has_mask ? a.in(1, "mask") : Tensor{};
    const Tensor y = a.out(0, "Y"), lse = has_lse ? a.out(1, "LSE") : Tensor{};
    const plugin_kit::MaskedSoftmaxShape sh =
        plugin_kit::masked_softmax_shape(a, at, x, has_mask ? &mask : nullptr, y, has_lse ? &lse : nullptr);
    if (overlap(y, x) && y.off != x.off) a.fail("Y partly overlaps X (in place is fine)");
    disjoint(a, y, "Y", {{&mask, "mask"}, {&lse, "LSE"}});
    if (has_lse) disjoint(a, lse, "LSE", {{&x, "X"}, {&mask, "mask"}});
    const int64_t rows = sh.batch * sh.tq;
    if (rows == 0 || sh.l == 0) {
        // An empty row has no visible key: LSE = -inf (Y has no elements).
        if (has_lse && lse.numel) Kernel(s, Family::Elementwise, "fill_f32").arg(lse.mem).arg(lse.off).arg(lse.numel)
            .arg(-INFINITY).run(lse.numel);
        return;
    }
    const cl_int causal = at.causal, has_m = has_mask ? 1 : 0, has_l = has_lse ? 1 : 0;
    Kernel(s, kFam, "masked_softmax").arg(x.mem).arg(x.off).arg(y.mem).arg(y.off).arg(has_l)
        .arg(has_lse ? lse.mem : y.mem).arg(has_lse ? lse.off : 0).arg(i32(rows)).arg(i32(sh.tq)).arg(i32(sh.l))
        .arg(i32(sh.heads)).arg(at.scale).arg(causal).arg(has_mask ? mask.mem : x.mem).arg(has_mask ? mask.off : 0)
        .arg(has_m).arg(i32(sh.mask.sb)).arg(i32(sh.mask.sh)).arg(i32(sh.mask.sq)).run(rows);
}

// ---- layout and batched products -----------------------------------------------------------

void op_permute(const xylem_op_desc& desc, xylem_stream_s& s) {
    OpArgs a(desc, 1, 1, 1);
    const auto at = a.attrs<xylem_permute_attrs>();
    const Tensor x = a.in(0, "X"), y = a.out(0, "Y");
    const plugin_kit::PermuteShape sh = plugin_kit::permute_shape(a, at, x, y);
    if (overlap(x, y)) a.fail("Y overlaps X");
    if (sh.numel == 0) return;
    cl_int8 dims{}, strides{};
    for (uint32_t d = 0; d < 8; ++d) {
        dims.s[d] = d < sh.ndim ? i32(sh.out_dims[d]) : 1;
        strides.s[d] = d < sh.ndim ? i32(sh.in_strides[d]) : 0;
    }
    const cl_int ndim = static_cast<cl_int>(sh.ndim);
    const int64_t runs = sh.numel / sh.out_dims[sh.ndim - 1];  // ndim >= 1, no dim is 0 (numel > 0)
    Kernel(s, kFam, "permute").arg(x.mem).arg(x.off).arg(y.mem).arg(y.off).arg(i32(runs)).arg(ndim).arg(dims)
        .arg(strides).run(runs);
}

// C[b] = alpha*op(A[b])*op(B[b]) + beta*C[b]: one launch over the batch (the own kernels on a
// CPU device, CLBlast's strided-batched GEMM elsewhere), a 2-D operand broadcast with stride 0.
void op_gemm_batched(const xylem_op_desc& desc, xylem_stream_s& s) {
    OpArgs a(desc, 2, 2, 1);
    const auto at = a.attrs<xylem_gemm_attrs>();
    const Tensor ta = a.in(0, "A"), tb = a.in(1, "B"), tc = a.out(0, "C");
    const plugin_kit::GemmBatchedShape g = plugin_kit::gemm_batched_shape(a, at, ta, tb, tc);
    if (overlap(tc, ta) || overlap(tc, tb)) a.fail("C overlaps A or B");
    if (g.batch == 0 || g.m == 0 || g.n == 0) return;
    if (g.k == 0 || at.alpha == 0.0f) {  // only the beta scaling remains (CLBlast rejects k = 0)
        scale(s, at.beta, tc.mem, tc.off, tc.numel);
        return;
    }
    gemm_batched(s, at.trans_a != 0, at.trans_b != 0, i32(g.batch), i32(g.m), i32(g.n), i32(g.k), at.alpha, ta.mem,
                 ta.off, i32(ta.dims[ta.ndim - 1]), i32(g.stride_a), tb.mem, tb.off, i32(tb.dims[tb.ndim - 1]),
                 i32(g.stride_b), at.beta, tc.mem, tc.off, i32(g.n), i32(g.stride_c), "gemm_batched");
}

}  // namespace xylem::opencl
