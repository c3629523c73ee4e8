// Op dispatch: the op enum -> host function table, op_run (checks and error boundary from the plugin
// kit), and the device-failure message.
#include <cstdio>

#include "cuda_plugin.h"

namespace xylem::cuda {

namespace {

constexpr auto kOps = plugin_kit::op_table<OpFn>({XYLEM_CUDA_OPS(XYLEM_PLUGIN_KIT_OP_ENTRY)});

}  // namespace

const char* op_name(uint32_t op) { return xylem_op_name(op); }

int32_t op_supported(xylem_framework_t, uint32_t op) { return kOps.supports(op); }

// Looks at the descriptor's shapes only (no framework, no buffers): the core asks before op_run.
int32_t op_accepts(xylem_framework_t, const xylem_op_desc* desc) {
    if (!desc) return 1;  // op_run reports it
    switch (desc->op) {
    case XYLEM_OP_ATTENTION_FWD:
    case XYLEM_OP_ATTENTION_BWD: return attention_accepts(*desc) ? 1 : 0;
    default: return plugin_kit::batchnorm_activation_accepted(*desc) ? 1 : 0;
    }
}

// Enqueues the op's kernels and library calls; nothing here waits for the device.
xylem_status op_run(xylem_framework_t fw, xylem_stream_t stream, const xylem_op_desc* desc) {
    if (const xylem_status s = check_framework(fw, "op_run")) return s;
    return plugin_kit::guarded_op_run<Plugin>(desc, stream, kOps.fn, [&](OpFn op) {
        if (fw->device_count_ > 1) cudaSetDevice(static_cast<int>(stream->device_));
        stream->scratch_.reset();
        try {
            op(*desc, *stream, *fw);
        } catch (...) {
            // An op that fails after enqueuing work into a capture (or after growing the arena)
            // must still hand its blocks to the capture: else the next reset() frees them with
            // cudaFree in the middle of the capture while recorded nodes point into them.
            if (stream->capture_) stream->scratch_.collect(stream->capture_->keep);
            throw;
        }
        if (stream->capture_) stream->scratch_.collect(stream->capture_->keep);
    });
}

// Names the inputs' shapes: a library failure is often a shape it cannot take.
void OpArgs::device_fail(const char* call, const char* text) const {
    char shapes[300] = "";
    int len = 0;
    const xylem_op_desc& d = desc();
    for (uint32_t i = 0; i < d.n_inputs && d.inputs && len < 240; ++i) {
        const xylem_tensor_arg& t = d.inputs[i];
        const Tensor v{nullptr, 0, t.ndim <= XYLEM_MAX_DIMS ? t.ndim : 0u, t.dims};
        len += std::snprintf(shapes + len, sizeof shapes - len, "%s%s", i ? " " : "inputs ", DimStr(v).s);
    }
    cudaGetLastError();  // a launch error would otherwise be reported again by the next op
    throw OpError{set_error(XYLEM_E_DEVICE, "cuda: %s: %s failed: %s (%s)", op_name(d.op), call, text, shapes)};
}

}  // namespace xylem::cuda
