// Op dispatch: the op enum -> kernel table and op_run (checks and error boundary from the plugin kit).
#include "native.h"

namespace xylem::native {

namespace {

// Indexed by xylem_op; a NULL entry would mean "not supported".
constexpr OpFn kOps[] = {
    op_fill,
    op_copy,
    op_axpby,
    op_mul,
    op_gemm,
    op_linear_fwd,
    op_bias_grad,
    op_act_fwd,
    op_act_bwd,
    op_softmax_fwd,
    op_softmax_bwd,
    op_xent_fwd,
    op_xent_bwd,
    op_nll_fwd,
    op_nll_bwd,
    op_mse_fwd,
    op_mse_bwd,
    op_dropout_fwd,
    op_sgd_update,
    op_adam_update,
    op_accuracy,
    op_conv2d_fwd,
    op_conv2d_bwd_data,
    op_conv2d_bwd_filter,
    op_pool2d_fwd,
    op_pool2d_bwd,
    op_batchnorm_fwd,
    op_batchnorm_bwd,
    op_gather_rows,
};
static_assert(sizeof kOps / sizeof kOps[0] == XYLEM_OP_COUNT_, "one kOps entry per xylem_op");

}  // namespace

int32_t op_supported(xylem_framework_t, uint32_t op) { return op < XYLEM_OP_COUNT_ && kOps[op] ? 1 : 0; }

xylem_status op_run(xylem_framework_t, xylem_stream_t stream, const xylem_op_desc* desc) {
    return plugin_kit::guarded_op_run<Plugin>(desc, stream, kOps, [&](OpFn op) {
        stream->scratch_.reset();  // may throw bad_alloc while it grows
        op(*desc, *stream);
    });
}

}  // namespace xylem::native
