// Shape rules and descriptors for the convolution, pooling and batch-norm ops.
#include <algorithm>
#include <array>

#include "op_call_util.h"
#include "xylem/op_calls.h"

namespace xylem::ops {
namespace {

using detail::Rule;
using detail::run;
using detail::View;
const auto fail = detail::shape_error;

void expect_shape(uint32_t op, const Tensor& t, const char* name, const Shape& want) {
    if (t.shape() != want) fail(op, std::string(name) + " " + to_string(t.shape()) + " should be " + to_string(want));
}

// The kit's conv rule (what every plugin checks) over the core's shapes.
void conv2d_rule(uint32_t op, const xylem_conv2d_attrs& a, const Tensor& x, const char* xn, const Tensor& w,
                 const char* wn, const Tensor& y, const char* yn) {
    plugin_kit::conv2d_shape(Rule{op}, a, View(op, x.shape()), xn, View(op, w.shape()), wn, View(op, y.shape()), yn);
}

// An f32 operand of `s` with no buffer: op_accepts looks at shapes only.
xylem_tensor_arg shape_arg(const Shape& s) {
    xylem_tensor_arg t{};
    t.dtype = XYLEM_F32;
    t.ndim = static_cast<uint32_t>(s.size());
    std::copy(s.begin(), s.end(), t.dims);
    return t;
}

}  // namespace

Shape conv2d_output_shape(const Shape& x, const Shape& w, const xylem_conv2d_attrs& a) {
    const uint32_t op = XYLEM_OP_CONV2D_FWD;
    const plugin_kit::Conv2dShape v = plugin_kit::conv2d_out(Rule{op}, a, View(op, x), "X", View(op, w), "W");
    return {v.n, v.k, v.oh, v.ow};
}

Shape pool2d_output_shape(const Shape& x, const xylem_pool2d_attrs& a) {
    const uint32_t op = XYLEM_OP_POOL2D_FWD;
    const plugin_kit::Pool2dShape p = plugin_kit::pool2d_out(Rule{op}, a, View(op, x), "X");
    return {p.n, p.c, p.oh, p.ow};
}

bool conv2d_fwd_takes_residual(Backend& backend, const Shape& x_sample, const Shape& w,
                               const xylem_conv2d_attrs& a) {
    if (backend.api().abi_minor < 10 || !backend.supports(XYLEM_OP_CONV2D_FWD)) return false;
    Shape x{1};
    x.insert(x.end(), x_sample.begin(), x_sample.end());
    const Shape y = conv2d_output_shape(x, w, a);
    const std::array<xylem_tensor_arg, 4> in{shape_arg(x), shape_arg(w), shape_arg({w.at(0)}), shape_arg(y)};
    const std::array<xylem_tensor_arg, 1> out{shape_arg(y)};
    const xylem_op_desc d{XYLEM_OP_CONV2D_FWD, 4, 1, static_cast<uint32_t>(sizeof a), in.data(), out.data(), &a};
    return backend.accepts(d);
}

void conv2d_fwd(Device& dev, const Tensor& x, const Tensor& w, const Tensor* bias, Tensor& y,
                const xylem_conv2d_attrs& a, const Tensor* residual) {
    const uint32_t op = XYLEM_OP_CONV2D_FWD;
    conv2d_rule(op, a, x, "X", w, "W", y, "Y");
    if (bias) expect_shape(op, *bias, "b", {w.dim(0)});
    auto ix = x.read(dev), iw = w.read(dev);
    if (residual) {
        if (!bias) fail(op, "a residual input R needs the bias b (pass zeros for a conv without one)");
        if (dev.backend().api().abi_minor < 10)
            fail(op, "a residual input R needs a backend built for ABI 1.10 or later; '" + dev.backend().name() +
                         "' was built for ABI 1." + std::to_string(dev.backend().api().abi_minor));
        expect_shape(op, *residual, "R", y.shape());
        auto ib = bias->read(dev), ir = residual->read(dev);
        return run<4, 1>(dev, op, {ix, iw, ib, ir}, {y.write(dev)}, &a);
    }
    if (bias) {
        auto ib = bias->read(dev);
        run<3, 1>(dev, op, {ix, iw, ib}, {y.write(dev)}, &a);
    } else {
        run<2, 1>(dev, op, {ix, iw}, {y.write(dev)}, &a);
    }
}

void conv2d_bwd_data(Device& dev, const Tensor& dy, const Tensor& w, Tensor& dx, const xylem_conv2d_attrs& a) {
    conv2d_rule(XYLEM_OP_CONV2D_BWD_DATA, a, dx, "dX", w, "W", dy, "dY");
    auto idy = dy.read(dev), iw = w.read(dev);
    run<2, 1>(dev, XYLEM_OP_CONV2D_BWD_DATA, {idy, iw}, {dx.write(dev)}, &a);
}

bool conv2d_bwd_filter_takes_bias(const Backend& backend) { return backend.api().abi_minor >= 9; }

void conv2d_bwd_filter(Device& dev, const Tensor& x, const Tensor& dy, Tensor& dw, const xylem_conv2d_attrs& a,
                       Tensor* db) {
    const uint32_t op = XYLEM_OP_CONV2D_BWD_FILTER;
    conv2d_rule(op, a, x, "X", dw, "dW", dy, "dY");
    auto ix = x.read(dev), idy = dy.read(dev);
    auto out = [&](Tensor& t) { return a.beta == 0.0f ? t.write(dev) : t.read_write(dev); };
    if (!db) return run<2, 1>(dev, op, {ix, idy}, {out(dw)}, &a);
    if (!conv2d_bwd_filter_takes_bias(dev.backend()))
        fail(op, "a bias gradient output needs a backend built for ABI 1.9 or later; '" + dev.backend().name() +
                     "' was built for ABI 1." + std::to_string(dev.backend().api().abi_minor) + " (use bias_grad)");
    expect_shape(op, *db, "db", {dw.dim(0)});
    run<2, 2>(dev, op, {ix, idy}, {out(dw), out(*db)}, &a);
}

void pool2d_fwd(Device& dev, const Tensor& x, Tensor& y, const xylem_pool2d_attrs& a) {
    plugin_kit::pool2d_shape(Rule{XYLEM_OP_POOL2D_FWD}, a, View(XYLEM_OP_POOL2D_FWD, x.shape()), "X",
                             View(XYLEM_OP_POOL2D_FWD, y.shape()), "Y");
    auto ix = x.read(dev);
    run<1, 1>(dev, XYLEM_OP_POOL2D_FWD, {ix}, {y.write(dev)}, &a);
}

void pool2d_bwd(Device& dev, const Tensor& dy, const Tensor& x, const Tensor& y, Tensor& dx,
                const xylem_pool2d_attrs& a) {
    const uint32_t op = XYLEM_OP_POOL2D_BWD;
    const View vx(op, x.shape());
    plugin_kit::pool2d_shape(Rule{op}, a, vx, "X", View(op, dy.shape()), "dY");
    plugin_kit::pool2d_shape(Rule{op}, a, vx, "X", View(op, y.shape()), "Y");
    expect_shape(op, dx, "dX", x.shape());
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
                   const xylem_batchnorm_attrs& a, const Tensor* y) {
    const uint32_t op = XYLEM_OP_BATCHNORM_BWD;
    if (x.shape().size() < 2) fail(op, "input " + to_string(x.shape()) + " needs a channel axis");
    const Shape c{x.dim(1)};
    expect_shape(op, dy, "output gradient", x.shape());
    expect_shape(op, dx, "input gradient", x.shape());
    for (const Tensor* t : {&gamma, &saved_mean, &saved_invstd, static_cast<const Tensor*>(&dgamma),
                            static_cast<const Tensor*>(&dbeta)})
        expect_shape(op, *t, "per-channel tensor", c);
    const bool relu = a.activation == XYLEM_ACT_RELU;
    if (relu != (y != nullptr))
        fail(op, relu ? "the ReLU's gradient needs the forward's output Y" : "Y is passed only with the ReLU");
    auto idy = dy.read(dev), ix = x.read(dev), ig = gamma.read(dev), im = saved_mean.read(dev),
         is = saved_invstd.read(dev);
    if (relu) {
        expect_shape(op, *y, "output", x.shape());
        run<6, 3>(dev, op, {idy, ix, ig, im, is, y->read(dev)}, {dx.write(dev), dgamma.write(dev), dbeta.write(dev)},
                  &a);
        return;
    }
    run<5, 3>(dev, op, {idy, ix, ig, im, is}, {dx.write(dev), dgamma.write(dev), dbeta.write(dev)}, &a);
}

bool batchnorm_takes_relu(Backend& backend, const Shape& x_sample) {
    if (backend.api().abi_minor < 11 || !XYLEM_TABLE_HAS(&backend.api(), op_accepts)) return false;
    if (!backend.supports(XYLEM_OP_BATCHNORM_FWD) || !backend.supports(XYLEM_OP_BATCHNORM_BWD) || x_sample.empty())
        return false;
    Shape x{2};  // training needs two values per channel
    x.insert(x.end(), x_sample.begin(), x_sample.end());
    const xylem_tensor_arg xa = shape_arg(x), ca = shape_arg({x[1]});
    const xylem_batchnorm_attrs at{1e-5f, 0.1f, 1, XYLEM_ACT_RELU};
    const std::array<xylem_tensor_arg, 3> fin{xa, ca, ca};
    const std::array<xylem_tensor_arg, 5> fout{xa, ca, ca, ca, ca};
    const std::array<xylem_tensor_arg, 6> bin{xa, xa, ca, ca, ca, xa};
    const std::array<xylem_tensor_arg, 3> bout{xa, ca, ca};
    const xylem_op_desc f{XYLEM_OP_BATCHNORM_FWD, 3, 5, static_cast<uint32_t>(sizeof at), fin.data(), fout.data(), &at};
    const xylem_op_desc b{XYLEM_OP_BATCHNORM_BWD, 6, 3, static_cast<uint32_t>(sizeof at), bin.data(), bout.data(), &at};
    return backend.api().op_accepts(backend.framework(), &f) == 1 && backend.api().op_accepts(backend.framework(), &b) == 1;
}

}  // namespace xylem::ops
