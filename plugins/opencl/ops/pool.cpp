// POOL2D_FWD / POOL2D_BWD (kernels/pool.cl), with the plugin kit's shape rules and messages.
#include "opencl.h"

namespace xylem::opencl {

namespace {

struct Pool {
    cl_int8 attrs;
    int32_t planes, h, w, oh, ow;
};

Pool pool_shape(const OpArgs& a, const xylem_pool2d_attrs& at, const Tensor& x, const char* xn, const Tensor& y,
                const char* yn) {
    const plugin_kit::Pool2dShape s = plugin_kit::pool2d_shape(a, at, x, xn, y, yn);
    Pool p{};
    const cl_int packed[8] = {at.kernel_h, at.kernel_w, at.stride_h, at.stride_w, at.pad_h, at.pad_w, s.max,
                              s.include_pad};
    for (int i = 0; i < 8; ++i) p.attrs.s[i] = packed[i];
    p.planes = static_cast<int32_t>(s.planes), p.h = static_cast<int32_t>(s.h), p.w = static_cast<int32_t>(s.w);
    p.oh = static_cast<int32_t>(s.oh), p.ow = static_cast<int32_t>(s.ow);
    return p;
}

}  // namespace

void op_pool2d_fwd(const xylem_op_desc& desc, xylem_stream_s& s) {
    OpArgs a(desc, 1, 1, 1);
    const Tensor x = a.in(0, "X"), y = a.out(0, "Y");
    const Pool p = pool_shape(a, a.attrs<xylem_pool2d_attrs>(), x, "X", y, "Y");
    if (overlap(x, y)) a.fail("Y overlaps X");
    Kernel(s, Family::Pool, "pool_fwd").arg(p.attrs).arg(p.planes).arg(p.h).arg(p.w).arg(p.oh).arg(p.ow).arg(x.mem)
        .arg(x.off).arg(y.mem).arg(y.off).run(y.numel);
}

void op_pool2d_bwd(const xylem_op_desc& desc, xylem_stream_s& s) {
    OpArgs a(desc, 3, 3, 1);
    const Tensor dy = a.in(0, "dY"), x = a.in(1, "X"), y = a.in(2, "Y"), dx = a.out(0, "dX");
    const Pool p = pool_shape(a, a.attrs<xylem_pool2d_attrs>(), x, "X", dy, "dY");
    a.same_numel(dy, "dY", y, "Y");
    a.same_numel(x, "X", dx, "dX");
    if (overlap(dx, dy) || overlap(dx, x) || overlap(dx, y)) a.fail("dX overlaps dY, X or Y");
    // Y is not needed: the windows' maxima are found again in X (ties to the first).
    Kernel(s, Family::Pool, "pool_bwd").arg(p.attrs).arg(p.planes).arg(p.h).arg(p.w).arg(p.oh).arg(p.ow).arg(dy.mem)
        .arg(dy.off).arg(x.mem).arg(x.off).arg(dx.mem).arg(dx.off).run(dx.numel);
}

}  // namespace xylem::opencl
