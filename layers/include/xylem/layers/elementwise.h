// Shape-preserving layers: activations (ReLU, Sigmoid, Tanh), Softmax/LogSoftmax, Dropout.
#pragma once

#include "xylem/layers/layer.h"

namespace xylem {

class Activation : public Layer {
public:
    explicit Activation(xylem_activation act) : act_(act) {}
    std::string kind() const override;
    Shape output_shape(const Shape& input) const override { return input; }
    const Tensor& forward(Device& dev, const Tensor& x, bool train) override;
    const Tensor& backward(Device& dev, const Tensor& dy, bool need_dx) override;
    bool takes_lent_output() const override { return true; }  // the inference memory plan (layer.h)
    std::vector<uint32_t> ops_needed(bool backward) const override {
        if (!backward) return {XYLEM_OP_ACT_FWD};
        return {XYLEM_OP_ACT_FWD, XYLEM_OP_ACT_BWD};
    }
    xylem_activation activation() const { return act_; }

private:
    // GELU's derivative reads the input (ops.h's act_bwd), the others' the output.
    bool grad_from_input() const { return act_ == XYLEM_ACT_GELU || act_ == XYLEM_ACT_GELU_TANH; }

    xylem_activation act_;
    Tensor x_, y_, dx_;
};

// Whether linear_fwd and conv2d_fwd on `backend` can run `act` as their epilogue (the one rule for
// fusing an activation layer into the layer it reads, and for folding one into a convolution with
// its batch norm): not the GELUs, whose gradient needs the input; ReLU6 from ABI 1.8.
bool fusable_activation(xylem_activation act, const Backend& backend);

// [[model.layers]] type = "gelu": approximate = "none" (exact, erf: nanoGPT, torch's default) or
// "tanh" (GPT-2's).
struct GeluOptions {
    bool tanh = false;
};

// Softmax or log-softmax over the last axis.
class Softmax : public Layer {
public:
    explicit Softmax(bool log) : log_(log) {}
    std::string kind() const override { return log_ ? "log_softmax" : "softmax"; }
    Shape output_shape(const Shape& input) const override;
    const Tensor& forward(Device& dev, const Tensor& x, bool train) override;
    const Tensor& backward(Device& dev, const Tensor& dy, bool need_dx) override;
    bool takes_lent_output() const override { return true; }  // the inference memory plan (layer.h)
    std::vector<uint32_t> ops_needed(bool backward) const override {
        if (!backward) return {XYLEM_OP_SOFTMAX_FWD};
        return {XYLEM_OP_SOFTMAX_FWD, XYLEM_OP_SOFTMAX_BWD};
    }

private:
    bool log_;
    Tensor y_, dx_;
};

// [[model.layers]] type = "dropout": p, the probability of dropping an element.
struct DropoutOptions {
    float p = 0.5f;
};

// Inverted dropout: scales kept values by 1/(1-p) in training, identity in evaluation.
// The mask comes from a counter-based hash of (seed, step, index): the same on every backend.
class Dropout : public Layer {
public:
    Dropout(float p, uint64_t seed);
    std::string kind() const override { return "dropout"; }
    Shape output_shape(const Shape& input) const override { return input; }
    const Tensor& forward(Device& dev, const Tensor& x, bool train) override;
    const Tensor& backward(Device& dev, const Tensor& dy, bool need_dx) override;
    std::vector<uint32_t> ops_needed(bool backward) const override {  // inference passes the input through
        if (!backward) return {};
        return {XYLEM_OP_DROPOUT_FWD, XYLEM_OP_MUL};
    }
    std::vector<std::pair<std::string, uint64_t*>> counters() override { return {{"mask_calls", &calls_}}; }

private:
    float p_;
    uint64_t seed_, calls_ = 0;
    bool trained_ = false;
    Tensor y_, mask_, dx_, passed_, passed_grad_;
};

}  // namespace xylem
