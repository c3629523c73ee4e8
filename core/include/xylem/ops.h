/* xylem op set: the op enum and attribute structs shared by the core and every plugin.
 * Append-only: new ops and new attribute fields go at the end; numbers never change. */
#ifndef XYLEM_OPS_H
#define XYLEM_OPS_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* THE OP LIST: one line per op, X(number, ENUM, name), in number order. It generates the enum below
 * (XYLEM_OP_<ENUM> = number), xylem_op_name() and the plugin kit's op list (plugin_kit/op_list.h), so
 * an op is named once. Append only: a new op takes the next number; numbers never change.
 *
 * The contract of every op is written beside its line: operands, the formula, which outputs are
 * read, dtypes, tie rules and the conformance kit's tolerance. Conventions:
 * - Every tensor is dense row-major, f32 unless said otherwise; "inputs" are read, "outputs" are
 *   written; an output marked (rw) is also read (accumulation, in-place updates). Scalars are
 *   tensors of one element. N = batch, C = classes/channels.
 * - A coefficient of 0 on an output's old value (beta = 0 in gemm, bias_grad, conv2d_bwd_filter,
 *   sum_squares; acc = 0 in the losses) means the output is NOT read: it may hold NaN or garbage
 *   and the result must not carry it (the BLAS convention; the kit fills such outputs with NaN).
 * - The kit compares against a float64 reference with the normalized error
 *   max|got - ref| / max(1, max|ref|); "tol" below is the bound. K = products summed per output,
 *   R = values summed per output.
 * - The shape rules every descriptor must meet are the plugin kit's (plugin_kit/shapes.h); the
 *   core checks the same rules before it builds a descriptor. */
#define XYLEM_OP_LIST(X) \
    /* fill: outputs (out); out = value.  attrs xylem_fill_attrs.  tol 1e-7 */ \
    X(0, FILL, fill) \
    /* copy: inputs (in), outputs (out) with the same element count (shapes may differ); out = in.  tol 1e-7 */ \
    X(1, COPY, copy) \
    /* axpby: inputs (a, b), outputs (out), all one shape: out = alpha*a + beta*b. With one input (a):   \
       out(rw) = alpha*a + beta*out, out not read when beta == 0.  attrs xylem_axpby_attrs.  tol 1e-6 */ \
    X(2, AXPBY, axpby) \
    /* mul: inputs (a, b), outputs (out), one shape: out = a*b elementwise.  tol 1e-6 */ \
    X(3, MUL, mul) \
    /* gemm: inputs (A, B), outputs (C(rw)), all 2-D: C = alpha*op(A)*op(B) + beta*C, op = transpose when \
       trans_*; C not read when beta == 0.  attrs xylem_gemm_attrs.  tol 1e-5*max(1, K/32) */ \
    X(4, GEMM, gemm) \
    /* linear_fwd: inputs (X [..., in], W [out, in], b [out] optional), outputs (Y [..., out] holding X's  \
       rows): Y = act(X*W^T + b).  attrs xylem_linear_attrs.  tol 1e-5*max(1, in/32) */ \
    X(5, LINEAR_FWD, linear_fwd) \
    /* bias_grad: inputs (dy [N, C, ...]), outputs (db(rw) [C]): db = beta*db + sum of dy over every axis \
       but 1; db not read when beta == 0.  attrs xylem_bias_grad_attrs.  tol 1e-5*max(1, R/32) */ \
    X(6, BIAS_GRAD, bias_grad) \
    /* act_fwd: inputs (x), outputs (y), one shape: y = f(x) (relu, sigmoid, tanh, or identity).        \
       attrs xylem_act_attrs.  tol 1e-6 */ \
    X(7, ACT_FWD, act_fwd) \
    /* act_bwd: inputs (dy, y), outputs (dx), one shape: dx = dy * f'(x) written through y               \
       (relu: y > 0; sigmoid: y(1-y); tanh: 1-y^2).  attrs xylem_act_attrs.  tol 1e-6 */ \
    X(8, ACT_BWD, act_bwd) \
    /* softmax_fwd: inputs (x), outputs (y), one shape, rank >= 1: softmax (or log_softmax) over the last \
       axis.  attrs xylem_softmax_attrs.  tol 1e-6 */ \
    X(9, SOFTMAX_FWD, softmax_fwd) \
    /* softmax_bwd: inputs (dy, y), outputs (dx): softmax: dx = y*(dy - sum(dy*y)); log: dx = dy -        \
       exp(y)*sum(dy), sums over the last axis.  attrs xylem_softmax_attrs.  tol 1e-6 */ \
    X(10, SOFTMAX_BWD, softmax_bwd) \
    /* xent_fwd: inputs (logits [N, C], labels [N] i32 in [0, C)), outputs (loss(rw) [1]):              \
       loss = acc*loss + scale*sum_i -log softmax(logits_i)[label_i]; loss not read when acc == 0.       \
       attrs xylem_loss_attrs.  tol 1e-5 */ \
    X(11, XENT_FWD, xent_fwd) \
    /* xent_bwd: inputs (logits, labels), outputs (dlogits [N, C]): scale*(softmax(logits) - onehot).     \
       attrs xylem_loss_attrs (acc unused).  tol 1e-6 */ \
    X(12, XENT_BWD, xent_bwd) \
    /* nll_fwd: inputs (logp [N, C], labels [N] i32), outputs (loss(rw) [1]):                           \
       loss = acc*loss + scale*sum_i -logp[i, label_i]; not read when acc == 0.  tol 1e-5 */ \
    X(13, NLL_FWD, nll_fwd) \
    /* nll_bwd: inputs (logp, labels), outputs (dlogp): -scale*onehot(labels).  tol 1e-6 */ \
    X(14, NLL_BWD, nll_bwd) \
    /* mse_fwd: inputs (pred, target), one element count, outputs (loss(rw) [1]):                      \
       loss = acc*loss + scale*sum (pred - target)^2; not read when acc == 0.  tol 1e-5 */ \
    X(15, MSE_FWD, mse_fwd) \
    /* mse_bwd: inputs (pred, target), outputs (dpred): 2*scale*(pred - target).  tol 1e-6 */ \
    X(16, MSE_BWD, mse_bwd) \
    /* dropout_fwd: inputs (x), outputs (y, mask), one shape: keep_i = xylem_dropout_keep(seed, i, p),   \
       mask = keep/(1-p), y = x*mask; 0 <= p < 1.  attrs xylem_dropout_attrs.  keep exact; tol 1e-6 */ \
    X(17, DROPOUT_FWD, dropout_fwd) \
    /* sgd_update: inputs (grad), outputs (param(rw), velocity(rw)), one shape. torch.optim.SGD:        \
       g = grad + weight_decay*p; when momentum != 0: v = momentum*v + (1-dampening)*g (the caller        \
       zeroes v before the first step), g = nesterov ? g + momentum*v : v; then p -= lr*g. With         \
       momentum == 0 the velocity is neither read nor written.  attrs xylem_sgd_attrs.  tol 1e-6 */ \
    X(18, SGD_UPDATE, sgd_update) \
    /* adam_update: inputs (grad), outputs (param(rw), m(rw), v(rw)), one shape. g = grad + wd*p;        \
       m = b1*m + (1-b1)*g; v = b2*v + (1-b2)*g^2; p -= (lr/bc1) * m / (sqrt(v)/sqrt(bc2) + eps);        \
       bc1, bc2 > 0 (the caller's 1 - beta^t).  attrs xylem_adam_attrs.  tol 2e-6 */ \
    X(19, ADAM_UPDATE, adam_update) \
    /* accuracy: inputs (logits [N, C] f32, labels [N] i32), outputs (correct(rw) [1] f32):               \
       correct += number of rows whose argmax equals the label; ties go to the FIRST maximal index      \
       (numpy, PyTorch). The count is an f32 (exact below 2^24).  tol 1e-7 */ \
    X(20, ACCURACY, accuracy) \
    /* conv2d_fwd (ABI 1.1; images NCHW, filters [K, C/groups, R, S]): inputs (X, W, b [K] optional,    \
       R [N, K, OH, OW] optional from ABI 1.10, only after b), outputs (Y [N, K, OH, OW]):                 \
       Y = act(conv(X, W) + b + R): R is a residual added before the activation (ResNet's shortcut), in     \
       the same pass as the bias; Y overlaps none of the inputs.  attrs xylem_conv2d_attrs.                \
       tol 1e-5*max(1, K/32) */ \
    X(21, CONV2D_FWD, conv2d_fwd) \
    /* conv2d_bwd_data: inputs (dY, W), outputs (dX): the input gradient.  tol 1e-5*max(1, K/32) */ \
    X(22, CONV2D_BWD_DATA, conv2d_bwd_data) \
    /* conv2d_bwd_filter: inputs (X, dY), outputs (dW(rw), db(rw) [K] optional from ABI 1.9): dW =        \
       beta*dW + the filter gradient; db = beta*db + dY summed over N, OH and OW (bias_grad's, read with   \
       dY's other pass: the Flux #558 reduction); neither read when beta == 0.  tol 1e-5*max(1, K/32) */ \
    X(23, CONV2D_BWD_FILTER, conv2d_bwd_filter) \
    /* pool2d_fwd: inputs (X), outputs (Y): max or average pooling (xylem_pool2d_window()).              \
       attrs xylem_pool2d_attrs.  tol 1e-6 */ \
    X(24, POOL2D_FWD, pool2d_fwd) \
    /* pool2d_bwd: inputs (dY, X, Y), outputs (dX): max routes each window's gradient to its FIRST        \
       maximum (row-major in the window); average spreads it over the divisor.  tol 1e-6 */ \
    X(25, POOL2D_BWD, pool2d_bwd) \
    /* batchnorm_fwd: per-channel (axis 1) normalisation. inputs (X, gamma [C], beta [C]); outputs (Y,    \
       running_mean(rw) [C], running_var(rw) [C], saved_mean [C], saved_invstd [C]). training: batch     \
       statistics; running = (1-momentum)*running + momentum*batch with the unbiased variance; saved_*   \
       written for the backward pass. eval: uses the running statistics (read only); saved_* untouched. \
       ABI 1.11: Y = relu(normalised X) when attrs.activation is XYLEM_ACT_RELU (training and eval).     \
       attrs xylem_batchnorm_attrs.  tol 1e-5*max(1, R/32) */ \
    X(26, BATCHNORM_FWD, batchnorm_fwd) \
    /* batchnorm_bwd: training-mode gradient. inputs (dY, X, gamma, saved_mean, saved_invstd, Y only     \
       with attrs.activation RELU (ABI 1.11): the forward's output); outputs (dX, dgamma, dbeta). With    \
       RELU, dY is the gradient of relu's output Y and the op uses dY * (Y > 0).                          \
       attrs xylem_batchnorm_attrs.  tol 1e-5*max(1, R/32) */ \
    X(27, BATCHNORM_BWD, batchnorm_bwd) \
    /* gather_rows (ABI 1.2): inputs (src [R, ...] f32 or i32, idx [N] i32 with 0 <= idx < R), outputs   \
       (out [N, ...] of src's dtype and trailing dims): out[i, ...] = src[idx[i], ...].  exact */ \
    X(28, GATHER_ROWS, gather_rows) \
    /* rmsprop_update (ABI 1.3, torch.optim.RMSprop): inputs (grad); outputs (param(rw), square_avg(rw),  \
       momentum_buffer(rw) only when momentum > 0, grad_avg(rw) only when centered), in that order.      \
       g = grad + wd*p; sq = alpha*sq + (1-alpha)*g^2; centered: ga = ga + (1-alpha)*(g - ga),            \
       avg = sqrt(sq - ga^2) + eps; else avg = sqrt(sq) + eps; momentum > 0: buf = momentum*buf + g/avg, \
       p -= lr*buf; else p -= lr*g/avg.  attrs xylem_rmsprop_attrs.  tol 2e-6 */ \
    X(29, RMSPROP_UPDATE, rmsprop_update) \
    /* adamw_update (ABI 1.3, torch.optim.AdamW): inputs (grad), outputs (param(rw), m(rw), v(rw)).       \
       p *= 1 - lr*wd; m = b1*m + (1-b1)*grad; v = b2*v + (1-b2)*grad^2;                                 \
       p -= (lr/bc1) * m / (sqrt(v)/sqrt(bc2) + eps); bc1, bc2 > 0.  attrs xylem_adamw_attrs.  tol 2e-6 */ \
    X(30, ADAMW_UPDATE, adamw_update) \
    /* clamp: outputs (x(rw)): x = min(max(x, lo), hi), lo <= hi, NaN stays NaN.  attrs xylem_clamp_attrs. \
       tol 1e-6 */ \
    X(31, CLAMP, clamp) \
    /* sum_squares: inputs (x), outputs (acc(rw) [1]): acc = beta*acc + sum of x^2; acc not read when     \
       beta == 0. Deterministic: the same inputs give the same bits on a device.                        \
       attrs xylem_sum_squares_attrs.  tol 1e-5*max(1, sqrt(R/1024)) */ \
    X(32, SUM_SQUARES, sum_squares) \
    /* clip_by_norm: inputs (sumsq [1]), outputs (x(rw)): x *= min(1, max_norm / (sqrt(sumsq) + eps)),    \
       read on the device; a NaN norm gives NaN (torch's clip_grad_norm_).                              \
       attrs xylem_clip_by_norm_attrs.  tol 1e-6 */ \
    X(33, CLIP_BY_NORM, clip_by_norm) \
    /* add (ABI 1.4): inputs (a, b), outputs (out), a and out one shape [..., cols] seen as [rows, cols]: \
       out = alpha*a + beta*b, with b broadcast: b of a's shape (elementwise), b [cols] (a row vector,   \
       added to every row) or b of a's leading dims then 1, [..., 1] (a column vector, one value per     \
       row). alpha = beta = 1 adds; beta = -1 subtracts.  attrs xylem_add_attrs.  tol 1e-6 */ \
    X(34, ADD, add) \
    /* fused_elementwise (ABI 1.5): runs the small elementwise program in xylem_fused_attrs (below) over   \
       one iteration space. outputs (1..XYLEM_FUSED_MAX_OUTPUTS, one element count, seen as [rows, cols]  \
       with cols = output 0's last dim); inputs (0..XYLEM_FUSED_MAX_INPUTS), input i broadcast by          \
       attrs.input_modes[i]: FULL rows*cols elements, ROW cols (one row for every row), COL rows (one value  \
       per row), SCALAR 1. An input may share memory with an output only exactly (same buffer and offset, \
       FULL): every element's inputs are read before its outputs are written. The rule and the opcodes'  \
       semantics are plugin_kit/fused.h's.  tol 1e-5 (relative to max(1, max|ref|), per output) */ \
    X(35, FUSED_ELEMENTWISE, fused_elementwise) \
    /* reduce (ABI 1.5): inputs (x), outputs (out(rw)). x is viewed as [outer, n, inner] around attrs.axis \
       (outer = product of the dims before it, inner = after); axis = -1 reduces every element (outer =   \
       inner = 1). out holds outer*inner elements (any shape): out = beta*out + sum, mean or max over n;   \
       out not read when beta == 0. max over n = 0 is -inf, mean over n = 0 is NaN; max propagates NaN.   \
       Deterministic on a device.  attrs xylem_reduce_attrs.  tol 1e-5*max(1, sqrt(R/1024)) */ \
    X(36, REDUCE, reduce) \
    /* scatter_add_rows (ABI 1.5, the embedding gradient): inputs (src [N, ...] f32, idx [N] i32 with      \
       0 <= idx < R), outputs (out(rw) [R, ...], src's trailing dims): out[idx[i], ...] += src[i, ...];   \
       repeated indices accumulate; rows no index names are untouched.  tol 1e-5*max(1, R/32), R = the most \
       repeats of one index */ \
    X(37, SCATTER_ADD_ROWS, scatter_add_rows) \
    /* layer_norm_fwd (ABI 1.7): normalisation over the last axis, D = X's last dim, rows = the rest.     \
       inputs (X [..., D], gamma [D], beta [D] optional), outputs (Y of X's shape, mean [rows],           \
       rstd [rows], any shapes holding rows elements): mean, rstd = 1/sqrt(var + eps) of each row (the    \
       biased variance, as torch.nn.LayerNorm), written for the backward pass; Y = (X - mean)*rstd*gamma  \
       + beta.  attrs xylem_layer_norm_attrs.  tol 1e-5*max(1, D/32) */ \
    X(38, LAYER_NORM_FWD, layer_norm_fwd) \
    /* layer_norm_bwd (ABI 1.7): inputs (dY, X, gamma, mean, rstd) as layer_norm_fwd's; outputs (dX,     \
       dgamma(rw) [D], dbeta(rw) [D] optional). xhat = (X - mean)*rstd, g = dY*gamma:                     \
       dX = rstd*(g - mean_D(g) - xhat*mean_D(g*xhat)); dgamma = beta*dgamma + sum over rows of dY*xhat;  \
       dbeta = beta*dbeta + sum over rows of dY; dgamma, dbeta not read when attrs.beta == 0 (beta = 1    \
       accumulates: a shared parameter). Deterministic.  attrs xylem_layer_norm_attrs.                    \
       tol 1e-5*max(1, max(D, rows)/32) */ \
    X(39, LAYER_NORM_BWD, layer_norm_bwd) \
    /* attention_fwd (ABI 1.7), scaled dot-product attention as ONE op: inputs (Q [B, H, Tq, Dk],        \
       K [B, H, Tk, Dk], V [B, H, Tk, Dv], mask optional), outputs (O [B, H, Tq, Dv], LSE [B, H, Tq]).     \
       Keys used: the first L = attrs.kv_length rows of K's and V's time axis (0: L = Tk; a key/value     \
       cache holds Tk >= L rows). s_ij = scale*(q_i . k_j) + mask_ij for j < L; causal: key j is visible  \
       to query i only when j <= i + L - Tq (aligned at the bottom right: the last query sees every key,  \
       as a decoder extending a cache needs; with Tq == L it is the usual lower triangle). Over the       \
       visible keys: P_i = softmax(s_i), LSE_i = log sum exp(s_i) (natural log, before dropout), then     \
       dropout when p > 0: P_ij *= keep/(1-p), keep = xylem_dropout_keep(seed, ((b*H + h)*Tq + i)*L + j,  \
       p) (the flat index of P as [B, H, Tq, L]); O_i = sum_j P_ij v_j. A row with no visible key, or only \
       -inf scores: O_i = 0, LSE_i = -inf. mask: additive f32 [Tq, L] or [B|1, H|1, Tq|1, L] (1 broadcasts). \
       Plugins may decline shapes through op_accepts (plugin_api.h); the core then composes the op from     \
       gemm_batched, masked_softmax and dropout_fwd.  attrs xylem_attention_attrs.  tol 1e-5*max(1, L/32) */ \
    X(40, ATTENTION_FWD, attention_fwd) \
    /* attention_bwd (ABI 1.7): inputs (dO, Q, K, V, O, LSE, mask optional) as attention_fwd's; outputs   \
       (dQ, dK, dV) of Q's, K's and V's shapes: with P recomputed from LSE and the same dropout mask M,   \
       D_i = dO_i . O_i: dV = (P*M)^T dO, dS = P*(M*(dO V^T) - D), dQ = scale*dS K, dK = scale*dS^T Q;     \
       rows j >= L of dK and dV are written as 0. Deterministic.  attrs xylem_attention_attrs.            \
       tol 1e-5*max(1, max(L, Tq)/32) */ \
    X(41, ATTENTION_BWD, attention_bwd) \
    /* gemm_batched (ABI 1.7): inputs (A, B), outputs (C(rw) [batch..., M, N], rank >= 3): for each batch \
       index, C = alpha*op(A)*op(B) + beta*C as gemm's. A is [batch..., M, K] ([..., K, M] when trans_a)  \
       with C's leading dims, or rank 2 (one matrix for every batch); B likewise [batch..., K, N] or      \
       [K, N] ([..., N, K] when trans_b). C not read when beta == 0.  attrs xylem_gemm_attrs.             \
       tol 1e-5*max(1, K/32) */ \
    X(42, GEMM_BATCHED, gemm_batched) \
    /* permute (ABI 1.7): inputs (X, rank n <= XYLEM_MAX_DIMS), outputs (Y, rank n): Y.dims[i] =          \
       X.dims[perm[i]] and Y[i_0, ..., i_n-1] = X at index i_k on axis perm[k] (numpy.transpose(X, perm),  \
       torch's permute().contiguous()). The split of heads and its inverse.  attrs xylem_permute_attrs.   \
       exact */ \
    X(43, PERMUTE, permute) \
    /* masked_softmax (ABI 1.7): inputs (X [..., Tq, L], rank >= 2, mask optional as attention's: a 4-D  \
       mask only for 4-D X), outputs (Y of X's shape, LSE optional holding X's rows, numel/L): attention's \
       P without dropout: Y_i = softmax over the visible j of s_ij = scale*X_ij + mask_ij (causal as       \
       attention_fwd's, bottom-right aligned), 0 at hidden j, LSE_i = log sum exp over them; a row with   \
       none visible (or all -inf): Y_i = 0, LSE_i = -inf. Its gradient is softmax_bwd's (times scale).    \
       attrs xylem_attention_attrs (scale, causal; kv_length must be 0, dropout_p is ignored).  tol 1e-6 */ \
    X(44, MASKED_SOFTMAX, masked_softmax)

typedef enum xylem_op {
#define XYLEM_OP_ENUM_(number, ENUM, name) XYLEM_OP_##ENUM = number,
    XYLEM_OP_LIST(XYLEM_OP_ENUM_)
#undef XYLEM_OP_ENUM_
    XYLEM_OP_COUNT_ = 45 /* number of ops in this version of the header (checked against the list below) */
} xylem_op;

/* Each op's position in the list: the check below fails to compile when a number is not its
 * position or when XYLEM_OP_COUNT_ is not the list's length. */
enum xylem_op_position_ {
#define XYLEM_OP_POSITION_(number, ENUM, name) XYLEM_OP_POSITION_##ENUM##_,
    XYLEM_OP_LIST(XYLEM_OP_POSITION_)
#undef XYLEM_OP_POSITION_
    XYLEM_OP_LIST_LENGTH_
};
#define XYLEM_OP_NUMBERED_(number, ENUM, name) &&(number) == XYLEM_OP_POSITION_##ENUM##_
typedef char xylem_op_list_numbered_in_order_[(1 XYLEM_OP_LIST(XYLEM_OP_NUMBERED_)) &&
                                                      (int)XYLEM_OP_LIST_LENGTH_ == (int)XYLEM_OP_COUNT_ ? 1 : -1];
#undef XYLEM_OP_NUMBERED_

typedef enum xylem_activation {
    XYLEM_ACT_NONE = 0,
    XYLEM_ACT_RELU = 1,
    XYLEM_ACT_SIGMOID = 2,
    XYLEM_ACT_TANH = 3,
    /* ABI 1.7, act_fwd and act_bwd only (not fused into linear_fwd or conv2d_fwd: their gradient needs
     * the input, so act_bwd's second input is x for these two, not y). */
    XYLEM_ACT_GELU = 4,     /* x * Phi(x) = 0.5*x*(1 + erf(x/sqrt 2)): exact (torch's default, nanoGPT) */
    XYLEM_ACT_GELU_TANH = 5, /* 0.5*x*(1 + tanh(sqrt(2/pi)*(x + 0.044715*x^3))) (GPT-2, approximate="tanh") */
    /* ABI 1.8: min(max(x, 0), 6) (MobileNet's ReLU6, ONNX's Clip(0, 6)); like relu, act_bwd reads y
     * (dx = dy where 0 < y < 6, else 0) and linear_fwd / conv2d_fwd fuse it. */
    XYLEM_ACT_RELU6 = 6
} xylem_activation;

typedef struct xylem_fill_attrs { float value; } xylem_fill_attrs;
typedef struct xylem_axpby_attrs { float alpha, beta; } xylem_axpby_attrs;
typedef struct xylem_gemm_attrs { int32_t trans_a, trans_b; float alpha, beta; } xylem_gemm_attrs;
typedef struct xylem_linear_attrs { int32_t activation; } xylem_linear_attrs;
typedef struct xylem_bias_grad_attrs { float beta; } xylem_bias_grad_attrs;
typedef struct xylem_act_attrs { int32_t activation; } xylem_act_attrs;
typedef struct xylem_softmax_attrs { int32_t log; } xylem_softmax_attrs;
/* acc = 0 overwrites the loss scalar, acc = 1 accumulates into it (loss sums stay on the device). */
typedef struct xylem_loss_attrs { float scale; float acc; } xylem_loss_attrs;
typedef struct xylem_dropout_attrs { float p; uint32_t pad_; uint64_t seed; } xylem_dropout_attrs;
typedef struct xylem_sgd_attrs {
    float lr, momentum, dampening, weight_decay;
    int32_t nesterov;
} xylem_sgd_attrs;
/* bias corrections are 1 - beta^t, computed by the host per step so the op needs no state. */
typedef struct xylem_adam_attrs {
    float lr, beta1, beta2, eps, weight_decay;
    float bias_correction1, bias_correction2;
} xylem_adam_attrs;

/* ABI 1.3. RMSprop as torch.optim.RMSprop: no state beyond the buffers (no bias correction). */
typedef struct xylem_rmsprop_attrs {
    float lr, alpha, eps, weight_decay, momentum;
    int32_t centered;
} xylem_rmsprop_attrs;
/* AdamW has its own op and struct rather than a flag in xylem_adam_attrs: a plugin built against an
 * older header would read the old struct, ignore the flag and silently apply Adam's L2 decay; a new
 * op is simply unsupported there. Same fields as Adam; weight_decay is decoupled. */
typedef struct xylem_adamw_attrs {
    float lr, beta1, beta2, eps, weight_decay;
    float bias_correction1, bias_correction2;
} xylem_adamw_attrs;
typedef struct xylem_clamp_attrs { float lo, hi; } xylem_clamp_attrs;
typedef struct xylem_sum_squares_attrs { float beta; } xylem_sum_squares_attrs;
typedef struct xylem_clip_by_norm_attrs { float max_norm, eps; } xylem_clip_by_norm_attrs;
/* ABI 1.4 */
typedef struct xylem_add_attrs { float alpha, beta; } xylem_add_attrs;

/* ABI 1.5: fused_elementwise's program. A straight-line program over float32 registers, run once per
 * element of the iteration space, instructions in order. Self-contained (no pointers: a captured op
 * keeps a byte copy) and versioned: a plugin refuses a version it does not know. The opcodes:
 * X(number, ENUM, name, arity) with arity = register operands read (a, b, c in that order);
 * plugin_kit/fused.h holds each one's arithmetic (fused_apply) and C text (fused_expr), the one home
 * every backend uses. Append only. */
#define XYLEM_FUSED_VERSION 1
#define XYLEM_FUSED_MAX_INSTRS 192
#define XYLEM_FUSED_MAX_REGS 64
#define XYLEM_FUSED_MAX_PARAMS 32
#define XYLEM_FUSED_MAX_INPUTS 16
#define XYLEM_FUSED_MAX_OUTPUTS 8
#define XYLEM_FUSED_OPCODE_LIST(X) \
    X(0, INPUT, input, 0)   /* r[dst] = input a at this element (broadcast by its mode) */ \
    X(1, PARAM, param, 0)   /* r[dst] = params[a]: a value bound at each run (learning rate, ...) */ \
    X(2, CONST, const, 0)   /* r[dst] = imm */ \
    X(3, OUTPUT, output, 1) /* output dst at this element = r[a]; each output stored exactly once */ \
    X(4, ADD, add, 2)       /* a + b */ \
    X(5, SUB, sub, 2)       /* a - b */ \
    X(6, MUL, mul, 2)       /* a * b */ \
    X(7, DIV, div, 2)       /* a / b (IEEE: x/0 = +-inf, 0/0 = NaN) */ \
    X(8, MIN, min, 2)       /* the smaller; NaN when either is NaN (torch.minimum) */ \
    X(9, MAX, max, 2)       /* the larger; NaN when either is NaN (torch.maximum) */ \
    X(10, NEG, neg, 1)      /* -a */ \
    X(11, ABS, abs, 1)      /* |a| */ \
    X(12, EXP, exp, 1)      /* e^a */ \
    X(13, LOG, log, 1)      /* ln a (NaN below 0, -inf at 0) */ \
    X(14, SQRT, sqrt, 1)    /* sqrt a */ \
    X(15, RSQRT, rsqrt, 1)  /* 1 / sqrt a */ \
    X(16, TANH, tanh, 1)    /* tanh a */ \
    X(17, SIGMOID, sigmoid, 1) /* 1 / (1 + e^-a) */ \
    X(18, RELU, relu, 1)    /* a > 0 ? a : 0 (NaN gives 0, as act_fwd) */ \
    X(19, FMA, fma, 3)      /* a * b + c */ \
    X(20, SELECT, select, 3) /* a != 0 ? b : c */ \
    X(21, GT, gt, 2)        /* a > b ? 1 : 0 */ \
    X(22, GE, ge, 2)        /* a >= b ? 1 : 0 */ \
    X(23, EQ, eq, 2)        /* a == b ? 1 : 0 */ \
    X(24, TANH_GRAD, tanh_grad, 2)       /* a * (1 - b*b): dy through y = tanh(x) (act_bwd) */ \
    X(25, SIGMOID_GRAD, sigmoid_grad, 2) /* a * b * (1 - b): dy through y = sigmoid(x) */ \
    X(26, RELU_GRAD, relu_grad, 2)       /* b > 0 ? a : 0: dy through y = relu(x) */ \
    X(27, SQUARE, square, 1) /* a * a */ \
    X(28, RECIP, recip, 1)   /* 1 / a */ \
    X(29, ERF, erf, 1)       /* erf a (ABI 1.7) */ \
    X(30, GELU, gelu, 1)     /* act_fwd's XYLEM_ACT_GELU of a (ABI 1.7) */ \
    X(31, GELU_TANH, gelu_tanh, 1) /* act_fwd's XYLEM_ACT_GELU_TANH of a (ABI 1.7) */ \
    X(32, GELU_GRAD, gelu_grad, 2) /* a * gelu'(b): dy through gelu at x = b (ABI 1.7) */ \
    X(33, GELU_TANH_GRAD, gelu_tanh_grad, 2) /* a * gelu_tanh'(b) (ABI 1.7) */

typedef enum xylem_fused_opcode {
#define XYLEM_FUSED_OPCODE_ENUM_(number, ENUM, name, arity) XYLEM_FUSED_##ENUM = number,
    XYLEM_FUSED_OPCODE_LIST(XYLEM_FUSED_OPCODE_ENUM_)
#undef XYLEM_FUSED_OPCODE_ENUM_
    XYLEM_FUSED_OPCODE_COUNT_ = 34
} xylem_fused_opcode;

typedef enum xylem_fused_input_mode {
    XYLEM_FUSED_FULL = 0,   /* rows*cols elements, one per element */
    XYLEM_FUSED_ROW = 1,    /* cols elements: the same row for every row */
    XYLEM_FUSED_COL = 2,    /* rows elements: one value per row */
    XYLEM_FUSED_SCALAR = 3  /* 1 element for every element */
} xylem_fused_input_mode;

typedef struct xylem_fused_instr {
    uint8_t op;      /* xylem_fused_opcode */
    uint8_t dst;     /* register written; OUTPUT: the output index */
    uint8_t a, b, c; /* registers read; INPUT: the input index; PARAM: the params index */
    uint8_t pad_[3];
    float imm;       /* CONST's value */
} xylem_fused_instr;

typedef struct xylem_fused_attrs {
    uint32_t version;  /* XYLEM_FUSED_VERSION */
    uint32_t n_instrs; /* 1..XYLEM_FUSED_MAX_INSTRS */
    uint32_t n_regs;   /* registers used, 1..XYLEM_FUSED_MAX_REGS; a register is written before it is read */
    uint32_t n_params; /* 0..XYLEM_FUSED_MAX_PARAMS */
    uint8_t input_modes[XYLEM_FUSED_MAX_INPUTS]; /* xylem_fused_input_mode of each input */
    float params[XYLEM_FUSED_MAX_PARAMS];
    xylem_fused_instr code[XYLEM_FUSED_MAX_INSTRS];
} xylem_fused_attrs;

typedef enum xylem_reduce_mode { XYLEM_REDUCE_SUM = 0, XYLEM_REDUCE_MEAN = 1, XYLEM_REDUCE_MAX = 2 } xylem_reduce_mode;
typedef struct xylem_reduce_attrs {
    int32_t mode; /* xylem_reduce_mode */
    int32_t axis; /* 0..ndim-1, or -1 for every element */
    float beta;
} xylem_reduce_attrs;

/* Output size per axis: (in + 2*pad - dilation*(kernel-1) - 1) / stride + 1 (floor).
 * beta is used by CONV2D_BWD_FILTER only; activation by CONV2D_FWD only. */
typedef struct xylem_conv2d_attrs {
    int32_t stride_h, stride_w, pad_h, pad_w, dilation_h, dilation_w, groups;
    int32_t activation; /* xylem_activation applied after the bias (the fused conv + bias + activation) */
    float beta;
} xylem_conv2d_attrs;

typedef enum xylem_pool_mode { XYLEM_POOL_MAX = 0, XYLEM_POOL_AVG = 1 } xylem_pool_mode;
/* Output size: (in + 2*pad - kernel) / stride + 1 (floor), with 2*pad <= kernel (PyTorch's "pad at
 * most half the kernel"). The window of each output and the average's divisor are
 * xylem_pool2d_window() below: padding never wins a max; average divides by the full window
 * clipped to the padded input (count_include_pad = 1, PyTorch's default) or by the in-bounds part. */
typedef struct xylem_pool2d_attrs {
    int32_t mode, kernel_h, kernel_w, stride_h, stride_w, pad_h, pad_w, count_include_pad;
} xylem_pool2d_attrs;

/* activation (ABI 1.11): XYLEM_ACT_NONE, or XYLEM_ACT_RELU applied to Y (oneDNN's fuse_norm_relu,
 * cuDNN's batch norm + activation): the ReLU after a batch norm without its own pass over memory in
 * either direction. The core sends RELU only to a plugin whose op_accepts returns 1 for that very
 * descriptor: a plugin without op_accepts, or built before 1.11 (whose attrs end at `training`),
 * never gets it, and the core runs the ReLU as its own op. */
typedef struct xylem_batchnorm_attrs {
    float eps, momentum;
    int32_t training;
    int32_t activation; /* ABI 1.11 */
} xylem_batchnorm_attrs;

/* ABI 1.7 */
typedef struct xylem_layer_norm_attrs {
    float eps;
    float beta; /* layer_norm_bwd: dgamma = beta*dgamma + ..., not read when 0 */
} xylem_layer_norm_attrs;
typedef struct xylem_attention_attrs {
    float scale;       /* usually 1/sqrt(Dk) */
    int32_t causal;    /* 1: bottom-right aligned causal mask (ops.h's attention_fwd) */
    float dropout_p;   /* 0 <= p < 1, on the attention probabilities */
    int32_t kv_length; /* keys used, 1..Tk; 0: all Tk */
    uint64_t seed;     /* dropout's mask stream (xylem_dropout_keep) */
} xylem_attention_attrs;
typedef struct xylem_permute_attrs {
    int32_t perm[8]; /* XYLEM_MAX_DIMS entries; the first rank(X) form a permutation of 0..rank-1 */
} xylem_permute_attrs;

/* The op's name for messages and profiles ("linear_fwd"), from the op list. */
static inline const char* xylem_op_name(uint32_t op) {
#define XYLEM_OP_NAME_(number, ENUM, name) #name,
    static const char* const names[] = {XYLEM_OP_LIST(XYLEM_OP_NAME_)};
#undef XYLEM_OP_NAME_
    return op < XYLEM_OP_COUNT_ ? names[op] : "unknown_op";
}

/* Dropout's keep decision for element i: a counter-based hash, so every backend draws the
 * same mask for the same seed (results agree across CPU, CUDA and OpenCL). CUDA kernels call
 * this very function, hence __host__ __device__ under nvcc. */
#if defined(__CUDACC__)
#define XYLEM_HOST_DEVICE __host__ __device__
#else
#define XYLEM_HOST_DEVICE
#endif
static inline XYLEM_HOST_DEVICE int xylem_dropout_keep(uint64_t seed, uint64_t i, float p) {
    uint64_t z = seed + (i + 1) * 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    return (float)(z >> 40) * (1.0f / 16777216.0f) >= p;
}

/* One output's pooling window along one axis: the input indices [*lo, *hi) it reads (padding
 * clipped off) and the count its average divides by (with count_include_pad, the window clipped to
 * the padded input, as PyTorch does). Host and device code (CUDA kernels) call this same function. */
static inline XYLEM_HOST_DEVICE int64_t xylem_pool2d_window(int64_t out_index, int64_t in_size, int64_t kernel,
                                                          int64_t stride, int64_t pad, int32_t count_include_pad,
                                                          int64_t* lo, int64_t* hi) {
    int64_t start = out_index * stride - pad, end = start + kernel;
    const int64_t padded_end = end < in_size + pad ? end : in_size + pad;
    const int64_t padded = padded_end - start;
    if (start < 0) start = 0;
    if (end > in_size) end = in_size;
    *lo = start;
    *hi = end;
    return count_include_pad ? padded : end - start;
}

#ifdef __cplusplus
}
#endif
#endif
