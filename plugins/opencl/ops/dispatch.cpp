// Op dispatch: the op enum -> host-glue table, op_run (checks and error boundary from the plugin
// kit) and kernel launches.
#include <algorithm>
#include <cstdio>

#include "opencl.h"

namespace xylem::opencl {

namespace {

constexpr auto kOps = plugin_kit::op_table<OpFn>({XYLEM_OPENCL_OPS(XYLEM_PLUGIN_KIT_OP_ENTRY)});

// Items per work-group for 1-D launches, and the grid: at least kGroupsPerUnit groups per compute
// unit, and enough that each item's grid-stride loop runs at most kItemsPerThread times. A fixed
// cap alone made every item stride across the whole tensor on large ones: on PoCL (CPU) an 8-op
// chain over 1M floats took 115 ms that way against 20 ms with this grid, while small tensors keep
// the few groups that suit them.
constexpr size_t kGroup = 64;
constexpr size_t kGroupsPerUnit = 16;
constexpr size_t kItemsPerThread = 8;

}  // namespace

int32_t op_supported(xylem_framework_t, uint32_t op) { return kOps.supports(op); }

// Every descriptor of a supported op runs; the ABI 1.11 batch norm's ReLU only needs saying so
// (the core sends it only to a plugin that accepts it).
int32_t op_accepts(xylem_framework_t, const xylem_op_desc* desc) {
    return !desc || plugin_kit::batchnorm_activation_accepted(*desc) ? 1 : 0;
}

xylem_status op_run(xylem_framework_t, xylem_stream_t stream, const xylem_op_desc* desc) {
    return plugin_kit::guarded_op_run<Plugin>(desc, stream, kOps.fn, [&](OpFn op) { op(*desc, *stream); });
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

void Kernel::enqueue(cl_uint dims, const size_t* global, const size_t* local) {
    const cl_int err = clEnqueueNDRangeKernel(s_.queue_, k_, dims, nullptr, global, local, 0, nullptr, nullptr);
    if (err != CL_SUCCESS) {
        char what[160];
        std::snprintf(what, sizeof what, "enqueue %s (%zu x %zu x %zu items in groups of %zu x %zu x %zu)", name_,
                      global[0], global[1], global[2], local[0], local[1], local[2]);
        throw_cl(err, what);
    }
}

void Kernel::run_nd(const size_t global[3], const size_t local[3]) {
    if (global[0] == 0 || global[1] == 0 || global[2] == 0) return;
    enqueue(3, global, local);
}

void Kernel::run(int64_t n) {
    if (n <= 0) return;
    const size_t group = std::min(kGroup, s_.dev_->max_work_group);
    const size_t want = (static_cast<size_t>(n) + group - 1) / group;
    const size_t groups = std::min(want, std::max(s_.dev_->compute_units * kGroupsPerUnit, want / kItemsPerThread));
    enqueue(groups * group, group);
}

size_t Kernel::group_limit() const {
    size_t limit = 0;
    const cl_int err = clGetKernelWorkGroupInfo(k_, s_.dev_->id, CL_KERNEL_WORK_GROUP_SIZE, sizeof limit, &limit, nullptr);
    if (err != CL_SUCCESS) {
        char what[128];
        std::snprintf(what, sizeof what, "clGetKernelWorkGroupInfo(%s)", name_);
        throw_cl(err, what);
    }
    return std::max<size_t>(1, std::min(limit, s_.dev_->max_work_group));
}

void Kernel::run_groups(int64_t n_groups, size_t group) {
    if (n_groups <= 0) return;
    enqueue(static_cast<size_t>(n_groups) * group, group);
}

}  // namespace xylem::opencl
