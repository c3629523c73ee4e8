// Fused optimizer updates on the device: SGD (momentum, dampening, Nesterov, weight decay), Adam,
// AdamW and RMSprop (plain, momentum, centered), each PyTorch's per-element formula.
#include <cmath>

#include "native.h"

namespace xylem::native {

namespace {

struct SgdConsts {
    float lr, wd, mom, keep;  // keep = 1 - dampening
};

XYLEM_KERNEL(void, sgd_plain, (float* __restrict p, const float* __restrict g, int64_t n, SgdConsts c), (p, g, n, c)) {
    for (int64_t i = 0; i < n; ++i) p[i] -= c.lr * (g[i] + c.wd * p[i]);
}

XYLEM_KERNEL(void, sgd_momentum,
             (float* __restrict p, float* __restrict v, const float* __restrict g, int64_t n, SgdConsts c),
             (p, v, g, n, c)) {
    for (int64_t i = 0; i < n; ++i) {
        const float vi = c.mom * v[i] + c.keep * (g[i] + c.wd * p[i]);
        v[i] = vi;
        p[i] -= c.lr * vi;
    }
}

XYLEM_KERNEL(void, sgd_nesterov,
             (float* __restrict p, float* __restrict v, const float* __restrict g, int64_t n, SgdConsts c),
             (p, v, g, n, c)) {
    for (int64_t i = 0; i < n; ++i) {
        const float gi = g[i] + c.wd * p[i];
        const float vi = c.mom * v[i] + c.keep * gi;
        v[i] = vi;
        p[i] -= c.lr * (gi + c.mom * vi);
    }
}

struct AdamConsts {
    float b1, b2, wd, eps, step, inv_sqrt_bc2;
};

XYLEM_KERNEL(void, adam,
             (float* __restrict p, float* __restrict m, float* __restrict v, const float* __restrict g, int64_t n,
              AdamConsts c),
             (p, m, v, g, n, c)) {
    for (int64_t i = 0; i < n; ++i) {
        const float gi = g[i] + c.wd * p[i];
        const float mi = c.b1 * m[i] + (1.0f - c.b1) * gi;
        const float vi = c.b2 * v[i] + (1.0f - c.b2) * gi * gi;
        m[i] = mi;
        v[i] = vi;
        p[i] -= c.step * mi / (std::sqrt(vi) * c.inv_sqrt_bc2 + c.eps);
    }
}

// AdamW: the decay multiplies the parameter before the Adam step (decay = 1 - lr*wd).
XYLEM_KERNEL(void, adamw,
             (float* __restrict p, float* __restrict m, float* __restrict v, const float* __restrict g, int64_t n,
              AdamConsts c, float decay),
             (p, m, v, g, n, c, decay)) {
    for (int64_t i = 0; i < n; ++i) {
        const float gi = g[i];
        const float mi = c.b1 * m[i] + (1.0f - c.b1) * gi;
        const float vi = c.b2 * v[i] + (1.0f - c.b2) * gi * gi;
        m[i] = mi;
        v[i] = vi;
        p[i] = p[i] * decay - c.step * mi / (std::sqrt(vi) * c.inv_sqrt_bc2 + c.eps);
    }
}

struct RmspropConsts {
    float lr, alpha, eps, wd, mom;
};

// One loop for the four variants: buf and ga are null when unused (the branches are loop-invariant).
XYLEM_KERNEL(void, rmsprop,
             (float* __restrict p, float* __restrict sq, float* __restrict buf, float* __restrict ga,
              const float* __restrict g, int64_t n, RmspropConsts c),
             (p, sq, buf, ga, g, n, c)) {
    const float keep = 1.0f - c.alpha;
    for (int64_t i = 0; i < n; ++i) {
        const float gi = g[i] + c.wd * p[i];
        const float si = c.alpha * sq[i] + keep * (gi * gi);
        sq[i] = si;
        float avg;
        if (ga) {
            const float ai = ga[i] + keep * (gi - ga[i]);
            ga[i] = ai;
            avg = std::sqrt(si - ai * ai) + c.eps;
        } else {
            avg = std::sqrt(si) + c.eps;
        }
        if (buf) {
            const float bi = c.mom * buf[i] + gi / avg;
            buf[i] = bi;
            p[i] -= c.lr * bi;
        } else {
            p[i] -= c.lr * (gi / avg);
        }
    }
}

}  // namespace

// PyTorch semantics with the velocity starting at zero (so no first-step special case):
// g = grad + wd*p; v = momentum*v + (1-dampening)*g; g = nesterov ? g + momentum*v : v; p -= lr*g.
void op_sgd_update(const xylem_op_desc& desc, xylem_stream_s&) {
    // The velocity may be left out when momentum is 0.
    OpArgs a(desc, 1, 1, desc.n_outputs == 1 ? 1 : 2);
    const auto attrs = a.attrs<xylem_sgd_attrs>();
    const Tensor tp = a.out(0, "param"), tg = a.in(0, "grad");
    a.same_numel(tp, "param", tg, "grad");
    const SgdConsts c{attrs.lr, attrs.weight_decay, attrs.momentum, 1.0f - attrs.dampening};
    if (c.mom == 0.0f) return sgd_plain(tp.f32(), tg.f32(), tp.numel, c);
    if (desc.n_outputs < 2) a.fail("momentum %g needs the velocity output", c.mom);
    const Tensor tv = a.out(1, "velocity");
    a.same_numel(tp, "param", tv, "velocity");
    if (attrs.nesterov) sgd_nesterov(tp.f32(), tv.f32(), tg.f32(), tp.numel, c);
    else sgd_momentum(tp.f32(), tv.f32(), tg.f32(), tp.numel, c);
}

// g = grad + wd*p; m = b1*m + (1-b1)*g; v = b2*v + (1-b2)*g^2; p -= lr*(m/bc1) / (sqrt(v/bc2) + eps),
// evaluated as PyTorch does: p -= (lr/bc1) * m / (sqrt(v)/sqrt(bc2) + eps).
void op_adam_update(const xylem_op_desc& desc, xylem_stream_s&) {
    OpArgs a(desc, 1, 1, 3);
    const auto o = plugin_kit::adam_operands<xylem_adam_attrs>(a);
    const AdamConsts c{o.attrs.beta1, o.attrs.beta2, o.attrs.weight_decay, o.attrs.eps, o.step, o.inv_sqrt_bc2};
    adam(o.param.f32(), o.m.f32(), o.v.f32(), o.grad.f32(), o.param.numel, c);
}

// torch.optim.AdamW: p *= 1 - lr*wd, then Adam's step on the raw gradient.
void op_adamw_update(const xylem_op_desc& desc, xylem_stream_s&) {
    OpArgs a(desc, 1, 1, 3);
    const auto o = plugin_kit::adam_operands<xylem_adamw_attrs>(a);
    const AdamConsts c{o.attrs.beta1, o.attrs.beta2, 0.0f, o.attrs.eps, o.step, o.inv_sqrt_bc2};
    adamw(o.param.f32(), o.m.f32(), o.v.f32(), o.grad.f32(), o.param.numel, c, 1.0f - o.attrs.lr * o.attrs.weight_decay);
}

// torch.optim.RMSprop: outputs (param, square_avg[, momentum_buffer if momentum > 0][, grad_avg if centered]).
void op_rmsprop_update(const xylem_op_desc& desc, xylem_stream_s&) {
    OpArgs a(desc, 1, 1, desc.n_outputs);  // 2 to 4 outputs, as the attrs say (checked by the rule)
    const auto o = plugin_kit::rmsprop_operands(a, desc.n_outputs);
    const auto& attrs = o.attrs;
    const bool has_buf = o.has_buffer, centered = o.centered;
    const Tensor &tp = o.param, &ts = o.square_avg, &tg = o.grad;
    float* buf = has_buf ? o.momentum_buffer.f32() : nullptr;
    float* ga = centered ? o.grad_avg.f32() : nullptr;
    const RmspropConsts c{attrs.lr, attrs.alpha, attrs.eps, attrs.weight_decay, attrs.momentum};
    rmsprop(tp.f32(), ts.f32(), buf, ga, tg.f32(), tp.numel, c);
}

}  // namespace xylem::native
