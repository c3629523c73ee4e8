// Each fused_elementwise opcode's arithmetic in float64, written from its definition in ops.h and
// nothing else: the tests' reference for every fused program (tests/ops/fused_programs.h). It
// must not call plugin_kit::fused_apply, which is the arithmetic the native interpreter and the
// code generators run: a reference that shares that code cannot see a wrong formula in it. The
// kit's table is checked against this one (FusedReference.KitArithmeticMatchesTheIndependentTable).
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <stdexcept>
#include <string>

#include "support/reference.h"  // ref::gelu and its kin, written from ops.h
#include "xylem/ops.h"

namespace xylem::test {

// Registers an opcode reads (0 for the movers INPUT, PARAM, CONST; OUTPUT reads one).
inline int fused_reference_arity(uint32_t op) {
    switch (op) {
    case XYLEM_FUSED_INPUT: case XYLEM_FUSED_PARAM: case XYLEM_FUSED_CONST: return 0;
    case XYLEM_FUSED_OUTPUT: case XYLEM_FUSED_NEG: case XYLEM_FUSED_ABS: case XYLEM_FUSED_EXP: case XYLEM_FUSED_LOG:
    case XYLEM_FUSED_SQRT: case XYLEM_FUSED_RSQRT: case XYLEM_FUSED_TANH: case XYLEM_FUSED_SIGMOID:
    case XYLEM_FUSED_RELU: case XYLEM_FUSED_SQUARE: case XYLEM_FUSED_RECIP: case XYLEM_FUSED_ERF:
    case XYLEM_FUSED_GELU: case XYLEM_FUSED_GELU_TANH: return 1;
    case XYLEM_FUSED_FMA: case XYLEM_FUSED_SELECT: return 3;
    default: return 2;
    }
}

// r = op(a, b, c) for an arithmetic opcode (not a mover).
inline double fused_reference_apply(uint32_t op, double a, double b, double c) {
    static_assert(XYLEM_FUSED_OPCODE_COUNT_ == 34, "a new opcode needs its formula here, from ops.h");
    const double nan = std::numeric_limits<double>::quiet_NaN();
    switch (op) {
    case XYLEM_FUSED_ADD: return a + b;
    case XYLEM_FUSED_SUB: return a - b;
    case XYLEM_FUSED_MUL: return a * b;
    case XYLEM_FUSED_DIV: return a / b;
    case XYLEM_FUSED_MIN: return std::isnan(a) || std::isnan(b) ? nan : std::fmin(a, b);
    case XYLEM_FUSED_MAX: return std::isnan(a) || std::isnan(b) ? nan : std::fmax(a, b);
    case XYLEM_FUSED_NEG: return -a;
    case XYLEM_FUSED_ABS: return std::fabs(a);
    case XYLEM_FUSED_EXP: return std::exp(a);
    case XYLEM_FUSED_LOG: return std::log(a);
    case XYLEM_FUSED_SQRT: return std::sqrt(a);
    case XYLEM_FUSED_RSQRT: return 1.0 / std::sqrt(a);
    case XYLEM_FUSED_TANH: return std::tanh(a);
    case XYLEM_FUSED_SIGMOID: return 1.0 / (1.0 + std::exp(-a));
    case XYLEM_FUSED_RELU: return a > 0.0 ? a : 0.0;  // NaN gives 0
    case XYLEM_FUSED_FMA: return a * b + c;
    case XYLEM_FUSED_SELECT: return a != 0.0 ? b : c;
    case XYLEM_FUSED_GT: return a > b ? 1.0 : 0.0;
    case XYLEM_FUSED_GE: return a >= b ? 1.0 : 0.0;
    case XYLEM_FUSED_EQ: return a == b ? 1.0 : 0.0;
    case XYLEM_FUSED_TANH_GRAD: return a * (1.0 - b * b);
    case XYLEM_FUSED_SIGMOID_GRAD: return a * b * (1.0 - b);
    case XYLEM_FUSED_RELU_GRAD: return b > 0.0 ? a : 0.0;
    case XYLEM_FUSED_SQUARE: return a * a;
    case XYLEM_FUSED_RECIP: return 1.0 / a;
    case XYLEM_FUSED_ERF: return std::erf(a);
    case XYLEM_FUSED_GELU: return ref::gelu(a);
    case XYLEM_FUSED_GELU_TANH: return ref::gelu_tanh(a);
    case XYLEM_FUSED_GELU_GRAD: return a * ref::gelu_grad(b);
    case XYLEM_FUSED_GELU_TANH_GRAD: return a * ref::gelu_tanh_grad(b);
    }
    throw std::invalid_argument("fused reference: opcode " + std::to_string(op) + " is not arithmetic");
}

}  // namespace xylem::test
