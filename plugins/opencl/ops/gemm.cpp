// GEMM, GEMM_BATCHED's products and LINEAR_FWD: on a CPU device (PoCL) the plugin's own kernels
// (kernels/gemm.cl, bias and activation in the same pass), elsewhere CLBlast (row-major), with the
// bias and activation after it in one elementwise pass. CLBlast's temporary buffer, or the own
// kernels' packed B, comes from the stream, not a per-call malloc.
#include <clblast.h>

#include <algorithm>
#include <cstdio>

#include "opencl.h"

namespace xylem::opencl {

namespace {
clblast::Transpose transpose(bool t) { return t ? clblast::Transpose::kYes : clblast::Transpose::kNo; }

// kernels/gemm.cl's register tile and the items per work-group along n (PoCL compiles a kernel
// once per group shape: a few fixed shapes, not one per problem).
constexpr int32_t kTileM = 8, kTileN = 32;
constexpr size_t kGroupN = 4;

size_t ceil_div(int64_t a, int64_t b) { return static_cast<size_t>((a + b - 1) / b); }

// The own kernels: B goes to a packed [k, round_up(n, 32)] copy (zeros past n) when it is
// transposed or n is not a whole number of tiles (every tile reads 32 columns of B); A is read in
// place, either way round.
void own_gemm(xylem_stream_s& s, bool trans_a, bool trans_b, int32_t batch, int32_t m, int32_t n, int32_t k,
              float alpha, cl_mem a, int32_t a_off, int32_t lda, int32_t stride_a, cl_mem b, int32_t b_off,
              int32_t ldb, int32_t stride_b, float beta, cl_mem c, int32_t c_off, int32_t ldc, int32_t stride_c,
              const Tensor* bias, int act) {
    const int32_t n_pad = static_cast<int32_t>(ceil_div(n, kTileN)) * kTileN;
    if (trans_b || n != n_pad) {
        // One packed copy per distinct B (a broadcast B, stride 0, is packed once).
        const int32_t copies = stride_b ? batch : 1;
        const size_t bytes = sizeof(float) * static_cast<size_t>(copies) * k * n_pad;
        cl_mem packed = stream_gemm_temp(s, bytes);
        const cl_int trans = trans_b ? 1 : 0;
        const size_t global[3] = {ceil_div(n_pad, 16), static_cast<size_t>(k), static_cast<size_t>(copies)};
        const size_t local[3] = {1, 1, 1};
        Kernel(s, Family::Gemm, "gemm_pack_b").arg(b).arg(b_off).arg(ldb).arg(stride_b).arg(trans).arg(k).arg(n)
            .arg(n_pad).arg(packed).run_nd(global, local);
        b = packed;
        b_off = 0;
        ldb = n_pad;
        stride_b = stride_b ? k * n_pad : 0;
    }
    const size_t tiles_n = ceil_div(n, kTileN), group_n = std::min(kGroupN, tiles_n);
    const size_t global[3] = {ceil_div(static_cast<int64_t>(tiles_n), static_cast<int64_t>(group_n)) * group_n,
                              ceil_div(m, kTileM), static_cast<size_t>(batch)};
    const size_t local[3] = {group_n, 1, 1};
    const cl_int has_bias = bias ? 1 : 0, activation = act;
    Kernel(s, Family::Gemm, trans_a ? "gemm_tn" : "gemm_nn").arg(m).arg(n).arg(k).arg(alpha).arg(a).arg(a_off)
        .arg(lda).arg(stride_a).arg(b).arg(b_off).arg(ldb).arg(stride_b).arg(beta).arg(c).arg(c_off).arg(ldc)
        .arg(stride_c).arg(has_bias).arg(bias ? bias->mem : c).arg(bias ? bias->off : 0).arg(activation)
        .run_nd(global, local);
}

void clblast_failed(const char* op, const char* routine, int64_t batch, int32_t m, int32_t n, int32_t k,
                    clblast::StatusCode status) {
    const int code = static_cast<int>(status);
    throw OpError{set_error(XYLEM_E_DEVICE, "opencl: %s: CLBlast %s (batch=%lld m=%d n=%d k=%d) failed with status %d%s%s%s",
                            op, routine, static_cast<long long>(batch), m, n, k, code, code > -1024 ? " (" : "",
                            code > -1024 ? cl_error_name(static_cast<cl_int>(code)) : "", code > -1024 ? ")" : "")};
}
}  // namespace

void gemm(xylem_stream_s& s, bool trans_a, bool trans_b, int32_t m, int32_t n, int32_t k, float alpha, cl_mem a,
          int32_t a_off, int32_t lda, cl_mem b, int32_t b_off, int32_t ldb, float beta, cl_mem c, int32_t c_off,
          int32_t ldc, const char* op, const Tensor* bias, int act) {
    if (m == 0 || n == 0) return;
    if (k == 0 || alpha == 0.0f) {  // only the beta scaling remains (CLBlast rejects k = 0)
        scale(s, beta, c, c_off, m * n);
        bias_activate(s, act, bias, c, c_off, m, n);
        return;
    }
    if (s.dev_->cpu_kernels) {
        own_gemm(s, trans_a, trans_b, 1, m, n, k, alpha, a, a_off, lda, 0, b, b_off, ldb, 0, beta, c, c_off, ldc, 0,
                 bias, act);
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
    if (status != clblast::StatusCode::kSuccess) clblast_failed(op, "GEMM", 1, m, n, k, status);
    bias_activate(s, act, bias, c, c_off, m, n);
}

void gemm_batched(xylem_stream_s& s, bool trans_a, bool trans_b, int32_t batch, int32_t m, int32_t n, int32_t k,
                  float alpha, cl_mem a, int32_t a_off, int32_t lda, int32_t stride_a, cl_mem b, int32_t b_off,
                  int32_t ldb, int32_t stride_b, float beta, cl_mem c, int32_t c_off, int32_t ldc, int32_t stride_c,
                  const char* op) {
    if (batch == 0 || m == 0 || n == 0) return;
    if (k == 0 || alpha == 0.0f) {  // only the beta scaling remains (CLBlast rejects k = 0)
        scale(s, beta, c, c_off, batch * stride_c);
        return;
    }
    if (s.dev_->cpu_kernels) {
        own_gemm(s, trans_a, trans_b, batch, m, n, k, alpha, a, a_off, lda, stride_a, b, b_off, ldb, stride_b, beta, c,
                 c_off, ldc, stride_c, nullptr, XYLEM_ACT_NONE);
        return;
    }
    const auto z = [](int32_t v) { return static_cast<size_t>(v); };
    const auto status = clblast::GemmStridedBatched<float>(
        clblast::Layout::kRowMajor, transpose(trans_a), transpose(trans_b), z(m), z(n), z(k), alpha, a, z(a_off),
        z(lda), z(stride_a), b, z(b_off), z(ldb), z(stride_b), beta, c, z(c_off), z(ldc), z(stride_c), z(batch),
        &s.queue_);
    if (status != clblast::StatusCode::kSuccess) clblast_failed(op, "GemmStridedBatched", batch, m, n, k, status);
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
         out_f, "linear_fwd", has_bias ? &tb : nullptr, act);
}

}  // namespace xylem::opencl
