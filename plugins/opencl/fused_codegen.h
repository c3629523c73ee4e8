// OpenCL C for fused_elementwise programs (ops.h, ABI 1.5): one kernel per program structure.
// The text depends only on what plugin_kit::fused_program_key hashes (instructions, constants,
// input modes, counts), never on params, offsets or sizes, so one build serves every run of a
// structure. No OpenCL calls here: text in, text out.
#pragma once

#include <cstdint>
#include <string>

#include "xylem/ops.h"

namespace xylem::opencl {

// The generated kernel's arguments, in order:
//   for each input i:  __global const float* in<i>, int in<i>_off
//   for each output o: __global float* out<o>, int out<o>_off
//   for each params slot k < fused_param_slots(): float p<k>
//   uint n (elements), uint cols (the iteration space's last dim)
// An input may be the same buffer as an output (exact aliasing): nothing is `restrict`.
struct FusedKernelSource {
    std::string name;  // "xylem_fused_<key in hex>"
    std::string text;  // the whole program: helper prelude, then the kernel
    uint32_t param_slots = 0;
};

// "xylem_fused_<key in hex>": the kernel's name, and the program's in messages.
std::string fused_kernel_name(uint64_t key);

// The params slots the kernel takes: one past the highest index a PARAM instruction reads.
uint32_t fused_param_slots(const xylem_fused_attrs& at);

// The kernel for a program that passed plugin_kit::fused_check. Throws std::logic_error naming the
// opcode when this file has no OpenCL C helper for it (an opcode added to ops.h but not here).
FusedKernelSource fused_kernel_source(const xylem_fused_attrs& at, uint32_t n_inputs, uint32_t n_outputs, uint64_t key);

}  // namespace xylem::opencl
