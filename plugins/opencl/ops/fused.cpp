// FUSED_ELEMENTWISE: the kit's rule (plugin_kit/fused.h), then the program's generated kernel
// (fused_codegen.cpp), built once per program structure and device and kept for the process;
// each stream keeps its own kernel object (clSetKernelArg is not thread-safe on one cl_kernel).
#include <algorithm>

#include "fused_codegen.h"
#include "opencl.h"
#include "xylem/plugin_kit/fused.h"

namespace xylem::opencl {

namespace {

// This stream's kernel for the program of `key`, the program built on the device's first use.
const xylem_stream_s::FusedKernel& fused_kernel(xylem_stream_s& s, const xylem_fused_attrs& at, uint32_t n_inputs,
                                                uint32_t n_outputs, uint64_t key) {
    const auto found = s.fused_kernels_.find(key);
    if (found != s.fused_kernels_.end()) return found->second;
    const std::string name = fused_kernel_name(key);
    char what[160];
    std::snprintf(what, sizeof what, "fused_elementwise program %s (%u instructions, %u inputs, %u outputs)",
                  name.c_str(), at.n_instrs, n_inputs, n_outputs);
    const cl_program program =
        s.dev_->fused_program(key, what, [&] { return fused_kernel_source(at, n_inputs, n_outputs, key).text; });
    cl_int err = CL_SUCCESS;
    const cl_kernel k = clCreateKernel(program, name.c_str(), &err);
    if (err != CL_SUCCESS) throw_cl(err, (std::string("clCreateKernel of ") + what).c_str());
    try {
        return s.fused_kernels_.emplace(key, xylem_stream_s::FusedKernel{k, fused_param_slots(at), name}).first->second;
    } catch (...) {
        clReleaseKernel(k);
        throw;
    }
}

}  // namespace

void op_fused_elementwise(const xylem_op_desc& desc, xylem_stream_s& s) {
    OpArgs a(desc, 0, XYLEM_FUSED_MAX_INPUTS, desc.n_outputs);
    const auto at = a.attrs<xylem_fused_attrs>();
    const uint32_t n_in = desc.n_inputs, n_out = desc.n_outputs;
    // Counts first (the kit's message), so the operand arrays below are in bounds.
    if (n_out < 1 || n_out > XYLEM_FUSED_MAX_OUTPUTS) plugin_kit::fused_program_check(a, at, n_in, n_out);
    if (n_out < 1 || n_out > XYLEM_FUSED_MAX_OUTPUTS) a.fail("%u outputs (1 to %d)", n_out, XYLEM_FUSED_MAX_OUTPUTS);
    Tensor in[XYLEM_FUSED_MAX_INPUTS], out[XYLEM_FUSED_MAX_OUTPUTS];
    for (uint32_t i = 0; i < n_in; ++i) in[i] = a.in(i, "input");
    for (uint32_t o = 0; o < n_out; ++o) out[o] = a.out(o, "output");
    const plugin_kit::FusedShape shape = plugin_kit::fused_check(a, at, in, n_in, out, n_out);

    plugin_kit::fused_check_sharing(a, at, in, n_in, out, n_out, overlap, [](const Tensor& x, const Tensor& y) {
        return x.mem == y.mem && x.off == y.off;
    });
    if (shape.numel() == 0) return;

    const uint64_t key = plugin_kit::fused_program_key(at, n_in, n_out);
    const xylem_stream_s::FusedKernel& k = fused_kernel(s, at, n_in, n_out, key);
    Kernel run(s, k.kernel, k.name.c_str());
    for (uint32_t i = 0; i < n_in; ++i) run.arg(in[i].mem).arg(in[i].off);
    for (uint32_t o = 0; o < n_out; ++o) run.arg(out[o].mem).arg(out[o].off);
    for (uint32_t p = 0; p < k.param_slots; ++p) run.arg(at.params[p]);
    run.arg(static_cast<cl_uint>(shape.numel())).arg(static_cast<cl_uint>(shape.cols));
    // 16 elements per item and step (fused_codegen.cpp), the grid capped as for every 1-D launch.
    run.run(chunks16(shape.numel()));
}

}  // namespace xylem::opencl
