// Op dispatch: the op enum -> host function table, op_run's error boundary, and operand validation.
#include <cstdarg>
#include <cstdio>
#include <exception>
#include <new>

#include "cuda_plugin.h"

namespace xylem::cuda {

namespace {

using ll = long long;

// Indexed by xylem_op; a NULL entry would mean "not supported".
constexpr OpFn kOps[] = {
    op_fill,         op_copy,           op_axpby,          op_mul,
    op_gemm,         op_linear_fwd,     op_bias_grad,      op_act_fwd,
    op_act_bwd,      op_softmax_fwd,    op_softmax_bwd,    op_xent_fwd,
    op_xent_bwd,     op_nll_fwd,        op_nll_bwd,        op_mse_fwd,
    op_mse_bwd,      op_dropout_fwd,    op_sgd_update,     op_adam_update,
    op_accuracy,     op_conv2d_fwd,     op_conv2d_bwd_data, op_conv2d_bwd_filter,
    op_pool2d_fwd,   op_pool2d_bwd,     op_batchnorm_fwd,  op_batchnorm_bwd,
    op_gather_rows,
};
static_assert(sizeof kOps / sizeof kOps[0] == XYLEM_OP_COUNT_, "one kOps entry per xylem_op");

const char* dtype_name(uint32_t dtype) {
    return dtype == XYLEM_F32 ? "f32" : dtype == XYLEM_I32 ? "i32" : "unknown dtype";
}

}  // namespace

const char* op_name(uint32_t op) { return xylem_op_name(op); }

DimStr::DimStr(const Tensor& t) {
    int len = std::snprintf(s, sizeof s, "[");
    for (uint32_t d = 0; d < t.ndim && len < 140; ++d)
        len += std::snprintf(s + len, sizeof s - len, d ? ",%lld" : "%lld", static_cast<ll>(t.dims[d]));
    std::snprintf(s + len, sizeof s - len, "]");
}

int32_t op_supported(xylem_framework_t, uint32_t op) { return op < XYLEM_OP_COUNT_ && kOps[op] ? 1 : 0; }

// Enqueues the op's kernels and library calls; nothing here waits for the device.
xylem_status op_run(xylem_framework_t fw, xylem_stream_t stream, const xylem_op_desc* desc) {
    if (const xylem_status s = check_framework(fw, "op_run")) return s;
    if (!desc) return set_error(XYLEM_E_INVALID, "cuda: op_run: desc is NULL");
    if (!stream) return set_error(XYLEM_E_INVALID, "cuda: op_run: stream is NULL");
    if (desc->op >= XYLEM_OP_COUNT_ || !kOps[desc->op])
        return set_error(XYLEM_E_UNSUPPORTED, "cuda: op %u is not supported (this plugin knows ops 0..%d)", desc->op,
                         XYLEM_OP_COUNT_ - 1);
    try {
        if (fw->device_count_ > 1) cudaSetDevice(static_cast<int>(stream->device_));
        stream->scratch_.reset();
        kOps[desc->op](*desc, *stream, *fw);
        if (stream->capture_) stream->scratch_.collect(stream->capture_->keep);
        return XYLEM_OK;
    } catch (const OpError& e) {
        return e.status;
    } catch (const std::bad_alloc&) {
        return set_error(XYLEM_E_NO_MEMORY, "cuda: %s: out of memory (scratch or host)", op_name(desc->op));
    } catch (const std::exception& e) {
        return set_error(XYLEM_E_DEVICE, "cuda: %s: %s", op_name(desc->op), e.what());
    } catch (...) {
        return set_error(XYLEM_E_DEVICE, "cuda: %s: unknown exception", op_name(desc->op));
    }
}

// ---- OpArgs --------------------------------------------------------------------------------

OpArgs::OpArgs(const xylem_op_desc& desc, uint32_t min_in, uint32_t max_in, uint32_t n_out) : desc_(desc) {
    if (desc.n_inputs < min_in || desc.n_inputs > max_in) {
        if (min_in == max_in) fail("expects %u input(s), got %u", min_in, desc.n_inputs);
        fail("expects %u to %u inputs, got %u", min_in, max_in, desc.n_inputs);
    }
    if (desc.n_outputs != n_out) fail("expects %u output(s), got %u", n_out, desc.n_outputs);
    if ((desc.n_inputs && !desc.inputs) || (desc.n_outputs && !desc.outputs)) fail("operand array is NULL");
}

void OpArgs::fail(const char* fmt, ...) const {
    char msg[400];
    va_list args;
    va_start(args, fmt);
    std::vsnprintf(msg, sizeof msg, fmt, args);
    va_end(args);
    throw OpError{set_error(XYLEM_E_INVALID, "cuda: %s: %s", op_name(desc_.op), msg)};
}

void OpArgs::device_fail(const char* call, const char* text) const {
    char shapes[300] = "";
    int len = 0;
    for (uint32_t i = 0; i < desc_.n_inputs && desc_.inputs && len < 240; ++i) {
        const xylem_tensor_arg& t = desc_.inputs[i];
        const Tensor v{nullptr, 0, t.ndim <= XYLEM_MAX_DIMS ? t.ndim : 0u, t.dims};
        len += std::snprintf(shapes + len, sizeof shapes - len, "%s%s", i ? " " : "inputs ", DimStr(v).s);
    }
    cudaGetLastError();  // a launch error would otherwise be reported again by the next op
    throw OpError{set_error(XYLEM_E_DEVICE, "cuda: %s: %s failed: %s (%s)", op_name(desc_.op), call, text, shapes)};
}

Tensor OpArgs::in(uint32_t i, const char* name, xylem_dtype dtype) const {
    if (i >= desc_.n_inputs) fail("input %u (%s) is missing", i, name);
    return operand(desc_.inputs[i], "input", i, name, dtype);
}

Tensor OpArgs::out(uint32_t i, const char* name, xylem_dtype dtype) const {
    if (i >= desc_.n_outputs) fail("output %u (%s) is missing", i, name);
    return operand(desc_.outputs[i], "output", i, name, dtype);
}

Tensor OpArgs::operand(const xylem_tensor_arg& arg, const char* kind, uint32_t i, const char* name,
                       xylem_dtype dtype) const {
    if (!arg.buffer) fail("%s %u (%s) has no buffer", kind, i, name);
    if (arg.dtype != static_cast<uint32_t>(dtype))
        fail("%s %u (%s) must be %s, got %s", kind, i, name, dtype_name(dtype), dtype_name(arg.dtype));
    if (arg.ndim > XYLEM_MAX_DIMS) fail("%s %u (%s) has %u dims (max %d)", kind, i, name, arg.ndim, XYLEM_MAX_DIMS);
    const uint64_t capacity = arg.buffer->bytes_ / 4;  // both dtypes are 4 bytes
    uint64_t numel = 1;
    for (uint32_t d = 0; d < arg.ndim; ++d) {
        if (arg.dims[d] < 0) fail("%s %u (%s) has negative dim %u", kind, i, name, d);
        const uint64_t size = static_cast<uint64_t>(arg.dims[d]);
        if (size && numel > capacity / size) numel = capacity + 1;  // saturate: surely out of range
        else numel *= size;
    }
    if (arg.offset > capacity || numel > capacity - arg.offset)
        fail("%s %u (%s) reads past its buffer: offset %llu + %llu elements > %llu", kind, i, name,
             static_cast<unsigned long long>(arg.offset), static_cast<unsigned long long>(numel),
             static_cast<unsigned long long>(capacity));
    return Tensor{static_cast<char*>(arg.buffer->data()) + arg.offset * 4, static_cast<int64_t>(numel), arg.ndim,
                  arg.dims};
}

void OpArgs::check_attrs_size(uint32_t need) const {
    if (!desc_.attrs || desc_.attrs_size < need)
        fail("attrs_size %u is smaller than the %u-byte attribute struct", desc_.attrs ? desc_.attrs_size : 0, need);
}

void OpArgs::same_numel(const Tensor& a, const char* a_name, const Tensor& b, const char* b_name) const {
    if (a.numel != b.numel) fail("%s has %lld elements but %s has %lld", a_name, ll(a.numel), b_name, ll(b.numel));
}

void OpArgs::check_scalar(const Tensor& t, const char* name) const {
    if (t.numel != 1) fail("%s must hold 1 element, got %lld", name, ll(t.numel));
}

void OpArgs::check_classification(const Tensor& logits, const Tensor& labels) const {
    if (logits.ndim != 2) fail("expects 2-D logits [N,C], got %u dims", logits.ndim);
    const int64_t n = logits.dims[0], c = logits.dims[1];
    if (c < 1 && n > 0) fail("logits have 0 classes");
    if (labels.numel != n) fail("labels hold %lld elements for %lld rows", ll(labels.numel), ll(n));
}

int OpArgs::check_activation(int32_t act) const {
    if (act < XYLEM_ACT_NONE || act > XYLEM_ACT_TANH) fail("unknown activation %d", act);
    return act;
}

void OpArgs::check_int(int64_t v, const char* what) const {
    if (v > INT32_MAX) fail("%s = %lld exceeds the cuBLAS/cuDNN limit of %d", what, ll(v), INT32_MAX);
}

}  // namespace xylem::cuda
