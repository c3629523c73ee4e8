// Plugin kit: fused_elementwise's program (ops.h, ABI 1.5): the rule every descriptor must meet, each
// opcode's arithmetic and its C text. Header-only C++17. The one home of the program's meaning:
//   - fused_check: the descriptor and program rule (the core runs it before it builds a descriptor,
//     every plugin when one arrives);
//   - fused_apply<T>: an opcode's arithmetic on T (float for executors, double for the reference);
//   - fused_expr: the opcode as a C expression over the helpers xf_<name>() that a code-generating
//     backend defines once in its kernel prelude (OpenCL C, CUDA C), so the generated code of every
//     backend spells each opcode the same way.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>

#include "xylem/ops.h"
#include "xylem/plugin_api.h"

namespace xylem::plugin_kit {

struct FusedOpcodeInfo {
    const char* name;
    int arity;  // registers read (a, b, c)
};

inline FusedOpcodeInfo fused_opcode_info(uint32_t op) {
#define XYLEM_FUSED_INFO_(number, ENUM, name, arity) {#name, arity},
    static const FusedOpcodeInfo table[] = {XYLEM_FUSED_OPCODE_LIST(XYLEM_FUSED_INFO_)};
#undef XYLEM_FUSED_INFO_
    static_assert(sizeof table / sizeof table[0] == XYLEM_FUSED_OPCODE_COUNT_, "opcode count");
    return op < XYLEM_FUSED_OPCODE_COUNT_ ? table[op] : FusedOpcodeInfo{"unknown", -1};
}

inline const char* fused_mode_name(uint32_t mode) {
    switch (mode) {
    case XYLEM_FUSED_FULL: return "full";
    case XYLEM_FUSED_ROW: return "row";
    case XYLEM_FUSED_COL: return "col";
    case XYLEM_FUSED_SCALAR: return "scalar";
    }
    return "unknown";
}

// The iteration space: rows x cols elements (cols = output 0's last dim; 1 for rank 0).
struct FusedShape {
    int64_t rows = 0, cols = 0;
    int64_t numel() const { return rows * cols; }
    // Elements input of `mode` holds.
    int64_t input_numel(uint32_t mode) const {
        return mode == XYLEM_FUSED_FULL ? rows * cols
               : mode == XYLEM_FUSED_ROW ? cols
               : mode == XYLEM_FUSED_COL ? rows
                                         : 1;
    }
};

// Checks the program alone (no operands): version, counts, every opcode and operand index, registers
// written before they are read, every output stored exactly once, no input read after the first
// output is written (so an input may alias its output exactly).
template <class Args>
void fused_program_check(const Args& a, const xylem_fused_attrs& at, uint32_t n_inputs, uint32_t n_outputs) {
    if (at.version != XYLEM_FUSED_VERSION)
        a.fail("program version %u is not known here (this build reads version %u)", at.version, XYLEM_FUSED_VERSION);
    if (at.n_instrs < 1 || at.n_instrs > XYLEM_FUSED_MAX_INSTRS)
        a.fail("program has %u instructions (1 to %d)", at.n_instrs, XYLEM_FUSED_MAX_INSTRS);
    if (at.n_regs < 1 || at.n_regs > XYLEM_FUSED_MAX_REGS)
        a.fail("program uses %u registers (1 to %d)", at.n_regs, XYLEM_FUSED_MAX_REGS);
    if (at.n_params > XYLEM_FUSED_MAX_PARAMS)
        a.fail("program has %u params (at most %d)", at.n_params, XYLEM_FUSED_MAX_PARAMS);
    if (n_inputs > XYLEM_FUSED_MAX_INPUTS) a.fail("%u inputs (at most %d)", n_inputs, XYLEM_FUSED_MAX_INPUTS);
    if (n_outputs < 1 || n_outputs > XYLEM_FUSED_MAX_OUTPUTS)
        a.fail("%u outputs (1 to %d)", n_outputs, XYLEM_FUSED_MAX_OUTPUTS);
    for (uint32_t i = 0; i < n_inputs; ++i)
        if (at.input_modes[i] > XYLEM_FUSED_SCALAR) a.fail("input %u has unknown mode %u", i, at.input_modes[i]);
    uint64_t defined = 0;  // bit r: register r written
    uint32_t stored = 0;   // bit o: output o written
    bool any_output = false;
    for (uint32_t i = 0; i < at.n_instrs; ++i) {
        const xylem_fused_instr& in = at.code[i];
        const FusedOpcodeInfo info = fused_opcode_info(in.op);
        if (info.arity < 0) a.fail("instruction %u has unknown opcode %u", i, in.op);
        const uint8_t regs[3] = {in.a, in.b, in.c};
        for (int k = 0; k < info.arity; ++k) {
            if (regs[k] >= at.n_regs) a.fail("instruction %u (%s) reads register %u of %u", i, info.name, regs[k], at.n_regs);
            if (!(defined >> regs[k] & 1))
                a.fail("instruction %u (%s) reads register %u before it is written", i, info.name, regs[k]);
        }
        switch (in.op) {
        case XYLEM_FUSED_INPUT:
            if (in.a >= n_inputs) a.fail("instruction %u reads input %u of %u", i, in.a, n_inputs);
            if (any_output) a.fail("instruction %u reads input %u after an output was written", i, in.a);
            break;
        case XYLEM_FUSED_PARAM:
            if (in.a >= at.n_params) a.fail("instruction %u reads param %u of %u", i, in.a, at.n_params);
            break;
        case XYLEM_FUSED_OUTPUT:
            if (in.dst >= n_outputs) a.fail("instruction %u writes output %u of %u", i, in.dst, n_outputs);
            if (stored >> in.dst & 1) a.fail("instruction %u writes output %u a second time", i, in.dst);
            stored |= 1u << in.dst;
            any_output = true;
            continue;  // dst names an output, not a register
        default: break;
        }
        if (in.dst >= at.n_regs) a.fail("instruction %u (%s) writes register %u of %u", i, info.name, in.dst, at.n_regs);
        defined |= uint64_t{1} << in.dst;
    }
    for (uint32_t o = 0; o < n_outputs; ++o)
        if (!(stored >> o & 1)) a.fail("output %u is never written", o);
}

// The whole rule: the program, then the operands against the iteration space (f32 tensors with
// ndim, dims and numel). Returns rows and cols.
template <class Args, class T>
FusedShape fused_check(const Args& a, const xylem_fused_attrs& at, const T* inputs, uint32_t n_inputs,
                       const T* outputs, uint32_t n_outputs) {
    fused_program_check(a, at, n_inputs, n_outputs);
    const T& o0 = outputs[0];
    FusedShape s;
    s.cols = o0.ndim ? o0.dims[o0.ndim - 1] : 1;
    s.rows = s.cols ? o0.numel / s.cols : 0;
    if (s.cols == 0) {  // empty last axis: rows from the leading dims
        s.rows = 1;
        for (uint32_t d = 0; d + 1 < o0.ndim; ++d) s.rows *= o0.dims[d];
    }
    for (uint32_t o = 1; o < n_outputs; ++o)
        if (outputs[o].numel != s.numel())
            a.fail("output %u has %lld elements but output 0 has %lld", o, static_cast<long long>(outputs[o].numel),
                   static_cast<long long>(s.numel()));
    for (uint32_t i = 0; i < n_inputs; ++i) {
        const int64_t want = s.input_numel(at.input_modes[i]);
        if (inputs[i].numel != want)
            a.fail("input %u (%s) has %lld elements; the iteration space [%lld, %lld] needs %lld", i,
                   fused_mode_name(at.input_modes[i]), static_cast<long long>(inputs[i].numel),
                   static_cast<long long>(s.rows), static_cast<long long>(s.cols), static_cast<long long>(want));
    }
    return s;
}

// The memory-sharing rule, checked by each plugin on its own tensors (the core cannot see
// addresses): every element's inputs are read before its outputs are written, so an input may be
// an output's exact elements read in FULL mode (an in-place update); any other overlap would read
// another element's result, and outputs share nothing. `overlap(a, b)` says whether two operands
// share any byte and `same_start(a, b)` whether they begin at the same element (the plugin's notions
// of both); fused_check has already made a FULL input as long as the outputs.
template <class Args, class T, class Overlap, class SameStart>
void fused_check_sharing(const Args& a, const xylem_fused_attrs& at, const T* inputs, uint32_t n_inputs,
                         const T* outputs, uint32_t n_outputs, Overlap overlap, SameStart same_start) {
    for (uint32_t o = 0; o < n_outputs; ++o)
        for (uint32_t p = o + 1; p < n_outputs; ++p)
            if (overlap(outputs[o], outputs[p])) a.fail("output %u overlaps output %u", o, p);
    for (uint32_t i = 0; i < n_inputs; ++i)
        for (uint32_t o = 0; o < n_outputs; ++o)
            if (overlap(inputs[i], outputs[o]) &&
                !(at.input_modes[i] == XYLEM_FUSED_FULL && same_start(inputs[i], outputs[o])))
                a.fail("input %u (%s) overlaps output %u; an input may share an output's memory only exactly "
                       "(same offset, full mode)",
                       i, fused_mode_name(at.input_modes[i]), o);
}

// GELU's two forms and their derivatives: the one home of the formulas (act_fwd/act_bwd of
// XYLEM_ACT_GELU and XYLEM_ACT_GELU_TANH, the fused opcodes, the float64 reference). Code-generating
// backends write the same formulas in their kernels' language.
template <class V>
inline V gelu_value(V x) {
    return V(0.5) * x * (V(1) + std::erf(x * V(0.70710678118654752440)));
}
template <class V>
inline V gelu_derivative(V x) {  // Phi(x) + x*phi(x)
    return V(0.5) * (V(1) + std::erf(x * V(0.70710678118654752440))) +
           x * std::exp(V(-0.5) * x * x) * V(0.39894228040143267794);
}
template <class V>
inline V gelu_tanh_value(V x) {
    const V u = V(0.79788456080286535588) * (x + V(0.044715) * x * x * x);
    return V(0.5) * x * (V(1) + std::tanh(u));
}
template <class V>
inline V gelu_tanh_derivative(V x) {
    const V u = V(0.79788456080286535588) * (x + V(0.044715) * x * x * x);
    const V t = std::tanh(u);
    return V(0.5) * (V(1) + t) + V(0.5) * x * (V(1) - t * t) * V(0.79788456080286535588) * (V(1) + V(0.134145) * x * x);
}

// One opcode's arithmetic (not INPUT, PARAM, CONST or OUTPUT, which move values).
template <class V>
inline V fused_apply(uint32_t op, V a, V b, V c) {
    using std::exp;
    using std::isnan;
    using std::log;
    using std::sqrt;
    using std::tanh;
    const V nan = std::numeric_limits<V>::quiet_NaN();
    switch (op) {
    case XYLEM_FUSED_ADD: return a + b;
    case XYLEM_FUSED_SUB: return a - b;
    case XYLEM_FUSED_MUL: return a * b;
    case XYLEM_FUSED_DIV: return a / b;
    case XYLEM_FUSED_MIN: return isnan(a) || isnan(b) ? nan : (b < a ? b : a);
    case XYLEM_FUSED_MAX: return isnan(a) || isnan(b) ? nan : (b > a ? b : a);
    case XYLEM_FUSED_NEG: return -a;
    case XYLEM_FUSED_ABS: return a < V(0) ? -a : a;  // keeps NaN
    case XYLEM_FUSED_EXP: return exp(a);
    case XYLEM_FUSED_LOG: return log(a);
    case XYLEM_FUSED_SQRT: return sqrt(a);
    case XYLEM_FUSED_RSQRT: return V(1) / sqrt(a);
    case XYLEM_FUSED_TANH: return tanh(a);
    case XYLEM_FUSED_SIGMOID: return V(1) / (V(1) + exp(-a));
    case XYLEM_FUSED_RELU: return a > V(0) ? a : V(0);
    case XYLEM_FUSED_FMA: return a * b + c;
    case XYLEM_FUSED_SELECT: return a != V(0) ? b : c;
    case XYLEM_FUSED_GT: return a > b ? V(1) : V(0);
    case XYLEM_FUSED_GE: return a >= b ? V(1) : V(0);
    case XYLEM_FUSED_EQ: return a == b ? V(1) : V(0);
    case XYLEM_FUSED_TANH_GRAD: return a * (V(1) - b * b);
    case XYLEM_FUSED_SIGMOID_GRAD: return a * b * (V(1) - b);
    case XYLEM_FUSED_RELU_GRAD: return b > V(0) ? a : V(0);
    case XYLEM_FUSED_SQUARE: return a * a;
    case XYLEM_FUSED_RECIP: return V(1) / a;
    case XYLEM_FUSED_ERF: return std::erf(a);
    case XYLEM_FUSED_GELU: return gelu_value(a);
    case XYLEM_FUSED_GELU_TANH: return gelu_tanh_value(a);
    case XYLEM_FUSED_GELU_GRAD: return a * gelu_derivative(b);
    case XYLEM_FUSED_GELU_TANH_GRAD: return a * gelu_tanh_derivative(b);
    }
    return nan;
}

// The opcode as C text over its operands' texts: "xf_add(r1, r2)". Generated kernels define xf_<name>
// for every arithmetic opcode in their prelude (walking fused_opcode_info over the opcode list). Returns false for
// INPUT, PARAM, CONST and OUTPUT, whose text depends on the backend's addressing.
inline bool fused_expr(uint32_t op, const char* a, const char* b, const char* c, char* out, size_t cap) {
    const FusedOpcodeInfo info = fused_opcode_info(op);
    if (info.arity < 1 || op == XYLEM_FUSED_OUTPUT) return false;
    if (info.arity == 1) std::snprintf(out, cap, "xf_%s(%s)", info.name, a);
    else if (info.arity == 2) std::snprintf(out, cap, "xf_%s(%s, %s)", info.name, a, b);
    else std::snprintf(out, cap, "xf_%s(%s, %s, %s)", info.name, a, b, c);
    return true;
}

// A 64-bit FNV-1a hash of the program's structure (everything but the params' values and the
// unused tail), with the input modes: the key of a compiled-kernel cache. Two programs with the same
// key generate the same code.
inline uint64_t fused_program_key(const xylem_fused_attrs& at, uint32_t n_inputs, uint32_t n_outputs) {
    uint64_t h = 1469598103934665603ull;
    auto mix = [&h](const void* p, size_t n) {
        const unsigned char* b = static_cast<const unsigned char*>(p);
        for (size_t i = 0; i < n; ++i) h = (h ^ b[i]) * 1099511628211ull;
    };
    const uint32_t head[5] = {at.version, at.n_instrs, at.n_regs, n_inputs, n_outputs};
    mix(head, sizeof head);
    mix(at.input_modes, n_inputs < XYLEM_FUSED_MAX_INPUTS ? n_inputs : XYLEM_FUSED_MAX_INPUTS);
    const uint32_t n = at.n_instrs < XYLEM_FUSED_MAX_INSTRS ? at.n_instrs : XYLEM_FUSED_MAX_INSTRS;
    for (uint32_t i = 0; i < n; ++i) {
        const xylem_fused_instr& in = at.code[i];
        const unsigned char f[5] = {in.op, in.dst, in.a, in.b, in.c};
        mix(f, sizeof f);
        if (in.op == XYLEM_FUSED_CONST) mix(&in.imm, sizeof in.imm);
    }
    return h;
}

}  // namespace xylem::plugin_kit
