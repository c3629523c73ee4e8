// Plugin kit: every op of ops.h, in enum order, as X(name) for a kernel named op_<name>. One list
// for a plugin's kernel declarations and its op -> kernel table, so an op added to ops.h cannot
// be declared in one place and forgotten in the other (tests/core/plugin_kit_test.cpp checks the
// list against xylem_op_name()). A plugin that implements a subset writes its own table.
//
//   #define DECLARE(name) void op_##name(const xylem_op_desc&, xylem_stream_s&);
//   XYLEM_PLUGIN_KIT_OPS(DECLARE)
//   #define ENTRY(name) op_##name,
//   constexpr OpFn kOps[] = {XYLEM_PLUGIN_KIT_OPS(ENTRY)};
#pragma once

#include "xylem/ops.h"

#define XYLEM_PLUGIN_KIT_OPS(X)                                                                          \
    X(fill) X(copy) X(axpby) X(mul) X(gemm) X(linear_fwd) X(bias_grad) X(act_fwd) X(act_bwd)              \
    X(softmax_fwd) X(softmax_bwd) X(xent_fwd) X(xent_bwd) X(nll_fwd) X(nll_bwd) X(mse_fwd) X(mse_bwd)     \
    X(dropout_fwd) X(sgd_update) X(adam_update) X(accuracy) X(conv2d_fwd) X(conv2d_bwd_data)             \
    X(conv2d_bwd_filter) X(pool2d_fwd) X(pool2d_bwd) X(batchnorm_fwd) X(batchnorm_bwd) X(gather_rows)        \
    X(rmsprop_update) X(adamw_update) X(clamp) X(sum_squares) X(clip_by_norm)
