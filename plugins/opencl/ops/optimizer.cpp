// Fused optimizer updates (kernels/optimizer.cl): SGD (momentum, dampening, Nesterov, weight
// decay), Adam, AdamW and RMSprop, one kernel per parameter tensor with the hyper-parameters by value.
#include <cmath>

#include "opencl.h"

namespace xylem::opencl {

void op_sgd_update(const xylem_op_desc& desc, xylem_stream_s& s) {
    OpArgs a(desc, 1, 1, desc.n_outputs == 1 ? 1 : 2);  // the velocity may be left out when momentum is 0
    const auto at = a.attrs<xylem_sgd_attrs>();
    const Tensor p = a.out(0, "param"), g = a.in(0, "grad");
    a.same_numel(p, "param", g, "grad");
    if (at.momentum == 0.0f) {
        Kernel(s, Family::Optimizer, "sgd_plain").arg(p.mem).arg(p.off).arg(g.mem).arg(g.off).arg(at.lr)
            .arg(at.weight_decay).arg(p.numel).run(p.numel);
        return;
    }
    if (desc.n_outputs < 2) a.fail("momentum %g needs the velocity output", at.momentum);
    const Tensor v = a.out(1, "velocity");
    a.same_numel(p, "param", v, "velocity");
    const float keep = 1.0f - at.dampening;
    const cl_int nesterov = at.nesterov ? 1 : 0;
    Kernel(s, Family::Optimizer, "sgd_momentum").arg(p.mem).arg(p.off).arg(v.mem).arg(v.off).arg(g.mem).arg(g.off)
        .arg(at.lr).arg(at.weight_decay).arg(at.momentum).arg(keep).arg(nesterov).arg(p.numel).run(p.numel);
}

void op_adam_update(const xylem_op_desc& desc, xylem_stream_s& s) {
    OpArgs a(desc, 1, 1, 3);
    const auto o = plugin_kit::adam_operands<xylem_adam_attrs>(a);
    const auto& at = o.attrs;
    const Tensor &p = o.param, &m = o.m, &v = o.v, &g = o.grad;
    const float step = o.step, inv_sqrt_bc2 = o.inv_sqrt_bc2;
    Kernel(s, Family::Optimizer, "adam").arg(p.mem).arg(p.off).arg(m.mem).arg(m.off).arg(v.mem).arg(v.off).arg(g.mem)
        .arg(g.off).arg(at.beta1).arg(at.beta2).arg(at.weight_decay).arg(at.eps).arg(step).arg(inv_sqrt_bc2)
        .arg(p.numel).run(p.numel);
}

void op_adamw_update(const xylem_op_desc& desc, xylem_stream_s& s) {
    OpArgs a(desc, 1, 1, 3);
    const auto o = plugin_kit::adam_operands<xylem_adamw_attrs>(a);
    const auto& at = o.attrs;
    const Tensor &p = o.param, &m = o.m, &v = o.v, &g = o.grad;
    const float step = o.step, inv_sqrt_bc2 = o.inv_sqrt_bc2;
    const float decay = 1.0f - at.lr * at.weight_decay;
    Kernel(s, Family::Optimizer, "adamw").arg(p.mem).arg(p.off).arg(m.mem).arg(m.off).arg(v.mem).arg(v.off)
        .arg(g.mem).arg(g.off).arg(at.beta1).arg(at.beta2).arg(at.eps).arg(step).arg(inv_sqrt_bc2).arg(decay)
        .arg(p.numel).run(p.numel);
}

// Outputs (param, square_avg[, momentum_buffer if momentum > 0][, grad_avg if centered]).
void op_rmsprop_update(const xylem_op_desc& desc, xylem_stream_s& s) {
    OpArgs a(desc, 1, 1, desc.n_outputs);  // 2 to 4 outputs, as the attrs say (checked by the rule)
    const auto o = plugin_kit::rmsprop_operands(a, desc.n_outputs);
    const auto& at = o.attrs;
    const cl_int has_buf = o.has_buffer ? 1 : 0, centered = o.centered ? 1 : 0;
    const Tensor &p = o.param, &sq = o.square_avg, &g = o.grad, &buf = o.momentum_buffer, &ga = o.grad_avg;
    Kernel(s, Family::Optimizer, "rmsprop").arg(p.mem).arg(p.off).arg(sq.mem).arg(sq.off).arg(buf.mem).arg(buf.off)
        .arg(ga.mem).arg(ga.off).arg(g.mem).arg(g.off).arg(at.lr).arg(at.alpha).arg(at.eps).arg(at.weight_decay)
        .arg(at.momentum).arg(has_buf).arg(centered).arg(p.numel).run(p.numel);
}

}  // namespace xylem::opencl
