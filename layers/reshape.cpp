// Reshape/Flatten: metadata only, the storage is shared. Transpose: the permute op.
#include "xylem/layers/reshape.h"

#include <algorithm>

#include "xylem/error.h"
#include "xylem/layers/registry.h"
#include "xylem/op_calls.h"

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

Shape Transpose::output_shape(const Shape& input) const {
    Shape sorted = perm_;
    std::sort(sorted.begin(), sorted.end());
    bool permutation = sorted.size() == input.size();
    for (size_t i = 0; permutation && i < sorted.size(); ++i) permutation = sorted[i] == static_cast<int64_t>(i);
    if (!permutation)
        throw Error(label() + ": perm " + to_string(perm_) + " is not a permutation of the " +
                    std::to_string(input.size()) + " axes of its input's sample " + to_string(input));
    if (input.size() + 1 > XYLEM_MAX_DIMS)
        throw Error(label() + ": its input " + to_string(input) + " has more than " + std::to_string(XYLEM_MAX_DIMS - 1) +
                    " axes per sample (the permute op's limit)");
    Shape out(input.size());
    for (size_t i = 0; i < out.size(); ++i) out[i] = input[static_cast<size_t>(perm_[i])];
    return out;
}

std::vector<int> Transpose::batched_perm(bool inverse) const {
    std::vector<int> p(perm_.size() + 1, 0);
    for (size_t i = 0; i < perm_.size(); ++i) {
        const int from = static_cast<int>(perm_[i]) + 1, to = static_cast<int>(i) + 1;
        if (inverse) p[static_cast<size_t>(from)] = to;
        else p[static_cast<size_t>(to)] = from;
    }
    return p;
}

const Tensor& Transpose::forward(Device& dev, const Tensor& x, bool) {
    const Shape sample(x.shape().begin() + 1, x.shape().end());
    ensure(y_, batched(x.dim(0), output_shape(sample)), dev);
    ops::permute(dev, x, y_, batched_perm(false));
    return y_;
}

const Tensor& Transpose::backward(Device& dev, const Tensor& dy, bool need_dx) {
    if (dy.shape() != y_.shape()) shape_error("output gradient", dy.shape(), y_.shape());
    if (!need_dx) return dx_;
    const std::vector<int> inverse = batched_perm(true);
    ensure(dx_, ops::permuted_shape(dy.shape(), inverse), dev);
    ops::permute(dev, dy, dx_, inverse);
    return dx_;
}

std::vector<uint32_t> Transpose::ops_needed(bool) const { return {XYLEM_OP_PERMUTE}; }

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

const LayerRegistration<TransposeOptions> kTranspose{
    "transpose", {"perm"},
    [](const ConfigSection& s) {
        TransposeOptions o;
        if (!s.has("perm")) s.fail("perm", "is required for a transpose layer (the sample's axes in their new order)");
        s.get_shape("perm", o.perm, IntRange{0, XYLEM_MAX_DIMS - 2});
        return o;
    },
    [](const TransposeOptions& o, LayerContext&) -> std::unique_ptr<Layer> { return std::make_unique<Transpose>(o.perm); }};

const LayerRegistration<NoLayerOptions> kFlatten{
    "flatten", {}, nullptr,
    [](const NoLayerOptions&, LayerContext&) -> std::unique_ptr<Layer> {
        return std::make_unique<Reshape>(Shape{-1}, "flatten");
    }};
}  // namespace

}  // namespace xylem
