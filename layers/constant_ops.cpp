// The bias and scale layers (constant_ops.h). Each batched tensor is seen as rows [R, C] with C the
// weight's element count (the trailing axes it covers; 1 for a single value), so the weight is a
// row every row shares: add's row form, fused_elementwise's ROW input, and bias_grad's column sums.
#include "xylem/layers/constant_ops.h"

#include "xylem/error.h"
#include "xylem/fused_builder.h"
#include "xylem/layers/registry.h"
#include "xylem/op_calls.h"

namespace xylem {

BroadcastConstant::BroadcastConstant(bool scale, Shape shape) : scale_(scale), shape_(std::move(shape)) {
    if (shape_.empty())
        throw Error(std::string(kind()) + " layer: shape must name at least one axis ([1] for one value)");
    for (int64_t d : shape_)
        if (d < 1) throw Error(std::string(kind()) + " layer: shape " + to_string(shape_) + " has an axis below 1");
}

Shape BroadcastConstant::output_shape(const Shape& input) const {
    const bool single = numel(shape_) == 1;
    const bool trailing = shape_.size() <= input.size() &&
                          std::equal(shape_.begin(), shape_.end(), input.end() - static_cast<long>(shape_.size()));
    if (!single && !trailing)
        shape_error("weight " + to_string(shape_) + " is not the input's trailing axes", input, shape_);
    return input;
}

void BroadcastConstant::bind(Device& dev, const Shape& input, std::mt19937_64&) {
    output_shape(input);
    weight_ = constant_param(dev, "weight", shape_, scale_ ? 1.0f : 0.0f);  // the identity until loaded
}

std::vector<uint32_t> BroadcastConstant::ops_needed(bool backward) const {
    std::vector<uint32_t> ops{scale_ ? XYLEM_OP_FUSED_ELEMENTWISE : XYLEM_OP_ADD};
    if (backward) {
        ops.push_back(XYLEM_OP_BIAS_GRAD);
        if (scale_) ops.push_back(XYLEM_OP_MUL);
    }
    return ops;
}

namespace {
// x * w with w a row of x's [rows, cols] view (or dy * w).
void times_row(Device& dev, const Tensor& x, const Tensor& w, Tensor& out) {
    FusedBuilder b;
    b.output(0, b.apply(XYLEM_FUSED_MUL, b.input(0), b.input(1)));
    ops::fused_elementwise(dev, b.finish({XYLEM_FUSED_FULL, XYLEM_FUSED_ROW}), {&x, &w}, {&out});
}
}  // namespace

const Tensor& BroadcastConstant::forward(Device& dev, const Tensor& x, bool) {
    const int64_t cols = numel(shape_), rows = x.numel() / cols;
    x_ = x.reshaped({rows, cols});
    ensure(y_, x.shape(), dev);
    Tensor y_rows = y_.reshaped({rows, cols});
    const Tensor w = weight_.value.reshaped({cols});
    if (scale_)
        times_row(dev, x_, w, y_rows);
    else
        ops::add(dev, 1.0f, x_, 1.0f, w, y_rows);
    return y_;
}

const Tensor& BroadcastConstant::backward(Device& dev, const Tensor& dy, bool need_dx) {
    if (dy.shape() != y_.shape()) shape_error("output gradient", dy.shape(), y_.shape());
    const Tensor dy_rows = dy.reshaped(x_.shape());
    Tensor dw = weight_.grad.reshaped({x_.dim(1)});
    if (scale_) {  // dw = column sums of dy * x; dx = dy * w
        ensure(prod_, x_.shape(), dev);
        ops::mul(dev, dy_rows, x_, prod_);
        ops::bias_grad(dev, prod_, dw, param_grad_beta());
        if (!need_dx) return dx_;
        ensure(dx_, dy.shape(), dev);
        Tensor dx_rows = dx_.reshaped(x_.shape());
        times_row(dev, dy_rows, weight_.value.reshaped({x_.dim(1)}), dx_rows);
        return dx_;
    }
    ops::bias_grad(dev, dy_rows, dw, param_grad_beta());  // dw = column sums of dy; dx = dy
    dx_ = dy;
    return dx_;
}

namespace {
BroadcastOptions parse(const ConfigSection& s, const char* type) {
    BroadcastOptions o;
    if (!s.has("shape"))
        s.fail("shape", std::string("is required for a ") + type + " layer (the trailing axes its weight covers)");
    s.get_shape("shape", o.shape, ranges::features);
    if (o.shape.empty()) s.fail("shape", "must name at least one axis ([1] for one value)");
    return o;
}

const LayerRegistration<BroadcastOptions> kBias{"bias",
                                                {"shape"},
                                                [](const ConfigSection& s) { return parse(s, "bias"); },
                                                [](const BroadcastOptions& o, LayerContext&) -> std::unique_ptr<Layer> {
                                                    return std::make_unique<BroadcastConstant>(false, o.shape);
                                                }};
const LayerRegistration<BroadcastOptions> kScale{
    "scale",
    {"shape"},
    [](const ConfigSection& s) { return parse(s, "scale"); },
    [](const BroadcastOptions& o, LayerContext&) -> std::unique_ptr<Layer> {
        return std::make_unique<BroadcastConstant>(true, o.shape);
    }};
}  // namespace

}  // namespace xylem
