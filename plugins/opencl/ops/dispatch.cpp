// Op dispatch: the op enum -> host-glue table, op_run's error boundary, operand validation and
// kernel launches.
#include <algorithm>
#include <climits>
#include <cstdarg>
#include <cstdio>
#include <exception>
#include <new>

#include "opencl.h"

namespace xylem::opencl {

namespace {

constexpr OpFn kOps[] = {
    op_fill,          op_copy,           op_axpby,          op_mul,           op_gemm,
    op_linear_fwd,    op_bias_grad,      op_act_fwd,        op_act_bwd,       op_softmax_fwd,
    op_softmax_bwd,   op_xent_fwd,       op_xent_bwd,       op_nll_fwd,       op_nll_bwd,
    op_mse_fwd,       op_mse_bwd,        op_dropout_fwd,    op_sgd_update,    op_adam_update,
    op_accuracy,      op_conv2d_fwd,     op_conv2d_bwd_data, op_conv2d_bwd_filter, op_pool2d_fwd,
    op_pool2d_bwd,    op_batchnorm_fwd,  op_batchnorm_bwd,  op_gather_rows,
};
static_assert(sizeof kOps / sizeof kOps[0] == XYLEM_OP_COUNT_, "one kOps entry per xylem_op");

const char* dtype_name(uint32_t dtype) {
    return dtype == XYLEM_F32 ? "f32" : dtype == XYLEM_I32 ? "i32" : "unknown dtype";
}

// Items per work-group for 1-D launches, and how many groups per compute unit before the
// kernels' grid-stride loops take over.
constexpr size_t kGroup = 64;
constexpr size_t kGroupsPerUnit = 16;

}  // namespace

int32_t op_supported(xylem_framework_t, uint32_t op) { return op < XYLEM_OP_COUNT_ && kOps[op] ? 1 : 0; }

xylem_status op_run(xylem_framework_t, xylem_stream_t stream, const xylem_op_desc* desc) {
    if (!desc) return set_error(XYLEM_E_INVALID, "opencl: op_run: desc is NULL");
    if (!stream) return set_error(XYLEM_E_INVALID, "opencl: op_run: stream is NULL");
    if (desc->op >= XYLEM_OP_COUNT_ || !kOps[desc->op])
        return set_error(XYLEM_E_UNSUPPORTED, "opencl: op %u is not supported (this plugin knows ops 0..%d)", desc->op,
                         XYLEM_OP_COUNT_ - 1);
    try {
        kOps[desc->op](*desc, *stream);
        return XYLEM_OK;
    } catch (const OpError& e) {
        return e.status;
    } catch (const std::bad_alloc&) {
        return set_error(XYLEM_E_NO_MEMORY, "opencl: %s: out of host memory", xylem_op_name(desc->op));
    } catch (const std::exception& e) {
        return set_error(XYLEM_E_DEVICE, "opencl: %s: %s", xylem_op_name(desc->op), e.what());
    } catch (...) {
        return set_error(XYLEM_E_DEVICE, "opencl: %s: unknown exception", xylem_op_name(desc->op));
    }
}

// ---- kernels -------------------------------------------------------------------------------

cl_kernel stream_kernel(xylem_stream_s& s, Family f, const char* name) {
    for (auto& [n, k] : s.kernels_)
        if (n == name) return k;
    cl_int err = CL_SUCCESS;
    cl_kernel k = clCreateKernel(s.dev_->program(f), name, &err);
    if (err != CL_SUCCESS) {
        char what[160];
        std::snprintf(what, sizeof what, "clCreateKernel(%s) from kernels/%s.cl", name, family_name(f));
        throw_cl(err, what);
    }
    s.kernels_.emplace_back(name, k);
    return k;
}

size_t reduce_group(const xylem_stream_s& s) {
    size_t g = 256;  // the kernels' __local arrays hold 256
    while (g > s.dev_->max_work_group) g /= 2;
    return g;
}

Kernel::Kernel(xylem_stream_s& s, Family f, const char* name) : s_(s), k_(stream_kernel(s, f, name)), name_(name) {}

void Kernel::set(size_t size, const void* value) {
    const cl_int err = clSetKernelArg(k_, next_, size, value);
    if (err != CL_SUCCESS) {
        char what[128];
        std::snprintf(what, sizeof what, "clSetKernelArg(%s, %u)", name_, next_);
        throw_cl(err, what);
    }
    ++next_;
}

Kernel& Kernel::local(size_t bytes) {
    set(bytes, nullptr);
    return *this;
}

void Kernel::enqueue(size_t global, size_t local) {
    const cl_int err = clEnqueueNDRangeKernel(s_.queue_, k_, 1, nullptr, &global, &local, 0, nullptr, nullptr);
    if (err != CL_SUCCESS) {
        char what[128];
        std::snprintf(what, sizeof what, "enqueue %s (%zu x %zu)", name_, global / local, local);
        throw_cl(err, what);
    }
}

void Kernel::run(int64_t n) {
    if (n <= 0) return;
    const size_t group = std::min(kGroup, s_.dev_->max_work_group);
    const size_t want = (static_cast<size_t>(n) + group - 1) / group;
    const size_t groups = std::min(want, s_.dev_->compute_units * kGroupsPerUnit);
    enqueue(groups * group, group);
}

void Kernel::run_groups(int64_t n_groups, size_t group) {
    if (n_groups <= 0) return;
    enqueue(static_cast<size_t>(n_groups) * group, group);
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
    throw OpError{set_error(XYLEM_E_INVALID, "opencl: %s: %s", xylem_op_name(desc_.op), msg)};
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
    if (arg.offset + numel > static_cast<uint64_t>(INT_MAX))
        fail("%s %u (%s) spans %llu elements; this plugin's kernels index with 32-bit ints", kind, i, name,
             static_cast<unsigned long long>(arg.offset + numel));
    return Tensor{arg.buffer->mem_, static_cast<int32_t>(arg.offset), static_cast<int32_t>(numel), arg.ndim, arg.dims};
}

void OpArgs::check_attrs_size(uint32_t need) const {
    if (!desc_.attrs || desc_.attrs_size < need)
        fail("attrs_size %u is smaller than the %u-byte attribute struct", desc_.attrs ? desc_.attrs_size : 0, need);
}

void OpArgs::same_numel(const Tensor& a, const char* a_name, const Tensor& b, const char* b_name) const {
    if (a.numel != b.numel) fail("%s has %d elements but %s has %d", a_name, a.numel, b_name, b.numel);
}

void OpArgs::check_scalar(const Tensor& t, const char* name) const {
    if (t.numel != 1) fail("%s must hold 1 element, got %d", name, t.numel);
}

// Label values are checked on the device (see stream.cpp's error word): reading them here
// would wait for the queue on every loss.
void OpArgs::check_classification(const Tensor& logits, const Tensor& labels) const {
    if (logits.ndim != 2) fail("expects 2-D logits [N,C], got %u dims", logits.ndim);
    const int64_t n = logits.dims[0], c = logits.dims[1];
    if (c < 1 && n > 0) fail("logits have 0 classes");
    if (labels.numel != n) fail("labels hold %d elements for %lld rows", labels.numel, static_cast<long long>(n));
}

int OpArgs::check_activation(int32_t act) const {
    if (act < XYLEM_ACT_NONE || act > XYLEM_ACT_TANH) fail("unknown activation %d", act);
    return act;
}

}  // namespace xylem::opencl
