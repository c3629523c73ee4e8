// Linear: y = act(x W^T + b), one fused op; the activation is set when the model fuses a
// following activation layer into it. Per sample it maps a feature vector [in] to [out], or each
// time step of a sequence [time, in] to [time, out] (the same weights at every step).
#pragma once

#include "xylem/layers/layer.h"

namespace xylem {

// [[model.layers]] type = "linear": out (required: a count, or "vocab" for the data's vocabulary
// size), bias, init (> 0: weight and bias drawn from U(-x, x) instead of PyTorch's
// U(-1/sqrt(in), 1/sqrt(in))).
struct LinearOptions {
    int64_t out = 0;
    bool out_from_vocabulary = false;  // out = "vocab"
    bool bias = true;
    float init = 0;
    float init_std = 0;  // > 0: weight N(0, init_std^2) and bias 0 (GPT-2's init)
};

class Linear : public Layer {
public:
    Linear(int64_t out_features, bool bias = true, float init = 0, float init_std = 0);

    std::string kind() const override { return "linear"; }
    Shape output_shape(const Shape& input) const override;
    void bind(Device& dev, const Shape& input, std::mt19937_64& rng) override;
    const Tensor& forward(Device& dev, const Tensor& x, bool train) override;
    const Tensor& backward(Device& dev, const Tensor& dy, bool need_dx) override;
    std::vector<Param*> params() override;
    ParamFloats param_floats_of(const std::vector<Shape>& in) const override {
        return {out_ * in[0].back() + (has_bias_ ? out_ : 0), 0};
    }
    bool can_accumulate_param_grads() const override { return true; }

    bool fuse_activation(xylem_activation act, Backend& backend) override;
    bool takes_lent_output() const override { return true; }  // the inference memory plan (layer.h)
    std::vector<uint32_t> ops_needed(bool backward) const override;
    xylem_activation activation() const { return act_; }
    int64_t out_features() const { return out_; }

private:
    int64_t in_ = 0, out_;
    bool has_bias_;
    float init_, init_std_;
    xylem_activation act_ = XYLEM_ACT_NONE;
    Param weight_, bias_;
    Tensor x_, y_, y_rows_, dz_, dx_;  // x_ and y_rows_: [rows, features] views of the batch
};

}  // namespace xylem
