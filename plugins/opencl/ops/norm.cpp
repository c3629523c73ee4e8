// BATCHNORM_FWD / BATCHNORM_BWD over axis 1 (kernels/norm.cl), PyTorch semantics.
#include "opencl.h"

namespace xylem::opencl {

namespace {

using ll = long long;
constexpr Family kFam = Family::Norm;

struct Bn {
    int32_t n, c, inner;
};

Bn bn_shape(const OpArgs& a, const Tensor& x, const char* xn) {
    if (x.ndim < 2) a.fail("%s must be [N,C] or [N,C,H,W,...], got %u dims", xn, x.ndim);
    Bn b{static_cast<int32_t>(x.dims[0]), static_cast<int32_t>(x.dims[1]), 1};
    for (uint32_t d = 2; d < x.ndim; ++d) b.inner *= static_cast<int32_t>(x.dims[d]);
    return b;
}

void check_channels(const OpArgs& a, const Bn& b, const Tensor& t, const char* name) {
    if (t.numel != b.c) a.fail("%s holds %d elements for C=%d channels", name, t.numel, b.c);
}

bool partial_overlap(const Tensor& a, const Tensor& b) { return overlap(a, b) && a.off != b.off; }

}  // namespace

void op_batchnorm_fwd(const xylem_op_desc& desc, xylem_stream_s& s) {
    OpArgs a(desc, 3, 3, 5);
    const auto at = a.attrs<xylem_batchnorm_attrs>();
    const Tensor x = a.in(0, "X"), gamma = a.in(1, "gamma"), beta = a.in(2, "beta");
    const Tensor y = a.out(0, "Y"), rm = a.out(1, "running_mean"), rv = a.out(2, "running_var");
    const Tensor sm = a.out(3, "saved_mean"), si = a.out(4, "saved_invstd");
    const Bn b = bn_shape(a, x, "X");
    a.same_numel(x, "X", y, "Y");
    check_channels(a, b, gamma, "gamma");
    check_channels(a, b, beta, "beta");
    check_channels(a, b, rm, "running_mean");
    check_channels(a, b, rv, "running_var");
    check_channels(a, b, sm, "saved_mean");
    check_channels(a, b, si, "saved_invstd");
    if (!(at.eps >= 0.0f)) a.fail("eps = %g must be >= 0", at.eps);
    if (!(at.momentum >= 0.0f && at.momentum <= 1.0f)) a.fail("momentum = %g must be in [0, 1]", at.momentum);
    if (partial_overlap(y, x)) a.fail("Y partly overlaps X (in place is fine)");
    cl_int use_var = 1;
    const Tensor* mean = &rm;
    const Tensor* stat = &rv;
    if (at.training) {
        if (static_cast<int64_t>(b.n) * b.inner < 2)
            a.fail("training needs more than 1 value per channel, X [%d,%d,...] has %lld", b.n, b.c,
                   static_cast<ll>(b.n) * b.inner);
        Kernel(s, kFam, "bn_stats").arg(x.mem).arg(x.off).arg(b.n).arg(b.c).arg(b.inner).arg(at.eps).arg(at.momentum)
            .arg(rm.mem).arg(rm.off).arg(rv.mem).arg(rv.off).arg(sm.mem).arg(sm.off).arg(si.mem).arg(si.off)
            .run_groups(b.c, reduce_group(s));
        use_var = 0;
        mean = &sm;
        stat = &si;
    }
    Kernel(s, kFam, "bn_normalize").arg(x.mem).arg(x.off).arg(b.n).arg(b.c).arg(b.inner).arg(mean->mem).arg(mean->off)
        .arg(stat->mem).arg(stat->off).arg(use_var).arg(at.eps).arg(gamma.mem).arg(gamma.off).arg(beta.mem)
        .arg(beta.off).arg(y.mem).arg(y.off).run(x.numel);
}

void op_batchnorm_bwd(const xylem_op_desc& desc, xylem_stream_s& s) {
    OpArgs a(desc, 5, 5, 3);
    a.attrs<xylem_batchnorm_attrs>();  // eps and momentum are baked into saved_invstd
    const Tensor dy = a.in(0, "dY"), x = a.in(1, "X"), gamma = a.in(2, "gamma");
    const Tensor sm = a.in(3, "saved_mean"), si = a.in(4, "saved_invstd");
    const Tensor dx = a.out(0, "dX"), dgamma = a.out(1, "dgamma"), dbeta = a.out(2, "dbeta");
    const Bn b = bn_shape(a, x, "X");
    a.same_numel(x, "X", dy, "dY");
    a.same_numel(x, "X", dx, "dX");
    check_channels(a, b, gamma, "gamma");
    check_channels(a, b, sm, "saved_mean");
    check_channels(a, b, si, "saved_invstd");
    check_channels(a, b, dgamma, "dgamma");
    check_channels(a, b, dbeta, "dbeta");
    if (partial_overlap(dx, dy) || overlap(dx, x)) a.fail("dX overlaps X or partly overlaps dY");
    Kernel(s, kFam, "bn_grad_sums").arg(dy.mem).arg(dy.off).arg(x.mem).arg(x.off).arg(b.n).arg(b.c).arg(b.inner)
        .arg(sm.mem).arg(sm.off).arg(si.mem).arg(si.off).arg(dgamma.mem).arg(dgamma.off).arg(dbeta.mem).arg(dbeta.off)
        .run_groups(b.c, reduce_group(s));
    if (x.numel == 0) return;
    Kernel(s, kFam, "bn_backward").arg(dy.mem).arg(dy.off).arg(x.mem).arg(x.off).arg(b.n).arg(b.c).arg(b.inner)
        .arg(gamma.mem).arg(gamma.off).arg(sm.mem).arg(sm.off).arg(si.mem).arg(si.off).arg(dgamma.mem).arg(dgamma.off)
        .arg(dbeta.mem).arg(dbeta.off).arg(dx.mem).arg(dx.off).run(x.numel);
}

}  // namespace xylem::opencl
