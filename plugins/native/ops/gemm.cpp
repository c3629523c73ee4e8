// GEMM and LINEAR_FWD on OpenBLAS's cblas_sgemm (row-major), or the plugin's own kernel
// (gemm_narrow.cpp): for a narrow C at the avx512 and avx2 levels, for a wider one in panels at
// the avx512 level; with the bias and activation fused into each block (GemmEpilogue).
#include <algorithm>
#include <climits>

#include "blas.h"
#include "native.h"

namespace xylem::native {

namespace {

void check_int(const OpArgs& a, int64_t v, const char* what) {
    if (v > INT_MAX) a.fail("%s = %lld exceeds the BLAS limit of %d", what, static_cast<long long>(v), INT_MAX);
}

// Work per block below which handing it to a worker costs more than it saves (a spinning helper
// takes a job in about a microsecond; 2 MFLOP is ~20 us of one thread's GEMM here). The LSTM's
// per-step GEMMs (512x50x128, 128x50x512: 6.5 MFLOP) are cut in two: char-rnn's step went from
// 44 to 33 ms with them cut (and the fused programs), on 2 CPUs.
constexpr double kMinSplitGemmFlops = 2e6;
// Below this a GEMM wider than tall is not cut at all. Cut by columns, each worker reads its own
// slice of B, which for a layer's forward (X * W^T) is a slice of the weights; the solver then
// updates them on the calling thread and pulls those cache lines back, every step (measured on
// fashion_mlp, 64x128x784: the SGD update 3x slower, the epoch 15% slower). Row cuts of the
// recurrent GEMMs slice W_hh too, but it is reused by every step of the sequence in between.
// Past 2e7 the second CPU pays for that: LeNet's 800 -> 500 layer (64x500x800 forward, and its
// two backward GEMMs, 51 MFLOP each) ran on one CPU under the old bound of 1e8, and its epoch
// took 5.63 s against 5.05 cut in two (2026-11-26, the AVX-512 Xeon; fashion_mlp unchanged).
constexpr double kMinColumnSplitFlops = 2e7;
// Blocks of C start at multiples of this many rows or columns (OpenBLAS's kernels work in 16s).
constexpr int64_t kSplitAlign = 16;

// The most blocks a cut of `edge` rows (or columns) makes: two of at least 64, or as many of at
// least 256 as fit. Each OpenBLAS call packs the operand all blocks share (B for row blocks) once
// more, which costs about 1/rows of the block's FLOPs (char-rnn's weight gradient dG^T X,
// 512x128 with k = 2500, packs X, 1.28 MB, once per block).
int64_t max_blocks(int64_t edge) {
    return std::max<int64_t>(std::min<int64_t>(2, edge / 64), edge / 256);
}

// C block [lo, hi) of the dimension being cut (rows when by_rows, else columns).
void sgemm_block(bool ta, bool tb, bool by_rows, int64_t lo, int64_t hi, int64_t m, int64_t n, int64_t k, float alpha,
                 const float* a, int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
    if (by_rows) {
        a += ta ? lo : lo * lda;
        c += lo * ldc;
        m = hi - lo;
    } else {
        b += tb ? lo * ldb : lo;
        c += lo;
        n = hi - lo;
    }
    cblas_sgemm_rm(ta, tb, static_cast<int>(m), static_cast<int>(n), static_cast<int>(k), alpha, a,
                   static_cast<int>(lda), b, static_cast<int>(ldb), beta, c, static_cast<int>(ldc));
}

// The narrow shapes where own_sgemm measured faster than OpenBLAS on one core (AVX-512 Xeon,
// 2026-11-23: 0.66-0.84x its time from 32 to 64 columns with k >= 128, e.g. 512x50x128 and
// 128x50x512, the LSTM's per-step GEMMs at batch 50; slower at 16 columns or fewer and for
// a few rows). At the avx2 level (the same Xeon with XYLEM_NATIVE_ISA=avx2, OpenBLAS Haswell,
// 2026-11-26): 0.76-0.92x OpenBLAS's time without A^T (512x50x128 59 us against 67), and with
// A^T where the columns are whole vectors (128x64x512 72 against 81); with A^T and a tail
// (128x50x512: 75 against 71) OpenBLAS is faster. Decided on the whole GEMM, so every row block
// uses the same kernel.
bool use_narrow_kernel(bool ta, bool tb, int64_t m, int64_t n, int64_t k) {
    return !tb && n >= 32 && n <= 64 && k >= 100 && m >= 32 && narrow_gemm_available() &&
           (isa() == Isa::avx512 || !ta || n % 8 == 0);
}

// A block's bias and activation, on the worker that computed it while the block is in its cache
// (a separate pass over all of C ran on one thread and read C back from memory).
void epilogue_block(const GemmEpilogue& epi, float* c, int64_t ldc, int64_t row0, int64_t rows, int64_t col0,
                    int64_t cols) {
    if (!epi.bias && epi.act == XYLEM_ACT_NONE) return;
    const float* bias = epi.bias ? epi.bias + col0 : nullptr;
    if (col0 == 0 && cols == ldc) return bias_activate(epi.act, bias, c + row0 * ldc, rows, cols);
    for (int64_t r = row0; r < row0 + rows; ++r) bias_activate(epi.act, bias, c + r * ldc + col0, 1, cols);
}

// One row of C (a batch of one: a classifier's head at inference) is a matrix-vector product:
// sgemv reads B once, in order, where sgemm packs it first (1280 -> 1000 at batch 1, 5 MB of
// weights: 416 us against 164 on one core). Being memory-bound, it is cut by C's columns from
// 2^18 floats of B a slice, in blocks fixed by the shape.
constexpr int64_t kMinSplitGemvFloats = int64_t{1} << 18;

void sgemv_row(bool ta, bool tb, int64_t n, int64_t k, float alpha, const float* a, int64_t lda, const float* b,
               int64_t ldb, float beta, float* c, const GemmEpilogue& epi) {
    const int64_t units = (n + kSplitAlign - 1) / kSplitAlign;
    const int incx = ta ? static_cast<int>(lda) : 1;  // A [1, k], or A^T of an A [k, 1]
    const int64_t slices = shape_slices(static_cast<double>(n * k), static_cast<double>(kMinSplitGemvFloats), units);
    run_slices(units, slices, [&](int64_t lo, int64_t hi, int, int64_t) {
        const int64_t from = lo * kSplitAlign, to = std::min(hi * kSplitAlign, n);
        if (to <= from) return;
        // beta = 0 never reads C (BLAS's scaling by 0 keeps a NaN there on some versions).
        if (beta == 0.0f) std::fill(c + from, c + to, 0.0f);
        if (tb)  // B [n, k]: C's columns are B's rows
            cblas_sgemv_rm(false, static_cast<int>(to - from), static_cast<int>(k), alpha, b + from * ldb,
                           static_cast<int>(ldb), a, incx, beta, c + from);
        else  // B [k, n]: its columns
            cblas_sgemv_rm(true, static_cast<int>(k), static_cast<int>(to - from), alpha, b + from,
                           static_cast<int>(ldb), a, incx, beta, c + from);
        epilogue_block(epi, c, n, 0, 1, from, to - from);
    });
}

}  // namespace

// At the avx512 level: on the Zen 4 machine 0.85-0.9x OpenBLAS's time on the character GPT's
// GEMMs and from 0.96x on convolution-sized ones (ops/gemm_narrow.cpp). Past k = 2048 a panel of
// B (k x 64 floats) no longer fits a core's L2, and nothing was measured there. At avx2 OpenBLAS
// stays (the AVX2 kernel's tiles hold 12 accumulators: not measured wide).
bool use_wide_kernel(int64_t m, int64_t n, int64_t k) {
    return n > 64 && m >= 16 && k >= 16 && k <= 2048 && wide_gemm_available();
}

void sgemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda, const float* b,
           int64_t ldb, float beta, float* c, int64_t ldc, const GemmEpilogue& epi) {
    if (m == 1) return sgemv_row(ta, tb, n, k, alpha, a, lda, b, ldb, beta, c, epi);
    const bool narrow = use_narrow_kernel(ta, tb, m, n, k), own = narrow || use_wide_kernel(m, n, k);
    const bool by_rows = narrow || m >= n;
    const int64_t cut = by_rows ? m : n, units = (cut + kSplitAlign - 1) / kSplitAlign;
    const double flops = 2.0 * static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k);
    // The own kernel's elements do not depend on the cut: one block per worker. OpenBLAS's do:
    // blocks fixed by the shape, whatever the thread count. The wide kernel, too, is cut by
    // columns where C is wider than tall: each worker then reads half of B and all of A, which is
    // the smaller (the GPT's c_proj weight gradient, 128x512 with k = 768: 1.12 -> 1.07 ms).
    auto block = [&](int64_t lo, int64_t hi, int, int64_t = 0) {
        const int64_t from = lo * kSplitAlign, to = std::min(hi * kSplitAlign, cut);
        const int64_t row0 = by_rows ? from : 0, rows = by_rows ? to - from : m;
        const int64_t col0 = by_rows ? 0 : from, cols = by_rows ? n : to - from;
        if (own)
            own_sgemm(ta, tb, rows, cols, k, alpha, ta ? a + row0 : a + row0 * lda, lda, tb ? b + col0 * ldb : b + col0,
                      ldb, beta, c + row0 * ldc + col0, ldc);
        else
            sgemm_block(ta, tb, by_rows, from, to, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
        epilogue_block(epi, c, ldc, row0, rows, col0, cols);
    };
    if (!by_rows && flops < kMinColumnSplitFlops) return block(0, units, 0);
    if (own) split_work(units, split_workers(flops, kMinSplitGemmFlops, units), block);
    else run_slices(units, shape_slices(flops, kMinSplitGemmFlops, std::min(units, max_blocks(cut))), block);
}

void op_gemm(const xylem_op_desc& desc, xylem_stream_s&) {
    OpArgs a(desc, 2, 2, 1);
    const auto attrs = a.attrs<xylem_gemm_attrs>();
    const Tensor ta = a.in(0, "A"), tb = a.in(1, "B"), tc = a.out(0, "C");
    const plugin_kit::GemmShape g = plugin_kit::gemm_shape(a, attrs, ta, tb, tc);
    const int64_t m = g.m, n = g.n, k = g.k;
    const bool trans_a = g.trans_a, trans_b = g.trans_b;
    if (overlap(tc, ta) || overlap(tc, tb)) a.fail("C overlaps A or B");
    check_int(a, m, "M");
    check_int(a, n, "N");
    check_int(a, k, "K");
    if (m == 0 || n == 0) return;
    float* c = tc.f32();
    if (k == 0 || attrs.alpha == 0.0f) {  // only the beta scaling remains (BLAS rejects lda = 0)
        if (attrs.beta == 0.0f) std::fill_n(c, m * n, 0.0f);
        else if (attrs.beta != 1.0f) for (int64_t i = 0; i < m * n; ++i) c[i] *= attrs.beta;
        return;
    }
    sgemm(trans_a, trans_b, m, n, k, attrs.alpha, ta.f32(), ta.dims[1], tb.f32(), tb.dims[1], attrs.beta, c, n);
}

// Y = act(X*W^T + b): the bias and activation applied to each block of Y by the worker that
// computed it (sgemm's GemmEpilogue).
void op_linear_fwd(const xylem_op_desc& desc, xylem_stream_s&) {
    OpArgs a(desc, 2, 3, 1);
    const int act = a.check_activation(a.attrs<xylem_linear_attrs>().activation);
    const Tensor tx = a.in(0, "X"), tw = a.in(1, "W"), ty = a.out(0, "Y");
    const Tensor tb = a.n_inputs() == 3 ? a.in(2, "b") : Tensor{};
    const plugin_kit::LinearShape l = plugin_kit::linear_shape(a, tx, tw, ty, a.n_inputs() == 3 ? &tb : nullptr);
    const int64_t out_f = l.out, in_f = l.in, rows = l.rows;
    const float* b = a.n_inputs() == 3 ? tb.f32() : nullptr;
    if (overlap(ty, tx) || overlap(ty, tw)) a.fail("Y overlaps X or W");
    check_int(a, rows, "N");
    check_int(a, out_f, "out");
    check_int(a, in_f, "in");
    if (rows == 0 || out_f == 0) return;
    float* y = ty.f32();
    if (in_f == 0) {
        std::fill_n(y, rows * out_f, 0.0f);
        if (b || act != XYLEM_ACT_NONE) bias_activate(act, b, y, rows, out_f);
        return;
    }
    sgemm(false, true, rows, out_f, in_f, 1.0f, tx.f32(), in_f, tw.f32(), in_f, 0.0f, y, out_f, GemmEpilogue{b, act});
}

}  // namespace xylem::native
