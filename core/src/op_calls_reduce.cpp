// The typed calls of reduce and scatter_add_rows: dtypes here, the shapes by the plugin kit's
// rules (reduce_shape, scatter_add_rows_shape), so the core and every plugin give one message.
#include "op_call_util.h"
#include "xylem/op_calls.h"

namespace xylem::ops {
namespace {

using detail::expect_dtype;
using detail::Rule;
using detail::run;
using detail::shape_error;
using detail::View;

}  // namespace

void reduce(Device& dev, const Tensor& x, Tensor& out, xylem_reduce_mode mode, int axis, float beta) {
    const uint32_t op = XYLEM_OP_REDUCE;
    expect_dtype(op, x, "x", DType::F32);
    expect_dtype(op, out, "out", DType::F32);
    const xylem_reduce_attrs at{static_cast<int32_t>(mode), axis, beta};
    plugin_kit::reduce_shape(Rule{op}, at, View(op, x.shape()), View(op, out.shape()));
    auto i = x.read(dev);
    run<1, 1>(dev, op, {i}, {beta == 0.0f ? out.write(dev) : out.read_write(dev)}, &at);
}

void scatter_add_rows(Device& dev, const Tensor& src, const Tensor& idx, Tensor& out) {
    const uint32_t op = XYLEM_OP_SCATTER_ADD_ROWS;
    expect_dtype(op, src, "src", DType::F32);
    expect_dtype(op, idx, "idx", DType::I32);
    expect_dtype(op, out, "out", DType::F32);
    plugin_kit::scatter_add_rows_shape(Rule{op}, View(op, src.shape()), View(op, idx.shape()), View(op, out.shape()));
    auto s = src.read(dev), i = idx.read(dev);
    run<2, 1>(dev, op, {s, i}, {out.read_write(dev)}, detail::kNone);
}

}  // namespace xylem::ops
