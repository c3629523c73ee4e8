// Fused optimizer updates on the device (SGD, Adam, AdamW, RMSprop); hyper-parameters pass by
// value (no per-step allocation).
#include <cmath>

#include "cuda_plugin.h"
#include "kernels/kernels.h"

namespace xylem::cuda {

// PyTorch semantics with the velocity starting at zero; the velocity may be left out when momentum is 0.
void op_sgd_update(const xylem_op_desc& desc, xylem_stream_s& s, xylem_framework_s&) {
    OpArgs a(desc, 1, 1, desc.n_outputs == 1 ? 1 : 2);
    const auto attrs = a.attrs<xylem_sgd_attrs>();
    const Tensor tp = a.out(0, "param"), tg = a.in(0, "grad");
    a.same_numel(tp, "param", tg, "grad");
    const kernels::SgdParams c{attrs.lr, attrs.weight_decay, attrs.momentum, 1.0f - attrs.dampening,
                               attrs.nesterov != 0};
    float* v = nullptr;
    if (c.mom != 0.0f) {
        if (desc.n_outputs < 2) a.fail("momentum %g needs the velocity output", c.mom);
        const Tensor tv = a.out(1, "velocity");
        a.same_numel(tp, "param", tv, "velocity");
        v = tv.f32();
    }
    kernels::sgd(tp.f32(), v, tg.f32(), tp.numel, c, s.stream_);
    a.check_launch();
}

// p -= (lr/bc1) * m / (sqrt(v)/sqrt(bc2) + eps), as PyTorch and the native plugin evaluate it.
void op_adam_update(const xylem_op_desc& desc, xylem_stream_s& s, xylem_framework_s&) {
    OpArgs a(desc, 1, 1, 3);
    const auto o = plugin_kit::adam_operands<xylem_adam_attrs>(a);
    const kernels::AdamParams c{o.attrs.beta1, o.attrs.beta2, o.attrs.weight_decay, o.attrs.eps, o.step, o.inv_sqrt_bc2};
    kernels::adam(o.param.f32(), o.m.f32(), o.v.f32(), o.grad.f32(), o.param.numel, c, s.stream_);
    a.check_launch();
}

// torch.optim.AdamW: p *= 1 - lr*wd, then Adam's step on the raw gradient.
void op_adamw_update(const xylem_op_desc& desc, xylem_stream_s& s, xylem_framework_s&) {
    OpArgs a(desc, 1, 1, 3);
    const auto o = plugin_kit::adam_operands<xylem_adamw_attrs>(a);
    const kernels::AdamParams c{o.attrs.beta1, o.attrs.beta2, 0.0f, o.attrs.eps, o.step, o.inv_sqrt_bc2};
    kernels::adamw(o.param.f32(), o.m.f32(), o.v.f32(), o.grad.f32(), o.param.numel, c,
                   1.0f - o.attrs.lr * o.attrs.weight_decay, s.stream_);
    a.check_launch();
}

// torch.optim.RMSprop: outputs (param, square_avg[, momentum_buffer if momentum > 0][, grad_avg if centered]).
void op_rmsprop_update(const xylem_op_desc& desc, xylem_stream_s& s, xylem_framework_s&) {
    OpArgs a(desc, 1, 1, desc.n_outputs);  // 2 to 4 outputs, as the attrs say (checked by the rule)
    const auto o = plugin_kit::rmsprop_operands(a, desc.n_outputs);
    const auto& attrs = o.attrs;
    const bool has_buf = o.has_buffer, centered = o.centered;
    const Tensor &tp = o.param, &ts = o.square_avg, &tg = o.grad;
    float* buf = has_buf ? o.momentum_buffer.f32() : nullptr;
    float* ga = centered ? o.grad_avg.f32() : nullptr;
    const kernels::RmspropParams c{attrs.lr, attrs.alpha, attrs.eps, attrs.weight_decay, attrs.momentum};
    kernels::rmsprop(tp.f32(), ts.f32(), buf, ga, tg.f32(), tp.numel, c, s.stream_);
    a.check_launch();
}

}  // namespace xylem::cuda
