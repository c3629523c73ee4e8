// The slice layer (slice.h). The batched input is seen as rows [outer * len, inner] (outer: the
// axes before `axis`, the batch included; inner: those after it); the output's rows are
// outer * (end - start) of them, gathered by one index built once per input shape.
#include "xylem/layers/slice.h"

#include <algorithm>
#include <vector>

#include "xylem/error.h"
#include "xylem/layers/registry.h"
#include "xylem/op_calls.h"

namespace xylem {

Slice::Slice(const SliceOptions& o) : o_(o) {
    if (o.axis < 1)
        throw Error("slice layer: axis must be 1 or later (the batch is not sliced), got " + std::to_string(o.axis));
}

std::pair<int64_t, int64_t> Slice::range(int64_t len) const {
    auto at = [&](int64_t v) { return std::clamp<int64_t>(v < 0 ? v + len : v, 0, len); };
    return {at(o_.start), std::max(at(o_.start), at(o_.end))};
}

Shape Slice::output_shape(const Shape& input) const {
    const size_t a = static_cast<size_t>(o_.axis - 1);  // the per-sample axis
    if (a >= input.size()) shape_error("axis " + std::to_string(o_.axis) + " is past the input's last axis", input, {});
    const auto [b, e] = range(input[a]);
    if (e <= b)
        shape_error("slice [" + std::to_string(o_.start) + ", " + std::to_string(o_.end) + ") of axis " +
                        std::to_string(o_.axis) + " is empty",
                    input, {});
    Shape out = input;
    out[a] = e - b;
    return out;
}

const Tensor& Slice::forward(Device& dev, const Tensor& x, bool) {
    const Shape sample(x.shape().begin() + 1, x.shape().end());
    const Shape out = batched(x.dim(0), output_shape(sample));
    const size_t a = static_cast<size_t>(o_.axis);
    int64_t outer = 1, inner = 1;
    for (size_t k = 0; k < a; ++k) outer *= x.dim(static_cast<int>(k));
    for (size_t k = a + 1; k < x.shape().size(); ++k) inner *= x.dim(static_cast<int>(k));
    const int64_t len = x.dim(static_cast<int>(a));
    const auto [b, e] = range(len);
    if (x.shape() != x_shape_) {  // a new input shape: the row index again
        if (outer * len > INT32_MAX)
            throw Error(label() + ": input " + to_string(x.shape()) + " has more than 2^31 - 1 rows");
        std::vector<int32_t> rows;
        rows.reserve(static_cast<size_t>(outer * (e - b)));
        for (int64_t o = 0; o < outer; ++o)
            for (int64_t t = b; t < e; ++t) rows.push_back(static_cast<int32_t>(o * len + t));
        idx_ = Tensor({static_cast<int64_t>(rows.size())}, DType::I32, dev);
        std::copy(rows.begin(), rows.end(),
                  idx_.host_write<int32_t>());  // the tensor's own host copy outlives the transfer
        idx_.upload(dev);
        x_shape_ = x.shape();
    }
    ensure(y_, out, dev);
    Tensor y_rows = y_.reshaped({outer * (e - b), inner});
    ops::gather_rows(dev, x.reshaped({outer * len, inner}), idx_, y_rows);
    return y_;
}

const Tensor& Slice::backward(Device& dev, const Tensor& dy, bool) {
    if (dy.shape() != y_.shape()) shape_error("output gradient", dy.shape(), y_.shape());
    ensure(dx_, x_shape_, dev);
    ops::fill(dev, dx_, 0.0f);
    const int64_t rows = idx_.numel(), inner = dy.numel() / rows;
    Tensor dx_rows = dx_.reshaped({dx_.numel() / inner, inner});
    ops::scatter_add_rows(dev, dy.reshaped({rows, inner}), idx_, dx_rows);
    return dx_;
}

namespace {
const LayerRegistration<SliceOptions> kSlice{
    "slice",
    {"axis", "start", "end"},
    [](const ConfigSection& s) {
        SliceOptions o;
        s.get("axis", o.axis, IntRange{1, ranges::kInt32Max});
        s.get("start", o.start, IntRange{-ranges::kInt32Max, ranges::kInt32Max});
        if (s.has("end")) s.get("end", o.end, IntRange{-ranges::kInt32Max, ranges::kInt32Max});
        return o;
    },
    [](const SliceOptions& o, LayerContext&) -> std::unique_ptr<Layer> { return std::make_unique<Slice>(o); }};
}  // namespace

}  // namespace xylem
