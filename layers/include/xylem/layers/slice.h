// [[model.layers]] type = "slice": y = x[..., start:end, ...] along `axis` of the batched tensor
// (1 or later: the batch is never sliced), Python's rules for negative start and end (counted from
// the axis's end; clamped to it). torch's x[:, -1:] or x[:, 2:5]; ONNX's Slice and Gather of a
// range on the model's data. One gather_rows forward, one scatter_add_rows backward.
#pragma once

#include <cstdint>

#include "xylem/layers/layer.h"

namespace xylem {

struct SliceOptions {
    int64_t axis = 1, start = 0, end = INT64_MAX;
};

class Slice : public Layer {
public:
    explicit Slice(const SliceOptions& o);
    std::string kind() const override { return "slice"; }
    Shape output_shape(const Shape& input) const override;
    const Tensor& forward(Device& dev, const Tensor& x, bool train) override;
    const Tensor& backward(Device& dev, const Tensor& dy, bool need_dx) override;
    std::vector<uint32_t> ops_needed(bool backward) const override {
        if (!backward) return {XYLEM_OP_GATHER_ROWS};
        return {XYLEM_OP_GATHER_ROWS, XYLEM_OP_FILL, XYLEM_OP_SCATTER_ADD_ROWS};
    }

private:
    // [begin, end) of the axis of length `len`, as Python slices it.
    std::pair<int64_t, int64_t> range(int64_t len) const;

    SliceOptions o_;
    Shape x_shape_;
    Tensor idx_, y_, dx_;
};

}  // namespace xylem
