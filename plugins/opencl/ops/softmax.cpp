// SOFTMAX_FWD / SOFTMAX_BWD over the last axis (kernels/softmax.cl).
#include "opencl.h"

namespace xylem::opencl {

void op_softmax_fwd(const xylem_op_desc& desc, xylem_stream_s& s) {
    OpArgs a(desc, 1, 1, 1);
    const cl_int log = a.attrs<xylem_softmax_attrs>().log != 0;
    const Tensor x = a.in(0, "x"), y = a.out(0, "y");
    a.same_numel(x, "x", y, "y");
    const int32_t c = x.cols();
    if (c == 0) return;
    if (overlap(x, y) && x.off != y.off) a.fail("x and y overlap without being the same range");
    Kernel(s, Family::Softmax, "softmax_fwd").arg(log).arg(x.mem).arg(x.off).arg(y.mem).arg(y.off).arg(x.rows()).arg(c)
        .run(x.rows());
}

void op_softmax_bwd(const xylem_op_desc& desc, xylem_stream_s& s) {
    OpArgs a(desc, 2, 2, 1);
    const cl_int log = a.attrs<xylem_softmax_attrs>().log != 0;
    const Tensor dy = a.in(0, "dy"), y = a.in(1, "y"), dx = a.out(0, "dx");
    a.same_numel(dy, "dy", y, "y");
    a.same_numel(dy, "dy", dx, "dx");
    const int32_t c = y.cols();
    if (c == 0) return;
    Kernel(s, Family::Softmax, "softmax_bwd").arg(log).arg(dy.mem).arg(dy.off).arg(y.mem).arg(y.off).arg(dx.mem)
        .arg(dx.off).arg(y.rows()).arg(c).run(y.rows());
}

}  // namespace xylem::opencl
