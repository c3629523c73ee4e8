// Typed calls for every op in ops.h: each checks shapes (the plugin kit's rule for the op where it
// has one, plugin_kit/shapes.h: the same rule every plugin runs), builds the op descriptor and
// runs it on a device. Layers and solvers use only these.
#pragma once

#include <cstdint>
#include <vector>

#include "xylem/tensor.h"

namespace xylem::ops {

void fill(Device& dev, Tensor& out, float value);
void copy(Device& dev, const Tensor& in, Tensor& out);
// out = alpha*a + beta*b
void axpby(Device& dev, float alpha, const Tensor& a, float beta, const Tensor& b, Tensor& out);
// out = alpha*a + beta*out
void axpby_inplace(Device& dev, float alpha, const Tensor& a, float beta, Tensor& out);
void mul(Device& dev, const Tensor& a, const Tensor& b, Tensor& out);
// c = alpha*op(a)*op(b) + beta*c
void gemm(Device& dev, bool trans_a, bool trans_b, float alpha, const Tensor& a, const Tensor& b, float beta,
          Tensor& c);
// y = act(x*w^T + b); x [..., in], w [out, in], y [..., out] with x's rows; bias may be null
void linear_fwd(Device& dev, const Tensor& x, const Tensor& w, const Tensor* bias, Tensor& y, xylem_activation act);
// db = beta*db + sum of dy over every axis but 1
void bias_grad(Device& dev, const Tensor& dy, Tensor& db, float beta = 0.0f);
void act_fwd(Device& dev, xylem_activation act, const Tensor& x, Tensor& y);
void act_bwd(Device& dev, xylem_activation act, const Tensor& dy, const Tensor& y, Tensor& dx);
void softmax_fwd(Device& dev, bool log, const Tensor& x, Tensor& y);
void softmax_bwd(Device& dev, bool log, const Tensor& dy, const Tensor& y, Tensor& dx);
// loss[0] = (accumulate ? loss[0] : 0) + scale * sum of per-sample losses
void xent_fwd(Device& dev, const Tensor& logits, const Tensor& labels, Tensor& loss, float scale, bool accumulate);
void xent_bwd(Device& dev, const Tensor& logits, const Tensor& labels, Tensor& dlogits, float scale);
void nll_fwd(Device& dev, const Tensor& logp, const Tensor& labels, Tensor& loss, float scale, bool accumulate);
void nll_bwd(Device& dev, const Tensor& logp, const Tensor& labels, Tensor& dlogp, float scale);
void mse_fwd(Device& dev, const Tensor& pred, const Tensor& target, Tensor& loss, float scale, bool accumulate);
void mse_bwd(Device& dev, const Tensor& pred, const Tensor& target, Tensor& dpred, float scale);
void dropout_fwd(Device& dev, const Tensor& x, Tensor& y, Tensor& mask, float p, uint64_t seed);
void sgd_update(Device& dev, Tensor& param, Tensor& velocity, const Tensor& grad, const xylem_sgd_attrs& attrs);
void adam_update(Device& dev, Tensor& param, Tensor& m, Tensor& v, const Tensor& grad, const xylem_adam_attrs& attrs);
// RMSprop (torch.optim.RMSprop): momentum_buffer is used when attrs.momentum > 0 and grad_avg when
// attrs.centered; either may be null otherwise.
void rmsprop_update(Device& dev, Tensor& param, Tensor& square_avg, Tensor* momentum_buffer, Tensor* grad_avg,
                    const Tensor& grad, const xylem_rmsprop_attrs& attrs);
// AdamW (torch.optim.AdamW): decoupled weight decay.
void adamw_update(Device& dev, Tensor& param, Tensor& m, Tensor& v, const Tensor& grad, const xylem_adamw_attrs& attrs);
// x = min(max(x, lo), hi) in place (gradient clipping by value)
void clamp(Device& dev, Tensor& x, float lo, float hi);
// acc[0] = beta*acc[0] + sum of x^2; acc stays on the device (the global gradient norm, squared)
void sum_squares(Device& dev, const Tensor& x, Tensor& acc, float beta);
// x *= min(1, max_norm / (sqrt(sumsq[0]) + eps)), the factor computed on the device (clip_grad_norm_)
void clip_by_norm(Device& dev, const Tensor& sumsq, Tensor& x, float max_norm, float eps = 1e-6f);
// out = alpha*a + beta*b, b of a's shape, a row vector [cols] or a column vector [..., 1] (ops.h's ADD)
void add(Device& dev, float alpha, const Tensor& a, float beta, const Tensor& b, Tensor& out);
// Runs a fused_elementwise program (ops.h; build one with FusedBuilder, xylem/fused_builder.h):
// inputs broadcast by attrs.input_modes, outputs of one element count. An output that is also an input
// (the same tensor) is updated in place.
void fused_elementwise(Device& dev, const xylem_fused_attrs& attrs, const std::vector<const Tensor*>& inputs,
                       const std::vector<Tensor*>& outputs);
// out = beta*out + sum, mean or max of x over `axis` (-1: every element); out holds the remaining
// elements and stays on the device (ops.h's REDUCE)
void reduce(Device& dev, const Tensor& x, Tensor& out, xylem_reduce_mode mode, int axis, float beta = 0.0f);
// out[idx[i], ...] += src[i, ...] (the embedding gradient; repeated indices accumulate)
void scatter_add_rows(Device& dev, const Tensor& src, const Tensor& idx, Tensor& out);
// correct[0] += number of rows whose argmax equals the label
void accuracy(Device& dev, const Tensor& logits, const Tensor& labels, Tensor& correct);
// out[i] = src[idx[i]] along axis 0 (rows of a device-resident dataset; f32 or i32)
void gather_rows(Device& dev, const Tensor& src, const Tensor& idx, Tensor& out);

// ---- convolutional networks (core/src/op_calls_conv.cpp) ----
// Shape rules: the NCHW output shape, or an Error naming the shapes that do not fit.
Shape conv2d_output_shape(const Shape& x, const Shape& w, const xylem_conv2d_attrs& attrs);
Shape pool2d_output_shape(const Shape& x, const xylem_pool2d_attrs& attrs);

// y = act(conv(x, w) + bias + residual); bias and residual may be null. A residual (y's shape)
// needs a bias (a conv without one passes zeros) and a backend that takes it:
// conv2d_fwd_takes_residual.
void conv2d_fwd(Device& dev, const Tensor& x, const Tensor& w, const Tensor* bias, Tensor& y,
                const xylem_conv2d_attrs& attrs, const Tensor* residual = nullptr);
// Whether the backend runs conv2d_fwd with a residual input for these operand shapes: built for
// ABI 1.10 or later, and not declined through op_accepts (asked with a batch of one).
bool conv2d_fwd_takes_residual(Backend& backend, const Shape& x_sample, const Shape& w, const xylem_conv2d_attrs& attrs);
void conv2d_bwd_data(Device& dev, const Tensor& dy, const Tensor& w, Tensor& dx, const xylem_conv2d_attrs& attrs);
// dw = attrs.beta*dw + filter gradient, and with db (a backend built for ABI 1.9 or later:
// conv2d_bwd_filter_takes_bias) db = attrs.beta*db + the bias gradient, in the same op.
void conv2d_bwd_filter(Device& dev, const Tensor& x, const Tensor& dy, Tensor& dw, const xylem_conv2d_attrs& attrs,
                       Tensor* db = nullptr);
bool conv2d_bwd_filter_takes_bias(const Backend& backend);
void pool2d_fwd(Device& dev, const Tensor& x, Tensor& y, const xylem_pool2d_attrs& attrs);
void pool2d_bwd(Device& dev, const Tensor& dy, const Tensor& x, const Tensor& y, Tensor& dx,
                const xylem_pool2d_attrs& attrs);
// Training mode writes saved_mean/saved_invstd and updates the running statistics. attrs.activation
// RELU (y = relu(batch norm of x)) needs a backend that takes it: batchnorm_takes_relu.
void batchnorm_fwd(Device& dev, const Tensor& x, const Tensor& gamma, const Tensor& beta, Tensor& y,
                   Tensor& running_mean, Tensor& running_var, Tensor& saved_mean, Tensor& saved_invstd,
                   const xylem_batchnorm_attrs& attrs);
// With attrs.activation RELU, y is the forward's output and dy the gradient of that output.
void batchnorm_bwd(Device& dev, const Tensor& dy, const Tensor& x, const Tensor& gamma, const Tensor& saved_mean,
                   const Tensor& saved_invstd, Tensor& dx, Tensor& dgamma, Tensor& dbeta,
                   const xylem_batchnorm_attrs& attrs, const Tensor* y = nullptr);
// Whether the backend runs batchnorm_fwd and batchnorm_bwd with the ReLU (ABI 1.11) for samples of
// this shape: built for 1.11 or later, and both ops accepted through op_accepts (asked with a batch
// of two) by a plugin that has it: a plugin without op_accepts is never sent the activation (one
// that ignored the new attribute would skip the ReLU without an error).
bool batchnorm_takes_relu(Backend& backend, const Shape& x_sample);

// ---- transformers (core/src/op_calls_transformer.cpp; ABI 1.7) ----
// y = (x - mean)*rstd*gamma + beta over x's last axis; mean and rstd (x's rows) saved for the backward
// pass; beta may be null.
void layer_norm_fwd(Device& dev, const Tensor& x, const Tensor& gamma, const Tensor* beta, Tensor& y, Tensor& mean,
                    Tensor& rstd, float eps);
// dx; dgamma = accumulate*dgamma + ..., dbeta likewise (may be null when the layer has no beta).
void layer_norm_bwd(Device& dev, const Tensor& dy, const Tensor& x, const Tensor& gamma, const Tensor& mean,
                    const Tensor& rstd, Tensor& dx, Tensor& dgamma, Tensor* dbeta, float eps, float accumulate);
// Scaled dot-product attention, ops.h's attention_fwd: O [B, H, Tq, Dv] and LSE [B, H, Tq] from Q, K, V;
// mask may be null. The plugin's fused op when it has it and accepts these shapes (op_accepts); else
// composed from gemm_batched, masked_softmax and dropout_fwd (said once in the profile).
void attention_fwd(Device& dev, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor* mask, Tensor& o,
                   Tensor& lse, const xylem_attention_attrs& attrs);
// dQ, dK, dV (ops.h's attention_bwd), fused or composed as attention_fwd.
void attention_bwd(Device& dev, const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v,
                   const Tensor& o, const Tensor& lse, const Tensor* mask, Tensor& dq, Tensor& dk, Tensor& dv,
                   const xylem_attention_attrs& attrs);
// The composed forms themselves, whatever the plugin has (the conformance kit compares them with the
// fused op; the calls above use them as the fallback).
void attention_fwd_composed(Device& dev, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor* mask,
                            Tensor& o, Tensor& lse, const xylem_attention_attrs& attrs);
void attention_bwd_composed(Device& dev, const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v,
                            const Tensor& o, const Tensor& lse, const Tensor* mask, Tensor& dq, Tensor& dk,
                            Tensor& dv, const xylem_attention_attrs& attrs);
// c = alpha*op(a)*op(b) + beta*c for each batch index (ops.h's gemm_batched; a or b may be 2-D).
void gemm_batched(Device& dev, bool trans_a, bool trans_b, float alpha, const Tensor& a, const Tensor& b, float beta,
                  Tensor& c);
// y = x with its axes permuted: y.dims[i] = x.dims[perm[i]] (numpy.transpose).
void permute(Device& dev, const Tensor& x, Tensor& y, const std::vector<int>& perm);
Shape permuted_shape(const Shape& x, const std::vector<int>& perm);
// y = softmax over the visible keys of scale*x + mask (ops.h's masked_softmax); mask, lse may be null.
void masked_softmax(Device& dev, const Tensor& x, const Tensor* mask, Tensor& y, Tensor* lse, float scale, bool causal);

}  // namespace xylem::ops
