// Reductions whose result stays on the device: BIAS_GRAD and ACCURACY (kernels/reduce.cl).
#include "opencl.h"

namespace xylem::opencl {

void op_bias_grad(const xylem_op_desc& desc, xylem_stream_s& s) {
    OpArgs a(desc, 1, 1, 1);
    const float beta = a.attrs<xylem_bias_grad_attrs>().beta;
    const Tensor dy = a.in(0, "dy"), db = a.out(0, "db");
    if (dy.ndim < 2) a.fail("dy must be [N,C,...], got %u dims", dy.ndim);
    const int32_t n = static_cast<int32_t>(dy.dims[0]), c = static_cast<int32_t>(dy.dims[1]);
    int32_t inner = 1;
    for (uint32_t d = 2; d < dy.ndim; ++d) inner *= static_cast<int32_t>(dy.dims[d]);
    if (db.numel != c) a.fail("db holds %d elements for %d channels", db.numel, c);
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

}  // namespace xylem::opencl
