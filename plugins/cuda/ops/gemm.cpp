// GEMM and LINEAR_FWD on cuBLAS. cuBLAS is column-major: a row-major [m,n] matrix is its [n,m]
// transpose, so C = op(A)op(B) is computed as C^T = op(B)^T op(A)^T with the operands swapped.
#include "cuda_plugin.h"
#include "kernels/kernels.h"

namespace xylem::cuda {

void op_gemm(const xylem_op_desc& desc, xylem_stream_s& s, xylem_framework_s&) {
    OpArgs a(desc, 2, 2, 1);
    const auto attrs = a.attrs<xylem_gemm_attrs>();
    const Tensor ta = a.in(0, "A"), tb = a.in(1, "B"), tc = a.out(0, "C");
    const plugin_kit::GemmShape g = plugin_kit::gemm_shape(a, attrs, ta, tb, tc);
    const int64_t m = g.m, n = g.n, k = g.k;
    const bool trans_a = g.trans_a, trans_b = g.trans_b;
    if (overlap(tc, ta) || overlap(tc, tb)) a.fail("C overlaps A or B");
    a.check_int(m, "M");
    a.check_int(n, "N");
    a.check_int(k, "K");
    if (m == 0 || n == 0) return;
    if (k == 0 || attrs.alpha == 0.0f) {  // only the beta scaling remains (cuBLAS rejects lda = 0)
        kernels::scale(tc.f32(), m * n, attrs.beta, s.stream_);
        return a.check_launch();
    }
    a.check_cublas(cublasSgemm(s.cublas_, trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, trans_a ? CUBLAS_OP_T : CUBLAS_OP_N,
                               static_cast<int>(n), static_cast<int>(m), static_cast<int>(k), &attrs.alpha, tb.f32(),
                               static_cast<int>(tb.dims[1]), ta.f32(), static_cast<int>(ta.dims[1]), &attrs.beta,
                               tc.f32(), static_cast<int>(n)),
                   "cublasSgemm");
}

// Y = X*W^T (beta = 0: Y is not read), then one pass for bias + activation.
void op_linear_fwd(const xylem_op_desc& desc, xylem_stream_s& s, xylem_framework_s&) {
    OpArgs a(desc, 2, 3, 1);
    const int act = a.check_activation(a.attrs<xylem_linear_attrs>().activation);
    const Tensor tx = a.in(0, "X"), tw = a.in(1, "W"), ty = a.out(0, "Y");
    const bool has_bias = a.n_inputs() == 3;
    const Tensor tb = has_bias ? a.in(2, "b") : Tensor{};
    const plugin_kit::LinearShape l = plugin_kit::linear_shape(a, tx, tw, ty, has_bias ? &tb : nullptr);
    const int64_t out_f = l.out, in_f = l.in, rows = l.rows;
    const float* b = has_bias ? tb.f32() : nullptr;
    if (overlap(ty, tx) || overlap(ty, tw)) a.fail("Y overlaps X or W");
    a.check_int(rows, "N");
    a.check_int(out_f, "out");
    a.check_int(in_f, "in");
    if (rows == 0 || out_f == 0) return;
    float* y = ty.f32();
    if (in_f == 0) {
        kernels::fill_u32(reinterpret_cast<uint32_t*>(y), rows * out_f, 0u, s.stream_);
    } else {
        const float one = 1.0f, zero = 0.0f;
        // Y^T[out,rows] = W[out,in] * X^T[in,rows]; W row-major is W^T column-major, hence OP_T.
        a.check_cublas(cublasSgemm(s.cublas_, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(out_f), static_cast<int>(rows),
                                   static_cast<int>(in_f), &one, tw.f32(), static_cast<int>(in_f), tx.f32(),
                                   static_cast<int>(in_f), &zero, y, static_cast<int>(out_f)),
                       "cublasSgemm");
    }
    if (b || act != XYLEM_ACT_NONE) kernels::row_bias_act(act, b, y, rows, out_f, s.stream_);
    a.check_launch();
}

}  // namespace xylem::cuda
