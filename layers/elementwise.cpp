// Activation, softmax and dropout layers.
#include "xylem/layers/elementwise.h"

#include "xylem/error.h"
#include "xylem/layers/registry.h"
#include "xylem/op_calls.h"

namespace xylem {

std::string Activation::kind() const {
    switch (act_) {
        case XYLEM_ACT_RELU: return "relu";
        case XYLEM_ACT_SIGMOID: return "sigmoid";
        case XYLEM_ACT_TANH: return "tanh";
        case XYLEM_ACT_GELU: return "gelu";
        case XYLEM_ACT_GELU_TANH: return "gelu (tanh)";
        case XYLEM_ACT_RELU6: return "relu6";
        default: return "identity";
    }
}

const Tensor& Activation::forward(Device& dev, const Tensor& x, bool) {
    if (grad_from_input()) x_ = x;  // the producer's output, valid until its next forward
    ops::act_fwd(dev, act_, x, ensure_output(y_, x.shape(), dev));
    return y_;
}

const Tensor& Activation::backward(Device& dev, const Tensor& dy, bool) {
    if (dy.shape() != y_.shape()) shape_error("output gradient", dy.shape(), y_.shape());
    ops::act_bwd(dev, act_, dy, grad_from_input() ? x_ : y_, ensure(dx_, dy.shape(), dev));
    return dx_;
}

Shape Softmax::output_shape(const Shape& input) const {
    if (input.empty()) shape_error("needs at least one axis", input, {-1});
    return input;
}

const Tensor& Softmax::forward(Device& dev, const Tensor& x, bool) {
    ops::softmax_fwd(dev, log_, x, ensure_output(y_, x.shape(), dev));
    return y_;
}

const Tensor& Softmax::backward(Device& dev, const Tensor& dy, bool) {
    if (dy.shape() != y_.shape()) shape_error("output gradient", dy.shape(), y_.shape());
    ops::softmax_bwd(dev, log_, dy, y_, ensure(dx_, dy.shape(), dev));
    return dx_;
}

Dropout::Dropout(float p, uint64_t seed) : p_(p), seed_(seed) {
    if (!(p >= 0.0f && p < 1.0f)) throw Error("dropout layer: p must be in [0, 1), got " + std::to_string(p));
}

const Tensor& Dropout::forward(Device& dev, const Tensor& x, bool train) {
    trained_ = train && p_ > 0.0f;
    if (!trained_) {
        passed_ = x;  // identity: shares the input's storage, no copy
        return passed_;
    }
    ensure(y_, x.shape(), dev);
    ensure(mask_, x.shape(), dev);
    // A fresh stream of masks per call, reproducible from the seed.
    ops::dropout_fwd(dev, x, y_, mask_, p_, seed_ + 0x632BE59BD9B4E019ull * ++calls_);
    return y_;
}

const Tensor& Dropout::backward(Device& dev, const Tensor& dy, bool) {
    if (!trained_) {
        passed_grad_ = dy;
        return passed_grad_;
    }
    if (dy.shape() != mask_.shape()) shape_error("output gradient", dy.shape(), mask_.shape());
    ops::mul(dev, dy, mask_, ensure(dx_, dy.shape(), dev));
    return dx_;
}

bool fusable_activation(xylem_activation act, const Backend& backend) {
    if (act == XYLEM_ACT_GELU || act == XYLEM_ACT_GELU_TANH) return false;
    return act != XYLEM_ACT_RELU6 || backend.api().abi_minor >= 8;
}

namespace {
std::unique_ptr<Layer> activation(xylem_activation act) { return std::make_unique<Activation>(act); }

const LayerRegistration<NoLayerOptions> kRelu{
    "relu", {}, nullptr, [](const NoLayerOptions&, LayerContext&) { return activation(XYLEM_ACT_RELU); }};
const LayerRegistration<NoLayerOptions> kSigmoid{
    "sigmoid", {}, nullptr, [](const NoLayerOptions&, LayerContext&) { return activation(XYLEM_ACT_SIGMOID); }};
// min(max(x, 0), 6): MobileNet's ReLU6 (ONNX's Clip(0, 6) imports as it); fused into a linear or
// conv layer before it like relu.
const LayerRegistration<NoLayerOptions> kRelu6{
    "relu6", {}, nullptr, [](const NoLayerOptions&, LayerContext&) { return activation(XYLEM_ACT_RELU6); }};
const LayerRegistration<NoLayerOptions> kTanh{
    "tanh", {}, nullptr, [](const NoLayerOptions&, LayerContext&) { return activation(XYLEM_ACT_TANH); }};
const LayerRegistration<GeluOptions> kGelu{
    "gelu", {"approximate"},
    [](const ConfigSection& s) {
        GeluOptions o;
        std::string form = "none";
        s.get("approximate", form);
        if (form != "none" && form != "tanh")
            s.fail("approximate", "must be \"none\" (exact, erf) or \"tanh\" (GPT-2's), got '" + form + "'");
        o.tanh = form == "tanh";
        return o;
    },
    [](const GeluOptions& o, LayerContext&) { return activation(o.tanh ? XYLEM_ACT_GELU_TANH : XYLEM_ACT_GELU); }};
const LayerRegistration<NoLayerOptions> kSoftmax{
    "softmax", {}, nullptr,
    [](const NoLayerOptions&, LayerContext&) -> std::unique_ptr<Layer> { return std::make_unique<Softmax>(false); }};
const LayerRegistration<NoLayerOptions> kLogSoftmax{
    "log_softmax", {}, nullptr,
    [](const NoLayerOptions&, LayerContext&) -> std::unique_ptr<Layer> { return std::make_unique<Softmax>(true); }};

const LayerRegistration<DropoutOptions> kDropout{
    "dropout", {"p"},
    [](const ConfigSection& s) {
        DropoutOptions o;
        s.get("p", o.p);
        if (!(o.p >= 0 && o.p < 1)) s.fail("p", "must be in [0, 1)");
        return o;
    },
    // Each dropout layer draws its own mask stream, seeded from the run's seed in model order.
    [](const DropoutOptions& o, LayerContext& c) -> std::unique_ptr<Layer> {
        return std::make_unique<Dropout>(o.p, c.next_seed());
    }};
}  // namespace

}  // namespace xylem
