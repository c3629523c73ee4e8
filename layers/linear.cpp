// Linear layer: forward is one fused op; backward is two GEMMs and a bias-gradient reduction.
#include "xylem/layers/linear.h"

#include <cmath>

#include "xylem/error.h"
#include "xylem/layers/elementwise.h"
#include "xylem/layers/registry.h"
#include "xylem/op_calls.h"

namespace xylem {

Linear::Linear(int64_t out_features, bool bias, float init, float init_std)
    : out_(out_features), has_bias_(bias), init_(init), init_std_(init_std) {
    if (out_features <= 0) throw Error("linear layer: out must be positive, got " + std::to_string(out_features));
}

Shape Linear::output_shape(const Shape& input) const {
    // Rank 3 and more are images: they need a flatten first (a sequence is [time, features]).
    if (input.empty() || input.size() > 2)
        shape_error("expects a flat feature vector per sample (add a flatten layer)", input,
                    {in_ ? in_ : numel(input)});
    if (in_ && input.back() != in_) shape_error("input features do not match the weight", input, {in_});
    Shape out = input;
    out.back() = out_;
    return out;
}

void Linear::bind(Device& dev, const Shape& input, std::mt19937_64& rng) {
    output_shape(input);
    in_ = input.back();
    if (init_std_ > 0) {  // GPT-2's init (nanoGPT's _init_weights)
        weight_ = normal_param(dev, "weight", {out_, in_}, init_std_, rng);
        if (has_bias_) bias_ = constant_param(dev, "bias", {out_}, 0.0f);
        return;
    }
    // PyTorch's default: U(-1/sqrt(in), 1/sqrt(in)) for weight and bias.
    const float k = init_ > 0 ? init_ : 1.0f / std::sqrt(static_cast<float>(in_));
    weight_ = uniform_param(dev, "weight", {out_, in_}, k, rng);
    if (has_bias_) bias_ = uniform_param(dev, "bias", {out_}, k, rng);
}

const Tensor& Linear::forward(Device& dev, const Tensor& x, bool) {
    const size_t rank = x.shape().size();
    if ((rank != 2 && rank != 3) || x.shape().back() != in_)
        shape_error("input", x.shape(), rank == 3 ? Shape{x.dim(0), x.dim(1), in_} : Shape{rank ? x.dim(0) : 0, in_});
    // A batch of sequences [N, T, in] is N*T rows of one GEMM.
    const int64_t rows = x.numel() / in_;
    x_ = x.reshaped({rows, in_});
    Shape y_shape = x.shape();
    y_shape.back() = out_;
    ensure_output(y_, y_shape, dev);
    y_rows_ = y_.reshaped({rows, out_});
    ops::linear_fwd(dev, x_, weight_.value, has_bias_ ? &bias_.value : nullptr, y_rows_, act_);
    return y_;
}

const Tensor& Linear::backward(Device& dev, const Tensor& dy, bool need_dx) {
    if (dy.shape() != y_.shape()) shape_error("output gradient", dy.shape(), y_.shape());
    const Tensor dy_rows = dy.reshaped(y_rows_.shape());
    const Tensor* dz = &dy_rows;
    if (act_ != XYLEM_ACT_NONE) {
        ensure(dz_, y_rows_.shape(), dev);
        ops::act_bwd(dev, act_, dy_rows, y_rows_, dz_);
        dz = &dz_;
    }
    // dW = dz^T x; beta 1 adds to a shared parameter's gradient.
    ops::gemm(dev, true, false, 1.0f, *dz, x_, param_grad_beta(), weight_.grad);
    if (has_bias_) ops::bias_grad(dev, *dz, bias_.grad, param_grad_beta());
    if (!need_dx) return dx_;
    Shape x_shape = y_.shape();
    x_shape.back() = in_;
    ensure(dx_, x_shape, dev);
    Tensor dx_rows = dx_.reshaped(x_.shape());
    ops::gemm(dev, false, false, 1.0f, *dz, weight_.value, 0.0f, dx_rows);  // dx = dz W
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
    if (!fusable_activation(act, backend)) return false;  // e.g. GELU: it stays a layer
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
    "linear", {"out", "bias", "init", "init_std"},
    [](const ConfigSection& s) {
        LinearOptions o;
        if (!s.has("out")) s.fail("out", "is required for a linear layer");
        if (s.is_string("out")) {
            std::string v;
            s.get("out", v);
            if (v != "vocab") s.fail("out", "must be a count of features or \"vocab\" (the data's vocabulary size), got '" + v + "'");
            o.out_from_vocabulary = true;
        } else {
            s.get("out", o.out, ranges::features);
        }
        s.get("bias", o.bias);
        s.get("init", o.init);
        if (s.has("init") && !(o.init > 0))
            s.fail("init", "must be positive (the bound of U(-init, init)); leave it out for PyTorch's U(+-1/sqrt(in))");
        s.get("init_std", o.init_std);
        if (s.has("init_std") && !(o.init_std > 0 && std::isfinite(o.init_std)))
            s.fail("init_std", "must be positive and finite (weight N(0, init_std^2), bias 0)");
        if (s.has("init") && s.has("init_std")) s.fail("init_std", "and `init` exclude each other: give one");
        return o;
    },
    [](const LinearOptions& o, LayerContext& c) -> std::unique_ptr<Layer> {
        const int64_t out = o.out_from_vocabulary ? c.vocabulary("linear out = \"vocab\"") : o.out;
        return std::make_unique<Linear>(out, o.bias, o.init, o.init_std);
    }};
}  // namespace

}  // namespace xylem
