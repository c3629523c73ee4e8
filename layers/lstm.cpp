// LSTM cell: per step one GEMM and one run of 9 elementwise ops forward, 12 (11 at t = 0) and one
// GEMM backward; the step fusion pass turns each run into one launch.
#include "xylem/layers/lstm.h"

#include "xylem/layers/registry.h"
#include "xylem/op_calls.h"

namespace xylem {

namespace {
constexpr int kI = 0, kF = 1, kG = 2, kO = 3;  // PyTorch's gate order
constexpr xylem_activation kSig = XYLEM_ACT_SIGMOID, kTanh = XYLEM_ACT_TANH;
}  // namespace

void Lstm::init_bias(const Weights& w) const {
    if (options().forget_bias == 0.0f) return;
    const int64_t h = hidden_units();
    float* b = w.b_ih->value.host_read_write<float>();  // still on the host at bind time
    for (int64_t j = kF * h; j < (kF + 1) * h; ++j) b[j] += options().forget_bias;
}

void Lstm::allocate(Device& dev, Level& lv, int64_t batch, int64_t time) const {
    const int64_t h = hidden_units();
    lv.c = Tensor({(time + 1) * h, batch}, DType::F32, dev);
    lv.tc = Tensor({time * h, batch}, DType::F32, dev);
    for (Tensor& d : lv.dc) d = Tensor({h, batch}, DType::F32, dev);
    lv.s.clear();
    for (int i = 0; i < 7; ++i) lv.s.emplace_back(Shape{h, batch}, DType::F32, dev);
}

void Lstm::combine_bias(Device& dev, const Weights& w, Level& lv) const {
    const Shape col = lv.bias.shape();
    ops::axpby(dev, 1.0f, w.b_ih->value.reshaped(col), 1.0f, w.b_hh->value.reshaped(col), lv.bias);
}

void Lstm::forward_step(Device& dev, const Weights& w, Level& lv, int64_t t) const {
    Tensor zt = step(lv.z, t);
    ops::gemm(dev, false, false, 1.0f, w.w_hh->value, block(lv.hs, t), 1.0f, zt);
    // From here to h_t: elementwise only, one iteration space [H, B].
    Tensor ai = gate(lv.a, t, kI), af = gate(lv.a, t, kF), ag = gate(lv.a, t, kG), ao = gate(lv.a, t, kO);
    ops::act_fwd(dev, kSig, gate(lv.z, t, kI), ai);
    ops::act_fwd(dev, kSig, gate(lv.z, t, kF), af);
    ops::act_fwd(dev, kTanh, gate(lv.z, t, kG), ag);
    ops::act_fwd(dev, kSig, gate(lv.z, t, kO), ao);
    Tensor c = block(lv.c, t + 1), tc = block(lv.tc, t), h = block(lv.hs, t + 1);
    ops::mul(dev, af, block(lv.c, t), lv.s[0]);
    ops::mul(dev, ai, ag, lv.s[1]);
    ops::axpby(dev, 1.0f, lv.s[0], 1.0f, lv.s[1], c);
    ops::act_fwd(dev, kTanh, c, tc);
    ops::mul(dev, ao, tc, h);
}

void Lstm::begin_backward(Device& dev, Level& lv) const { ops::fill(dev, lv.dc[0], 0.0f); }

void Lstm::backward_step(Device& dev, const Weights& w, Level& lv, int64_t t) const {
    const int64_t time = lv.tc.dim(0) / hidden_units();
    const Tensor dh = block(lv.dy, t), tc = block(lv.tc, t);
    const Tensor ai = gate(lv.a, t, kI), af = gate(lv.a, t, kF), ag = gate(lv.a, t, kG), ao = gate(lv.a, t, kO);
    // dL/dc flows from step t+1 through dc_in; z now receives the gate gradients.
    const Tensor& dc_in = lv.dc[(time - 1 - t) % 2];
    Tensor& dc_out = lv.dc[(time - t) % 2];
    Tensor dzi = gate(lv.z, t, kI), dzf = gate(lv.z, t, kF), dzg = gate(lv.z, t, kG), dzo = gate(lv.z, t, kO);
    std::vector<Tensor>& s = lv.s;
    ops::mul(dev, dh, tc, s[0]);
    ops::act_bwd(dev, kSig, s[0], ao, dzo);  // do = dh*tanh(c)
    ops::mul(dev, dh, ao, s[1]);
    ops::act_bwd(dev, kTanh, s[1], tc, s[2]);
    ops::axpby(dev, 1.0f, s[2], 1.0f, dc_in, s[3]);  // dc = dh*o*(1 - tanh(c)^2) + dc_in
    ops::mul(dev, s[3], ag, s[4]);
    ops::act_bwd(dev, kSig, s[4], ai, dzi);  // di = dc*g
    ops::mul(dev, s[3], ai, s[5]);
    ops::act_bwd(dev, kTanh, s[5], ag, dzg);  // dg = dc*i
    ops::mul(dev, s[3], block(lv.c, t), s[6]);
    ops::act_bwd(dev, kSig, s[6], af, dzf);  // df = dc*c_prev
    if (t == 0) return;  // truncated BPTT: nothing flows into the previous batch
    ops::mul(dev, s[3], af, dc_out);
    Tensor dh_prev = block(lv.dy, t - 1);
    ops::gemm(dev, true, false, 1.0f, w.w_hh->value, step(lv.z, t), 1.0f, dh_prev);
}

std::vector<Recurrent::InputGrad> Lstm::gate_grads(Device& dev, Level& lv) {
    const int64_t g = 4 * hidden_units(), time = lv.tc.dim(0) / hidden_units();
    swap_rows(dev, lv.z, time, g, lv.p);  // rows (t, gate unit) -> (gate unit, t)
    return {{0, g, lv.p, true}};          // both sides see the same pre-activation gradient
}

namespace {
const LayerRegistration<RecurrentOptions> kLstm{
    "lstm", {"hidden", "layers", "dropout", "forget_bias", "init"},
    [](const ConfigSection& s) { return parse_recurrent_options(s, true); },
    [](const RecurrentOptions& o, LayerContext& c) -> std::unique_ptr<Layer> {
        return std::make_unique<Lstm>(o, c.next_seed());
    }};
}  // namespace

}  // namespace xylem
