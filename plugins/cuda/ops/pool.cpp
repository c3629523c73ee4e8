// POOL2D_FWD / POOL2D_BWD: validation as on the CPU, then own kernels (see kernels/pool.cu for why
// not cuDNN: the tie rule must match the native plugin's).
#include "cuda_plugin.h"
#include "kernels/kernels.h"

namespace xylem::cuda {

using plugin_kit::pool2d_shape;

void op_pool2d_fwd(const xylem_op_desc& desc, xylem_stream_s& s, xylem_framework_s&) {
    OpArgs a(desc, 1, 1, 1);
    const auto attrs = a.attrs<xylem_pool2d_attrs>();
    const Tensor tx = a.in(0, "X"), ty = a.out(0, "Y");
    const kernels::PoolGeom p = pool2d_shape(a, attrs, tx, "X", ty, "Y");
    if (overlap(ty, tx)) a.fail("Y overlaps X");
    kernels::pool_fwd(p, tx.f32(), ty.f32(), s.stream_);
    a.check_launch();
}

// The max windows are found again in X (ties to the first); Y is validated but not needed.
void op_pool2d_bwd(const xylem_op_desc& desc, xylem_stream_s& s, xylem_framework_s&) {
    OpArgs a(desc, 3, 3, 1);
    const auto attrs = a.attrs<xylem_pool2d_attrs>();
    const Tensor tdy = a.in(0, "dY"), tx = a.in(1, "X"), ty = a.in(2, "Y"), tdx = a.out(0, "dX");
    const kernels::PoolGeom p = pool2d_shape(a, attrs, tx, "X", tdy, "dY");
    a.same_numel(tdy, "dY", ty, "Y");
    a.same_numel(tx, "X", tdx, "dX");
    if (overlap(tdx, tdy) || overlap(tdx, tx)) a.fail("dX overlaps dY or X");
    kernels::pool_bwd(p, tdy.f32(), tx.f32(), tdx.f32(), s.stream_);
    a.check_launch();
}

}  // namespace xylem::cuda
