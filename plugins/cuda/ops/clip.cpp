// Gradient clipping (kernels/clip.cu): CLAMP, SUM_SQUARES (the squared global norm, accumulated
// into a device scalar across parameters) and CLIP_BY_NORM (the kernel computes its factor from
// that scalar, so the host never reads it and a captured step replays it).
#include "cuda_plugin.h"
#include "kernels/kernels.h"

namespace xylem::cuda {

void op_clamp(const xylem_op_desc& desc, xylem_stream_s& s, xylem_framework_s&) {
    OpArgs a(desc, 0, 0, 1);
    const auto attrs = a.attrs<xylem_clamp_attrs>();
    if (!(attrs.lo <= attrs.hi)) a.fail("lower bound %g exceeds upper bound %g", attrs.lo, attrs.hi);
    const Tensor tx = a.out(0, "x");
    kernels::clamp(tx.f32(), tx.numel, attrs.lo, attrs.hi, s.stream_);
    a.check_launch();
}

void op_sum_squares(const xylem_op_desc& desc, xylem_stream_s& s, xylem_framework_s&) {
    OpArgs a(desc, 1, 1, 1);
    const float beta = a.attrs<xylem_sum_squares_attrs>().beta;
    const Tensor tx = a.in(0, "x"), tacc = a.out(0, "acc");
    a.check_scalar(tacc, "acc");
    double* partials = s.scratch_.alloc<double>(kernels::sum_squares_blocks(tx.numel));
    kernels::sum_squares(tx.f32(), tx.numel, tacc.f32(), beta, partials, s.stream_);
    a.check_launch();
}

void op_clip_by_norm(const xylem_op_desc& desc, xylem_stream_s& s, xylem_framework_s&) {
    OpArgs a(desc, 1, 1, 1);
    const auto attrs = a.attrs<xylem_clip_by_norm_attrs>();
    const Tensor ts = a.in(0, "sumsq"), tx = a.out(0, "x");
    a.check_scalar(ts, "sumsq");
    kernels::clip_by_norm(ts.f32(), tx.f32(), tx.numel, attrs.max_norm, attrs.eps, s.stream_);
    a.check_launch();
}

}  // namespace xylem::cuda
