// OpenCL C for fused_elementwise programs: a prelude defining xf_<name> for every arithmetic
// opcode (the names plugin_kit::fused_expr calls), then one kernel whose body is the program,
// one statement per instruction, over private float16 registers (16 elements per step).
#include "fused_codegen.h"

#include <cmath>
#include <cstdio>
#include <stdexcept>

#include "xylem/plugin_kit/fused.h"

namespace xylem::opencl {

namespace {

// Each arithmetic opcode's body over its operands a, b, c, 16 lanes at a time (XV is float16,
// XI int16): plugin_kit::fused_apply spelled in OpenCL C, operation for operation (so float
// rounding matches an executor that runs fused_apply on floats), with select() where a scalar
// `?:` would not take a vector condition. FP_CONTRACT is off in the prelude: a*b + c stays two
// roundings, as in the kit.
const char* helper_body(uint32_t op) {
    switch (op) {
    case XYLEM_FUSED_ADD: return "a + b";
    case XYLEM_FUSED_SUB: return "a - b";
    case XYLEM_FUSED_MUL: return "a * b";
    case XYLEM_FUSED_DIV: return "a / b";
    case XYLEM_FUSED_MIN: return "select(select(a, b, b < a), (XV)(NAN), isnan(a) | isnan(b))";
    case XYLEM_FUSED_MAX: return "select(select(a, b, b > a), (XV)(NAN), isnan(a) | isnan(b))";
    case XYLEM_FUSED_NEG: return "-a";
    case XYLEM_FUSED_ABS: return "select(a, -a, a < 0.0f)";
    case XYLEM_FUSED_EXP: return "exp(a)";
    case XYLEM_FUSED_LOG: return "log(a)";
    case XYLEM_FUSED_SQRT: return "sqrt(a)";
    case XYLEM_FUSED_RSQRT: return "1.0f / sqrt(a)";
    case XYLEM_FUSED_TANH: return "tanh(a)";
    case XYLEM_FUSED_SIGMOID: return "1.0f / (1.0f + exp(-a))";
    case XYLEM_FUSED_RELU: return "select((XV)(0.0f), a, a > 0.0f)";
    case XYLEM_FUSED_FMA: return "a * b + c";
    case XYLEM_FUSED_SELECT: return "select(c, b, a != 0.0f)";
    case XYLEM_FUSED_GT: return "select((XV)(0.0f), (XV)(1.0f), a > b)";
    case XYLEM_FUSED_GE: return "select((XV)(0.0f), (XV)(1.0f), a >= b)";
    case XYLEM_FUSED_EQ: return "select((XV)(0.0f), (XV)(1.0f), a == b)";
    case XYLEM_FUSED_TANH_GRAD: return "a * (1.0f - b * b)";
    case XYLEM_FUSED_SIGMOID_GRAD: return "a * b * (1.0f - b)";
    case XYLEM_FUSED_RELU_GRAD: return "select((XV)(0.0f), a, b > 0.0f)";
    case XYLEM_FUSED_SQUARE: return "a * a";
    case XYLEM_FUSED_RECIP: return "1.0f / a";
    // GELU: plugin_kit/fused.h's gelu_value, gelu_tanh_value and derivatives (the derivatives are
    // the prelude's xg_ functions, below). The tanh form without tanh: 0.5x(1 + tanh(u)) =
    // x/(1 + exp(-2u)), as kernels/common.cl says why (an OpenCL tanh need not reach +-1).
    case XYLEM_FUSED_ERF: return "xg_erf(a)";
    case XYLEM_FUSED_GELU: return "0.5f * a * (1.0f + xg_erf(a * 0.70710678118654752440f))";
    case XYLEM_FUSED_GELU_TANH: return "a / (1.0f + exp(-2.0f * (0.79788456080286535588f * (a + 0.044715f * a * a * a))))";
    case XYLEM_FUSED_GELU_GRAD: return "a * xg_gelu_derivative(b)";
    case XYLEM_FUSED_GELU_TANH_GRAD: return "a * xg_gelu_tanh_derivative(b)";
    }
    return nullptr;  // INPUT, PARAM, CONST, OUTPUT move values; an unknown opcode has no helper
}

bool is_arithmetic(uint32_t op) {
    return op != XYLEM_FUSED_INPUT && op != XYLEM_FUSED_PARAM && op != XYLEM_FUSED_CONST && op != XYLEM_FUSED_OUTPUT;
}

// The prelude, the same for every program: built once. Every value is a float16 of 16 elements
// (PoCL's CPU device runs a scalar exp or erf ~15x slower than the float16 form, and vectorizes a
// one-element-per-item kernel poorly); the loads and stores below pad and trim a chunk at the end
// or across a row, so every element takes the same vector path wherever it sits.
const std::string& prelude() {
    static const std::string text = [] {
        std::string s =
            "/* xylem fused_elementwise: helpers with plugin_kit/fused.h's semantics, 16 lanes */\n"
            "#pragma OPENCL FP_CONTRACT OFF\n"
            "#define XV float16\n"
            // kernels/common.cl's erf16 (Juffa's minimax erf, the native plugin's): within about
            // 1 ulp like PoCL's erf, at a sixth of its time; here with separate roundings.
            "inline XV xg_erf(XV x) {\n"
            "    const XV t = fabs(x), s = x * x;\n"
            "    XV r = -1.72853470e-5f * t + 3.83197126e-4f;\n"
            "    const XV u = -3.88396438e-3f * t + 2.42546219e-2f;\n"
            "    r = r * s + u;\n"
            "    r = r * t - 1.06777877e-1f;\n"
            "    r = r * t - 6.34846687e-1f;\n"
            "    r = r * t - 1.28717512e-1f;\n"
            "    r = r * t - t;\n"
            "    const XV big = copysign(1.0f - exp(r), x);\n"
            "    XV q = -5.96761703e-4f;\n"
            "    q = q * s + 4.99119423e-3f;\n"
            "    q = q * s - 2.67681349e-2f;\n"
            "    q = q * s + 1.12819925e-1f;\n"
            "    q = q * s - 3.76125336e-1f;\n"
            "    q = q * s + 1.28379166e-1f;\n"
            "    q = q * x + x;\n"
            "    return select(q, big, t > 0.927734375f);\n"
            "}\n"
            // fused.h's gelu_derivative and gelu_tanh_derivative, operation for operation except
            // in the tanh form: 0.5(1 + t) = 1/(1 + exp(-2u)), 1 - t*t = 4e/(1 + e)^2 with
            // e = exp(-2|u|) (kernels/common.cl's act_bwd does the same, and says why).
            "inline XV xg_gelu_derivative(XV x) {\n"
            "    return 0.5f * (1.0f + xg_erf(x * 0.70710678118654752440f)) +\n"
            "           x * exp(-0.5f * x * x) * 0.39894228040143267794f;\n"
            "}\n"
            "inline XV xg_gelu_tanh_derivative(XV x) {\n"
            "    const XV u = 0.79788456080286535588f * (x + 0.044715f * x * x * x);\n"
            "    const XV e = exp(-2.0f * fabs(u));\n"
            "    const XV half_1pt = 1.0f / (1.0f + exp(-2.0f * u));\n"
            "    const XV sech2 = 4.0f * e / ((1.0f + e) * (1.0f + e));\n"
            "    return half_1pt + 0.5f * x * sech2 * 0.79788456080286535588f * (1.0f + 0.134145f * x * x);\n"
            "}\n"
            // A chunk of 16 elements at p of which `left` exist (zeros past them), and back.
            "inline XV xl_full(__global const float* p, uint left) {\n"
            "    if (left >= 16) return vload16(0, p);\n"
            "    float t[16];\n"
            "    for (uint e = 0; e < 16; ++e) t[e] = e < left ? p[e] : 0.0f;\n"
            "    return vload16(0, t);\n"
            "}\n"
            "inline void xl_store(__global float* p, uint left, XV v) {\n"
            "    if (left >= 16) { vstore16(v, 0, p); return; }\n"
            "    float t[16];\n"
            "    vstore16(v, 0, t);\n"
            "    for (uint e = 0; e < left; ++e) p[e] = t[e];\n"
            "}\n"
            // A row input (p[col]) and a column input (p[row]) for the chunk that starts at
            // (row, col): one vector load or broadcast when the chunk stays in its row.
            "inline XV xl_row(__global const float* p, uint col, uint cols, uint left) {\n"
            "    if (left >= 16 && col + 16 <= cols) return vload16(0, p + col);\n"
            "    float t[16];\n"
            "    for (uint e = 0; e < 16; ++e, col = col + 1 == cols ? 0 : col + 1) t[e] = e < left ? p[col] : 0.0f;\n"
            "    return vload16(0, t);\n"
            "}\n"
            "inline XV xl_col(__global const float* p, uint row, uint col, uint cols, uint left) {\n"
            "    if (col + 16 <= cols) return (XV)(p[row]);\n"
            "    float t[16];\n"
            "    for (uint e = 0; e < 16; ++e) {\n"
            "        t[e] = e < left ? p[row] : 0.0f;\n"
            "        if (++col == cols) col = 0, ++row;\n"
            "    }\n"
            "    return vload16(0, t);\n"
            "}\n";
        static const char* const params[] = {"", "XV a", "XV a, XV b", "XV a, XV b, XV c"};
        for (uint32_t op = 0; op < XYLEM_FUSED_OPCODE_COUNT_; ++op) {
            if (!is_arithmetic(op)) continue;
            const plugin_kit::FusedOpcodeInfo info = plugin_kit::fused_opcode_info(op);
            const char* body = helper_body(op);
            if (!body || info.arity < 1 || info.arity > 3)
                throw std::logic_error(std::string("opcode ") + info.name + " has no OpenCL C helper in this plugin");
            s += "inline XV xf_";
            s += info.name;
            s += "(";
            s += params[info.arity];
            s += ") { return ";
            s += body;
            s += "; }\n";
        }
        return s;
    }();
    return text;
}

// A float literal that reads back as exactly v: hex float with the f suffix; inf and NaN by name.
std::string float_literal(float v) {
    if (std::isnan(v)) return "NAN";
    if (std::isinf(v)) return v < 0 ? "(-INFINITY)" : "INFINITY";
    char buf[48];
    std::snprintf(buf, sizeof buf, std::signbit(v) ? "(%af)" : "%af", static_cast<double>(v));
    return buf;
}

std::string reg(uint32_t r) {
    char buf[16];
    std::snprintf(buf, sizeof buf, "r%u", r);
    return buf;
}

}  // namespace

std::string fused_kernel_name(uint64_t key) {
    char name[40];
    std::snprintf(name, sizeof name, "xylem_fused_%016llx", static_cast<unsigned long long>(key));
    return name;
}

uint32_t fused_param_slots(const xylem_fused_attrs& at) {
    uint32_t slots = 0;
    for (uint32_t i = 0; i < at.n_instrs && i < XYLEM_FUSED_MAX_INSTRS; ++i)
        if (at.code[i].op == XYLEM_FUSED_PARAM && at.code[i].a + 1u > slots) slots = at.code[i].a + 1u;
    return slots;
}

FusedKernelSource fused_kernel_source(const xylem_fused_attrs& at, uint32_t n_inputs, uint32_t n_outputs,
                                      uint64_t key) {
    FusedKernelSource k;
    k.name = fused_kernel_name(key);
    k.param_slots = fused_param_slots(at);

    std::string sig = "__kernel void " + k.name + "(";
    std::string sep;
    for (uint32_t i = 0; i < n_inputs; ++i) {
        sig += sep + "__global const float* in" + std::to_string(i) + ", int in" + std::to_string(i) + "_off";
        sep = ", ";
    }
    for (uint32_t o = 0; o < n_outputs; ++o) {
        sig += sep + "__global float* out" + std::to_string(o) + ", int out" + std::to_string(o) + "_off";
        sep = ", ";
    }
    for (uint32_t p = 0; p < k.param_slots; ++p) sig += sep + "float p" + std::to_string(p), sep = ", ";
    sig += sep + "uint n, uint cols)";

    // Row and column only when a broadcast input needs them (a division per element otherwise).
    bool need_row_col = false;
    for (uint32_t i = 0; i < at.n_instrs; ++i)
        if (at.code[i].op == XYLEM_FUSED_INPUT) {
            const uint8_t mode = at.input_modes[at.code[i].a];
            need_row_col = need_row_col || mode == XYLEM_FUSED_ROW || mode == XYLEM_FUSED_COL;
        }

    // 16 elements per step (a float16 per register), a grid-stride loop over the chunks: the host
    // caps the grid (Kernel::run) so an item takes a few contiguous chunks, not one element.
    std::string body = "    for (uint i = 16 * (uint)get_global_id(0); i < n; i += 16 * (uint)get_global_size(0)) {\n"
                       "        const uint left = n - i;\n";
    if (need_row_col) body += "        const uint row = i / cols, col = i - row * cols;\n";
    if (at.n_regs) {
        body += "        XV";
        for (uint32_t r = 0; r < at.n_regs; ++r) body += (r ? ", " : " ") + reg(r);
        body += ";\n";
    }
    char expr[160];
    for (uint32_t i = 0; i < at.n_instrs; ++i) {
        const xylem_fused_instr& in = at.code[i];
        const std::string a = reg(in.a), b = reg(in.b), c = reg(in.c);
        std::string line;
        switch (in.op) {
        case XYLEM_FUSED_INPUT: {
            const std::string src = "in" + std::to_string(in.a), base = src + " + " + src + "_off";
            const uint8_t mode = at.input_modes[in.a];
            const std::string value = mode == XYLEM_FUSED_FULL  ? "xl_full(" + base + " + i, left)"
                                      : mode == XYLEM_FUSED_ROW ? "xl_row(" + base + ", col, cols, left)"
                                      : mode == XYLEM_FUSED_COL ? "xl_col(" + base + ", row, col, cols, left)"
                                                                : "(XV)(" + src + "[" + src + "_off])";
            line = reg(in.dst) + " = " + value + ";";
            break;
        }
        case XYLEM_FUSED_PARAM: line = reg(in.dst) + " = (XV)(p" + std::to_string(in.a) + ");"; break;
        case XYLEM_FUSED_CONST: line = reg(in.dst) + " = (XV)(" + float_literal(in.imm) + ");"; break;
        case XYLEM_FUSED_OUTPUT: {
            const std::string dst = "out" + std::to_string(in.dst);
            line = "xl_store(" + dst + " + " + dst + "_off + i, left, " + a + ");";
            break;
        }
        default:
            if (!plugin_kit::fused_expr(in.op, a.c_str(), b.c_str(), c.c_str(), expr, sizeof expr))
                throw std::logic_error("instruction " + std::to_string(i) + " has opcode " + std::to_string(in.op) +
                                       ", which has no C expression");
            line = reg(in.dst) + " = " + expr + ";";
        }
        body += "        " + line + "\n";
    }
    body += "    }\n";

    k.text = prelude() + sig + " {\n" + body + "}\n";
    return k;
}

}  // namespace xylem::opencl
