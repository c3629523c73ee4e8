// Helpers shared by the typed op calls (op_calls.cpp, op_calls_conv.cpp): the shape-error
// message and the descriptor built around a call's operands.
#pragma once

#include <array>
#include <string>

#include "xylem/backend.h"
#include "xylem/error.h"

namespace xylem::ops::detail {

[[noreturn]] inline void shape_error(uint32_t op, const std::string& what) {
    throw Error(std::string("op ") + op_name(op) + ": " + what);
}

// Runs `op` on `dev`; attrs may be null for ops without attributes.
template <size_t NI, size_t NO, class Attrs>
void run(Device& dev, uint32_t op, const std::array<xylem_tensor_arg, NI>& in,
         const std::array<xylem_tensor_arg, NO>& out, const Attrs* attrs) {
    const xylem_op_desc d{op, NI, NO, attrs ? static_cast<uint32_t>(sizeof(Attrs)) : 0u, in.data(), out.data(), attrs};
    dev.run(d);
}

}  // namespace xylem::ops::detail
