// BATCHNORM_FWD / BATCHNORM_BWD over axis 1 of [N,C] or [N,C,H,W,...], PyTorch semantics, own
// kernels (statistics in double, as on the CPU, so both backends agree closely).
#include "cuda_plugin.h"
#include "kernels/kernels.h"

namespace xylem::cuda {

namespace {

using ll = long long;

kernels::BnGeom bn_shape(const OpArgs& a, const Tensor& x, const char* xn) {
    if (x.ndim < 2) a.fail("%s must be [N,C] or [N,C,H,W,...], got %u dims", xn, x.ndim);
    kernels::BnGeom b{x.dims[0], x.dims[1], 1};
    for (uint32_t d = 2; d < x.ndim; ++d) b.inner *= x.dims[d];
    return b;
}

void check_channels(const OpArgs& a, const kernels::BnGeom& b, const Tensor& t, const char* name) {
    if (t.numel != b.c) a.fail("%s holds %lld elements for C=%lld channels", name, ll(t.numel), ll(b.c));
}

bool partial_overlap(const Tensor& a, const Tensor& b) { return overlap(a, b) && a.data != b.data; }

}  // namespace

void op_batchnorm_fwd(const xylem_op_desc& desc, xylem_stream_s& s, xylem_framework_s&) {
    OpArgs a(desc, 3, 3, 5);
    const auto attrs = a.attrs<xylem_batchnorm_attrs>();
    const Tensor tx = a.in(0, "X"), tgamma = a.in(1, "gamma"), tbeta = a.in(2, "beta");
    const Tensor ty = a.out(0, "Y"), trm = a.out(1, "running_mean"), trv = a.out(2, "running_var");
    const Tensor tsm = a.out(3, "saved_mean"), tsi = a.out(4, "saved_invstd");
    const kernels::BnGeom b = bn_shape(a, tx, "X");
    a.same_numel(tx, "X", ty, "Y");
    check_channels(a, b, tgamma, "gamma");
    check_channels(a, b, tbeta, "beta");
    check_channels(a, b, trm, "running_mean");
    check_channels(a, b, trv, "running_var");
    check_channels(a, b, tsm, "saved_mean");
    check_channels(a, b, tsi, "saved_invstd");
    if (!(attrs.eps >= 0.0f)) a.fail("eps = %g must be >= 0", attrs.eps);
    if (!(attrs.momentum >= 0.0f && attrs.momentum <= 1.0f)) a.fail("momentum = %g must be in [0, 1]", attrs.momentum);
    if (partial_overlap(ty, tx)) a.fail("Y partly overlaps X (in place is fine)");
    float* shift = s.scratch_.alloc<float>(b.c);
    float* scale = s.scratch_.alloc<float>(b.c);
    if (!attrs.training) {
        kernels::bn_eval_coeffs(b, tgamma.f32(), trm.f32(), trv.f32(), shift, scale, attrs.eps, s.stream_);
    } else {
        if (b.n * b.inner < 2)
            a.fail("training needs more than 1 value per channel, X [%lld,%lld,...] has %lld", ll(b.n), ll(b.c),
                   ll(b.n * b.inner));
        kernels::bn_train_stats(b, tx.f32(), tgamma.f32(), trm.f32(), trv.f32(), tsm.f32(), tsi.f32(), shift, scale,
                                attrs.eps, attrs.momentum, s.stream_);
    }
    kernels::bn_normalize(b, tx.f32(), ty.f32(), shift, scale, tbeta.f32(), s.stream_);
    a.check_launch();
}

void op_batchnorm_bwd(const xylem_op_desc& desc, xylem_stream_s& s, xylem_framework_s&) {
    OpArgs a(desc, 5, 5, 3);
    a.attrs<xylem_batchnorm_attrs>();  // eps and momentum are baked into saved_invstd
    const Tensor tdy = a.in(0, "dY"), tx = a.in(1, "X"), tgamma = a.in(2, "gamma");
    const Tensor tsm = a.in(3, "saved_mean"), tsi = a.in(4, "saved_invstd");
    const Tensor tdx = a.out(0, "dX"), tdgamma = a.out(1, "dgamma"), tdbeta = a.out(2, "dbeta");
    const kernels::BnGeom b = bn_shape(a, tx, "X");
    a.same_numel(tx, "X", tdy, "dY");
    a.same_numel(tx, "X", tdx, "dX");
    check_channels(a, b, tgamma, "gamma");
    check_channels(a, b, tsm, "saved_mean");
    check_channels(a, b, tsi, "saved_invstd");
    check_channels(a, b, tdgamma, "dgamma");
    check_channels(a, b, tdbeta, "dbeta");
    if (partial_overlap(tdx, tdy) || overlap(tdx, tx)) a.fail("dX overlaps X or partly overlaps dY");
    if (b.n * b.inner == 0) {
        kernels::fill_u32(reinterpret_cast<uint32_t*>(tdgamma.data), b.c, 0u, s.stream_);
        kernels::fill_u32(reinterpret_cast<uint32_t*>(tdbeta.data), b.c, 0u, s.stream_);
        return a.check_launch();
    }
    float* k = s.scratch_.alloc<float>(b.c);
    float* kx = s.scratch_.alloc<float>(b.c);
    float* k0 = s.scratch_.alloc<float>(b.c);
    kernels::bn_backward(b, tdy.f32(), tx.f32(), tgamma.f32(), tsm.f32(), tsi.f32(), tdx.f32(), tdgamma.f32(),
                         tdbeta.f32(), k, kx, k0, s.stream_);
    a.check_launch();
}

}  // namespace xylem::cuda
