// SOFTMAX_FWD / SOFTMAX_BWD over the last axis, softmax or log_softmax.
#include "cuda_plugin.h"
#include "kernels/kernels.h"

namespace xylem::cuda {

void op_softmax_fwd(const xylem_op_desc& desc, xylem_stream_s& s, xylem_framework_s&) {
    OpArgs a(desc, 1, 1, 1);
    const bool log = a.attrs<xylem_softmax_attrs>().log != 0;
    const Tensor tx = a.in(0, "x"), ty = a.out(0, "y");
    a.same_numel(tx, "x", ty, "y");
    kernels::softmax_fwd(tx.f32(), ty.f32(), tx.rows(), tx.cols(), log, s.stream_);
    a.check_launch();
}

void op_softmax_bwd(const xylem_op_desc& desc, xylem_stream_s& s, xylem_framework_s&) {
    OpArgs a(desc, 2, 2, 1);
    const bool log = a.attrs<xylem_softmax_attrs>().log != 0;
    const Tensor tdy = a.in(0, "dy"), ty = a.in(1, "y"), tdx = a.out(0, "dx");
    a.same_numel(tdy, "dy", ty, "y");
    a.same_numel(tdy, "dy", tdx, "dx");
    kernels::softmax_bwd(tdy.f32(), ty.f32(), tdx.f32(), ty.rows(), ty.cols(), log, s.stream_);
    a.check_launch();
}

}  // namespace xylem::cuda
