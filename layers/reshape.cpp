// Reshape/Flatten: metadata only, the storage is shared.
#include "xylem/layers/reshape.h"

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

}  // namespace xylem
