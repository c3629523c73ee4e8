// ATTENTION_FWD / ATTENTION_BWD (ABI 1.7): the kit's rule and the native plugin's operand checks,
// then the flash-style kernels of kernels/attention.cu. Those have variants for head sizes up to
// kAttentionMaxHeadDim only: attention_accepts (the op_accepts member, plugin.cpp) declines larger
// ones, so the core composes them from gemm_batched and masked_softmax instead of calling op_run.
#include "cuda_plugin.h"
#include "kernels/kernels.h"
#include "xylem/plugin_kit/shapes_transformer.h"

namespace xylem::cuda {

namespace {

using ll = long long;
using plugin_kit::AttentionShape;

// A descriptor that op_run would refuse anyway is accepted: op_run then says what is wrong.
bool head_dims_fit(const xylem_tensor_arg& q, const xylem_tensor_arg& v) {
    if (q.ndim != 4 || v.ndim != 4) return true;
    return q.dims[3] <= kernels::kAttentionMaxHeadDim && v.dims[3] <= kernels::kAttentionMaxHeadDim;
}

void check_head_dims(const OpArgs& a, const AttentionShape& s) {
    if (s.dk > kernels::kAttentionMaxHeadDim || s.dv > kernels::kAttentionMaxHeadDim)
        a.fail("head_dim Dk = %lld, Dv = %lld: this plugin's attention kernels take at most %lld (op_accepts "
               "declines larger ones; the core composes them)",
               ll(s.dk), ll(s.dv), ll(kernels::kAttentionMaxHeadDim));
}

kernels::AttnGeom geom(const AttentionShape& s, const xylem_attention_attrs& at, const Tensor* mask) {
    kernels::AttnGeom g{};
    g.b = s.b, g.h = s.h, g.tq = s.tq, g.tk = s.tk, g.l = s.l, g.dk = s.dk, g.dv = s.dv;
    g.scale = at.scale;
    g.causal = at.causal;
    g.dropout_p = at.dropout_p;
    g.keep_scale = 1.0f / (1.0f - at.dropout_p);
    g.seed = at.seed;
    g.mask = mask ? mask->f32() : nullptr;
    g.msb = s.mask.sb, g.msh = s.mask.sh, g.msq = s.mask.sq;
    return g;
}

}  // namespace

// Q is input 0 of attention_fwd and input 1 of attention_bwd, V input 2 and 3.
bool attention_accepts(const xylem_op_desc& d) {
    const uint32_t q = d.op == XYLEM_OP_ATTENTION_BWD ? 1 : 0;
    if (!d.inputs || d.n_inputs < q + 3) return true;
    return head_dims_fit(d.inputs[q], d.inputs[q + 2]);
}

void op_attention_fwd(const xylem_op_desc& desc, xylem_stream_s& s, xylem_framework_s&) {
    OpArgs a(desc, 3, 4, 2);
    const auto at = a.attrs<xylem_attention_attrs>();
    const Tensor tq = a.in(0, "Q"), tk = a.in(1, "K"), tv = a.in(2, "V"), to = a.out(0, "O"), tl = a.out(1, "LSE");
    const Tensor tm = a.n_inputs() == 4 ? a.in(3, "mask") : Tensor{};
    const Tensor* mask = a.n_inputs() == 4 ? &tm : nullptr;
    const AttentionShape sh = plugin_kit::attention_shape(a, at, tq, tk, tv, mask);
    plugin_kit::attention_outputs(a, sh, to, "O", tl);
    for (const Tensor* in : {&tq, &tk, &tv, mask})
        if (in && (overlap(*in, to) || overlap(*in, tl))) a.fail("O or LSE overlaps an input");
    if (overlap(to, tl)) a.fail("O overlaps LSE");
    check_head_dims(a, sh);
    a.check_cuda(kernels::attention_fwd(geom(sh, at, mask), tq.f32(), tk.f32(), tv.f32(), to.f32(), tl.f32(), s.stream_),
                 "cudaFuncSetAttribute");
    a.check_launch();
}

void op_attention_bwd(const xylem_op_desc& desc, xylem_stream_s& s, xylem_framework_s&) {
    OpArgs a(desc, 6, 7, 3);
    const auto at = a.attrs<xylem_attention_attrs>();
    const Tensor tdo = a.in(0, "dO"), tq = a.in(1, "Q"), tk = a.in(2, "K"), tv = a.in(3, "V"), to = a.in(4, "O"),
                 tl = a.in(5, "LSE");
    const Tensor tm = a.n_inputs() == 7 ? a.in(6, "mask") : Tensor{};
    const Tensor* mask = a.n_inputs() == 7 ? &tm : nullptr;
    const Tensor tdq = a.out(0, "dQ"), tdk = a.out(1, "dK"), tdv = a.out(2, "dV");
    const AttentionShape sh = plugin_kit::attention_shape(a, at, tq, tk, tv, mask);
    plugin_kit::attention_outputs(a, sh, to, "O", tl);
    plugin_kit::attention_outputs(a, sh, tdo, "dO", tl);
    plugin_kit::same_shape(a, tdq, "dQ", tq, "Q");
    plugin_kit::same_shape(a, tdk, "dK", tk, "K");
    plugin_kit::same_shape(a, tdv, "dV", tv, "V");
    for (const Tensor* out : {&tdq, &tdk, &tdv})
        for (const Tensor* in : {&tdo, &tq, &tk, &tv, &to, &tl, mask})
            if (in && overlap(*in, *out)) a.fail("dQ, dK or dV overlaps an input");
    if (overlap(tdq, tdk) || overlap(tdq, tdv) || overlap(tdk, tdv)) a.fail("dQ, dK and dV overlap");
    check_head_dims(a, sh);
    const int64_t rows = sh.b * sh.h * sh.tq;
    float* delta = s.scratch_.alloc<float>(rows > 0 ? rows : 1);  // D_i = dO_i . O_i
    a.check_cuda(kernels::attention_bwd(geom(sh, at, mask), tdo.f32(), tq.f32(), tk.f32(), tv.f32(), to.f32(), tl.f32(),
                                        tdq.f32(), tdk.f32(), tdv.f32(), delta, s.stream_),
                 "cudaFuncSetAttribute");
    a.check_launch();
}

}  // namespace xylem::cuda
