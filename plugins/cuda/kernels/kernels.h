// Launch functions of the plugin's own CUDA kernels: plain C++ signatures, so the host files
// (ops/*.cpp) compile with the host compiler. Every launch is asynchronous on `s`; none syncs.
// `flags` is the stream's error word: a kernel sets bit (1 << op) when it meets bad data.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "xylem/plugin_kit/shapes.h"

namespace xylem::cuda::kernels {

constexpr int kThreads = 256;

// Blocks for a grid-stride loop over n elements (capped: each thread then loops). Here rather than
// in common.cuh so that host code launching a kernel of its own (ops/fused.cpp) sizes grids alike.
inline unsigned grid_for(int64_t n) {
    const int64_t b = (n + kThreads - 1) / kThreads;
    return static_cast<unsigned>(b < 1 ? 1 : b > 65535 * 8 ? 65535 * 8 : b);
}

// ---- elementwise.cu ----
void fill_u32(uint32_t* y, int64_t n, uint32_t bits, cudaStream_t s);  // f32 or i32 by bit pattern
void copy_u32(const uint32_t* x, uint32_t* y, int64_t n, cudaStream_t s);
// out = alpha*a + beta*b; b may be null (then out is read when beta != 0).
void axpby(const float* a, const float* b, float* out, int64_t n, float alpha, float beta, cudaStream_t s);
void scale(float* y, int64_t n, float beta, cudaStream_t s);  // beta == 0 writes zeros without reading
void mul(const float* a, const float* b, float* out, int64_t n, cudaStream_t s);
// ADD: out = alpha*a + beta*b over [rows, cols]; mode: plugin_kit::Broadcast (0 elementwise, 1 row, 2 column).
void add(const float* a, const float* b, float* out, int64_t rows, int64_t cols, int mode, float alpha, float beta,
         cudaStream_t s);
void act_fwd(int act, const float* x, float* y, int64_t n, cudaStream_t s);
void act_bwd(int act, const float* dy, const float* y, float* dx, int64_t n, cudaStream_t s);
void dropout(const float* x, float* y, float* mask, int64_t n, float p, uint64_t seed, cudaStream_t s);
// y[r,j] = act(y[r,j] + b[j]) (b may be null): LINEAR_FWD's epilogue.
void row_bias_act(int act, const float* b, float* y, int64_t rows, int64_t cols, cudaStream_t s);
// y[(n*C + c)*inner + i] = act(y[...] + b[c]) (b may be null): the conv epilogue.
void channel_bias_act(int act, const float* b, float* y, int64_t n, int64_t c, int64_t inner, cudaStream_t s);

// ---- reduce.cu ----
// BIAS_GRAD and ACCURACY.
void bias_grad(const float* dy, float* db, int64_t n, int64_t c, int64_t inner, float beta, cudaStream_t s);
void accuracy(const float* logits, const int32_t* labels, float* correct, int64_t n, int64_t c, unsigned* flags,
              unsigned bit, cudaStream_t s);

// REDUCE: x seen as [outer, n, inner] (the kit's ReduceShape); mode and beta as xylem_reduce_attrs.
struct ReduceGeom {
    int64_t outputs, n, inner;
    int mode;
    float beta;
};
// Doubles of scratch reduce() needs: 0 unless a few long runs are cut into slices.
int64_t reduce_partials(const ReduceGeom& g);
void reduce(const float* x, float* out, const ReduceGeom& g, double* partials, cudaStream_t s);

// ---- softmax.cu ----
void softmax_fwd(const float* x, float* y, int64_t rows, int64_t c, bool log, cudaStream_t s);
void softmax_bwd(const float* dy, const float* y, float* dx, int64_t rows, int64_t c, bool log, cudaStream_t s);

// ---- loss.cu ---- (loss[0] = acc == 0 ? scale*sum : acc*loss[0] + scale*sum, summed in double)
void xent_fwd(const float* logits, const int32_t* labels, float* loss, int64_t n, int64_t c, float scale, float acc,
              unsigned* flags, unsigned bit, cudaStream_t s);
void xent_bwd(const float* logits, const int32_t* labels, float* dx, int64_t n, int64_t c, float scale,
              unsigned* flags, unsigned bit, cudaStream_t s);
void nll_fwd(const float* logp, const int32_t* labels, float* loss, int64_t n, int64_t c, float scale, float acc,
             unsigned* flags, unsigned bit, cudaStream_t s);
void nll_bwd(const int32_t* labels, float* dx, int64_t n, int64_t c, float scale, unsigned* flags, unsigned bit,
             cudaStream_t s);
// partials: scratch for one double per block (mse_blocks(n) of them).
int64_t mse_blocks(int64_t n);
void mse_fwd(const float* p, const float* t, float* loss, int64_t n, float scale, float acc, double* partials,
             cudaStream_t s);
void mse_bwd(const float* p, const float* t, float* dp, int64_t n, float scale, cudaStream_t s);

// ---- optimizer.cu ----
struct SgdParams {
    float lr, wd, mom, keep;  // keep = 1 - dampening
    bool nesterov;
};
void sgd(float* p, float* v, const float* g, int64_t n, SgdParams c, cudaStream_t s);  // v null when mom == 0
struct AdamParams {
    float b1, b2, wd, eps, step, inv_sqrt_bc2;
};
void adam(float* p, float* m, float* v, const float* g, int64_t n, AdamParams c, cudaStream_t s);
// AdamW: p = p*decay - step*m/(sqrt(v)*inv_sqrt_bc2 + eps), decay = 1 - lr*wd (c.wd unused).
void adamw(float* p, float* m, float* v, const float* g, int64_t n, AdamParams c, float decay, cudaStream_t s);
struct RmspropParams {
    float lr, alpha, eps, wd, mom;
};
// buf null when momentum == 0, ga null unless centered.
void rmsprop(float* p, float* sq, float* buf, float* ga, const float* g, int64_t n, RmspropParams c, cudaStream_t s);

// ---- clip.cu ---- (gradient clipping; no float atomics, a fixed summation order)
void clamp(float* x, int64_t n, float lo, float hi, cudaStream_t s);
// partials: scratch for sum_squares_blocks(n) doubles.
int64_t sum_squares_blocks(int64_t n);
void sum_squares(const float* x, int64_t n, float* acc, float beta, double* partials, cudaStream_t s);
void clip_by_norm(const float* sumsq, float* x, int64_t n, float max_norm, float eps, cudaStream_t s);

// ---- pool.cu ----
using PoolGeom = plugin_kit::Pool2dShape;  // the kit's shape, passed to the kernels by value
void pool_fwd(const PoolGeom& p, const float* x, float* y, cudaStream_t s);
void pool_bwd(const PoolGeom& p, const float* dy, const float* x, float* dx, cudaStream_t s);

// ---- norm.cu ---- (per-channel statistics over axis 1, accumulated in double)
struct BnGeom {
    int64_t n, c, inner;
};
// Training: batch statistics -> saved_mean/saved_invstd, running stats, and shift/scale for normalize.
void bn_train_stats(const BnGeom& b, const float* x, const float* gamma, float* running_mean, float* running_var,
                    float* saved_mean, float* saved_invstd, float* shift, float* scale, float eps, float momentum,
                    cudaStream_t s);
void bn_eval_coeffs(const BnGeom& b, const float* gamma, const float* running_mean, const float* running_var,
                    float* shift, float* scale, float eps, cudaStream_t s);
// y = (x - shift[c]) * scale[c] + offset[c], its ReLU with `relu` (y may equal x).
void bn_normalize(const BnGeom& b, const float* x, float* y, const float* shift, const float* scale,
                  const float* offset, bool relu, cudaStream_t s);
// y: null, or the ReLU's output (ABI 1.11), whose positives pass dy.
void bn_backward(const BnGeom& b, const float* dy, const float* y, const float* x, const float* gamma,
                 const float* mean, const float* invstd, float* dx, float* dgamma, float* dbeta, float* k, float* kx,
                 float* k0, cudaStream_t s);

// ---- gather.cu ----
// out[i, :] = src[idx[i], :] on 32-bit words; a bad index flags and writes `poison` into the row.
void gather_rows(const uint32_t* src, const int32_t* idx, uint32_t* out, int64_t n_idx, int64_t rows,
                 int64_t row_words, uint32_t poison, unsigned* flags, unsigned bit, cudaStream_t s);
// SCATTER_ADD_ROWS: out[idx[i], :] += src[i, :], each row's sources added in position order (no
// float atomics); a bad index flags and its source row is skipped. keys: scratch for
// scatter_keys(n) 64-bit keys (n < 2^32).
int64_t scatter_keys(int64_t n);
void scatter_add_rows(const float* src, const int32_t* idx, float* out, int64_t n, int64_t rows, int64_t row_len,
                      unsigned long long* keys, unsigned* flags, unsigned bit, cudaStream_t s);

// ---- layer_norm.cu ---- (ABI 1.7; rows of d elements, statistics in double)
// mean/rstd of each row (the biased variance), y = (x - mean)*rstd*gamma + beta (beta may be null;
// y may be x).
void layer_norm_fwd(const float* x, const float* gamma, const float* beta, float* y, float* mean, float* rstd,
                    int64_t rows, int64_t d, float eps, cudaStream_t s);
// Doubles of scratch layer_norm_bwd needs: per-chunk partial sums of dgamma (and dbeta).
int64_t layer_norm_partials(int64_t rows, int64_t d, bool with_dbeta);
// dx (may be dy) per row; dgamma = beta*dgamma + sum dy*xhat, dbeta likewise (null: none), summed
// over fixed chunks of rows, then the chunks in order: no atomics, the same bits every run.
void layer_norm_bwd(const float* dy, const float* x, const float* gamma, const float* mean, const float* rstd,
                    float* dx, float* dgamma, float* dbeta, int64_t rows, int64_t d, float beta, double* partials,
                    cudaStream_t s);

// ---- transformer.cu ---- (ABI 1.7: permute, masked_softmax)
// The mask of the kit's MaskStrides: row i of score block bh (= b*heads + h) starts at
// p + b*sb + h*sh + i*sq; p null: no mask.
struct MaskGeom {
    const float* p;
    int64_t heads, sb, sh, sq;
};
// X seen as [rows / tq, tq, l]; y may be x; lse may be null.
void masked_softmax(const float* x, const MaskGeom& m, float* y, float* lse, int64_t rows, int64_t tq, int64_t l,
                    float scale, bool causal, cudaStream_t s);
// Y[i] = X[sum over axes d of coordinate_d(i) * in_strides[d]], Y's coordinates from out_dims.
struct PermuteGeom {
    int ndim;
    int64_t out_dims[XYLEM_MAX_DIMS];
    int64_t in_strides[XYLEM_MAX_DIMS];
    int64_t numel;
};
void permute(const float* x, float* y, const PermuteGeom& g, cudaStream_t s);

// ---- attention.cu ---- (ABI 1.7: flash-style attention_fwd/bwd)
// Head sizes the kernels have a variant for (buckets 32, 64, 128 of max(Dk, Dv)); larger ones are
// declined through op_accepts and composed by the core.
constexpr int64_t kAttentionMaxHeadDim = 128;
struct AttnGeom {
    int64_t b, h, tq, tk, l, dk, dv;  // l: keys used (kv_length or Tk)
    float scale;
    int causal;
    float dropout_p, keep_scale;      // keep_scale = 1/(1 - p)
    uint64_t seed;
    const float* mask;                // null: none; else mask(b, h, i, j) = mask[b*msb + h*msh + i*msq + j]
    int64_t msb, msh, msq;
};
// O and LSE. Returns the error of raising a kernel's shared-memory limit (launch errors are the
// caller's check_launch).
cudaError_t attention_fwd(const AttnGeom& g, const float* q, const float* k, const float* v, float* o, float* lse,
                          cudaStream_t s);
// dQ, dK, dV (rows j >= L of dK and dV zero); delta: scratch for b*h*tq floats (D_i = dO_i . O_i).
cudaError_t attention_bwd(const AttnGeom& g, const float* dout, const float* q, const float* k, const float* v,
                          const float* o, const float* lse, float* dq, float* dk, float* dv, float* delta,
                          cudaStream_t s);

}  // namespace xylem::cuda::kernels
