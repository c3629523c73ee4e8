// LSTM (PyTorch's nn.LSTM with batch_first = True): gates i, f, g, o in that order in every
// weight_ih_l<k> [4H, in], weight_hh_l<k> [4H, H], bias_ih_l<k> [4H], bias_hh_l<k> [4H].
//   i = sigmoid(.), f = sigmoid(.), g = tanh(.), o = sigmoid(.)  of  W_ih x + b_ih + W_hh h + b_hh
//   c' = f*c + i*g,  h' = o*tanh(c')
// The stacking, layouts and carried state are Recurrent's (recurrent.h).
#pragma once

#include "xylem/layers/recurrent.h"

namespace xylem {

class Lstm : public Recurrent {
public:
    Lstm(const RecurrentOptions& options, uint64_t seed) : Recurrent(options, seed, 4, 2) {}
    std::string kind() const override { return "lstm"; }

protected:
    void init_bias(const Weights& w) const override;
    void allocate(Device& dev, Level& lv, int64_t batch, int64_t time) const override;
    void combine_bias(Device& dev, const Weights& w, Level& lv) const override;
    void forward_step(Device& dev, const Weights& w, Level& lv, int64_t t) const override;
    void begin_backward(Device& dev, Level& lv) const override;
    void backward_step(Device& dev, const Weights& w, Level& lv, int64_t t) const override;
    std::vector<InputGrad> gate_grads(Device& dev, Level& lv) override;
};

}  // namespace xylem
