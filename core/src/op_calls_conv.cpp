// Shape rules and descriptors for the convolution, pooling and batch-norm ops.
#include <array>

#include "op_call_util.h"
#include "xylem/op_calls.h"

namespace xylem::ops {
namespace {

using detail::run;
const auto fail = detail::shape_error;

int64_t out_size(int64_t in, int64_t kernel, int64_t stride, int64_t pad, int64_t dilation) {
    return (in + 2 * pad - dilation * (kernel - 1) - 1) / stride + 1;
}

void expect_shape(uint32_t op, const Tensor& t, const char* name, const Shape& want) {
    if (t.shape() != want) fail(op, std::string(name) + " " + to_string(t.shape()) + " should be " + to_string(want));
}

}  // namespace

Shape conv2d_output_shape(const Shape& x, const Shape& w, const xylem_conv2d_attrs& a) {
    const uint32_t op = XYLEM_OP_CONV2D_FWD;
    if (x.size() != 4) fail(op, "input " + to_string(x) + " must be NCHW (rank 4)");
    if (w.size() != 4) fail(op, "weight " + to_string(w) + " must be [out, in/groups, kh, kw]");
    if (a.stride_h < 1 || a.stride_w < 1 || a.dilation_h < 1 || a.dilation_w < 1 || a.pad_h < 0 || a.pad_w < 0 ||
        a.groups < 1)
        fail(op, "stride and dilation must be >= 1, padding >= 0, groups >= 1");
    if (x[1] % a.groups || w[0] % a.groups)
        fail(op, "input channels " + std::to_string(x[1]) + " and output channels " + std::to_string(w[0]) +
                     " must both divide by groups " + std::to_string(a.groups));
    if (w[1] * a.groups != x[1])
        fail(op, "input " + to_string(x) + " has " + std::to_string(x[1]) + " channels but weight " + to_string(w) +
                     " expects " + std::to_string(w[1] * a.groups));
    const int64_t oh = out_size(x[2], w[2], a.stride_h, a.pad_h, a.dilation_h);
    const int64_t ow = out_size(x[3], w[3], a.stride_w, a.pad_w, a.dilation_w);
    if (oh < 1 || ow < 1 || x[2] + 2 * a.pad_h < a.dilation_h * (w[2] - 1) + 1 ||
        x[3] + 2 * a.pad_w < a.dilation_w * (w[3] - 1) + 1)
        fail(op, "input " + to_string(x) + " (padding " + std::to_string(a.pad_h) + "x" + std::to_string(a.pad_w) +
                     ") is smaller than the kernel " + to_string({w[2], w[3]}));
    return {x[0], w[0], oh, ow};
}

Shape pool2d_output_shape(const Shape& x, const xylem_pool2d_attrs& a) {
    const uint32_t op = XYLEM_OP_POOL2D_FWD;
    if (x.size() != 4) fail(op, "input " + to_string(x) + " must be NCHW (rank 4)");
    if (a.kernel_h < 1 || a.kernel_w < 1 || a.stride_h < 1 || a.stride_w < 1 || a.pad_h < 0 || a.pad_w < 0)
        fail(op, "kernel and stride must be >= 1, padding >= 0");
    if (2 * a.pad_h > a.kernel_h || 2 * a.pad_w > a.kernel_w) fail(op, "padding must be at most half the kernel");
    if (x[2] + 2 * a.pad_h < a.kernel_h || x[3] + 2 * a.pad_w < a.kernel_w)
        fail(op, "input " + to_string(x) + " is smaller than the pooling window " + to_string({a.kernel_h, a.kernel_w}));
    return {x[0], x[1], out_size(x[2], a.kernel_h, a.stride_h, a.pad_h, 1), out_size(x[3], a.kernel_w, a.stride_w, a.pad_w, 1)};
}

void conv2d_fwd(Device& dev, const Tensor& x, const Tensor& w, const Tensor* bias, Tensor& y,
                const xylem_conv2d_attrs& a) {
    const uint32_t op = XYLEM_OP_CONV2D_FWD;
    expect_shape(op, y, "output", conv2d_output_shape(x.shape(), w.shape(), a));
    if (bias) expect_shape(op, *bias, "bias", {w.dim(0)});
    auto ix = x.read(dev), iw = w.read(dev);
    if (bias) {
        auto ib = bias->read(dev);
        run<3, 1>(dev, op, {ix, iw, ib}, {y.write(dev)}, &a);
    } else {
        run<2, 1>(dev, op, {ix, iw}, {y.write(dev)}, &a);
    }
}

void conv2d_bwd_data(Device& dev, const Tensor& dy, const Tensor& w, Tensor& dx, const xylem_conv2d_attrs& a) {
    expect_shape(XYLEM_OP_CONV2D_BWD_DATA, dy, "output gradient", conv2d_output_shape(dx.shape(), w.shape(), a));
    auto idy = dy.read(dev), iw = w.read(dev);
    run<2, 1>(dev, XYLEM_OP_CONV2D_BWD_DATA, {idy, iw}, {dx.write(dev)}, &a);
}

void conv2d_bwd_filter(Device& dev, const Tensor& x, const Tensor& dy, Tensor& dw, const xylem_conv2d_attrs& a) {
    expect_shape(XYLEM_OP_CONV2D_BWD_FILTER, dy, "output gradient", conv2d_output_shape(x.shape(), dw.shape(), a));
    auto ix = x.read(dev), idy = dy.read(dev);
    run<2, 1>(dev, XYLEM_OP_CONV2D_BWD_FILTER, {ix, idy}, {a.beta == 0.0f ? dw.write(dev) : dw.read_write(dev)}, &a);
}

void pool2d_fwd(Device& dev, const Tensor& x, Tensor& y, const xylem_pool2d_attrs& a) {
    expect_shape(XYLEM_OP_POOL2D_FWD, y, "output", pool2d_output_shape(x.shape(), a));
    auto ix = x.read(dev);
    run<1, 1>(dev, XYLEM_OP_POOL2D_FWD, {ix}, {y.write(dev)}, &a);
}

void pool2d_bwd(Device& dev, const Tensor& dy, const Tensor& x, const Tensor& y, Tensor& dx,
                const xylem_pool2d_attrs& a) {
    const uint32_t op = XYLEM_OP_POOL2D_BWD;
    const Shape out = pool2d_output_shape(x.shape(), a);
    expect_shape(op, dy, "output gradient", out);
    expect_shape(op, y, "output", out);
    expect_shape(op, dx, "input gradient", x.shape());
    auto idy = dy.read(dev), ix = x.read(dev), iy = y.read(dev);
    run<3, 1>(dev, op, {idy, ix, iy}, {dx.write(dev)}, &a);
}

void batchnorm_fwd(Device& dev, const Tensor& x, const Tensor& gamma, const Tensor& beta, Tensor& y,
                   Tensor& running_mean, Tensor& running_var, Tensor& saved_mean, Tensor& saved_invstd,
                   const xylem_batchnorm_attrs& a) {
    const uint32_t op = XYLEM_OP_BATCHNORM_FWD;
    if (x.shape().size() < 2) fail(op, "input " + to_string(x.shape()) + " needs a channel axis");
    const Shape c{x.dim(1)};
    expect_shape(op, y, "output", x.shape());
    expect_shape(op, gamma, "gamma", c);
    expect_shape(op, beta, "beta", c);
    expect_shape(op, running_mean, "running mean", c);
    expect_shape(op, running_var, "running variance", c);
    expect_shape(op, saved_mean, "saved mean", c);
    expect_shape(op, saved_invstd, "saved inverse std", c);
    if (a.training && x.numel() / x.dim(1) < 2) fail(op, "training needs more than one value per channel, got input " + to_string(x.shape()));
    auto ix = x.read(dev), ig = gamma.read(dev), ib = beta.read(dev);
    auto rm = running_mean.read_write(dev), rv = running_var.read_write(dev);
    if (a.training) {
        run<3, 5>(dev, op, {ix, ig, ib}, {y.write(dev), rm, rv, saved_mean.write(dev), saved_invstd.write(dev)}, &a);
    } else {  // the saved statistics are neither read nor written: pass them without touching residency
        auto sm = saved_mean.read(dev), si = saved_invstd.read(dev);
        run<3, 5>(dev, op, {ix, ig, ib}, {y.write(dev), rm, rv, sm, si}, &a);
    }
}

void batchnorm_bwd(Device& dev, const Tensor& dy, const Tensor& x, const Tensor& gamma, const Tensor& saved_mean,
                   const Tensor& saved_invstd, Tensor& dx, Tensor& dgamma, Tensor& dbeta,
                   const xylem_batchnorm_attrs& a) {
    const uint32_t op = XYLEM_OP_BATCHNORM_BWD;
    if (x.shape().size() < 2) fail(op, "input " + to_string(x.shape()) + " needs a channel axis");
    const Shape c{x.dim(1)};
    expect_shape(op, dy, "output gradient", x.shape());
    expect_shape(op, dx, "input gradient", x.shape());
    for (const Tensor* t : {&gamma, &saved_mean, &saved_invstd, static_cast<const Tensor*>(&dgamma),
                            static_cast<const Tensor*>(&dbeta)})
        expect_shape(op, *t, "per-channel tensor", c);
    auto idy = dy.read(dev), ix = x.read(dev), ig = gamma.read(dev), im = saved_mean.read(dev),
         is = saved_invstd.read(dev);
    run<5, 3>(dev, op, {idy, ix, ig, im, is}, {dx.write(dev), dgamma.write(dev), dbeta.write(dev)}, &a);
}

}  // namespace xylem::ops
