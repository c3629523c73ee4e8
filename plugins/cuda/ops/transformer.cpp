// GEMM_BATCHED, PERMUTE and MASKED_SOFTMAX (ABI 1.7): the pieces the core composes attention from
// when attention_fwd declines a shape, and the head split and merge around it.
#include <climits>

#include "cuda_plugin.h"
#include "kernels/kernels.h"
#include "xylem/plugin_kit/shapes_transformer.h"

namespace xylem::cuda {

// One cublasSgemmStridedBatched: a 2-D operand is the same matrix for every batch index (stride
// 0). cuBLAS is column-major, so as in ops/gemm.cpp the row-major C = op(A)op(B) is computed as
// C^T = op(B)^T op(A)^T with the operands swapped; the leading dimensions are the stored rows'.
void op_gemm_batched(const xylem_op_desc& desc, xylem_stream_s& s, xylem_framework_s&) {
    OpArgs a(desc, 2, 2, 1);
    const auto at = a.attrs<xylem_gemm_attrs>();
    const Tensor ta = a.in(0, "A"), tb = a.in(1, "B"), tc = a.out(0, "C");
    const plugin_kit::GemmBatchedShape g = plugin_kit::gemm_batched_shape(a, at, ta, tb, tc);
    if (overlap(tc, ta) || overlap(tc, tb)) a.fail("C overlaps A or B");
    a.check_int(g.m, "M");
    a.check_int(g.n, "N");
    a.check_int(g.k, "K");
    a.check_int(g.batch, "batch");
    if (g.batch == 0 || g.m == 0 || g.n == 0) return;
    if (g.k == 0 || at.alpha == 0.0f) {  // only the beta scaling remains (cuBLAS rejects lda = 0)
        kernels::scale(tc.f32(), g.batch * g.m * g.n, at.beta, s.stream_);
        return a.check_launch();
    }
    const int lda = static_cast<int>(ta.dims[ta.ndim - 1]), ldb = static_cast<int>(tb.dims[tb.ndim - 1]);
    a.check_cublas(cublasSgemmStridedBatched(s.cublas_, at.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N,
                                             at.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, static_cast<int>(g.n),
                                             static_cast<int>(g.m), static_cast<int>(g.k), &at.alpha, tb.f32(), ldb,
                                             g.stride_b, ta.f32(), lda, g.stride_a, &at.beta, tc.f32(),
                                             static_cast<int>(g.n), g.stride_c, static_cast<int>(g.batch)),
                   "cublasSgemmStridedBatched");
}

// The kit's shape, simplified before the kernel: axes of size 1 dropped, and neighbouring axes of Y
// that walk X as one axis (the outer's stride = the inner's size * stride) merged, so that each
// element costs one division per axis left (a permute that is a copy: none).
void op_permute(const xylem_op_desc& desc, xylem_stream_s& s, xylem_framework_s&) {
    OpArgs a(desc, 1, 1, 1);
    const auto at = a.attrs<xylem_permute_attrs>();
    const Tensor tx = a.in(0, "X"), ty = a.out(0, "Y");
    const plugin_kit::PermuteShape ps = plugin_kit::permute_shape(a, at, tx, ty);
    if (overlap(tx, ty)) a.fail("Y overlaps X");
    kernels::PermuteGeom g{0, {}, {}, ps.numel};
    for (uint32_t d = 0; d < ps.ndim; ++d) {
        if (ps.out_dims[d] == 1) continue;
        if (g.ndim && g.in_strides[g.ndim - 1] == ps.out_dims[d] * ps.in_strides[d]) {
            g.out_dims[g.ndim - 1] *= ps.out_dims[d];
            g.in_strides[g.ndim - 1] = ps.in_strides[d];
            continue;
        }
        g.out_dims[g.ndim] = ps.out_dims[d];
        g.in_strides[g.ndim] = ps.in_strides[d];
        ++g.ndim;
    }
    if (g.ndim == 0) g = kernels::PermuteGeom{1, {1}, {1}, ps.numel};  // one element (or none)
    kernels::permute(tx.f32(), ty.f32(), g, s.stream_);
    a.check_launch();
}

void op_masked_softmax(const xylem_op_desc& desc, xylem_stream_s& s, xylem_framework_s&) {
    OpArgs a(desc, 1, 2, desc.n_outputs == 2 ? 2 : 1);
    const auto at = a.attrs<xylem_attention_attrs>();
    const Tensor tx = a.in(0, "X"), ty = a.out(0, "Y");
    const Tensor tm = a.n_inputs() == 2 ? a.in(1, "mask") : Tensor{};
    const Tensor tl = desc.n_outputs == 2 ? a.out(1, "LSE") : Tensor{};
    const Tensor* mask = a.n_inputs() == 2 ? &tm : nullptr;
    const Tensor* lse = desc.n_outputs == 2 ? &tl : nullptr;
    const plugin_kit::MaskedSoftmaxShape ms = plugin_kit::masked_softmax_shape(a, at, tx, mask, ty, lse);
    if (tx.data != ty.data && overlap(tx, ty)) a.fail("Y partly overlaps X (in place is fine)");
    if ((mask && overlap(ty, tm)) || (lse && (overlap(tl, tx) || overlap(tl, ty) || (mask && overlap(tl, tm)))))
        a.fail("an output overlaps the mask or another operand");
    const kernels::MaskGeom m{mask ? tm.f32() : nullptr, ms.heads, ms.mask.sb, ms.mask.sh, ms.mask.sq};
    kernels::masked_softmax(tx.f32(), m, ty.f32(), lse ? tl.f32() : nullptr, ms.batch * ms.tq, ms.tq, ms.l, at.scale,
                            at.causal != 0, s.stream_);
    a.check_launch();
}

}  // namespace xylem::cuda
