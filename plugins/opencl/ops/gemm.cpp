// GEMM and LINEAR_FWD through CLBlast (row-major), with the bias and activation fused after in
// one elementwise pass. CLBlast's temporary buffer comes from the stream, not a per-call malloc.
#include <clblast.h>

#include <cstdio>

#include "opencl.h"

namespace xylem::opencl {

namespace {
clblast::Transpose transpose(bool t) { return t ? clblast::Transpose::kYes : clblast::Transpose::kNo; }
}  // namespace

void gemm(xylem_stream_s& s, bool trans_a, bool trans_b, int32_t m, int32_t n, int32_t k, float alpha, cl_mem a,
          int32_t a_off, int32_t lda, cl_mem b, int32_t b_off, int32_t ldb, float beta, cl_mem c, int32_t c_off,
          int32_t ldc, const char* op) {
    if (m == 0 || n == 0) return;
    if (k == 0 || alpha == 0.0f) {  // only the beta scaling remains (CLBlast rejects k = 0)
        scale(s, beta, c, c_off, m * n);
        return;
    }
    const auto layout = clblast::Layout::kRowMajor;
    size_t temp_bytes = 0;
    auto status = clblast::GemmTempBufferSize<float>(layout, transpose(trans_a), transpose(trans_b), m, n, k, a_off,
                                                     lda, b_off, ldb, c_off, ldc, &s.queue_, temp_bytes);
    if (status == clblast::StatusCode::kSuccess) {
        cl_mem temp = temp_bytes ? stream_gemm_temp(s, temp_bytes) : nullptr;
        status = clblast::Gemm<float>(layout, transpose(trans_a), transpose(trans_b), m, n, k, alpha, a, a_off, lda, b,
                                      b_off, ldb, beta, c, c_off, ldc, &s.queue_, nullptr, temp);
    }
    if (status != clblast::StatusCode::kSuccess)
        throw OpError{set_error(XYLEM_E_DEVICE, "opencl: %s: CLBlast GEMM (m=%d n=%d k=%d) failed with status %d%s", op,
                                m, n, k, static_cast<int>(status),
                                static_cast<int>(status) > -1024 ? (std::string(" (") +
                                    cl_error_name(static_cast<cl_int>(status)) + ")").c_str() : "")};
}

void op_gemm(const xylem_op_desc& desc, xylem_stream_s& s) {
    OpArgs a(desc, 2, 2, 1);
    const auto at = a.attrs<xylem_gemm_attrs>();
    const Tensor ta = a.in(0, "A"), tb = a.in(1, "B"), tc = a.out(0, "C");
    const plugin_kit::GemmShape g = plugin_kit::gemm_shape(a, at, ta, tb, tc);
    const int64_t m = g.m, n = g.n, k = g.k;
    const bool trans_a = g.trans_a, trans_b = g.trans_b;
    if (overlap(tc, ta) || overlap(tc, tb)) a.fail("C overlaps A or B");
    gemm(s, trans_a, trans_b, static_cast<int32_t>(m), static_cast<int32_t>(n), static_cast<int32_t>(k), at.alpha,
         ta.mem, ta.off, static_cast<int32_t>(ta.dims[1]), tb.mem, tb.off, static_cast<int32_t>(tb.dims[1]), at.beta,
         tc.mem, tc.off, static_cast<int32_t>(n), "gemm");
}

void op_linear_fwd(const xylem_op_desc& desc, xylem_stream_s& s) {
    OpArgs a(desc, 2, 3, 1);
    const int act = a.check_activation(a.attrs<xylem_linear_attrs>().activation);
    const Tensor tx = a.in(0, "X"), tw = a.in(1, "W"), ty = a.out(0, "Y");
    const bool has_bias = a.n_inputs() == 3;
    const Tensor tb = has_bias ? a.in(2, "b") : Tensor{};
    const plugin_kit::LinearShape l = plugin_kit::linear_shape(a, tx, tw, ty, has_bias ? &tb : nullptr);
    if (overlap(ty, tx) || overlap(ty, tw)) a.fail("Y overlaps X or W");
    if (l.rows == 0 || l.out == 0) return;
    // Y's element count bounds rows and out, and W's bounds in: all fit an int.
    const int32_t rows = static_cast<int32_t>(l.rows), out_f = static_cast<int32_t>(l.out);
    const int32_t in_f = static_cast<int32_t>(l.in);
    gemm(s, false, true, rows, out_f, in_f, 1.0f, tx.mem, tx.off, in_f, tw.mem, tw.off, in_f, 0.0f, ty.mem, ty.off,
         out_f, "linear_fwd");
    bias_activate(s, act, has_bias ? &tb : nullptr, ty.mem, ty.off, rows, out_f);
}

}  // namespace xylem::opencl
