// BATCHNORM_FWD / BATCHNORM_BWD over axis 1 (kernels/norm.cl), PyTorch semantics.
#include "opencl.h"

namespace xylem::opencl {

namespace {

constexpr Family kFam = Family::Norm;

// The kit's shape in the kernels' int32 (operands were checked to fit).
struct Bn {
    int32_t n, c, inner;
};

Bn bn32(const plugin_kit::BatchnormShape& b) {
    return Bn{static_cast<int32_t>(b.n), static_cast<int32_t>(b.c), static_cast<int32_t>(b.inner)};
}

bool partial_overlap(const Tensor& a, const Tensor& b) { return overlap(a, b) && a.off != b.off; }

}  // namespace

void op_batchnorm_fwd(const xylem_op_desc& desc, xylem_stream_s& s) {
    OpArgs a(desc, 3, 3, 5);
    const auto o = plugin_kit::batchnorm_fwd_operands(a);
    const auto& at = o.attrs;
    const Tensor &x = o.x, &gamma = o.gamma, &beta = o.beta, &y = o.y;
    const Tensor &rm = o.running_mean, &rv = o.running_var, &sm = o.saved_mean, &si = o.saved_invstd;
    const Bn b = bn32(o.shape);
    if (partial_overlap(y, x)) a.fail("Y partly overlaps X (in place is fine)");
    cl_int use_var = 1;
    const Tensor* mean = &rm;
    const Tensor* stat = &rv;
    if (at.training) {
        Kernel(s, kFam, "bn_stats").arg(x.mem).arg(x.off).arg(b.n).arg(b.c).arg(b.inner).arg(at.eps).arg(at.momentum)
            .arg(rm.mem).arg(rm.off).arg(rv.mem).arg(rv.off).arg(sm.mem).arg(sm.off).arg(si.mem).arg(si.off)
            .run_groups(b.c, reduce_group(s));
        use_var = 0;
        mean = &sm;
        stat = &si;
    }
    Kernel(s, kFam, "bn_normalize").arg(x.mem).arg(x.off).arg(b.n).arg(b.c).arg(b.inner).arg(mean->mem).arg(mean->off)
        .arg(stat->mem).arg(stat->off).arg(use_var).arg(at.eps).arg(gamma.mem).arg(gamma.off).arg(beta.mem)
        .arg(beta.off).arg(y.mem).arg(y.off).arg(cl_int{at.activation == XYLEM_ACT_RELU}).run(x.numel);
}

void op_batchnorm_bwd(const xylem_op_desc& desc, xylem_stream_s& s) {
    OpArgs a(desc, 5, 6, 3);
    const auto o = plugin_kit::batchnorm_bwd_operands(a);
    const Tensor &dy = o.dy, &x = o.x, &gamma = o.gamma, &sm = o.saved_mean, &si = o.saved_invstd;
    const Tensor &dx = o.dx, &dgamma = o.dgamma, &dbeta = o.dbeta;
    const Bn b = bn32(o.shape);
    if (partial_overlap(dx, dy) || overlap(dx, x)) a.fail("dX overlaps X or partly overlaps dY");
    if (o.relu && partial_overlap(dx, o.y)) a.fail("dX partly overlaps Y (in place is fine)");
    // Without the ReLU the kernels read no Y: dY stands in for the argument.
    const Tensor& y = o.relu ? o.y : dy;
    const cl_int has_y = o.relu ? 1 : 0;
    Kernel(s, kFam, "bn_grad_sums").arg(dy.mem).arg(dy.off).arg(y.mem).arg(y.off).arg(has_y).arg(x.mem).arg(x.off)
        .arg(b.n).arg(b.c).arg(b.inner).arg(sm.mem).arg(sm.off).arg(si.mem).arg(si.off).arg(dgamma.mem)
        .arg(dgamma.off).arg(dbeta.mem).arg(dbeta.off).run_groups(b.c, reduce_group(s));
    if (x.numel == 0) return;
    Kernel(s, kFam, "bn_backward").arg(dy.mem).arg(dy.off).arg(y.mem).arg(y.off).arg(has_y).arg(x.mem).arg(x.off)
        .arg(b.n).arg(b.c).arg(b.inner).arg(gamma.mem).arg(gamma.off).arg(sm.mem).arg(sm.off).arg(si.mem).arg(si.off)
        .arg(dgamma.mem).arg(dgamma.off).arg(dbeta.mem).arg(dbeta.off).arg(dx.mem).arg(dx.off).run(x.numel);
}

}  // namespace xylem::opencl
