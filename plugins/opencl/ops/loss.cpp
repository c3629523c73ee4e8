// Losses (kernels/loss.cl): XENT, NLL and MSE forward into a device scalar, backward into the
// prediction's gradient. Labels are range-checked on the device (see stream.cpp).
#include "opencl.h"

namespace xylem::opencl {

namespace {
constexpr Family kFam = Family::Loss;

struct Classification {
    Tensor x, labels;
    int32_t n, c;
};

Classification classification(const OpArgs& a, const char* x_name) {
    const Tensor x = a.in(0, x_name), labels = a.in(1, "labels", XYLEM_I32);
    a.check_classification(x, labels);
    return {x, labels, static_cast<int32_t>(x.dims[0]), static_cast<int32_t>(x.dims[1])};
}

// XENT_FWD and NLL_FWD: one work-group sums the rows' losses into the scalar; the kernel is
// named like the op (kernels/loss.cl) and takes the same arguments.
void class_loss_fwd(const xylem_op_desc& desc, xylem_stream_s& s, const char* x_name) {
    OpArgs a(desc, 2, 2, 1);
    const auto at = a.attrs<xylem_loss_attrs>();
    const auto [x, labels, n, c] = classification(a, x_name);
    const Tensor loss = a.out(0, "loss");
    a.check_scalar(loss, "loss");
    const cl_int op = static_cast<cl_int>(desc.op);
    Kernel(s, kFam, xylem_op_name(desc.op)).arg(x.mem).arg(x.off).arg(labels.mem).arg(labels.off).arg(n).arg(c)
        .arg(at.scale).arg(at.acc).arg(loss.mem).arg(loss.off).arg(s.error_word_).arg(op).run_groups(1, reduce_group(s));
}
}  // namespace

void op_xent_fwd(const xylem_op_desc& desc, xylem_stream_s& s) { class_loss_fwd(desc, s, "logits"); }

void op_xent_bwd(const xylem_op_desc& desc, xylem_stream_s& s) {
    OpArgs a(desc, 2, 2, 1);
    const float scale = a.attrs<xylem_loss_attrs>().scale;
    const auto [x, labels, n, c] = classification(a, "logits");
    const Tensor dx = a.out(0, "dlogits");
    a.same_numel(x, "logits", dx, "dlogits");
    if (overlap(x, dx) && x.off != dx.off) a.fail("logits and dlogits overlap without being the same range");
    const cl_int op = XYLEM_OP_XENT_BWD;
    Kernel(s, kFam, "xent_bwd").arg(x.mem).arg(x.off).arg(labels.mem).arg(labels.off).arg(n).arg(c).arg(scale)
        .arg(dx.mem).arg(dx.off).arg(s.error_word_).arg(op).run(n);
}

void op_nll_fwd(const xylem_op_desc& desc, xylem_stream_s& s) { class_loss_fwd(desc, s, "logp"); }

void op_nll_bwd(const xylem_op_desc& desc, xylem_stream_s& s) {
    OpArgs a(desc, 2, 2, 1);
    const float scale = a.attrs<xylem_loss_attrs>().scale;
    const auto [x, labels, n, c] = classification(a, "logp");
    const Tensor dx = a.out(0, "dlogp");
    a.same_numel(x, "logp", dx, "dlogp");
    const cl_int op = XYLEM_OP_NLL_BWD;
    Kernel(s, kFam, "nll_bwd").arg(labels.mem).arg(labels.off).arg(n).arg(c).arg(scale).arg(dx.mem).arg(dx.off)
        .arg(s.error_word_).arg(op).run(n);
}

void op_mse_fwd(const xylem_op_desc& desc, xylem_stream_s& s) {
    OpArgs a(desc, 2, 2, 1);
    const auto at = a.attrs<xylem_loss_attrs>();
    const Tensor p = a.in(0, "pred"), t = a.in(1, "target"), loss = a.out(0, "loss");
    a.same_numel(p, "pred", t, "target");
    a.check_scalar(loss, "loss");
    Kernel(s, kFam, "mse_fwd").arg(p.mem).arg(p.off).arg(t.mem).arg(t.off).arg(p.numel).arg(at.scale).arg(at.acc)
        .arg(loss.mem).arg(loss.off).run_groups(1, reduce_group(s));
}

void op_mse_bwd(const xylem_op_desc& desc, xylem_stream_s& s) {
    OpArgs a(desc, 2, 2, 1);
    const float k = 2.0f * a.attrs<xylem_loss_attrs>().scale;
    const Tensor p = a.in(0, "pred"), t = a.in(1, "target"), dp = a.out(0, "dpred");
    a.same_numel(p, "pred", t, "target");
    a.same_numel(p, "pred", dp, "dpred");
    Kernel(s, kFam, "mse_bwd").arg(p.mem).arg(p.off).arg(t.mem).arg(t.off).arg(k).arg(dp.mem).arg(dp.off).arg(p.numel)
        .run(p.numel);
}

}  // namespace xylem::opencl
