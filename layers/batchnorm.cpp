// BatchNorm layer over the core batch-norm ops.
#include "xylem/layers/batchnorm.h"

#include <cstdio>

#include "xylem/error.h"
#include "xylem/layers/registry.h"
#include "xylem/op_calls.h"

namespace xylem {

Shape BatchNorm::output_shape(const Shape& input) const {
    if (input.empty()) shape_error("needs a channel axis", input, {-1});
    if (channels_ && input[0] != channels_) shape_error("channels do not match", input, {channels_});
    return input;
}

void BatchNorm::bind(Device& dev, const Shape& input, std::mt19937_64&) {
    output_shape(input);
    channels_ = input[0];
    sample_ = input;
    const Shape c{channels_};
    dev.backend().require(XYLEM_OP_FILL, label());  // initialises the parameters and statistics
    gamma_ = constant_param(dev, "weight", c, 1.0f);  // PyTorch's state_dict names
    beta_ = constant_param(dev, "bias", c, 0.0f);
    auto statistic = [&](const char* name, float value) {  // a buffer: no gradient
        Param p{param_prefix() + name, Tensor(c, DType::F32, dev), Tensor()};
        ops::fill(dev, p.value, value);
        return p;
    };
    running_mean_ = statistic("running_mean", 0.0f);
    running_var_ = statistic("running_var", 1.0f);
    saved_mean_ = Tensor(c, DType::F32, dev);
    saved_invstd_ = Tensor(c, DType::F32, dev);
}

const Tensor& BatchNorm::forward(Device& dev, const Tensor& x, bool train) {
    if (x.shape().size() < 2 || x.dim(1) != channels_) shape_error("input", x.shape(), {x.dim(0), channels_});
    x_ = x;
    xylem_batchnorm_attrs a = attrs_;
    a.training = train ? 1 : 0;
    ops::batchnorm_fwd(dev, x, gamma_.value, beta_.value, ensure_output(y_, x.shape(), dev), running_mean_.value,
                       running_var_.value, saved_mean_, saved_invstd_, a);
    return y_;
}

std::string BatchNorm::buffer_value_problem(const Param& buffer, const std::vector<float>& values) const {
    if (&buffer != &running_var_) return {};
    for (size_t i = 0; i < values.size(); ++i)
        if (values[i] < 0.0f) {
            char v[32];
            std::snprintf(v, sizeof v, "%g", static_cast<double>(values[i]));
            return std::string("holds the negative variance ") + v + " at index " + std::to_string(i) +
                   ": a running variance is never below 0";
        }
    return {};
}

bool BatchNorm::fuse_activation(xylem_activation act, Backend& backend) {
    if (act != XYLEM_ACT_RELU || attrs_.activation != XYLEM_ACT_NONE || sample_.empty()) return false;
    if (!ops::batchnorm_takes_relu(backend, sample_)) return false;
    attrs_.activation = XYLEM_ACT_RELU;
    return true;
}

void BatchNorm::fold_into(Device& dev, const Tensor& w, const Tensor* b, Tensor& w_out, Tensor& b_out) {
    if (w.shape().empty() || w.dim(0) != channels_) shape_error("folded weights", w.shape(), {channels_, -1});
    ensure(zeros_, {channels_}, dev);
    ops::fill(dev, zeros_, 0.0f);
    xylem_batchnorm_attrs a = attrs_;
    a.training = 0;
    a.activation = XYLEM_ACT_NONE;  // the rescaling alone: the folding conv applies the ReLU
    // The weights as one sample whose channel axis is their rows: (w - 0) * s + 0.
    const int64_t per_row = w.numel() / channels_;
    ensure(w_out, w.shape(), dev);
    Tensor w_rows = w.reshaped({1, channels_, per_row, 1}), w_out_rows = w_out.reshaped({1, channels_, per_row, 1});
    ops::batchnorm_fwd(dev, w_rows, gamma_.value, zeros_, w_out_rows, zeros_, running_var_.value, saved_mean_,
                       saved_invstd_, a);
    // The bias as one sample of [C]: (b - mean) * s + beta.
    ensure(b_out, {channels_}, dev);
    Tensor b_in = b ? b->reshaped({1, channels_}) : zeros_.reshaped({1, channels_});
    Tensor b_out_row = b_out.reshaped({1, channels_});
    ops::batchnorm_fwd(dev, b_in, gamma_.value, beta_.value, b_out_row, running_mean_.value, running_var_.value,
                       saved_mean_, saved_invstd_, a);
}

const Tensor& BatchNorm::backward(Device& dev, const Tensor& dy, bool) {
    if (dy.shape() != y_.shape()) shape_error("output gradient", dy.shape(), y_.shape());
    xylem_batchnorm_attrs a = attrs_;
    a.training = 1;
    ops::batchnorm_bwd(dev, dy, x_, gamma_.value, saved_mean_, saved_invstd_, ensure(dx_, x_.shape(), dev),
                       gamma_.grad, beta_.grad, a, a.activation == XYLEM_ACT_RELU ? &y_ : nullptr);
    return dx_;
}

namespace {
const LayerRegistration<BatchNormOptions> kBatchNorm{
    "batchnorm", {"eps", "momentum"},
    [](const ConfigSection& s) {
        BatchNormOptions o;
        s.get("eps", o.eps);
        s.get("momentum", o.momentum);
        if (!(o.eps > 0)) s.fail("eps", "must be positive");
        if (!(o.momentum >= 0 && o.momentum <= 1)) s.fail("momentum", "must be in [0, 1]");
        return o;
    },
    [](const BatchNormOptions& o, LayerContext&) -> std::unique_ptr<Layer> {
        return std::make_unique<BatchNorm>(o.eps, o.momentum);
    }};
}  // namespace

}  // namespace xylem
