// Linear layer: forward is one fused op; backward is two GEMMs and a bias-gradient reduction.
#include "xylem/layers/linear.h"

#include <cmath>

#include "xylem/error.h"
#include "xylem/layers/registry.h"
#include "xylem/op_calls.h"

namespace xylem {

Linear::Linear(int64_t out_features, bool bias) : out_(out_features), has_bias_(bias) {
    if (out_features <= 0) throw Error("linear layer: out must be positive, got " + std::to_string(out_features));
}

Shape Linear::output_shape(const Shape& input) const {
    if (input.size() != 1)
        shape_error("expects a flat feature vector per sample (add a flatten layer)", input,
                    {in_ ? in_ : numel(input)});
    if (in_ && input[0] != in_) shape_error("input features do not match the weight", input, {in_});
    return {out_};
}

void Linear::bind(Device& dev, const Shape& input, std::mt19937_64& rng) {
    output_shape(input);
    in_ = input[0];
    // PyTorch's default: U(-1/sqrt(in), 1/sqrt(in)) for weight and bias.
    const float k = 1.0f / std::sqrt(static_cast<float>(in_));
    weight_ = uniform_param(dev, "weight", {out_, in_}, k, rng);
    if (has_bias_) bias_ = uniform_param(dev, "bias", {out_}, k, rng);
}

const Tensor& Linear::forward(Device& dev, const Tensor& x, bool) {
    if (x.shape().size() != 2 || x.dim(1) != in_) shape_error("input", x.shape(), {x.dim(0), in_});
    x_ = x;
    ensure(y_, {x.dim(0), out_}, dev);
    ops::linear_fwd(dev, x, weight_.value, has_bias_ ? &bias_.value : nullptr, y_, act_);
    return y_;
}

const Tensor& Linear::backward(Device& dev, const Tensor& dy, bool need_dx) {
    if (dy.shape() != y_.shape()) shape_error("output gradient", dy.shape(), y_.shape());
    const Tensor* dz = &dy;
    if (act_ != XYLEM_ACT_NONE) {
        ensure(dz_, dy.shape(), dev);
        ops::act_bwd(dev, act_, dy, y_, dz_);
        dz = &dz_;
    }
    ops::gemm(dev, true, false, 1.0f, *dz, x_, 0.0f, weight_.grad);  // dW = dz^T x
    if (has_bias_) ops::bias_grad(dev, *dz, bias_.grad);
    if (!need_dx) return dx_;
    ensure(dx_, x_.shape(), dev);
    ops::gemm(dev, false, false, 1.0f, *dz, weight_.value, 0.0f, dx_);  // dx = dz W
    return dx_;
}

std::vector<uint32_t> Linear::ops_needed(bool backward) const {
    if (!backward) return {XYLEM_OP_FILL, XYLEM_OP_LINEAR_FWD};
    std::vector<uint32_t> ops = {XYLEM_OP_FILL, XYLEM_OP_LINEAR_FWD, XYLEM_OP_GEMM};
    if (has_bias_) ops.push_back(XYLEM_OP_BIAS_GRAD);
    if (act_ != XYLEM_ACT_NONE) ops.push_back(XYLEM_OP_ACT_BWD);
    return ops;
}

bool Linear::fuse_activation(xylem_activation act, Backend& backend) {
    if (act_ != XYLEM_ACT_NONE || !backend.supports(XYLEM_OP_LINEAR_FWD)) return false;
    act_ = act;
    return true;
}

std::vector<Param*> Linear::params() {
    if (has_bias_) return {&weight_, &bias_};
    return {&weight_};
}

namespace {
const LayerRegistration<LinearOptions> kLinear{
    "linear", {"out", "bias"},
    [](const ConfigSection& s) {
        LinearOptions o;
        if (!s.has("out")) s.fail("out", "is required for a linear layer");
        s.get("out", o.out, ranges::features);
        s.get("bias", o.bias);
        return o;
    },
    [](const LinearOptions& o, LayerContext&) -> std::unique_ptr<Layer> { return std::make_unique<Linear>(o.out, o.bias); }};
}  // namespace

}  // namespace xylem
