// [[model.layers]] type = "bias" (y = x + weight) and type = "scale" (y = x * weight): a learned
// tensor broadcast over the trailing axes of each sample (`shape`: those axes, [F] for a feature
// vector, [T, F], ...; [1] is one value for every element). ONNX's Add, Sub, Mul and Div of a
// constant on the model's data (a normalisation's mean and scale, a residual's factor) import as
// these, the constant becoming the weight. Forward is one op; the weight's gradient is one
// bias_grad reduction over the rows.
#pragma once

#include "xylem/layers/layer.h"

namespace xylem {

struct BroadcastOptions {
    Shape shape;
};

class BroadcastConstant : public Layer {
public:
    BroadcastConstant(bool scale, Shape shape);
    std::string kind() const override { return scale_ ? "scale" : "bias"; }
    Shape output_shape(const Shape& input) const override;
    void bind(Device& dev, const Shape& input, std::mt19937_64& rng) override;
    const Tensor& forward(Device& dev, const Tensor& x, bool train) override;
    const Tensor& backward(Device& dev, const Tensor& dy, bool need_dx) override;
    std::vector<Param*> params() override { return {&weight_}; }
    ParamFloats param_floats_of(const std::vector<Shape>&) const override { return {numel(shape_), 0}; }
    bool can_accumulate_param_grads() const override { return true; }
    std::vector<uint32_t> ops_needed(bool backward) const override;

private:
    bool scale_;
    Shape shape_;
    Param weight_;
    Tensor x_, y_, dx_, prod_;
};

}  // namespace xylem
