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
    if (ta.ndim != 2 || tb.ndim != 2 || tc.ndim != 2)
        a.fail("A, B and C must be 2-D, got %u, %u and %u dims", ta.ndim, tb.ndim, tc.ndim);
    const bool trans_a = attrs.trans_a != 0, trans_b = attrs.trans_b != 0;
    const int64_t m = ta.dims[trans_a ? 1 : 0], k = ta.dims[trans_a ? 0 : 1];
    const int64_t kb = tb.dims[trans_b ? 1 : 0], n = tb.dims[trans_b ? 0 : 1];
    if (k != kb)
        a.fail("inner dims differ: op(A) is [%lld,%lld] but op(B) is [%lld,%lld]", static_cast<long long>(m),
               static_cast<long long>(k), static_cast<long long>(kb), static_cast<long long>(n));
    if (tc.dims[0] != m || tc.dims[1] != n)
        a.fail("C is [%lld,%lld] but op(A)*op(B) is [%lld,%lld]", static_cast<long long>(tc.dims[0]),
               static_cast<long long>(tc.dims[1]), static_cast<long long>(m), static_cast<long long>(n));
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
    if (tw.ndim != 2) a.fail("W must be 2-D [out,in], got %u dims", tw.ndim);
    if (tx.ndim < 1 || ty.ndim < 1) a.fail("X and Y need at least 1 dim");
    const int64_t out_f = tw.dims[0], in_f = tw.dims[1], rows = tx.rows();
    if (tx.cols() != in_f)
        a.fail("X's last dim is %lld but W is [%lld,%lld]", static_cast<long long>(tx.cols()),
               static_cast<long long>(out_f), static_cast<long long>(in_f));
    if (ty.cols() != out_f || ty.rows() != rows)
        a.fail("Y holds %lld rows of %lld, expected %lld rows of %lld", static_cast<long long>(ty.rows()),
               static_cast<long long>(ty.cols()), static_cast<long long>(rows), static_cast<long long>(out_f));
    const float* b = nullptr;
    if (a.n_inputs() == 3) {
        const Tensor tb = a.in(2, "b");
        if (tb.numel != out_f)
            a.fail("b holds %lld elements for %lld outputs", static_cast<long long>(tb.numel),
                   static_cast<long long>(out_f));
        b = tb.f32();
    }
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
