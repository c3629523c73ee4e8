// Helpers shared by the typed op calls (op_calls.cpp, op_calls_conv.cpp): the shape-error
// message, the plugin kit's rules run on the core's shapes, and the descriptor built around a
// call's operands.
#pragma once

#include <array>
#include <cstdarg>
#include <cstdio>
#include <string>

#include "xylem/backend.h"
#include "xylem/error.h"
#include "xylem/plugin_kit/shapes.h"
#include "xylem/shape.h"
#include "xylem/tensor.h"

namespace xylem::ops::detail {

[[noreturn]] inline void shape_error(uint32_t op, const std::string& what) {
    throw Error(std::string("op ") + op_name(op) + ": " + what);
}

// The attrs argument of run() for ops without attributes.
struct NoAttrs {};
constexpr const NoAttrs* kNone = nullptr;

inline void expect_dtype(uint32_t op, const Tensor& t, const char* name, DType dtype) {
    if (t.dtype() != dtype) shape_error(op, std::string(name) + " must be " + dtype_name(dtype));
}

// The kit's Args for the core: a failed rule throws Error("op <name>: <the kit's message>"), the
// message every plugin gives for the same descriptor.
struct Rule {
    uint32_t op;
    [[noreturn]] __attribute__((format(printf, 2, 3))) void fail(const char* fmt, ...) const {
        char msg[400];
        va_list args;
        va_start(args, fmt);
        std::vsnprintf(msg, sizeof msg, fmt, args);
        va_end(args);
        shape_error(op, msg);
    }
};

// A shape as the kit's rules read an operand (ndim, dims, numel).
struct View {
    uint32_t ndim = 0;
    int64_t dims[XYLEM_MAX_DIMS] = {};
    int64_t numel = 1;

    View(uint32_t op, const Shape& s) : ndim(static_cast<uint32_t>(s.size())) {
        if (s.size() > XYLEM_MAX_DIMS)
            shape_error(op, "shape " + to_string(s) + " has more than " + std::to_string(XYLEM_MAX_DIMS) + " dims");
        for (uint32_t d = 0; d < ndim; ++d) numel *= dims[d] = s[d];
    }
};

// Runs `op` on `dev`; attrs may be null for ops without attributes.
template <size_t NI, size_t NO, class Attrs>
void run(Device& dev, uint32_t op, const std::array<xylem_tensor_arg, NI>& in,
         const std::array<xylem_tensor_arg, NO>& out, const Attrs* attrs) {
    const xylem_op_desc d{op, NI, NO, attrs ? static_cast<uint32_t>(sizeof(Attrs)) : 0u, in.data(), out.data(), attrs};
    dev.run(d);
}

}  // namespace xylem::ops::detail
