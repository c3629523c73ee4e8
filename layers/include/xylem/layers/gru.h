// GRU (PyTorch's nn.GRU with batch_first = True): gates r, z, n in that order in every
// weight_ih_l<k> [3H, in], weight_hh_l<k> [3H, H], bias_ih_l<k> [3H], bias_hh_l<k> [3H].
//   r = sigmoid(W_ir x + b_ir + W_hr h + b_hr),  z = sigmoid(W_iz x + b_iz + W_hz h + b_hz)
//   n = tanh(W_in x + b_in + r*(W_hn h + b_hn)),  h' = (1 - z)*n + z*h
// The stacking, layouts and carried state are Recurrent's (recurrent.h).
#pragma once

#include "xylem/layers/recurrent.h"

namespace xylem {

class Gru : public Recurrent {
public:
    Gru(const RecurrentOptions& options, uint64_t seed) : Recurrent(options, seed, 3, 1) {}
    std::string kind() const override { return "gru"; }

protected:
    void allocate(Device& dev, Level& lv, int64_t batch, int64_t time) const override;
    void combine_bias(Device& dev, const Weights& w, Level& lv) const override;
    void forward_step(Device& dev, const Weights& w, Level& lv, int64_t t) const override;
    void backward_step(Device& dev, const Weights& w, Level& lv, int64_t t) const override;
    std::vector<InputGrad> gate_grads(Device& dev, Level& lv) override;
};

}  // namespace xylem
