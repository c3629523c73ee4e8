// SGD and Adam: one fused update op per parameter tensor.
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

Sgd::Sgd(const SgdOptions& o) : Solver(o.lr), o_(o) {
    if (!(o.lr > 0)) throw Error("solver.lr must be positive");
    if (o.momentum < 0) throw Error("solver.momentum must be >= 0");
    if (o.nesterov && (o.momentum <= 0 || o.dampening != 0))
        throw Error("solver.nesterov needs momentum > 0 and dampening = 0");
}

void Sgd::step(Device& dev, const std::vector<Param*>& params) {
    // PyTorch seeds the velocity with the first gradient undamped; from a zero velocity that
    // is one step with dampening 0.
    xylem_sgd_attrs a{lr_, o_.momentum, steps_ == 0 ? 0.0f : o_.dampening, o_.weight_decay, o_.nesterov ? 1 : 0};
    ++steps_;
    auto& vel = state(velocity_, dev, params);
    for (size_t i = 0; i < params.size(); ++i) ops::sgd_update(dev, params[i]->value, vel[i], params[i]->grad, a);
}

std::vector<Solver::StateSlot> Sgd::state_slots(Device& dev, const std::vector<Param*>& params) {
    return {{"momentum_buffer", &state(velocity_, dev, params)}};
}

Adam::Adam(const AdamOptions& o) : Solver(o.lr), o_(o) {
    if (!(o.lr > 0)) throw Error("solver.lr must be positive");
    if (!(o.beta1 >= 0 && o.beta1 < 1) || !(o.beta2 >= 0 && o.beta2 < 1))
        throw Error("solver.beta1 and solver.beta2 must be in [0, 1)");
}

void Adam::step(Device& dev, const std::vector<Param*>& params) {
    ++steps_;
    const double t = static_cast<double>(steps_);
    xylem_adam_attrs a{lr_, o_.beta1, o_.beta2, o_.eps, o_.weight_decay,
                       static_cast<float>(1.0 - std::pow(static_cast<double>(o_.beta1), t)),
                       static_cast<float>(1.0 - std::pow(static_cast<double>(o_.beta2), t))};
    auto& m = state(m_, dev, params);
    auto& v = state(v_, dev, params);
    for (size_t i = 0; i < params.size(); ++i) ops::adam_update(dev, params[i]->value, m[i], v[i], params[i]->grad, a);
}

std::vector<Solver::StateSlot> Adam::state_slots(Device& dev, const std::vector<Param*>& params) {
    return {{"exp_avg", &state(m_, dev, params)}, {"exp_avg_sq", &state(v_, dev, params)}};
}

}  // namespace xylem
