// GEMM_BATCHED, PERMUTE and MASKED_SOFTMAX (ABI 1.7): the pieces the core composes attention from
// when the fused op declines, and the head split and merge around it.
#include <algorithm>
#include <climits>
#include <cmath>
#include <limits>

#include "native.h"
#include "xylem/plugin_kit/shapes_transformer.h"

namespace xylem::native {

namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

void check_int(const OpArgs& a, int64_t v, const char* what) {
    if (v > INT_MAX) a.fail("%s = %lld exceeds the BLAS limit of %d", what, static_cast<long long>(v), INT_MAX);
}

// s[j] = scale*x[j] + mask[j] for j < visible, -inf after (mask may be null; s may be x); returns
// the largest visible one.
XYLEM_KERNEL(float, masked_scores,
             (const float* x, const float* mask, float* s, int64_t n, int64_t visible, float scale),
             (x, mask, s, n, visible, scale)) {
    if (mask)
        for (int64_t j = 0; j < visible; ++j) s[j] = scale * x[j] + mask[j];
    else
        for (int64_t j = 0; j < visible; ++j) s[j] = scale * x[j];
    for (int64_t j = visible; j < n; ++j) s[j] = -kInf;
    return visible > 0 ? row_max(s, visible) : -kInf;
}

// y[j] *= k over a row.
XYLEM_KERNEL(void, scale_row, (float* y, int64_t n, float k), (y, n, k)) {
    for (int64_t j = 0; j < n; ++j) y[j] *= k;
}

}  // namespace

// C = alpha*op(A)*op(B) + beta*C per batch index, each one the plugin's sgemm (ops/gemm.cpp).
// With at least as many matrices as CPUs the batch is shared out (each sgemm then runs on its
// worker alone); else each sgemm spreads itself. sgemm's blocks depend on the shape only, so
// both give the same bits.
void op_gemm_batched(const xylem_op_desc& desc, xylem_stream_s&) {
    OpArgs a(desc, 2, 2, 1);
    const auto at = a.attrs<xylem_gemm_attrs>();
    const Tensor ta = a.in(0, "A"), tb = a.in(1, "B"), tc = a.out(0, "C");
    const plugin_kit::GemmBatchedShape g = plugin_kit::gemm_batched_shape(a, at, ta, tb, tc);
    if (overlap(tc, ta) || overlap(tc, tb)) a.fail("C overlaps A or B");
    check_int(a, g.m, "M");
    check_int(a, g.n, "N");
    check_int(a, g.k, "K");
    if (g.batch == 0 || g.m == 0 || g.n == 0) return;
    const bool trans_a = at.trans_a != 0, trans_b = at.trans_b != 0;
    const int64_t lda = ta.dims[ta.ndim - 1], ldb = tb.dims[tb.ndim - 1];
    const float *pa = ta.f32(), *pb = tb.f32();
    float* pc = tc.f32();
    auto one = [&](int64_t i) {
        float* c = pc + i * g.stride_c;
        if (g.k == 0 || at.alpha == 0.0f) {  // only the beta scaling remains (BLAS rejects lda = 0)
            if (at.beta == 0.0f) std::fill_n(c, g.m * g.n, 0.0f);
            else if (at.beta != 1.0f) for (int64_t e = 0; e < g.m * g.n; ++e) c[e] *= at.beta;
            return;
        }
        sgemm(trans_a, trans_b, g.m, g.n, g.k, at.alpha, pa + i * g.stride_a, lda, pb + i * g.stride_b, ldb, at.beta, c,
              g.n);
    };
    const double flops = 2.0 * static_cast<double>(g.m) * static_cast<double>(g.n) * static_cast<double>(g.k);
    const int workers = split_workers(flops * static_cast<double>(g.batch), 2e6, g.batch);
    if (workers > 1 && g.batch >= split_cpus()) {
        parallel_items(g.batch, workers, [&](int, int64_t i) { one(i); });
        return;
    }
    for (int64_t i = 0; i < g.batch; ++i) one(i);
}

// A row of Y from X: contiguous (a loop, not a memcpy call: the attention's head rows are 32
// floats, where the call costs more than the copy) or strided.
XYLEM_KERNEL_NO_LIBCALLS(void, permute_row, (float* __restrict y, const float* __restrict x, int64_t cols, int64_t stride),
                         (y, x, cols, stride)) {
    if (stride == 1) {
        for (int64_t j = 0; j < cols; ++j) y[j] = x[j];
    } else {
        for (int64_t j = 0; j < cols; ++j) y[j] = x[j * stride];
    }
}

// Block b of a permute whose Y ends [.., I, J] with I walking X's last axis: y[i*J + j] =
// x[i + j*stride] for i in [i0, i1), in square tiles (each tile's X rows and Y rows stay in cache,
// where row by row each element of a Y row came from another cache line).
XYLEM_KERNEL_NO_LIBCALLS(void, permute_tiles,
                         (float* __restrict y, const float* __restrict x, int64_t i0, int64_t i1, int64_t cols,
                          int64_t stride),
                         (y, x, i0, i1, cols, stride)) {
    constexpr int64_t kTile = 32;
    for (int64_t jt = 0; jt < cols; jt += kTile)
        for (int64_t it = i0; it < i1; it += kTile) {
            const int64_t je = std::min(jt + kTile, cols), ie = std::min(it + kTile, i1);
            for (int64_t i = it; i < ie; ++i)
                for (int64_t j = jt; j < je; ++j) y[i * cols + j] = x[i + j * stride];
        }
}

// X's offset of the first element of Y's block b (the blocks: Y's leading `axes` axes).
int64_t permute_block_offset(const plugin_kit::PermuteShape& s, int64_t b, uint32_t axes) {
    int64_t from = 0;
    for (int64_t d = static_cast<int64_t>(axes) - 1; d >= 0; --d) {
        from += (b % s.out_dims[d]) * s.in_strides[d];
        b /= s.out_dims[d];
    }
    return from;
}

// Y[i_0, ..., i_n-1] = X at i_k on axis perm[k]: Y is written in order, row by row (its last
// axis), each row read from X with the stride of the X axis it walks. A slice of rows finds its
// first row's offset in X by division, then steps the index like an odometer. When Y's
// next-to-last axis walks X's last one (a transpose of the last axes in each block: char-rnn's
// [T, B, G*H] -> [T, G*H, B], a 2-D transpose), by tiles instead.
void op_permute(const xylem_op_desc& desc, xylem_stream_s&) {
    OpArgs a(desc, 1, 1, 1);
    const auto at = a.attrs<xylem_permute_attrs>();
    const Tensor tx = a.in(0, "X"), ty = a.out(0, "Y");
    const plugin_kit::PermuteShape s = plugin_kit::permute_shape(a, at, tx, ty);
    if (overlap(tx, ty)) a.fail("Y overlaps X");
    if (s.numel == 0) return;
    const uint32_t n = s.ndim;
    const int64_t cols = s.out_dims[n - 1], stride = s.in_strides[n - 1], rows = s.numel / cols;
    const float* x = tx.f32();
    float* y = ty.f32();
    const int workers = split_workers(static_cast<double>(s.numel), static_cast<double>(kMinSplitElements) / 4, rows);
    if (n >= 2 && stride != 1 && s.in_strides[n - 2] == 1) {
        constexpr int64_t kTileRows = 32;
        const int64_t inner = s.out_dims[n - 2], tiles = (inner + kTileRows - 1) / kTileRows;
        const int64_t blocks = s.numel / (inner * cols);
        split_work(blocks * tiles, workers, [&](int64_t lo, int64_t hi, int) {
            for (int64_t u = lo; u < hi; ++u) {
                const int64_t b = u / tiles, i0 = (u % tiles) * kTileRows, i1 = std::min(inner, i0 + kTileRows);
                permute_tiles(y + b * inner * cols, x + permute_block_offset(s, b, n - 2), i0, i1, cols, stride);
            }
        });
        return;
    }
    // Split from 64k elements a worker: the attention's head split, [B, T, 3, H, D] -> [3, B, H, T, D]
    // (295k elements for the character GPT), took 107 us on one thread.
    split_work(rows, workers, [&](int64_t lo, int64_t hi, int) {
                   if (lo >= hi) return;
                   int64_t idx[XYLEM_MAX_DIMS] = {};  // Y's index of row r over the leading n - 1 axes
                   int64_t from = 0;                   // X's offset of row r's first element
                   for (int64_t rest = lo, d = static_cast<int64_t>(n) - 2; d >= 0; --d) {
                       idx[d] = rest % s.out_dims[d];
                       from += idx[d] * s.in_strides[d];
                       rest /= s.out_dims[d];
                   }
                   for (int64_t r = lo; r < hi; ++r) {
                       permute_row(y + r * cols, x + from, cols, stride);
                       for (int64_t d = static_cast<int64_t>(n) - 2; d >= 0; --d) {  // the next row
                           from += s.in_strides[d];
                           if (++idx[d] < s.out_dims[d]) break;
                           from -= idx[d] * s.in_strides[d];
                           idx[d] = 0;
                       }
                   }
               });
}

// Y_i = softmax over the visible j of scale*X_ij + mask_ij, 0 at hidden j; LSE_i its log-sum-exp.
// Row by row (each row's arithmetic its own), rows shared out among the workers.
void op_masked_softmax(const xylem_op_desc& desc, xylem_stream_s&) {
    OpArgs a(desc, 1, 2, desc.n_outputs == 2 ? 2 : 1);
    const auto at = a.attrs<xylem_attention_attrs>();
    const Tensor tx = a.in(0, "X"), ty = a.out(0, "Y");
    const Tensor tm = a.n_inputs() == 2 ? a.in(1, "mask") : Tensor{};
    const Tensor tl = desc.n_outputs == 2 ? a.out(1, "LSE") : Tensor{};
    const Tensor* mask = a.n_inputs() == 2 ? &tm : nullptr;
    const Tensor* lse = desc.n_outputs == 2 ? &tl : nullptr;
    const plugin_kit::MaskedSoftmaxShape s = plugin_kit::masked_softmax_shape(a, at, tx, mask, ty, lse);
    if (tx.data != ty.data && overlap(tx, ty)) a.fail("Y partly overlaps X (in place is fine)");
    if ((mask && overlap(ty, tm)) || (lse && (overlap(tl, tx) || overlap(tl, ty) || (mask && overlap(tl, tm)))))
        a.fail("an output overlaps the mask or another operand");
    const int64_t rows = s.batch * s.tq;
    if (rows == 0 || s.l == 0) return;
    const float* x = tx.f32();
    const float* m = mask ? tm.f32() : nullptr;
    float* y = ty.f32();
    float* l = lse ? tl.f32() : nullptr;
    const bool causal = at.causal != 0;
    split_work(rows, split_workers(static_cast<double>(rows * s.l), static_cast<double>(kMinSplitElements), rows),
               [&](int64_t lo, int64_t hi, int) {
                   for (int64_t r = lo; r < hi; ++r) {
                       const int64_t bh = r / s.tq, i = r % s.tq;
                       const int64_t e = causal ? std::clamp<int64_t>(i + s.l - s.tq + 1, 0, s.l) : s.l;
                       const float* mr = m ? m + (bh / s.heads) * s.mask.sb + (bh % s.heads) * s.mask.sh + i * s.mask.sq
                                           : nullptr;
                       float* yr = y + r * s.l;  // may be x's row: each y[j] is written after x[j] is read
                       const float mx = masked_scores(x + r * s.l, mr, yr, s.l, e, at.scale);
                       if (mx == -kInf || mx != mx) {  // nothing visible (or all -inf): zeros, LSE -inf
                           std::fill_n(yr, s.l, mx != mx ? mx : 0.0f);
                           if (l) l[r] = mx != mx ? mx : -kInf;
                           continue;
                       }
                       const double sum = sum_exp(yr, e, mx, yr);  // exp(-inf - mx) = 0 at the hidden ones
                       std::fill(yr + e, yr + s.l, 0.0f);
                       scale_row(yr, e, static_cast<float>(1.0 / sum));
                       if (l) l[r] = mx + static_cast<float>(std::log(sum));
                   }
               });
}

}  // namespace xylem::native
