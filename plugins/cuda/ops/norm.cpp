// BATCHNORM_FWD / BATCHNORM_BWD over axis 1 of [N,C] or [N,C,H,W,...], PyTorch semantics, own
// kernels (statistics in double, as on the CPU, so both backends agree closely).
#include "cuda_plugin.h"
#include "kernels/kernels.h"

namespace xylem::cuda {

namespace {

kernels::BnGeom bn_geom(const plugin_kit::BatchnormShape& b) { return kernels::BnGeom{b.n, b.c, b.inner}; }

bool partial_overlap(const Tensor& a, const Tensor& b) { return overlap(a, b) && a.data != b.data; }

}  // namespace

void op_batchnorm_fwd(const xylem_op_desc& desc, xylem_stream_s& s, xylem_framework_s&) {
    OpArgs a(desc, 3, 3, 5);
    const auto o = plugin_kit::batchnorm_fwd_operands(a);
    const auto& attrs = o.attrs;
    const Tensor &tx = o.x, &tgamma = o.gamma, &tbeta = o.beta, &ty = o.y;
    const Tensor &trm = o.running_mean, &trv = o.running_var, &tsm = o.saved_mean, &tsi = o.saved_invstd;
    const kernels::BnGeom b = bn_geom(o.shape);
    if (partial_overlap(ty, tx)) a.fail("Y partly overlaps X (in place is fine)");
    float* shift = s.scratch_.alloc<float>(b.c);
    float* scale = s.scratch_.alloc<float>(b.c);
    if (!attrs.training) {
        kernels::bn_eval_coeffs(b, tgamma.f32(), trm.f32(), trv.f32(), shift, scale, attrs.eps, s.stream_);
    } else {
        kernels::bn_train_stats(b, tx.f32(), tgamma.f32(), trm.f32(), trv.f32(), tsm.f32(), tsi.f32(), shift, scale,
                                attrs.eps, attrs.momentum, s.stream_);
    }
    kernels::bn_normalize(b, tx.f32(), ty.f32(), shift, scale, tbeta.f32(), attrs.activation == XYLEM_ACT_RELU,
                          s.stream_);
    a.check_launch();
}

void op_batchnorm_bwd(const xylem_op_desc& desc, xylem_stream_s& s, xylem_framework_s&) {
    OpArgs a(desc, 5, 6, 3);
    const auto o = plugin_kit::batchnorm_bwd_operands(a);
    const Tensor &tdy = o.dy, &tx = o.x, &tgamma = o.gamma, &tsm = o.saved_mean, &tsi = o.saved_invstd;
    const Tensor &tdx = o.dx, &tdgamma = o.dgamma, &tdbeta = o.dbeta;
    const kernels::BnGeom b = bn_geom(o.shape);
    if (partial_overlap(tdx, tdy) || overlap(tdx, tx)) a.fail("dX overlaps X or partly overlaps dY");
    if (o.relu && partial_overlap(tdx, o.y)) a.fail("dX partly overlaps Y (in place is fine)");
    if (b.n * b.inner == 0) {
        kernels::fill_u32(reinterpret_cast<uint32_t*>(tdgamma.data), b.c, 0u, s.stream_);
        kernels::fill_u32(reinterpret_cast<uint32_t*>(tdbeta.data), b.c, 0u, s.stream_);
        return a.check_launch();
    }
    float* k = s.scratch_.alloc<float>(b.c);
    float* kx = s.scratch_.alloc<float>(b.c);
    float* k0 = s.scratch_.alloc<float>(b.c);
    kernels::bn_backward(b, tdy.f32(), o.relu ? o.y.f32() : nullptr, tx.f32(), tgamma.f32(), tsm.f32(), tsi.f32(),
                         tdx.f32(), tdgamma.f32(), tdbeta.f32(), k, kx, k0, s.stream_);
    a.check_launch();
}

}  // namespace xylem::cuda
