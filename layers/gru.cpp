// GRU cell: per step one GEMM (W_hh h into a scratch: W_hn h stays apart from W_in x) and one run
// of 11 elementwise ops forward, 9 (10 past t = 0) and one GEMM backward; the step fusion pass
// turns each run into one launch.
#include "xylem/layers/gru.h"

#include "xylem/layers/registry.h"
#include "xylem/op_calls.h"

namespace xylem {

namespace {
constexpr int kR = 0, kZ = 1, kN = 2;  // PyTorch's gate order
constexpr xylem_activation kSig = XYLEM_ACT_SIGMOID, kTanh = XYLEM_ACT_TANH;
}  // namespace

void Gru::allocate(Device& dev, Level& lv, int64_t batch, int64_t time) const {
    const int64_t h = hidden_units();
    lv.r = Tensor({3 * h, batch}, DType::F32, dev);
    lv.hn = Tensor({time * h, batch}, DType::F32, dev);
    lv.dzn = Tensor({time * h, batch}, DType::F32, dev);
    lv.dzn_t = Tensor({h, time * batch}, DType::F32, dev);
    lv.s.clear();
    for (int i = 0; i < 6; ++i) lv.s.emplace_back(Shape{h, batch}, DType::F32, dev);
}

// r and z take both biases in the projection; n takes b_in there and b_hn inside r*(...).
void Gru::combine_bias(Device& dev, const Weights& w, Level& lv) const {
    const int64_t h = hidden_units();
    Tensor rz = lv.bias.rows(0, 2 * h), n = lv.bias.rows(2 * h, h);
    ops::axpby(dev, 1.0f, w.b_ih->value.rows(0, 2 * h).reshaped({2 * h, 1}), 1.0f,
               w.b_hh->value.rows(0, 2 * h).reshaped({2 * h, 1}), rz);
    ops::copy(dev, w.b_ih->value.rows(2 * h, h), n);
}

void Gru::forward_step(Device& dev, const Weights& w, Level& lv, int64_t t) const {
    const int64_t h = hidden_units();
    const Tensor h_prev = block(lv.hs, t);
    ops::gemm(dev, false, false, 1.0f, w.w_hh->value, h_prev, 0.0f, lv.r);
    // From here to h_t: elementwise only, one iteration space [H, B].
    std::vector<Tensor>& s = lv.s;
    Tensor ar = gate(lv.a, t, kR), az = gate(lv.a, t, kZ), an = gate(lv.a, t, kN);
    Tensor hn = block(lv.hn, t), h_next = block(lv.hs, t + 1);
    ops::axpby(dev, 1.0f, gate(lv.z, t, kR), 1.0f, lv.r.rows(0, h), s[0]);
    ops::act_fwd(dev, kSig, s[0], ar);
    ops::axpby(dev, 1.0f, gate(lv.z, t, kZ), 1.0f, lv.r.rows(h, h), s[1]);
    ops::act_fwd(dev, kSig, s[1], az);
    ops::add(dev, 1.0f, lv.r.rows(2 * h, h), 1.0f, w.b_hh->value.rows(2 * h, h).reshaped({h, 1}), hn);
    ops::mul(dev, ar, hn, s[2]);
    ops::axpby(dev, 1.0f, gate(lv.z, t, kN), 1.0f, s[2], s[3]);
    ops::act_fwd(dev, kTanh, s[3], an);
    ops::axpby(dev, 1.0f, h_prev, -1.0f, an, s[4]);
    ops::mul(dev, az, s[4], s[5]);
    ops::axpby(dev, 1.0f, an, 1.0f, s[5], h_next);  // h' = n + z*(h - n)
}

void Gru::backward_step(Device& dev, const Weights& w, Level& lv, int64_t t) const {
    const Tensor dh = block(lv.dy, t), h_prev = block(lv.hs, t), hn = block(lv.hn, t);
    const Tensor ar = gate(lv.a, t, kR), az = gate(lv.a, t, kZ), an = gate(lv.a, t, kN);
    // z now receives the hidden side's gate gradients: r, z and dL/d(W_hn h + b_hn).
    Tensor dr = gate(lv.z, t, kR), dz = gate(lv.z, t, kZ), dhn = gate(lv.z, t, kN), dn = block(lv.dzn, t);
    std::vector<Tensor>& s = lv.s;
    ops::mul(dev, dh, az, s[0]);                     // dh*z: the direct path to h_prev
    ops::axpby(dev, 1.0f, dh, -1.0f, s[0], s[1]);    // dh*(1 - z)
    ops::act_bwd(dev, kTanh, s[1], an, dn);          // dL/d(n's pre-activation)
    ops::mul(dev, dn, ar, dhn);
    ops::mul(dev, dn, hn, s[2]);
    ops::act_bwd(dev, kSig, s[2], ar, dr);
    ops::axpby(dev, 1.0f, h_prev, -1.0f, an, s[3]);
    ops::mul(dev, dh, s[3], s[4]);
    ops::act_bwd(dev, kSig, s[4], az, dz);
    if (t == 0) return;  // truncated BPTT: nothing flows into the previous batch
    Tensor dh_prev = block(lv.dy, t - 1);
    ops::axpby_inplace(dev, 1.0f, s[0], 1.0f, dh_prev);
    ops::gemm(dev, true, false, 1.0f, w.w_hh->value, step(lv.z, t), 1.0f, dh_prev);
}

std::vector<Recurrent::InputGrad> Gru::gate_grads(Device& dev, Level& lv) {
    const int64_t h = hidden_units(), time = lv.hn.dim(0) / h;
    swap_rows(dev, lv.z, time, 3 * h, lv.p);   // rows (t, gate unit) -> (gate unit, t)
    swap_rows(dev, lv.dzn, time, h, lv.dzn_t);  // rows (t, unit) -> (unit, t)
    // r and z: the same gradient on both sides; n: the input side's own.
    return {{0, 2 * h, lv.p.rows(0, 2 * h), true}, {2 * h, h, lv.dzn_t, false}};
}

namespace {
const LayerRegistration<RecurrentOptions> kGru{
    "gru", {"hidden", "layers", "dropout", "init"},
    [](const ConfigSection& s) { return parse_recurrent_options(s, false); },
    [](const RecurrentOptions& o, LayerContext& c) -> std::unique_ptr<Layer> {
        return std::make_unique<Gru>(o, c.next_seed());
    }};
}  // namespace

}  // namespace xylem
