// Shape rules and descriptor building for every op; the plugin does the arithmetic. Where the
// plugin kit has an op's rule (plugin_kit/shapes.h), the call runs that rule, so the core and
// every plugin accept the same descriptors with the same messages.
#include "xylem/op_calls.h"

#include <array>

#include "op_call_util.h"

namespace xylem::ops {
namespace {

using detail::expect_dtype;
using detail::kNone;
using detail::Rule;
using detail::run;
using detail::shape_error;
using detail::View;


void expect_same(uint32_t op, const Tensor& a, const char* an, const Tensor& b, const char* bn) {
    if (a.shape() != b.shape())
        shape_error(op, std::string(an) + " " + to_string(a.shape()) + " and " + bn + " " + to_string(b.shape()) +
                            " must have the same shape");
}

void expect_rank(uint32_t op, const Tensor& t, const char* name, size_t rank) {
    if (t.shape().size() != rank)
        shape_error(op, std::string(name) + " " + to_string(t.shape()) + " must have rank " + std::to_string(rank));
}

void expect_scalar(uint32_t op, const Tensor& t, const char* name) {
    if (t.numel() != 1) shape_error(op, std::string(name) + " " + to_string(t.shape()) + " must hold one element");
}

// Logits [N, C] with int32 labels [N].
void expect_labels(uint32_t op, const Tensor& x, const Tensor& labels) {
    expect_rank(op, x, "input", 2);
    expect_rank(op, labels, "labels", 1);
    expect_dtype(op, labels, "labels", DType::I32);
    if (labels.dim(0) != x.dim(0))
        shape_error(op, "labels " + to_string(labels.shape()) + " do not match input " + to_string(x.shape()));
}


}  // namespace

void fill(Device& dev, Tensor& out, float value) {
    xylem_fill_attrs a{value};
    run<0, 1>(dev, XYLEM_OP_FILL, {}, {out.write(dev)}, &a);
}

void copy(Device& dev, const Tensor& in, Tensor& out) {
    if (in.numel() != out.numel())
        shape_error(XYLEM_OP_COPY, "input " + to_string(in.shape()) + " and output " + to_string(out.shape()) +
                                       " hold different element counts");
    auto i = in.read(dev);
    run<1, 1>(dev, XYLEM_OP_COPY, {i}, {out.write(dev)}, kNone);
}

void axpby(Device& dev, float alpha, const Tensor& a, float beta, const Tensor& b, Tensor& out) {
    expect_same(XYLEM_OP_AXPBY, a, "a", b, "b");
    expect_same(XYLEM_OP_AXPBY, a, "a", out, "out");
    xylem_axpby_attrs at{alpha, beta};
    auto ia = a.read(dev), ib = b.read(dev);
    run<2, 1>(dev, XYLEM_OP_AXPBY, {ia, ib}, {out.write(dev)}, &at);
}

void axpby_inplace(Device& dev, float alpha, const Tensor& a, float beta, Tensor& out) {
    expect_same(XYLEM_OP_AXPBY, a, "a", out, "out");
    xylem_axpby_attrs at{alpha, beta};
    auto ia = a.read(dev);
    run<1, 1>(dev, XYLEM_OP_AXPBY, {ia}, {out.read_write(dev)}, &at);
}

void mul(Device& dev, const Tensor& a, const Tensor& b, Tensor& out) {
    expect_same(XYLEM_OP_MUL, a, "a", b, "b");
    expect_same(XYLEM_OP_MUL, a, "a", out, "out");
    auto ia = a.read(dev), ib = b.read(dev);
    run<2, 1>(dev, XYLEM_OP_MUL, {ia, ib}, {out.write(dev)}, kNone);
}

void gemm(Device& dev, bool ta, bool tb, float alpha, const Tensor& a, const Tensor& b, float beta, Tensor& c) {
    const uint32_t op = XYLEM_OP_GEMM;
    xylem_gemm_attrs at{ta, tb, alpha, beta};
    plugin_kit::gemm_shape(Rule{op}, at, View(op, a.shape()), View(op, b.shape()), View(op, c.shape()));
    auto ia = a.read(dev), ib = b.read(dev);
    run<2, 1>(dev, op, {ia, ib}, {beta == 0.0f ? c.write(dev) : c.read_write(dev)}, &at);
}

void linear_fwd(Device& dev, const Tensor& x, const Tensor& w, const Tensor* bias, Tensor& y, xylem_activation act) {
    const uint32_t op = XYLEM_OP_LINEAR_FWD;
    const View vb(op, bias ? bias->shape() : Shape{});
    plugin_kit::linear_shape(Rule{op}, View(op, x.shape()), View(op, w.shape()), View(op, y.shape()),
                             bias ? &vb : nullptr);
    xylem_linear_attrs at{act};
    auto ix = x.read(dev), iw = w.read(dev);
    if (bias) {
        auto ib = bias->read(dev);
        run<3, 1>(dev, op, {ix, iw, ib}, {y.write(dev)}, &at);
    } else {
        run<2, 1>(dev, op, {ix, iw}, {y.write(dev)}, &at);
    }
}

void bias_grad(Device& dev, const Tensor& dy, Tensor& db, float beta) {
    const uint32_t op = XYLEM_OP_BIAS_GRAD;
    if (dy.shape().size() < 2) shape_error(op, "gradient " + to_string(dy.shape()) + " needs rank >= 2");
    if (db.shape() != Shape{dy.dim(1)})
        shape_error(op, "bias gradient " + to_string(db.shape()) + " should be " + to_string({dy.dim(1)}));
    xylem_bias_grad_attrs at{beta};
    auto i = dy.read(dev);
    run<1, 1>(dev, op, {i}, {beta == 0.0f ? db.write(dev) : db.read_write(dev)}, &at);
}

namespace {

// GELU came with ABI 1.7 and ReLU6 with 1.8: an older plugin would refuse them by number; say what
// is missing instead.
void expect_activation_known(Device& dev, uint32_t op, xylem_activation act) {
    const uint32_t minor = dev.backend().api().abi_minor;
    const bool gelu = act == XYLEM_ACT_GELU || act == XYLEM_ACT_GELU_TANH;
    if ((gelu && minor < 7) || (act == XYLEM_ACT_RELU6 && minor < 8))
        shape_error(op, std::string(gelu ? "GELU" : "ReLU6") + " needs a backend built for ABI 1." + (gelu ? "7" : "8") +
                            " or later; '" + dev.backend().name() + "' (" + dev.backend().path() +
                            ") was built for ABI 1." + std::to_string(minor));
}

}  // namespace

void act_fwd(Device& dev, xylem_activation act, const Tensor& x, Tensor& y) {
    expect_activation_known(dev, XYLEM_OP_ACT_FWD, act);
    expect_same(XYLEM_OP_ACT_FWD, x, "input", y, "output");
    xylem_act_attrs at{act};
    auto i = x.read(dev);
    run<1, 1>(dev, XYLEM_OP_ACT_FWD, {i}, {y.write(dev)}, &at);
}

void act_bwd(Device& dev, xylem_activation act, const Tensor& dy, const Tensor& y, Tensor& dx) {
    expect_activation_known(dev, XYLEM_OP_ACT_BWD, act);
    const bool from_input = act == XYLEM_ACT_GELU || act == XYLEM_ACT_GELU_TANH;  // ops.h: GELU's reads x
    expect_same(XYLEM_OP_ACT_BWD, dy, "gradient", y, from_input ? "input" : "output");
    expect_same(XYLEM_OP_ACT_BWD, dy, "gradient", dx, "input gradient");
    xylem_act_attrs at{act};
    auto i0 = dy.read(dev), i1 = y.read(dev);
    run<2, 1>(dev, XYLEM_OP_ACT_BWD, {i0, i1}, {dx.write(dev)}, &at);
}

void softmax_fwd(Device& dev, bool log, const Tensor& x, Tensor& y) {
    expect_same(XYLEM_OP_SOFTMAX_FWD, x, "input", y, "output");
    if (x.shape().empty()) shape_error(XYLEM_OP_SOFTMAX_FWD, "input must have rank >= 1");
    xylem_softmax_attrs at{log};
    auto i = x.read(dev);
    run<1, 1>(dev, XYLEM_OP_SOFTMAX_FWD, {i}, {y.write(dev)}, &at);
}

void softmax_bwd(Device& dev, bool log, const Tensor& dy, const Tensor& y, Tensor& dx) {
    expect_same(XYLEM_OP_SOFTMAX_BWD, dy, "gradient", y, "output");
    expect_same(XYLEM_OP_SOFTMAX_BWD, dy, "gradient", dx, "input gradient");
    xylem_softmax_attrs at{log};
    auto i0 = dy.read(dev), i1 = y.read(dev);
    run<2, 1>(dev, XYLEM_OP_SOFTMAX_BWD, {i0, i1}, {dx.write(dev)}, &at);
}

namespace {
void loss_fwd(uint32_t op, Device& dev, const Tensor& x, const Tensor& t, Tensor& loss, float scale, bool acc) {
    expect_scalar(op, loss, "loss");
    xylem_loss_attrs at{scale, acc ? 1.0f : 0.0f};
    auto i0 = x.read(dev), i1 = t.read(dev);
    run<2, 1>(dev, op, {i0, i1}, {acc ? loss.read_write(dev) : loss.write(dev)}, &at);
}
void loss_bwd(uint32_t op, Device& dev, const Tensor& x, const Tensor& t, Tensor& dx, float scale) {
    expect_same(op, x, "input", dx, "input gradient");
    xylem_loss_attrs at{scale, 0.0f};
    auto i0 = x.read(dev), i1 = t.read(dev);
    run<2, 1>(dev, op, {i0, i1}, {dx.write(dev)}, &at);
}
}  // namespace

void xent_fwd(Device& dev, const Tensor& logits, const Tensor& labels, Tensor& loss, float scale, bool accumulate) {
    expect_labels(XYLEM_OP_XENT_FWD, logits, labels);
    loss_fwd(XYLEM_OP_XENT_FWD, dev, logits, labels, loss, scale, accumulate);
}
void xent_bwd(Device& dev, const Tensor& logits, const Tensor& labels, Tensor& dlogits, float scale) {
    expect_labels(XYLEM_OP_XENT_BWD, logits, labels);
    loss_bwd(XYLEM_OP_XENT_BWD, dev, logits, labels, dlogits, scale);
}
void nll_fwd(Device& dev, const Tensor& logp, const Tensor& labels, Tensor& loss, float scale, bool accumulate) {
    expect_labels(XYLEM_OP_NLL_FWD, logp, labels);
    loss_fwd(XYLEM_OP_NLL_FWD, dev, logp, labels, loss, scale, accumulate);
}
void nll_bwd(Device& dev, const Tensor& logp, const Tensor& labels, Tensor& dlogp, float scale) {
    expect_labels(XYLEM_OP_NLL_BWD, logp, labels);
    loss_bwd(XYLEM_OP_NLL_BWD, dev, logp, labels, dlogp, scale);
}
void mse_fwd(Device& dev, const Tensor& pred, const Tensor& target, Tensor& loss, float scale, bool accumulate) {
    expect_same(XYLEM_OP_MSE_FWD, pred, "prediction", target, "target");
    loss_fwd(XYLEM_OP_MSE_FWD, dev, pred, target, loss, scale, accumulate);
}
void mse_bwd(Device& dev, const Tensor& pred, const Tensor& target, Tensor& dpred, float scale) {
    expect_same(XYLEM_OP_MSE_BWD, pred, "prediction", target, "target");
    loss_bwd(XYLEM_OP_MSE_BWD, dev, pred, target, dpred, scale);
}

void dropout_fwd(Device& dev, const Tensor& x, Tensor& y, Tensor& mask, float p, uint64_t seed) {
    expect_same(XYLEM_OP_DROPOUT_FWD, x, "input", y, "output");
    expect_same(XYLEM_OP_DROPOUT_FWD, x, "input", mask, "mask");
    if (!(p >= 0.0f && p < 1.0f)) shape_error(XYLEM_OP_DROPOUT_FWD, "probability must be in [0, 1)");
    xylem_dropout_attrs at{p, 0, seed};
    auto i = x.read(dev);
    run<1, 2>(dev, XYLEM_OP_DROPOUT_FWD, {i}, {y.write(dev), mask.write(dev)}, &at);
}

void sgd_update(Device& dev, Tensor& param, Tensor& velocity, const Tensor& grad, const xylem_sgd_attrs& attrs) {
    expect_same(XYLEM_OP_SGD_UPDATE, param, "parameter", grad, "gradient");
    expect_same(XYLEM_OP_SGD_UPDATE, param, "parameter", velocity, "velocity");
    auto g = grad.read(dev);
    run<1, 2>(dev, XYLEM_OP_SGD_UPDATE, {g}, {param.read_write(dev), velocity.read_write(dev)}, &attrs);
}

void adam_update(Device& dev, Tensor& param, Tensor& m, Tensor& v, const Tensor& grad, const xylem_adam_attrs& attrs) {
    expect_same(XYLEM_OP_ADAM_UPDATE, param, "parameter", grad, "gradient");
    expect_same(XYLEM_OP_ADAM_UPDATE, param, "parameter", m, "first moment");
    expect_same(XYLEM_OP_ADAM_UPDATE, param, "parameter", v, "second moment");
    plugin_kit::check_bias_corrections(Rule{XYLEM_OP_ADAM_UPDATE}, attrs);
    auto g = grad.read(dev);
    run<1, 3>(dev, XYLEM_OP_ADAM_UPDATE, {g}, {param.read_write(dev), m.read_write(dev), v.read_write(dev)},
              &attrs);
}

void rmsprop_update(Device& dev, Tensor& param, Tensor& square_avg, Tensor* momentum_buffer, Tensor* grad_avg,
                    const Tensor& grad, const xylem_rmsprop_attrs& attrs) {
    const uint32_t op = XYLEM_OP_RMSPROP_UPDATE;
    expect_same(op, param, "parameter", grad, "gradient");
    expect_same(op, param, "parameter", square_avg, "square_avg");
    // The optional buffers follow square_avg in a fixed order, present exactly when the attrs use them.
    std::array<Tensor*, 2> extra{};
    uint32_t n_extra = 0;
    if (attrs.momentum > 0.0f) {
        if (!momentum_buffer) shape_error(op, "momentum " + std::to_string(attrs.momentum) + " needs momentum_buffer");
        expect_same(op, param, "parameter", *momentum_buffer, "momentum_buffer");
        extra[n_extra++] = momentum_buffer;
    }
    if (attrs.centered) {
        if (!grad_avg) shape_error(op, "centered needs grad_avg");
        expect_same(op, param, "parameter", *grad_avg, "grad_avg");
        extra[n_extra++] = grad_avg;
    }
    const xylem_tensor_arg g = grad.read(dev);
    std::array<xylem_tensor_arg, 4> out{param.read_write(dev), square_avg.read_write(dev)};
    for (uint32_t i = 0; i < n_extra; ++i) out[2 + i] = extra[i]->read_write(dev);
    const xylem_op_desc d{op, 1, 2 + n_extra, sizeof attrs, &g, out.data(), &attrs};
    dev.run(d);
}

void adamw_update(Device& dev, Tensor& param, Tensor& m, Tensor& v, const Tensor& grad, const xylem_adamw_attrs& attrs) {
    const uint32_t op = XYLEM_OP_ADAMW_UPDATE;
    expect_same(op, param, "parameter", grad, "gradient");
    expect_same(op, param, "parameter", m, "first moment");
    expect_same(op, param, "parameter", v, "second moment");
    plugin_kit::check_bias_corrections(Rule{op}, attrs);
    auto g = grad.read(dev);
    run<1, 3>(dev, op, {g}, {param.read_write(dev), m.read_write(dev), v.read_write(dev)}, &attrs);
}

void clamp(Device& dev, Tensor& x, float lo, float hi) {
    if (!(lo <= hi))
        shape_error(XYLEM_OP_CLAMP, "lower bound " + std::to_string(lo) + " exceeds upper bound " + std::to_string(hi));
    expect_dtype(XYLEM_OP_CLAMP, x, "input", DType::F32);
    xylem_clamp_attrs at{lo, hi};
    run<0, 1>(dev, XYLEM_OP_CLAMP, {}, {x.read_write(dev)}, &at);
}

void sum_squares(Device& dev, const Tensor& x, Tensor& acc, float beta) {
    expect_dtype(XYLEM_OP_SUM_SQUARES, x, "input", DType::F32);
    expect_scalar(XYLEM_OP_SUM_SQUARES, acc, "sum");
    xylem_sum_squares_attrs at{beta};
    auto i = x.read(dev);
    run<1, 1>(dev, XYLEM_OP_SUM_SQUARES, {i}, {beta == 0.0f ? acc.write(dev) : acc.read_write(dev)}, &at);
}

void clip_by_norm(Device& dev, const Tensor& sumsq, Tensor& x, float max_norm, float eps) {
    expect_scalar(XYLEM_OP_CLIP_BY_NORM, sumsq, "sum of squares");
    expect_dtype(XYLEM_OP_CLIP_BY_NORM, x, "input", DType::F32);
    if (!(max_norm > 0.0f)) shape_error(XYLEM_OP_CLIP_BY_NORM, "max_norm must be positive");
    xylem_clip_by_norm_attrs at{max_norm, eps};
    auto s = sumsq.read(dev);
    run<1, 1>(dev, XYLEM_OP_CLIP_BY_NORM, {s}, {x.read_write(dev)}, &at);
}

void add(Device& dev, float alpha, const Tensor& a, float beta, const Tensor& b, Tensor& out) {
    const uint32_t op = XYLEM_OP_ADD;
    expect_dtype(op, a, "a", DType::F32);
    expect_dtype(op, b, "b", DType::F32);
    plugin_kit::add_shape(Rule{op}, View(op, a.shape()), View(op, b.shape()), View(op, out.shape()));
    xylem_add_attrs at{alpha, beta};
    auto ia = a.read(dev), ib = b.read(dev);
    run<2, 1>(dev, op, {ia, ib}, {out.write(dev)}, &at);
}

void accuracy(Device& dev, const Tensor& logits, const Tensor& labels, Tensor& correct) {
    expect_labels(XYLEM_OP_ACCURACY, logits, labels);
    expect_scalar(XYLEM_OP_ACCURACY, correct, "correct count");
    auto i0 = logits.read(dev), i1 = labels.read(dev);
    run<2, 1>(dev, XYLEM_OP_ACCURACY, {i0, i1}, {correct.read_write(dev)}, kNone);
}

void gather_rows(Device& dev, const Tensor& src, const Tensor& idx, Tensor& out) {
    expect_rank(XYLEM_OP_GATHER_ROWS, idx, "indices", 1);
    expect_dtype(XYLEM_OP_GATHER_ROWS, idx, "indices", DType::I32);
    if (src.shape().empty()) shape_error(XYLEM_OP_GATHER_ROWS, "source must have rank >= 1");
    Shape want = src.shape();
    want[0] = idx.dim(0);
    if (out.shape() != want || out.dtype() != src.dtype())
        shape_error(XYLEM_OP_GATHER_ROWS, "output " + to_string(out.shape()) + " must be " + to_string(want) +
                                              " with the source's dtype");
    auto s = src.read(dev), i = idx.read(dev);
    run<2, 1>(dev, XYLEM_OP_GATHER_ROWS, {s, i}, {out.write(dev)}, kNone);
}

}  // namespace xylem::ops
