// Reshape/Flatten: metadata only, the storage is shared.
#include "xylem/layers/reshape.h"

#include "xylem/layers/registry.h"

namespace xylem {

Shape Reshape::output_shape(const Shape& input) const {
    Shape out = shape_;
    int64_t known = 1, infer = -1;
    for (size_t i = 0; i < out.size(); ++i) {
        if (out[i] == -1 && infer < 0) infer = static_cast<int64_t>(i);
        else if (out[i] <= 0) shape_error("bad target shape", out, input);
        else known *= out[i];
    }
    if (infer >= 0) {
        if (known == 0 || numel(input) % known != 0) shape_error("cannot reshape input", input, out);
        out[static_cast<size_t>(infer)] = numel(input) / known;
    }
    if (numel(out) != numel(input)) shape_error("element count differs from the target shape", input, out);
    return out;
}

const Tensor& Reshape::forward(Device&, const Tensor& x, bool) {
    in_sample_.assign(x.shape().begin() + 1, x.shape().end());
    y_ = x.reshaped(batched(x.dim(0), output_shape(in_sample_)));
    return y_;
}

const Tensor& Reshape::backward(Device&, const Tensor& dy, bool) {
    dx_ = dy.reshaped(batched(dy.dim(0), in_sample_));
    return dx_;
}

namespace {
// Reshape's target: at most one -1, and the known sizes' product must fit in int64.
void check_reshape(const ConfigSection& s, const Shape& shape) {
    int64_t product = 1, inferred = 0;
    for (int64_t d : shape) {
        if (d == -1) {
            if (++inferred > 1) s.fail("shape", "may hold at most one -1");
        } else if (__builtin_mul_overflow(product, d, &product)) {
            s.fail("shape", "describes more than 2^63 - 1 elements");
        }
    }
}

const LayerRegistration<ReshapeOptions> kReshape{
    "reshape", {"shape"},
    [](const ConfigSection& s) {
        ReshapeOptions o;
        if (!s.has("shape")) s.fail("shape", "is required for a reshape layer");
        s.get_shape("shape", o.shape, ranges::features, true);
        check_reshape(s, o.shape);
        return o;
    },
    [](const ReshapeOptions& o, LayerContext&) -> std::unique_ptr<Layer> { return std::make_unique<Reshape>(o.shape); }};

const LayerRegistration<NoLayerOptions> kFlatten{
    "flatten", {}, nullptr,
    [](const NoLayerOptions&, LayerContext&) -> std::unique_ptr<Layer> {
        return std::make_unique<Reshape>(Shape{-1}, "flatten");
    }};
}  // namespace

}  // namespace xylem
