// Flatten and Reshape: change the per-sample shape without copying (views of one storage).
#pragma once

#include "xylem/layers/layer.h"

namespace xylem {

// [[model.layers]] type = "reshape": shape (required, per sample, at most one -1). "flatten" has none.
struct ReshapeOptions {
    Shape shape;
};

class Reshape : public Layer {
public:
    // `shape` is per sample; one entry may be -1 (inferred). Flatten is Reshape({-1}).
    explicit Reshape(Shape shape, std::string kind = "reshape") : shape_(std::move(shape)), kind_(std::move(kind)) {}
    std::string kind() const override { return kind_; }
    Shape output_shape(const Shape& input) const override;
    const Tensor& forward(Device& dev, const Tensor& x, bool train) override;
    const Tensor& backward(Device& dev, const Tensor& dy, bool need_dx) override;

private:
    Shape shape_;
    std::string kind_;
    Shape in_sample_;
    Tensor y_, dx_;
};

}  // namespace xylem
