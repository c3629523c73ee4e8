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
    XYLEM_OP_COUNT_ = 21      /* number of ops in this version of the header */
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

/* Dropout's keep decision for element i: a counter-based hash, so every backend draws the
 * same mask for the same seed (results agree across CPU, CUDA and OpenCL). */
static inline int xylem_dropout_keep(uint64_t seed, uint64_t i, float p) {
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
