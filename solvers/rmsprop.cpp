// RMSprop (torch.optim.RMSprop): one fused rmsprop_update op per parameter tensor. It has no
// per-step host value (no bias correction), so a captured step replays it exactly.
#include "xylem/error.h"
#include "xylem/op_calls.h"
#include "xylem/solvers/solver.h"

namespace xylem {

Rmsprop::Rmsprop(const RmspropOptions& o) : Solver(o.lr), o_(o) {
    if (!(o.lr > 0)) throw Error("solver.lr must be positive");
    if (!(o.alpha >= 0 && o.alpha < 1)) throw Error("solver.alpha must be in [0, 1)");
    if (!(o.eps >= 0)) throw Error("solver.eps must be >= 0");
    if (!(o.momentum >= 0)) throw Error("solver.momentum must be >= 0");
    if (!(o.weight_decay >= 0)) throw Error("solver.weight_decay must be >= 0");
}

void Rmsprop::prepare(Device& dev, const std::vector<Param*>& params) {
    ++steps_;
    state(square_avg_, dev, params);
    if (o_.momentum > 0) state(momentum_buffer_, dev, params);
    if (o_.centered) state(grad_avg_, dev, params);
}

void Rmsprop::update_one(Device& dev, size_t i, Param& p) {
    const xylem_rmsprop_attrs a{lr_, o_.alpha, o_.eps, weight_decay_for(p, o_.weight_decay), o_.momentum, o_.centered ? 1 : 0};
    ops::rmsprop_update(dev, p.value, square_avg_[i], o_.momentum > 0 ? &momentum_buffer_[i] : nullptr,
                        o_.centered ? &grad_avg_[i] : nullptr, p.grad, a);
}

std::vector<Solver::StateSlot> Rmsprop::state_slots(Device& dev, const std::vector<Param*>& params) {
    std::vector<StateSlot> slots{{"square_avg", &state(square_avg_, dev, params)}};
    if (o_.momentum > 0) slots.push_back({"momentum_buffer", &state(momentum_buffer_, dev, params)});
    if (o_.centered) slots.push_back({"grad_avg", &state(grad_avg_, dev, params)});
    return slots;
}

}  // namespace xylem
