// POOL2D_FWD / POOL2D_BWD: validation as on the CPU, then own kernels (see kernels/pool.cu for why
// not cuDNN: the tie rule must match the native plugin's).
#include "cuda_plugin.h"
#include "kernels/kernels.h"

namespace xylem::cuda {

namespace {

using ll = long long;

kernels::PoolGeom pool_shape(const OpArgs& a, const xylem_pool2d_attrs& at, const Tensor& x, const char* xn,
                             const Tensor& y, const char* yn) {
    if (at.mode != XYLEM_POOL_MAX && at.mode != XYLEM_POOL_AVG) a.fail("unknown pooling mode %d", at.mode);
    if (at.kernel_h < 1 || at.kernel_w < 1) a.fail("kernel %dx%d must be >= 1", at.kernel_h, at.kernel_w);
    if (at.stride_h < 1 || at.stride_w < 1) a.fail("stride %dx%d must be >= 1", at.stride_h, at.stride_w);
    if (at.pad_h < 0 || at.pad_w < 0) a.fail("padding %dx%d must be >= 0", at.pad_h, at.pad_w);
    if (at.pad_h >= at.kernel_h || at.pad_w >= at.kernel_w)
        a.fail("padding %dx%d must be smaller than the %dx%d kernel", at.pad_h, at.pad_w, at.kernel_h, at.kernel_w);
    if (x.ndim != 4) a.fail("%s must be 4-D [N,C,H,W], got %u dims", xn, x.ndim);
    if (y.ndim != 4) a.fail("%s must be 4-D [N,C,OH,OW], got %u dims", yn, y.ndim);
    kernels::PoolGeom p{};
    const int64_t n = x.dims[0], c = x.dims[1];
    p.planes = n * c, p.h = x.dims[2], p.w = x.dims[3];
    p.kh = at.kernel_h, p.kw = at.kernel_w, p.sh = at.stride_h, p.sw = at.stride_w, p.ph = at.pad_h, p.pw = at.pad_w;
    p.max = at.mode == XYLEM_POOL_MAX;
    p.include_pad = at.count_include_pad != 0;
    if (p.h + 2 * p.ph < p.kh || p.w + 2 * p.pw < p.kw)
        a.fail("the %lldx%lld window does not fit %s [%lld,%lld,%lld,%lld] padded by %lldx%lld", ll(p.kh), ll(p.kw), xn,
               ll(n), ll(c), ll(p.h), ll(p.w), ll(p.ph), ll(p.pw));
    p.oh = (p.h + 2 * p.ph - p.kh) / p.sh + 1;
    p.ow = (p.w + 2 * p.pw - p.kw) / p.sw + 1;
    if (y.dims[0] != n || y.dims[1] != c || y.dims[2] != p.oh || y.dims[3] != p.ow)
        a.fail("%s is [%lld,%lld,%lld,%lld] but %s [%lld,%lld,%lld,%lld] pools to [%lld,%lld,%lld,%lld]", yn,
               ll(y.dims[0]), ll(y.dims[1]), ll(y.dims[2]), ll(y.dims[3]), xn, ll(n), ll(c), ll(p.h), ll(p.w), ll(n),
               ll(c), ll(p.oh), ll(p.ow));
    return p;
}

}  // namespace

void op_pool2d_fwd(const xylem_op_desc& desc, xylem_stream_s& s, xylem_framework_s&) {
    OpArgs a(desc, 1, 1, 1);
    const auto attrs = a.attrs<xylem_pool2d_attrs>();
    const Tensor tx = a.in(0, "X"), ty = a.out(0, "Y");
    const kernels::PoolGeom p = pool_shape(a, attrs, tx, "X", ty, "Y");
    if (overlap(ty, tx)) a.fail("Y overlaps X");
    kernels::pool_fwd(p, tx.f32(), ty.f32(), s.stream_);
    a.check_launch();
}

// The max windows are found again in X (ties to the first); Y is validated but not needed.
void op_pool2d_bwd(const xylem_op_desc& desc, xylem_stream_s& s, xylem_framework_s&) {
    OpArgs a(desc, 3, 3, 1);
    const auto attrs = a.attrs<xylem_pool2d_attrs>();
    const Tensor tdy = a.in(0, "dY"), tx = a.in(1, "X"), ty = a.in(2, "Y"), tdx = a.out(0, "dX");
    const kernels::PoolGeom p = pool_shape(a, attrs, tx, "X", tdy, "dY");
    a.same_numel(tdy, "dY", ty, "Y");
    a.same_numel(tx, "X", tdx, "dX");
    if (overlap(tdx, tdy) || overlap(tdx, tx)) a.fail("dX overlaps dY or X");
    kernels::pool_bwd(p, tdy.f32(), tx.f32(), tdx.f32(), s.stream_);
    a.check_launch();
}

}  // namespace xylem::cuda
