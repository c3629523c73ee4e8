// Op dispatch: the op -> kernel table and op_run (checks and error boundary from the plugin kit).
#include "native.h"

namespace xylem::native {

namespace {
constexpr auto kOps = plugin_kit::op_table<OpFn>({XYLEM_NATIVE_OPS(XYLEM_PLUGIN_KIT_OP_ENTRY)});
}  // namespace

int32_t op_supported(xylem_framework_t, uint32_t op) { return kOps.supports(op); }

// Every descriptor of a supported op runs; the ABI 1.11 batch norm's ReLU only needs saying so
// (the core sends it only to a plugin that accepts it).
int32_t op_accepts(xylem_framework_t, const xylem_op_desc* desc) {
    return !desc || plugin_kit::batchnorm_activation_accepted(*desc) ? 1 : 0;
}

xylem_status op_run(xylem_framework_t, xylem_stream_t stream, const xylem_op_desc* desc) {
    return plugin_kit::guarded_op_run<Plugin>(desc, stream, kOps.fn, [&](OpFn op) {
        stream->scratch_.reset();  // may throw bad_alloc while it grows
        op(*desc, *stream);
    });
}

}  // namespace xylem::native
