/* xylem op set: the op enum and attribute structs shared by the core and every plugin.
 * Append-only: new ops and new attribute fields go at the end; numbers never change. */
#ifndef XYLEM_OPS_H
#define XYLEM_OPS_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Every tensor argument is dense row-major. "inputs" are read, "outputs" are written;
 * an output marked (rw) is also read (accumulation, in-place updates). Shapes below use
 * N = batch, C = classes/features. Scalars are tensors of shape [1]. */
typedef enum xylem_op {
    XYLEM_OP_FILL = 0,        /* out = value                                 attrs: xylem_fill_attrs */
    XYLEM_OP_COPY = 1,        /* out = in (same element count)               attrs: none */
    XYLEM_OP_AXPBY = 2,       /* out = alpha*a + beta*b (b optional: out(rw) used when n_inputs==1) attrs: xylem_axpby_attrs */
    XYLEM_OP_MUL = 3,         /* out = a * b, elementwise                    attrs: none */
    XYLEM_OP_GEMM = 4,        /* C(rw) = alpha*op(A)*op(B) + beta*C; A,B,C 2-D  attrs: xylem_gemm_attrs */
    XYLEM_OP_LINEAR_FWD = 5,  /* Y = act(X*W^T + b); X[N,in] W[out,in] b[out] (b optional) attrs: xylem_linear_attrs */
    XYLEM_OP_BIAS_GRAD = 6,   /* db(rw)[C] = beta*db + sum of dy[N,C,...] over every axis but 1  attrs: xylem_bias_grad_attrs */
    XYLEM_OP_ACT_FWD = 7,     /* y = f(x)                                    attrs: xylem_act_attrs */
    XYLEM_OP_ACT_BWD = 8,     /* dx = dy * f'(x) expressed through y: inputs (dy, y) attrs: xylem_act_attrs */
    XYLEM_OP_SOFTMAX_FWD = 9, /* y = softmax or log_softmax over the last axis  attrs: xylem_softmax_attrs */
    XYLEM_OP_SOFTMAX_BWD = 10,/* dx from (dy, y) for softmax or log_softmax  attrs: xylem_softmax_attrs */
    XYLEM_OP_XENT_FWD = 11,   /* loss(rw)[1] = acc*loss + scale*sum_i -log softmax(logits_i)[label_i]
                                 inputs (logits[N,C] f32, labels[N] i32)     attrs: xylem_loss_attrs */
    XYLEM_OP_XENT_BWD = 12,   /* dlogits = scale*(softmax(logits) - onehot(labels))  attrs: xylem_loss_attrs */
    XYLEM_OP_NLL_FWD = 13,    /* loss(rw)[1] = acc*loss + scale*sum_i -logp[i,label_i]  attrs: xylem_loss_attrs */
    XYLEM_OP_NLL_BWD = 14,    /* dlogp = -scale*onehot(labels); inputs (logp, labels) attrs: xylem_loss_attrs */
    XYLEM_OP_MSE_FWD = 15,    /* loss(rw)[1] = acc*loss + scale*sum (pred-target)^2   attrs: xylem_loss_attrs */
    XYLEM_OP_MSE_BWD = 16,    /* dpred = 2*scale*(pred-target)               attrs: xylem_loss_attrs */
    XYLEM_OP_DROPOUT_FWD = 17,/* outputs (y, mask): mask = keep/(1-p), keep from xylem_dropout_keep(); y = x*mask
                                 attrs: xylem_dropout_attrs */
    XYLEM_OP_SGD_UPDATE = 18, /* outputs (param(rw), velocity(rw)), inputs (grad)  attrs: xylem_sgd_attrs */
    XYLEM_OP_ADAM_UPDATE = 19,/* outputs (param(rw), m(rw), v(rw)), inputs (grad)  attrs: xylem_adam_attrs */
    XYLEM_OP_ACCURACY = 20,   /* correct(rw)[1] += count of argmax(logits_i) == label_i; inputs (logits, labels) */
    /* Convolutional networks (ABI 1.1). Images are NCHW; filters are [K, C/groups, R, S]. */
    XYLEM_OP_CONV2D_FWD = 21, /* Y[N,K,OH,OW] = act(conv(X, W) + b); inputs (X, W, b optional)  attrs: xylem_conv2d_attrs */
    XYLEM_OP_CONV2D_BWD_DATA = 22,   /* dX = the input gradient; inputs (dY, W)             attrs: xylem_conv2d_attrs */
    XYLEM_OP_CONV2D_BWD_FILTER = 23, /* dW(rw) = beta*dW + the filter gradient; inputs (X, dY) attrs: xylem_conv2d_attrs */
    XYLEM_OP_POOL2D_FWD = 24, /* Y = max or average pooling of X                         attrs: xylem_pool2d_attrs */
    XYLEM_OP_POOL2D_BWD = 25, /* dX from inputs (dY, X, Y); max routes each window's gradient to its first maximum
                                 attrs: xylem_pool2d_attrs */
    XYLEM_OP_BATCHNORM_FWD = 26, /* per-channel (axis 1) normalisation. inputs (X, gamma[C], beta[C]);
                                    outputs (Y, running_mean(rw)[C], running_var(rw)[C], saved_mean[C], saved_invstd[C]).
                                    training: batch statistics; running = (1-momentum)*running + momentum*batch, with the
                                    unbiased variance; saved_* written for the backward pass.
                                    eval: uses the running statistics (read only); saved_* untouched.
                                    attrs: xylem_batchnorm_attrs */
    XYLEM_OP_BATCHNORM_BWD = 27, /* training-mode gradient. inputs (dY, X, gamma, saved_mean, saved_invstd);
                                    outputs (dX, dgamma, dbeta)                           attrs: xylem_batchnorm_attrs */
    /* ABI 1.2 */
    XYLEM_OP_GATHER_ROWS = 28,   /* out[i, ...] = src[idx[i], ...]: picks rows of a device-resident dataset.
                                    inputs (src [R, ...] f32 or i32, idx [N] i32 with 0 <= idx < R); out [N, ...] with
                                    src's dtype and trailing dims                          attrs: none */
    /* ABI 1.3: more optimisers and gradient clipping (PyTorch's definitions). Hyper-parameters by value. */
    XYLEM_OP_RMSPROP_UPDATE = 29,/* outputs (param(rw), square_avg(rw), momentum_buffer(rw) only when momentum > 0,
                                    grad_avg(rw) only when centered), inputs (grad); in that order, 2 to 4 outputs.
                                    g = grad + wd*p; sq = alpha*sq + (1-alpha)*g^2;
                                    centered: ga = ga + (1-alpha)*(g - ga), avg = sqrt(sq - ga^2) + eps;
                                    else avg = sqrt(sq) + eps;
                                    momentum > 0: buf = momentum*buf + g/avg, p -= lr*buf;  else p -= lr*g/avg
                                    attrs: xylem_rmsprop_attrs */
    XYLEM_OP_ADAMW_UPDATE = 30,  /* outputs (param(rw), m(rw), v(rw)), inputs (grad). Decoupled weight decay
                                    (torch.optim.AdamW): p *= 1 - lr*wd; m = b1*m + (1-b1)*grad;
                                    v = b2*v + (1-b2)*grad^2; p -= (lr/bc1) * m / (sqrt(v)/sqrt(bc2) + eps)
                                    attrs: xylem_adamw_attrs */
    XYLEM_OP_CLAMP = 31,         /* x(rw) = min(max(x, lo), hi), NaN stays NaN (clipping by value)  attrs: xylem_clamp_attrs */
    XYLEM_OP_SUM_SQUARES = 32,   /* acc(rw)[1] = beta*acc + sum of x^2 (acc not read when beta == 0); inputs (x).
                                    A deterministic reduction: the same inputs give the same bits on a device.
                                    attrs: xylem_sum_squares_attrs */
    XYLEM_OP_CLIP_BY_NORM = 33,  /* x(rw) *= min(1, max_norm / (sqrt(sumsq[0]) + eps)), read on the device; inputs
                                    (sumsq[1]); a NaN norm gives NaN (torch's clip_grad_norm_)  attrs: xylem_clip_by_norm_attrs */
    XYLEM_OP_COUNT_ = 34      /* number of ops in this version of the header */
} xylem_op;

typedef enum xylem_activation {
    XYLEM_ACT_NONE = 0,
    XYLEM_ACT_RELU = 1,
    XYLEM_ACT_SIGMOID = 2,
    XYLEM_ACT_TANH = 3
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

/* Output size per axis: (in + 2*pad - dilation*(kernel-1) - 1) / stride + 1 (floor).
 * beta is used by CONV2D_BWD_FILTER only; activation by CONV2D_FWD only. */
typedef struct xylem_conv2d_attrs {
    int32_t stride_h, stride_w, pad_h, pad_w, dilation_h, dilation_w, groups;
    int32_t activation; /* xylem_activation applied after the bias (the fused conv + bias + activation) */
    float beta;
} xylem_conv2d_attrs;

typedef enum xylem_pool_mode { XYLEM_POOL_MAX = 0, XYLEM_POOL_AVG = 1 } xylem_pool_mode;
/* Output size: (in + 2*pad - kernel) / stride + 1 (floor). Padding never wins a max; average
 * divides by the full window (count_include_pad = 1, PyTorch's default) or only the in-bounds part. */
typedef struct xylem_pool2d_attrs {
    int32_t mode, kernel_h, kernel_w, stride_h, stride_w, pad_h, pad_w, count_include_pad;
} xylem_pool2d_attrs;

typedef struct xylem_batchnorm_attrs {
    float eps, momentum;
    int32_t training;
} xylem_batchnorm_attrs;

/* The op's name for messages and profiles ("linear_fwd"); one table for the core and every plugin. */
static inline const char* xylem_op_name(uint32_t op) {
    static const char* const names[] = {
        "fill", "copy", "axpby", "mul", "gemm", "linear_fwd", "bias_grad", "act_fwd", "act_bwd",
        "softmax_fwd", "softmax_bwd", "xent_fwd", "xent_bwd", "nll_fwd", "nll_bwd", "mse_fwd", "mse_bwd",
        "dropout_fwd", "sgd_update", "adam_update", "accuracy", "conv2d_fwd", "conv2d_bwd_data",
        "conv2d_bwd_filter", "pool2d_fwd", "pool2d_bwd", "batchnorm_fwd", "batchnorm_bwd", "gather_rows",
        "rmsprop_update", "adamw_update", "clamp", "sum_squares", "clip_by_norm"};
    typedef char one_name_per_op[sizeof names / sizeof names[0] == XYLEM_OP_COUNT_ ? 1 : -1];
    (void)sizeof(one_name_per_op);
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

#ifdef __cplusplus
}
#endif
#endif
