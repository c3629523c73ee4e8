// Reductions whose result stays on the device: BIAS_GRAD, ACCURACY and REDUCE (kernels/reduce.cl).
#include <algorithm>

#include "opencl.h"

namespace xylem::opencl {

void op_bias_grad(const xylem_op_desc& desc, xylem_stream_s& s) {
    OpArgs a(desc, 1, 1, 1);
    const float beta = a.attrs<xylem_bias_grad_attrs>().beta;
    const Tensor dy = a.in(0, "dy"), db = a.out(0, "db");
    const plugin_kit::BiasGradShape b = plugin_kit::bias_grad_shape(a, dy, db);
    bias_grad(s, dy, static_cast<int32_t>(b.n), static_cast<int32_t>(b.c), static_cast<int32_t>(b.inner), beta, db);
}

void bias_grad(xylem_stream_s& s, const Tensor& dy, int32_t n, int32_t c, int32_t inner, float beta, const Tensor& db) {
    if (inner == 1 && c > 0) {
        // Column sums: fixed chunks of rows (a function of the shape), then the chunks in order.
        const int32_t n_chunks = std::max<int32_t>(1, std::min<int32_t>(n, 64));
        const int32_t chunk_rows = n ? (n + n_chunks - 1) / n_chunks : 1;
        const int32_t chunks = n ? (n + chunk_rows - 1) / chunk_rows : 1;
        cl_mem part = stream_scratch(s, sizeof(float) * static_cast<size_t>(chunks) * c);
        Kernel(s, Family::Reduce, "colsum_partials").arg(dy.mem).arg(dy.off).arg(n).arg(c).arg(chunk_rows)
            .arg(chunks).arg(part).run(static_cast<int64_t>(chunks) * chunks16(c));
        Kernel(s, Family::Reduce, "colsum_combine").arg(part).arg(chunks).arg(c).arg(beta).arg(db.mem).arg(db.off)
            .run(chunks16(c));
        return;
    }
    Kernel(s, Family::Reduce, "bias_grad").arg(dy.mem).arg(dy.off).arg(n).arg(c).arg(inner).arg(beta).arg(db.mem)
        .arg(db.off).run_groups(c, reduce_group(s));
}

void op_accuracy(const xylem_op_desc& desc, xylem_stream_s& s) {
    OpArgs a(desc, 2, 2, 1);
    const Tensor x = a.in(0, "logits"), labels = a.in(1, "labels", XYLEM_I32), correct = a.out(0, "correct");
    a.check_classification(x, labels);
    a.check_scalar(correct, "correct");
    const int32_t n = static_cast<int32_t>(x.dims[0]), c = static_cast<int32_t>(x.dims[1]);
    const cl_int op = XYLEM_OP_ACCURACY;
    Kernel(s, Family::Reduce, "accuracy").arg(x.mem).arg(x.off).arg(labels.mem).arg(labels.off).arg(n).arg(c)
        .arg(correct.mem).arg(correct.off).arg(s.error_word_).arg(op).run_groups(1, reduce_group(s));
}

// The kernel and the number of slices depend on the shape and the device's group size only, so a
// tensor reduces in the same order every run (no atomics). Many outputs (or short runs): one item
// each, a coalesced walk when inner > 1. Few long runs: a work-group each, and a run too long for
// one group is cut into up to 64 slices in all, combined in order by reduce_finish.
void op_reduce(const xylem_op_desc& desc, xylem_stream_s& s) {
    OpArgs a(desc, 1, 1, 1);
    const auto at = a.attrs<xylem_reduce_attrs>();
    const Tensor x = a.in(0, "x"), out = a.out(0, "out");
    const auto r = plugin_kit::reduce_shape(a, at, x, out);
    if (overlap(out, x)) a.fail("out overlaps x");
    const int32_t outputs = out.numel, n = static_cast<int32_t>(r.n), inner = static_cast<int32_t>(r.inner);
    if (outputs == 0) return;
    const cl_int mode = at.mode;
    constexpr int32_t kShortRun = 32, kManyOutputs = 1024, kMaxGroups = 64;
    if (n <= kShortRun || outputs >= kManyOutputs) {
        Kernel(s, Family::Reduce, "reduce_each").arg(x.mem).arg(x.off).arg(n).arg(inner).arg(outputs).arg(mode)
            .arg(out.mem).arg(out.off).arg(at.beta).run(outputs);
        return;
    }
    const size_t group = reduce_group(s);
    const int64_t per_group = static_cast<int64_t>(group) * 8;  // at least 8 elements per work-item
    const cl_int slices = static_cast<cl_int>(
        std::clamp<int64_t>((n + per_group - 1) / per_group, 1, std::max<int64_t>(1, kMaxGroups / outputs)));
    if (slices == 1) {
        const cl_int final = 1;
        Kernel(s, Family::Reduce, "reduce_groups").arg(x.mem).arg(x.off).arg(n).arg(inner).arg(slices).arg(mode)
            .arg(out.mem).arg(out.off).arg(at.beta).arg(final).run_groups(outputs, group);
        return;
    }
    const int32_t parts = outputs * slices;  // at most kMaxGroups
    cl_mem partial = stream_scratch(s, static_cast<size_t>(parts) * sizeof(float));
    const cl_int zero = 0, final = 0;
    Kernel(s, Family::Reduce, "reduce_groups").arg(x.mem).arg(x.off).arg(n).arg(inner).arg(slices).arg(mode)
        .arg(partial).arg(zero).arg(at.beta).arg(final).run_groups(parts, group);
    Kernel(s, Family::Reduce, "reduce_finish").arg(partial).arg(slices).arg(n).arg(mode).arg(outputs).arg(out.mem)
        .arg(out.off).arg(at.beta).run(outputs);
}

}  // namespace xylem::opencl
