// Op dispatch: the op enum -> kernel table and op_run (checks and error boundary from the plugin kit).
#include "native.h"

namespace xylem::native {

namespace {

// Indexed by xylem_op: every op of ops.h, in enum order.
#define XYLEM_OP_ENTRY(name) op_##name,
constexpr OpFn kOps[] = {XYLEM_PLUGIN_KIT_OPS(XYLEM_OP_ENTRY)};
#undef XYLEM_OP_ENTRY
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
