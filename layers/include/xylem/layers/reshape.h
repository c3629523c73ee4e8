// Flatten and Reshape: change the per-sample shape without copying (views of one storage).
// Transpose: reorders the sample's axes (a copy).
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

// [[model.layers]] type = "transpose", perm = [...]: each sample's axes reordered as numpy.transpose
// does (perm over the sample's axes, 0 its first): a [C, H, W] sample with perm = [1, 2, 0] becomes
// [H, W, C]; ShuffleNet's channel shuffle is [g, C/g, H, W] with perm = [1, 0, 2, 3]. The batch
// stays first. A copy by the permute op; the gradient is the inverse permutation.
struct TransposeOptions {
    Shape perm;
};

class Transpose : public Layer {
public:
    explicit Transpose(Shape perm) : perm_(std::move(perm)) {}
    std::string kind() const override { return "transpose"; }
    Shape output_shape(const Shape& input) const override;
    const Tensor& forward(Device& dev, const Tensor& x, bool train) override;
    const Tensor& backward(Device& dev, const Tensor& dy, bool need_dx) override;
    std::vector<uint32_t> ops_needed(bool) const override;

private:
    std::vector<int> batched_perm(bool inverse) const;  // over the batched tensor's axes
    Shape perm_;
    Tensor y_, dx_;
};

}  // namespace xylem
