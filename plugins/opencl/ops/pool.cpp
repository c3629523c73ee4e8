// POOL2D_FWD / POOL2D_BWD (kernels/pool.cl), with the native plugin's shape rules and messages.
#include "opencl.h"

namespace xylem::opencl {

namespace {

using ll = long long;

struct Pool {
    cl_int8 attrs;
    int32_t planes, h, w, oh, ow;
};

Pool pool_shape(const OpArgs& a, const xylem_pool2d_attrs& at, const Tensor& x, const char* xn, const Tensor& y,
                const char* yn) {
    if (at.mode != XYLEM_POOL_MAX && at.mode != XYLEM_POOL_AVG) a.fail("unknown pooling mode %d", at.mode);
    if (at.kernel_h < 1 || at.kernel_w < 1) a.fail("kernel %dx%d must be >= 1", at.kernel_h, at.kernel_w);
    if (at.stride_h < 1 || at.stride_w < 1) a.fail("stride %dx%d must be >= 1", at.stride_h, at.stride_w);
    if (at.pad_h < 0 || at.pad_w < 0) a.fail("padding %dx%d must be >= 0", at.pad_h, at.pad_w);
    if (at.pad_h >= at.kernel_h || at.pad_w >= at.kernel_w)  // then every window holds an input element
        a.fail("padding %dx%d must be smaller than the %dx%d kernel", at.pad_h, at.pad_w, at.kernel_h, at.kernel_w);
    if (x.ndim != 4) a.fail("%s must be 4-D [N,C,H,W], got %u dims", xn, x.ndim);
    if (y.ndim != 4) a.fail("%s must be 4-D [N,C,OH,OW], got %u dims", yn, y.ndim);
    const int64_t n = x.dims[0], c = x.dims[1], h = x.dims[2], w = x.dims[3];
    if (h + 2 * at.pad_h < at.kernel_h || w + 2 * at.pad_w < at.kernel_w)
        a.fail("the %dx%d window does not fit %s [%lld,%lld,%lld,%lld] padded by %dx%d", at.kernel_h, at.kernel_w, xn,
               ll(n), ll(c), ll(h), ll(w), at.pad_h, at.pad_w);
    const int64_t oh = (h + 2 * at.pad_h - at.kernel_h) / at.stride_h + 1;
    const int64_t ow = (w + 2 * at.pad_w - at.kernel_w) / at.stride_w + 1;
    if (y.dims[0] != n || y.dims[1] != c || y.dims[2] != oh || y.dims[3] != ow)
        a.fail("%s is [%lld,%lld,%lld,%lld] but %s [%lld,%lld,%lld,%lld] pools to [%lld,%lld,%lld,%lld]", yn,
               ll(y.dims[0]), ll(y.dims[1]), ll(y.dims[2]), ll(y.dims[3]), xn, ll(n), ll(c), ll(h), ll(w), ll(n), ll(c),
               ll(oh), ll(ow));
    Pool p{};
    const cl_int packed[8] = {at.kernel_h, at.kernel_w, at.stride_h, at.stride_w, at.pad_h, at.pad_w,
                              at.mode == XYLEM_POOL_MAX, at.count_include_pad != 0};
    for (int i = 0; i < 8; ++i) p.attrs.s[i] = packed[i];
    p.planes = static_cast<int32_t>(n * c), p.h = static_cast<int32_t>(h), p.w = static_cast<int32_t>(w);
    p.oh = static_cast<int32_t>(oh), p.ow = static_cast<int32_t>(ow);
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
