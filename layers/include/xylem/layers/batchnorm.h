// BatchNorm over axis 1 ([N, C] or [N, C, H, W]): batch statistics in training, running
// statistics in evaluation, like PyTorch's BatchNorm1d/2d.
#pragma once

#include "xylem/layers/layer.h"

namespace xylem {

// [[model.layers]] type = "batchnorm": eps, momentum (PyTorch's defaults).
struct BatchNormOptions {
    float eps = 1e-5f, momentum = 0.1f;
};

class BatchNorm : public Layer {
public:
    BatchNorm(float eps = 1e-5f, float momentum = 0.1f) : attrs_{eps, momentum, 0, XYLEM_ACT_NONE} {}
    std::string kind() const override { return "batchnorm"; }
    Shape output_shape(const Shape& input) const override;
    void bind(Device& dev, const Shape& input, std::mt19937_64& rng) override;
    const Tensor& forward(Device& dev, const Tensor& x, bool train) override;
    const Tensor& backward(Device& dev, const Tensor& dy, bool need_dx) override;
    std::vector<Param*> params() override { return {&gamma_, &beta_}; }
    ParamFloats param_floats_of(const std::vector<Shape>& in) const override { return {2 * in[0][0], 2 * in[0][0]}; }
    bool takes_lent_output() const override { return true; }  // the inference memory plan (layer.h)
    std::vector<uint32_t> ops_needed(bool backward) const override {
        if (!backward) return {XYLEM_OP_FILL, XYLEM_OP_BATCHNORM_FWD};
        return {XYLEM_OP_FILL, XYLEM_OP_BATCHNORM_FWD, XYLEM_OP_BATCHNORM_BWD};
    }
    std::vector<Param*> buffers() override { return {&running_mean_, &running_var_}; }
    std::string buffer_value_problem(const Param& buffer, const std::vector<float>& values) const override;
    // A ReLU after the batch norm runs inside its ops (ABI 1.11: batchnorm_fwd writes relu(Y), and
    // batchnorm_bwd takes the ReLU's gradient from Y), where the backend takes it: one pass over
    // the map fewer in each direction. Other activations stay layers.
    bool fuse_activation(xylem_activation act, Backend& backend) override;
    xylem_activation fused_activation() const { return static_cast<xylem_activation>(attrs_.activation); }
    // Inference folding (Net): the weights and bias of the layer before this one, a conv or linear
    // with one output channel per row of `w`, rescaled so that it computes this layer's inference
    // output directly: w_out = w * s, b_out = (b - running_mean) * s + beta with s = gamma /
    // sqrt(running_var + eps), per channel (b absent: zero). Computed by the batch-norm op itself
    // in inference mode, so every backend that runs this layer can fold it.
    void fold_into(Device& dev, const Tensor& w, const Tensor* b, Tensor& w_out, Tensor& b_out);

private:
    xylem_batchnorm_attrs attrs_;
    int64_t channels_ = 0;
    Shape sample_;  // the per-sample input shape bind() saw
    Param gamma_, beta_, running_mean_, running_var_;
    Tensor saved_mean_, saved_invstd_, x_, y_, dx_;
    Tensor zeros_;  // [C] zeros: fold_into's mean and shift for the weights
};

}  // namespace xylem
