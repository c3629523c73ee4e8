// The Solver base (clipping, per-parameter weight decay, state slots), SGD, Adam and AdamW: one
// fused update op per parameter tensor.
#include "xylem/solvers/solver.h"

#include <cmath>

#include "xylem/error.h"
#include "xylem/op_calls.h"

namespace xylem {

std::vector<Tensor>& Solver::state(std::vector<Tensor>& slots, Device& dev, const std::vector<Param*>& params) {
    if (slots.size() == params.size()) return slots;
    slots.clear();
    for (Param* p : params) {
        slots.emplace_back(p->value.shape(), DType::F32, dev);
        ops::fill(dev, slots.back(), 0.0f);  // zeroed on the device
    }
    return slots;
}

void Solver::set_clipping(const ClipOptions& c) {
    if (!(c.value >= 0)) throw Error("solver.clip_value must be positive (0: no clipping by value)");
    if (!(c.norm >= 0)) throw Error("solver.clip_norm must be positive (0: no clipping by norm)");
    if (c.value > 0 && c.norm > 0) throw Error("solver.clip_value and solver.clip_norm cannot both be set");
    clip_ = c;
}

float Solver::weight_decay_for(const Param& p, float wd) const {
    return no_decay_bias_ && p.value.shape().size() <= 1 ? 0.0f : wd;
}

std::vector<uint32_t> Solver::ops_needed() const {
    std::vector<uint32_t> ops = update_ops();
    if (clip_.value > 0) ops.push_back(XYLEM_OP_CLAMP);
    if (clip_.norm > 0) {
        ops.push_back(XYLEM_OP_SUM_SQUARES);
        ops.push_back(XYLEM_OP_CLIP_BY_NORM);
    }
    return ops;
}

void Solver::step(Device& dev, const std::vector<Param*>& params) {
    if (dev.capture_log())
        if (const std::string why = capture_blocker(); !why.empty()) throw Error(why);
    if (clip_.norm > 0 && !params.empty()) {  // the global norm needs every gradient first
        if (!norm_sq_.defined()) norm_sq_ = Tensor({1}, DType::F32, dev);
        for (size_t i = 0; i < params.size(); ++i) ops::sum_squares(dev, params[i]->grad, norm_sq_, i == 0 ? 0.0f : 1.0f);
    }
    prepare(dev, params);
    for (size_t i = 0; i < params.size(); ++i) {
        clip(dev, *params[i]);
        update_one(dev, i, *params[i]);
    }
}

// By norm: the squared norms of every gradient are summed into one device scalar (step(), in
// parameter order, so the sum is reproducible), and each gradient is scaled by a factor the device
// computes from it. The host never reads the norm, so the step stays asynchronous and capturable.
void Solver::clip(Device& dev, Param& p) {
    if (clip_.value > 0) ops::clamp(dev, p.grad, -clip_.value, clip_.value);
    if (clip_.norm > 0) ops::clip_by_norm(dev, norm_sq_, p.grad, clip_.norm, 1e-6f);
}

Sgd::Sgd(const SgdOptions& o) : Solver(o.lr), o_(o) {
    if (!(o.lr > 0)) throw Error("solver.lr must be positive");
    if (o.momentum < 0) throw Error("solver.momentum must be >= 0");
    if (o.nesterov && (o.momentum <= 0 || o.dampening != 0))
        throw Error("solver.nesterov needs momentum > 0 and dampening = 0");
}

void Sgd::prepare(Device& dev, const std::vector<Param*>& params) {
    // PyTorch seeds the velocity with the first gradient undamped; from a zero velocity that
    // is one step with dampening 0.
    step_ = {lr_, o_.momentum, steps_ == 0 ? 0.0f : o_.dampening, o_.weight_decay, o_.nesterov ? 1 : 0};
    ++steps_;
    state(velocity_, dev, params);
}

void Sgd::update_one(Device& dev, size_t i, Param& p) {
    xylem_sgd_attrs a = step_;
    a.weight_decay = weight_decay_for(p, o_.weight_decay);
    ops::sgd_update(dev, p.value, velocity_[i], p.grad, a);
}

std::vector<Solver::StateSlot> Sgd::state_slots(Device& dev, const std::vector<Param*>& params) {
    return {{"momentum_buffer", &state(velocity_, dev, params)}};
}

Adam::Adam(const AdamOptions& o, bool decoupled) : Solver(o.lr), o_(o), decoupled_(decoupled) {
    if (!(o.lr > 0)) throw Error("solver.lr must be positive");
    if (!(o.beta1 >= 0 && o.beta1 < 1) || !(o.beta2 >= 0 && o.beta2 < 1))
        throw Error("solver.beta1 and solver.beta2 must be in [0, 1)");
    if (decoupled && !(o.weight_decay >= 0)) throw Error("solver.weight_decay must be >= 0");
}

std::string Adam::capture_blocker() const {
    return "train.capture = true does not support solver.type = \"" + kind() +
           "\": its bias corrections change every step and a captured update would replay one step's";
}

void Adam::prepare(Device& dev, const std::vector<Param*>& params) {
    ++steps_;
    const double t = static_cast<double>(steps_);
    bc1_ = static_cast<float>(1.0 - std::pow(static_cast<double>(o_.beta1), t));
    bc2_ = static_cast<float>(1.0 - std::pow(static_cast<double>(o_.beta2), t));
    state(m_, dev, params);
    state(v_, dev, params);
}

void Adam::update_one(Device& dev, size_t i, Param& p) {
    const float wd = weight_decay_for(p, o_.weight_decay);
    if (decoupled_)
        ops::adamw_update(dev, p.value, m_[i], v_[i], p.grad, xylem_adamw_attrs{lr_, o_.beta1, o_.beta2, o_.eps, wd, bc1_, bc2_});
    else
        ops::adam_update(dev, p.value, m_[i], v_[i], p.grad, xylem_adam_attrs{lr_, o_.beta1, o_.beta2, o_.eps, wd, bc1_, bc2_});
}

std::vector<Solver::StateSlot> Adam::state_slots(Device& dev, const std::vector<Param*>& params) {
    return {{"exp_avg", &state(m_, dev, params)}, {"exp_avg_sq", &state(v_, dev, params)}};
}

}  // namespace xylem
