// GEMM and LINEAR_FWD on OpenBLAS's cblas_sgemm (row-major), with the bias and activation fused after.
#include <cblas.h>

#include <algorithm>
#include <climits>

#include "native.h"

namespace xylem::native {

namespace {

void check_int(const OpArgs& a, int64_t v, const char* what) {
    if (v > INT_MAX) a.fail("%s = %lld exceeds the BLAS limit of %d", what, static_cast<long long>(v), INT_MAX);
}

}  // namespace

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
    cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans,
                static_cast<int>(m), static_cast<int>(n), static_cast<int>(k), attrs.alpha, ta.f32(),
                static_cast<int>(ta.dims[1]), tb.f32(), static_cast<int>(tb.dims[1]), attrs.beta, c,
                static_cast<int>(n));
}

// Y = X*W^T with beta = 0 (nothing to read), then one pass for bias + activation: that touches Y
// once less than broadcasting the bias first and activating separately.
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
    if (in_f == 0) std::fill_n(y, rows * out_f, 0.0f);
    else
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(rows), static_cast<int>(out_f),
                    static_cast<int>(in_f), 1.0f, tx.f32(), static_cast<int>(in_f), tw.f32(),
                    static_cast<int>(in_f), 0.0f, y, static_cast<int>(out_f));
    if (b || act != XYLEM_ACT_NONE) bias_activate(act, b, y, rows, out_f);
}

}  // namespace xylem::native
