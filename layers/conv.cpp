// Conv2d and pooling layers over the core conv/pool ops.
#include "xylem/layers/conv.h"

#include <cmath>

#include "xylem/error.h"
#include "xylem/layers/batchnorm.h"
#include "xylem/layers/elementwise.h"
#include "xylem/layers/registry.h"
#include "xylem/op_calls.h"

namespace xylem {

namespace {
// Runs a core shape rule, re-throwing its message under the layer's name.
template <class F> Shape with_label(const std::string& label, F rule) {
    try {
        return rule();
    } catch (const Error& e) {
        throw Error(label + ": " + e.what());
    }
}
Shape per_sample(const Shape& batch) { return Shape(batch.begin() + 1, batch.end()); }
}  // namespace

Conv2d::Conv2d(const Conv2dOptions& o) : o_(o) {
    if (o.out_channels <= 0 || o.kernel_h <= 0 || o.kernel_w <= 0)
        throw Error("conv2d layer: out and kernel must be positive");
    attrs_ = {o.stride, o.stride, o.padding, o.padding, o.dilation, o.dilation, o.groups, XYLEM_ACT_NONE, 0.0f};
}

Shape Conv2d::weight_shape(int64_t in_channels) const {
    return {o_.out_channels, o_.groups > 0 ? in_channels / o_.groups : in_channels, o_.kernel_h, o_.kernel_w};
}

Shape Conv2d::output_shape(const Shape& input) const {
    if (input.size() != 3) shape_error("expects [channels, height, width] per sample", input, {-1, -1, -1});
    return with_label(label(), [&] {
        return per_sample(ops::conv2d_output_shape(batched(1, input), weight_shape(input[0]), attrs_));
    });
}

void Conv2d::bind(Device& dev, const Shape& input, std::mt19937_64& rng) {
    output_shape(input);
    const Shape ws = weight_shape(input[0]);
    // PyTorch's default: U(-1/sqrt(fan_in), 1/sqrt(fan_in)), fan_in = in/groups * kh * kw.
    const float k = 1.0f / std::sqrt(static_cast<float>(ws[1] * ws[2] * ws[3]));
    weight_ = uniform_param(dev, "weight", ws, k, rng);
    if (o_.bias) bias_ = uniform_param(dev, "bias", {ws[0]}, k, rng);
}

Layer::ParamFloats Conv2d::param_floats_of(const std::vector<Shape>& in) const {
    const Shape ws = weight_shape(in[0][0]);
    return {numel(ws) + (o_.bias ? ws[0] : 0), 0};
}

bool Conv2d::fuse_activation(xylem_activation act, Backend& backend) {
    if (!fusable_activation(act, backend)) return false;  // e.g. GELU: it stays a layer
    if (attrs_.activation != XYLEM_ACT_NONE) return false;
    attrs_.activation = act;  // conv2d_fwd always carries the fused bias + activation
    return true;
}

std::vector<uint32_t> Conv2d::ops_needed(bool backward) const {
    if (!backward) return {XYLEM_OP_FILL, XYLEM_OP_CONV2D_FWD};
    std::vector<uint32_t> ops = {XYLEM_OP_FILL, XYLEM_OP_CONV2D_FWD, XYLEM_OP_CONV2D_BWD_FILTER, XYLEM_OP_CONV2D_BWD_DATA};
    if (o_.bias) ops.push_back(XYLEM_OP_BIAS_GRAD);
    if (attrs_.activation != XYLEM_ACT_NONE) ops.push_back(XYLEM_OP_ACT_BWD);
    return ops;
}

const Tensor& Conv2d::forward(Device& dev, const Tensor& x, bool) {
    const Shape out = with_label(label(), [&] { return ops::conv2d_output_shape(x.shape(), weight_.value.shape(), attrs_); });
    x_ = x;
    ensure_output(y_, out, dev);
    ops::conv2d_fwd(dev, x, weight_.value, o_.bias ? &bias_.value : nullptr, y_, attrs_);
    return y_;
}

const Tensor& Conv2d::forward_folded(Device& dev, const Tensor& x, BatchNorm* bn, const Tensor* residual,
                                     xylem_activation act) {
    const Shape out = with_label(label(), [&] { return ops::conv2d_output_shape(x.shape(), weight_.value.shape(), attrs_); });
    const Tensor* w = &weight_.value;
    const Tensor* b = o_.bias ? &bias_.value : nullptr;
    if (bn) {
        // Refolded at every call: the parameters and statistics may have changed since the last
        // one (a training step, a loaded checkpoint), and the weights are small beside a batch's maps.
        bn->fold_into(dev, weight_.value, b, folded_w_, folded_b_);
        w = &folded_w_, b = &folded_b_;
    }
    if (residual && residual->shape() != out) shape_error("residual", residual->shape(), out);
    if (residual && !b) {  // the op takes R after a bias
        if (!zero_b_.defined() || zero_b_.shape() != Shape{out[1]}) {
            zero_b_ = Tensor(Shape{out[1]}, DType::F32, dev);
            ops::fill(dev, zero_b_, 0.0f);
        }
        b = &zero_b_;
    }
    xylem_conv2d_attrs a = attrs_;
    a.activation = act;
    x_ = Tensor();  // no backward from this pass
    ensure_output(y_, out, dev);
    ops::conv2d_fwd(dev, x, *w, b, y_, a, residual);
    return y_;
}

const Tensor& Conv2d::backward(Device& dev, const Tensor& dy, bool need_dx) {
    if (dy.shape() != y_.shape()) shape_error("output gradient", dy.shape(), y_.shape());
    const Tensor* dz = &dy;
    const auto act = static_cast<xylem_activation>(attrs_.activation);
    if (act != XYLEM_ACT_NONE) {
        ensure(dz_, dy.shape(), dev);
        ops::act_bwd(dev, act, dy, y_, dz_);
        dz = &dz_;
    }
    // The bias gradient, a sum over N, H, W (the Flux #558 reduction), comes out of the filter
    // gradient's op where the backend takes it there (ABI 1.9): its kernel reads dY anyway, where a
    // bias_grad op reads it once more (a quarter of LeNet's conv1 backward pass). beta 1 adds to a
    // shared parameter's gradient.
    xylem_conv2d_attrs filter = attrs_;
    filter.beta = param_grad_beta();
    const bool bias_inside = o_.bias && ops::conv2d_bwd_filter_takes_bias(dev.backend());
    if (o_.bias && !bias_inside) ops::bias_grad(dev, *dz, bias_.grad, param_grad_beta());
    ops::conv2d_bwd_filter(dev, x_, *dz, weight_.grad, filter, bias_inside ? &bias_.grad : nullptr);
    if (!need_dx) return dx_;
    ensure(dx_, x_.shape(), dev);
    ops::conv2d_bwd_data(dev, *dz, weight_.value, dx_, attrs_);
    return dx_;
}

std::vector<Param*> Conv2d::params() {
    if (o_.bias) return {&weight_, &bias_};
    return {&weight_};
}

Pool2d::Pool2d(const Pool2dOptions& o) {
    attrs_ = {o.mode, o.kernel, o.kernel, o.stride ? o.stride : o.kernel, o.stride ? o.stride : o.kernel, o.padding,
              o.padding, o.count_include_pad ? 1 : 0};
}

Shape Pool2d::output_shape(const Shape& input) const {
    if (input.size() != 3) shape_error("expects [channels, height, width] per sample", input, {-1, -1, -1});
    return with_label(label(), [&] { return per_sample(ops::pool2d_output_shape(batched(1, input), attrs_)); });
}

const Tensor& Pool2d::forward(Device& dev, const Tensor& x, bool) {
    x_ = x;
    ensure_output(y_, with_label(label(), [&] { return ops::pool2d_output_shape(x.shape(), attrs_); }), dev);
    ops::pool2d_fwd(dev, x, y_, attrs_);
    return y_;
}

const Tensor& Pool2d::backward(Device& dev, const Tensor& dy, bool) {
    if (dy.shape() != y_.shape()) shape_error("output gradient", dy.shape(), y_.shape());
    ops::pool2d_bwd(dev, dy, x_, y_, ensure(dx_, x_.shape(), dev), attrs_);
    return dx_;
}

Shape GlobalAvgPool::output_shape(const Shape& input) const {
    if (input.size() != 3) shape_error("expects [channels, height, width] per sample", input, {-1, -1, -1});
    return {input[0]};
}

// An average pool whose window is the whole image, so its backward pass is the pool's own.
xylem_pool2d_attrs GlobalAvgPool::window(const Shape& x) const {
    const auto h = static_cast<int32_t>(x[2]), w = static_cast<int32_t>(x[3]);
    return {XYLEM_POOL_AVG, h, w, h, w, 0, 0, 1};
}

const Tensor& GlobalAvgPool::forward(Device& dev, const Tensor& x, bool) {
    if (x.shape().size() != 4) shape_error("input", x.shape(), {-1, -1, -1, -1});
    x_ = x;
    ensure_output(y_, {x.dim(0), x.dim(1), 1, 1}, dev);
    ops::pool2d_fwd(dev, x, y_, window(x.shape()));
    out_ = y_.reshaped({x.dim(0), x.dim(1)});
    return out_;
}

const Tensor& GlobalAvgPool::backward(Device& dev, const Tensor& dy, bool) {
    if (dy.shape() != out_.shape()) shape_error("output gradient", dy.shape(), out_.shape());
    ops::pool2d_bwd(dev, dy.reshaped(y_.shape()), x_, y_, ensure(dx_, x_.shape(), dev), window(x_.shape()));
    return dx_;
}

namespace {
// `kernel = 5` or `kernel = [5, 3]` (height, width): required for conv2d and both pools.
void parse_kernel(const ConfigSection& s, const std::string& type, int32_t& h, int32_t& w) {
    if (!s.has("kernel")) s.fail("kernel", "is required for a " + type + " layer");
    if (s.is_array("kernel")) {
        Shape k;
        s.get_shape("kernel", k, ranges::kernel);
        if (k.size() != 2) s.fail("kernel", "must be an integer or [height, width]");
        h = static_cast<int32_t>(k[0]);
        w = static_cast<int32_t>(k[1]);
    } else {
        s.get("kernel", h, ranges::kernel);
        w = h;
    }
}

const LayerRegistration<Conv2dOptions> kConv2d{
    "conv2d", {"out", "kernel", "stride", "padding", "dilation", "groups", "bias"},
    [](const ConfigSection& s) {
        Conv2dOptions o;  // stride 1, padding 0, dilation 1, groups 1, bias: PyTorch's defaults
        if (!s.has("out")) s.fail("out", "is required for a conv2d layer");
        s.get("out", o.out_channels, ranges::features);
        s.get("dilation", o.dilation, ranges::dilation);
        s.get("groups", o.groups, ranges::groups);
        s.get("bias", o.bias);
        parse_kernel(s, "conv2d", o.kernel_h, o.kernel_w);
        s.get("stride", o.stride, ranges::stride);
        s.get("padding", o.padding, ranges::padding);
        return o;
    },
    [](const Conv2dOptions& o, LayerContext&) -> std::unique_ptr<Layer> { return std::make_unique<Conv2d>(o); }};

Pool2dConfig parse_pool(const ConfigSection& s, xylem_pool_mode mode) {
    Pool2dConfig c;
    c.pool.mode = mode;
    parse_kernel(s, mode == XYLEM_POOL_MAX ? "maxpool2d" : "avgpool2d", c.kernel_h, c.kernel_w);
    c.pool.kernel = c.kernel_h;
    c.pool.stride = 0;  // absent: the kernel
    s.get("stride", c.pool.stride, ranges::stride);
    s.get("padding", c.pool.padding, ranges::padding);
    s.get("count_include_pad", c.pool.count_include_pad);  // only avgpool2d allows the key
    return c;
}

std::unique_ptr<Layer> build_pool(const Pool2dConfig& c, LayerContext& context) {
    if (c.kernel_h != c.kernel_w)
        throw Error(context.source() + ": " + (c.pool.mode == XYLEM_POOL_MAX ? "maxpool2d" : "avgpool2d") +
                    " needs a square kernel");
    return std::make_unique<Pool2d>(c.pool);
}

const LayerRegistration<Pool2dConfig> kMaxPool2d{
    "maxpool2d", {"kernel", "stride", "padding"}, [](const ConfigSection& s) { return parse_pool(s, XYLEM_POOL_MAX); },
    build_pool};
const LayerRegistration<Pool2dConfig> kAvgPool2d{
    "avgpool2d", {"kernel", "stride", "padding", "count_include_pad"},
    [](const ConfigSection& s) { return parse_pool(s, XYLEM_POOL_AVG); }, build_pool};
const LayerRegistration<NoLayerOptions> kGlobalAvgPool{
    "global_avgpool", {}, nullptr,
    [](const NoLayerOptions&, LayerContext&) -> std::unique_ptr<Layer> { return std::make_unique<GlobalAvgPool>(); }};
}  // namespace

}  // namespace xylem
