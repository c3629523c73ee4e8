// fused_elementwise's CUDA C: the text of one program's kernel. Plain host code (no CUDA calls), so
// tests/cuda checks it, and NVRTC compiles it, on a machine without a GPU. The program's meaning is
// plugin_kit/fused.h's; this file only spells it in CUDA C.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "xylem/ops.h"

namespace xylem::cuda::fused {

// The generated kernel's one argument, passed by value: a launch (and a graph captured around it)
// copies every pointer and param into the kernel node, so a replay needs nothing from the host.
// The generated struct XfArgs has this layout; the generated code static_asserts the size.
struct KernelArgs {
    const float* in[XYLEM_FUSED_MAX_INPUTS];  // each input's first element (buffer + offset)
    float* out[XYLEM_FUSED_MAX_OUTPUTS];
    int64_t rows, cols;                       // the iteration space (fused.h's FusedShape)
    float param[XYLEM_FUSED_MAX_PARAMS];      // all of them, whatever the program's n_params
};

constexpr int kThreadsPerBlock = 256;  // the generated kernel's __launch_bounds__

// The CUDA C definition of the helper xf_<name> for an arithmetic opcode (fused_expr's text calls
// it), or nullptr for INPUT, PARAM, CONST, OUTPUT and unknown opcodes.
const char* helper_definition(uint32_t op);

// Every helper, one definition per arithmetic opcode: the kernel's prelude.
std::string prelude();

// "xylem_fused_<16 hex digits of fused_program_key>".
std::string kernel_name(uint64_t key);

// A float as CUDA C text that denotes exactly its bits: a hex float literal ("0x1.8p+1f") when
// finite, __int_as_float(0x7f800000) for infinities and NaNs (their payload kept).
std::string float_literal(float v);

// The whole translation unit of `at`'s kernel, named `name`. `at` must have passed
// plugin_kit::fused_program_check with these counts (the generator trusts its indices).
std::string kernel_source(const xylem_fused_attrs& at, uint32_t n_inputs, uint32_t n_outputs, const std::string& name);

// The program in words for error messages, at most `cap` characters:
// "3 inputs (full, row, scalar), 1 output, 7 instructions: r0=in0 r1=in1 r2=add(r0,r1) out0=r2".
std::string describe(const xylem_fused_attrs& at, uint32_t n_inputs, uint32_t n_outputs, size_t cap = 200);

}  // namespace xylem::cuda::fused
