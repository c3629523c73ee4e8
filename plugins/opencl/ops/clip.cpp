// Gradient clipping (kernels/clip.cl): CLAMP, SUM_SQUARES (the squared global norm, accumulated
// into a device scalar across parameters) and CLIP_BY_NORM (scales by a factor the kernel computes
// from that scalar, so the host never reads it).
#include <algorithm>

#include "opencl.h"

namespace xylem::opencl {

void op_clamp(const xylem_op_desc& desc, xylem_stream_s& s) {
    OpArgs a(desc, 0, 0, 1);
    const auto at = a.attrs<xylem_clamp_attrs>();
    if (!(at.lo <= at.hi)) a.fail("lower bound %g exceeds upper bound %g", at.lo, at.hi);
    const Tensor x = a.out(0, "x");
    Kernel(s, Family::Clip, "clamp_values").arg(x.mem).arg(x.off).arg(at.lo).arg(at.hi).arg(x.numel).run(x.numel);
}

// Two passes without atomics: the group count depends only on n and the device's reduction group
// size, so the same tensor always sums in the same order (the same bits every run).
void op_sum_squares(const xylem_op_desc& desc, xylem_stream_s& s) {
    OpArgs a(desc, 1, 1, 1);
    const float beta = a.attrs<xylem_sum_squares_attrs>().beta;
    const Tensor x = a.in(0, "x"), acc = a.out(0, "acc");
    a.check_scalar(acc, "acc");
    const size_t group = reduce_group(s);
    constexpr int64_t kMaxGroups = 64;  // enough to fill a GPU's compute units; the finish pass adds them
    const int64_t per_group = static_cast<int64_t>(group) * 8;  // at least 8 elements per work-item
    const cl_int groups = static_cast<cl_int>(std::clamp<int64_t>((x.numel + per_group - 1) / per_group, 1, kMaxGroups));
    cl_mem partial = stream_scratch(s, static_cast<size_t>(groups) * sizeof(float));
    Kernel(s, Family::Clip, "sum_squares_partial").arg(x.mem).arg(x.off).arg(x.numel).arg(partial)
        .run_groups(groups, group);
    Kernel(s, Family::Clip, "sum_squares_finish").arg(partial).arg(groups).arg(beta).arg(acc.mem).arg(acc.off)
        .run_groups(1, group);
}

void op_clip_by_norm(const xylem_op_desc& desc, xylem_stream_s& s) {
    OpArgs a(desc, 1, 1, 1);
    const auto at = a.attrs<xylem_clip_by_norm_attrs>();
    const Tensor sumsq = a.in(0, "sumsq"), x = a.out(0, "x");
    a.check_scalar(sumsq, "sumsq");
    Kernel(s, Family::Clip, "clip_by_norm").arg(sumsq.mem).arg(sumsq.off).arg(x.mem).arg(x.off).arg(at.max_norm)
        .arg(at.eps).arg(x.numel).run(x.numel);
}

}  // namespace xylem::opencl
