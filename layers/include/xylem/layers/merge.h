// Layers that merge several tensors into one: add and sub (residual connections), mul (gates) and
// concat.
#pragma once

#include <functional>
#include <map>

#include "xylem/layers/layer.h"

namespace xylem {

// Index tensors for gather_rows, one per batch size (the last, shorter batch of an epoch and
// evaluation batches differ from the training batch), built on the host and uploaded once.
class RowIndexCache {
public:
    // The index for `batch`, filling it with `make(batch)` the first time.
    const Tensor& get(Device& dev, int64_t batch, const std::function<std::vector<int32_t>(int64_t)>& make);
    // The index that spreads `per_sample` rows of each sample over `copies` consecutive rows each
    // (index r names row r / copies): add's and mul's broadcast second input.
    const Tensor& spread(Device& dev, int64_t batch, int64_t per_sample, int64_t copies);

private:
    std::map<int64_t, Tensor> by_batch_;
};

// [[model.layers]] type = "add", inputs = ["a", "b"]: y = a + b. b has a's per-sample shape, or
// the trailing part of it (a [T, F] + b [F]: b added at every step; a [C, H, W] + b [H, W]).
// [[model.layers]] type = "sub", inputs = ["a", "b"]: y = a - b, b as for add.
class Add : public MultiInputLayer {
public:
    explicit Add(bool subtract = false) : sign_(subtract ? -1.0f : 1.0f) {}
    std::string kind() const override { return sign_ > 0 ? "add" : "sub"; }
    size_t input_count() const override { return 2; }
    Shape output_shape_of(const std::vector<Shape>& inputs) const override;
    void bind_inputs(Device& dev, const std::vector<Shape>& inputs, std::mt19937_64& rng) override;
    const Tensor& forward_inputs(Device& dev, const std::vector<const Tensor*>& xs, bool train) override;
    void backward_inputs(Device& dev, const Tensor& dy, const std::vector<bool>& need_dx,
                         std::vector<const Tensor*>& dxs) override;
    bool takes_lent_output() const override { return true; }  // the inference memory plan (layer.h)
    std::vector<uint32_t> ops_needed(bool backward) const override;

private:
    float sign_;          // b's factor: 1 (add) or -1 (sub)
    int64_t repeat_ = 1;  // how many copies of b one sample of a holds (1: same shape)
    Shape b_sample_;
    Tensor y_, b_wide_, db_, neg_;
    RowIndexCache spread_;  // b's row n for each of the repeat_ rows of sample n
};

// [[model.layers]] type = "mul", inputs = ["a", "b"]: y = a * b elementwise (SiLU's x * sigmoid(x),
// a squeeze-and-excitation gate). b has a's per-sample shape; or its trailing part (as add: a
// [T, F] * b [F]); or its leading part with ones after it (a [C, H, W] * b [C, 1, 1]: one value
// per channel). A broadcast b is spread to a's shape by gather_rows (an index of a's size), and
// its gradient summed back by reduce.
class Mul : public MultiInputLayer {
public:
    std::string kind() const override { return "mul"; }
    size_t input_count() const override { return 2; }
    Shape output_shape_of(const std::vector<Shape>& inputs) const override;
    void bind_inputs(Device& dev, const std::vector<Shape>& inputs, std::mt19937_64& rng) override;
    const Tensor& forward_inputs(Device& dev, const std::vector<const Tensor*>& xs, bool train) override;
    void backward_inputs(Device& dev, const Tensor& dy, const std::vector<bool>& need_dx,
                         std::vector<const Tensor*>& dxs) override;
    bool takes_lent_output() const override { return true; }  // the inference memory plan (layer.h)
    std::vector<uint32_t> ops_needed(bool backward) const override;

private:
    // b's per-sample shape against a's: b is cut into rows of row_ values, each spread over
    // copies_ consecutive places of a (1: the same shape).
    void spread_of(const Shape& a, const Shape& b);
    int64_t row_ = 1, copies_ = 1;
    Shape b_sample_;
    Tensor a_, b_, y_, b_wide_, da_, prod_, db_;  // a_ and b_ (spread to a's shape): views for backward
    RowIndexCache spread_;
};

// The options of [[model.layers]] type = "concat" (read by the ONNX exporter too).
struct ConcatOptions {
    int64_t axis = 1;
};

// [[model.layers]] type = "concat", inputs = [...], axis (default 1): joins two or more tensors
// along an axis of the batched tensor, as torch.cat(dim = axis) (1: channels of an image, or
// features of a vector; negative counts from the last). The other axes must agree.
class Concat : public MultiInputLayer {
public:
    explicit Concat(int64_t axis = 1);
    std::string kind() const override { return "concat"; }
    size_t input_count() const override { return 0; }
    Shape output_shape_of(const std::vector<Shape>& inputs) const override;
    void bind_inputs(Device& dev, const std::vector<Shape>& inputs, std::mt19937_64& rng) override;
    const Tensor& forward_inputs(Device& dev, const std::vector<const Tensor*>& xs, bool train) override;
    void backward_inputs(Device& dev, const Tensor& dy, const std::vector<bool>& need_dx,
                         std::vector<const Tensor*>& dxs) override;
    bool takes_lent_output() const override { return true; }  // the inference memory plan (layer.h)
    std::vector<uint32_t> ops_needed(bool backward) const override;

private:
    size_t sample_axis(size_t rank) const;  // the axis within a sample's shape; throws if out of range
    int64_t axis_;
    // Every tensor is seen as rows of `inner_` elements (the product of the axes after the
    // concatenated one), grouped in `outer_` blocks per sample (the product of the sample's axes
    // before it): input k has extents_[k] rows per block, the output total_.
    int64_t inner_ = 1, outer_ = 1, total_ = 0;
    std::vector<int64_t> extents_;
    std::vector<Shape> samples_;  // the inputs' per-sample shapes
    Tensor stacked_, y_;
    std::vector<Tensor> dx_;
    RowIndexCache interleave_;
    std::vector<RowIndexCache> pick_;
};

}  // namespace xylem
