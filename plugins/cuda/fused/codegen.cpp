// fused_elementwise's CUDA C generator (codegen.h). Each helper below is fused_apply<float>'s case
// for its opcode, written with the same comparisons and operand order, so NaN, -0 and the
// comparisons come out as on the CPU; compile options (nvrtc.cpp) keep IEEE division, square root
// and separate rounding of a*b+c.
#include "fused/codegen.h"

#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <cstring>

#include "xylem/plugin_kit/fused.h"

namespace xylem::cuda::fused {

namespace pk = plugin_kit;

const char* helper_definition(uint32_t op) {
#define XF1(name, body) "__device__ __forceinline__ float xf_" #name "(float a) { return " body "; }\n"
#define XF2(name, body) "__device__ __forceinline__ float xf_" #name "(float a, float b) { return " body "; }\n"
#define XF3(name, body) "__device__ __forceinline__ float xf_" #name "(float a, float b, float c) { return " body "; }\n"
    switch (op) {
    case XYLEM_FUSED_ADD: return XF2(add, "a + b");
    case XYLEM_FUSED_SUB: return XF2(sub, "a - b");
    case XYLEM_FUSED_MUL: return XF2(mul, "a * b");
    case XYLEM_FUSED_DIV: return XF2(div, "a / b");
    case XYLEM_FUSED_MIN: return XF2(min, "(a != a || b != b) ? XF_NAN : (b < a ? b : a)");
    case XYLEM_FUSED_MAX: return XF2(max, "(a != a || b != b) ? XF_NAN : (b > a ? b : a)");
    case XYLEM_FUSED_NEG: return XF1(neg, "-a");
    case XYLEM_FUSED_ABS: return XF1(abs, "a < 0.0f ? -a : a");
    case XYLEM_FUSED_EXP: return XF1(exp, "expf(a)");
    case XYLEM_FUSED_LOG: return XF1(log, "logf(a)");
    case XYLEM_FUSED_SQRT: return XF1(sqrt, "sqrtf(a)");
    case XYLEM_FUSED_RSQRT: return XF1(rsqrt, "1.0f / sqrtf(a)");  // not rsqrtf: that one is approximate
    case XYLEM_FUSED_TANH: return XF1(tanh, "tanhf(a)");
    case XYLEM_FUSED_SIGMOID: return XF1(sigmoid, "1.0f / (1.0f + expf(-a))");
    case XYLEM_FUSED_RELU: return XF1(relu, "a > 0.0f ? a : 0.0f");
    case XYLEM_FUSED_FMA: return XF3(fma, "a * b + c");
    case XYLEM_FUSED_SELECT: return XF3(select, "a != 0.0f ? b : c");
    case XYLEM_FUSED_GT: return XF2(gt, "a > b ? 1.0f : 0.0f");
    case XYLEM_FUSED_GE: return XF2(ge, "a >= b ? 1.0f : 0.0f");
    case XYLEM_FUSED_EQ: return XF2(eq, "a == b ? 1.0f : 0.0f");
    case XYLEM_FUSED_TANH_GRAD: return XF2(tanh_grad, "a * (1.0f - b * b)");
    case XYLEM_FUSED_SIGMOID_GRAD: return XF2(sigmoid_grad, "a * b * (1.0f - b)");
    case XYLEM_FUSED_RELU_GRAD: return XF2(relu_grad, "b > 0.0f ? a : 0.0f");
    case XYLEM_FUSED_SQUARE: return XF1(square, "a * a");
    case XYLEM_FUSED_RECIP: return XF1(recip, "1.0f / a");
    // GELU (ABI 1.7): fused.h's gelu_value, gelu_tanh_value and derivatives in float, as the plugin's
    // own act_fwd/act_bwd kernels compute them (kernels/common.cuh), including the one change there:
    // the tanh form's 1 - t*t taken as sech^2(u) = 4e/(1+e)^2, e = exp(-2|u|), free of cancellation.
    case XYLEM_FUSED_ERF: return XF1(erf, "erff(a)");
    case XYLEM_FUSED_GELU: return XF1(gelu, "0.5f * a * (1.0f + erff(a * 0.70710678118654752440f))");
    case XYLEM_FUSED_GELU_TANH:
        return XF1(gelu_tanh, "0.5f * a * (1.0f + tanhf(0.79788456080286535588f * (a + 0.044715f * a * a * a)))");
    case XYLEM_FUSED_GELU_GRAD:
        return XF2(gelu_grad, "a * (0.5f * (1.0f + erff(b * 0.70710678118654752440f)) + "
                              "b * expf(-0.5f * b * b) * 0.39894228040143267794f)");
    case XYLEM_FUSED_GELU_TANH_GRAD:
        return "__device__ __forceinline__ float xf_gelu_tanh_grad(float a, float b) {\n"
               "    const float u = 0.79788456080286535588f * (b + 0.044715f * b * b * b);\n"
               "    const float t = tanhf(u), e = expf(-2.0f * fabsf(u));\n"
               "    const float sech2 = 4.0f * e / ((1.0f + e) * (1.0f + e));\n"
               "    return a * (0.5f * (1.0f + t) + 0.5f * b * sech2 * 0.79788456080286535588f * (1.0f + 0.134145f * b * b));\n"
               "}\n";
    default: return nullptr;  // INPUT, PARAM, CONST, OUTPUT move values; the kernel spells them
    }
#undef XF1
#undef XF2
#undef XF3
}

std::string prelude() {
    std::string s =
        "// fused_elementwise helpers: plugin_kit/fused.h's fused_apply<float>, one per opcode.\n"
        "#define XF_NAN __int_as_float(0x7fc00000)\n";
    for (uint32_t op = 0; op < XYLEM_FUSED_OPCODE_COUNT_; ++op)
        if (const char* def = helper_definition(op)) s += def;
    return s;
}

std::string kernel_name(uint64_t key) {
    char s[40];
    std::snprintf(s, sizeof s, "xylem_fused_%016llx", static_cast<unsigned long long>(key));
    return s;
}

std::string float_literal(float v) {
    char s[64];
    if (std::isfinite(v)) {
        std::snprintf(s, sizeof s, "%af", static_cast<double>(v));  // exact: every float is a double
    } else {
        uint32_t bits;
        std::memcpy(&bits, &v, sizeof bits);
        std::snprintf(s, sizeof s, "__int_as_float(0x%08x)", bits);
    }
    return s;
}

namespace {

void append(std::string& s, const char* fmt, ...) __attribute__((format(printf, 2, 3)));
void append(std::string& s, const char* fmt, ...) {
    char line[256];
    va_list args;
    va_start(args, fmt);
    std::vsnprintf(line, sizeof line, fmt, args);
    va_end(args);
    s += line;
}

// Where input k's value for element i is: FULL reads element i, ROW the column, COL the row;
// SCALAR inputs are read once before the loop (no input but a FULL one may share an output's
// memory, so nothing the loop writes changes them).
std::string input_value(uint32_t k, uint32_t mode) {
    const std::string in = "in" + std::to_string(k);
    switch (mode) {
    case XYLEM_FUSED_ROW: return in + "[col]";
    case XYLEM_FUSED_COL: return in + "[row]";
    case XYLEM_FUSED_SCALAR: return in;
    default: return in + "[i]";
    }
}

}  // namespace

std::string kernel_source(const xylem_fused_attrs& at, uint32_t n_inputs, uint32_t n_outputs, const std::string& name) {
    const uint32_t n = at.n_instrs;
    bool input_used[XYLEM_FUSED_MAX_INPUTS] = {};
    bool reg_written[XYLEM_FUSED_MAX_REGS] = {};
    bool needs_row_col = false;
    for (uint32_t i = 0; i < n; ++i) {
        const xylem_fused_instr& in = at.code[i];
        if (in.op == XYLEM_FUSED_INPUT) {
            input_used[in.a] = true;
            const uint32_t mode = at.input_modes[in.a];
            needs_row_col = needs_row_col || mode == XYLEM_FUSED_ROW || mode == XYLEM_FUSED_COL;
        }
        if (in.op != XYLEM_FUSED_OUTPUT) reg_written[in.dst] = true;
    }

    std::string s;
    append(s, "// xylem fused_elementwise kernel %s: %u inputs, %u outputs, %u instructions, %u registers.\n",
           name.c_str(), n_inputs, n_outputs, n, at.n_regs);
    s += prelude();
    append(s,
           "struct XfArgs {\n"
           "    const float* in[%d];\n"
           "    float* out[%d];\n"
           "    long long rows, cols;\n"
           "    float param[%d];\n"
           "};\n"
           "static_assert(sizeof(XfArgs) == %zu, \"XfArgs must match the plugin's KernelArgs\");\n",
           XYLEM_FUSED_MAX_INPUTS, XYLEM_FUSED_MAX_OUTPUTS, XYLEM_FUSED_MAX_PARAMS, sizeof(KernelArgs));
    append(s, "extern \"C\" __global__ void __launch_bounds__(%d) %s(const XfArgs p) {\n", kThreadsPerBlock,
           name.c_str());
    for (uint32_t k = 0; k < n_inputs; ++k) {
        if (!input_used[k]) continue;
        const uint32_t mode = at.input_modes[k];
        if (mode == XYLEM_FUSED_SCALAR) append(s, "    const float in%u = p.in[%u][0];  // scalar\n", k, k);
        else append(s, "    const float* const in%u = p.in[%u];  // %s\n", k, k, pk::fused_mode_name(mode));
    }
    for (uint32_t o = 0; o < n_outputs; ++o) append(s, "    float* const out%u = p.out[%u];\n", o, o);
    s += "    const long long n = p.rows * p.cols;\n"
         "    const long long stride = (long long)gridDim.x * blockDim.x;\n"
         "    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;\n";
    // ROW and COL inputs need i's row and column: one division per thread, then each grid stride
    // advances them by a fixed step (a 64-bit division per element would cost more than the loads).
    if (needs_row_col)
        s += "    long long row = i / p.cols, col = i - row * p.cols;\n"
             "    const long long step_rows = stride / p.cols, step_cols = stride - step_rows * p.cols;\n";
    s += "    for (; i < n; i += stride) {\n";
    bool first = true;
    for (uint32_t r = 0; r < at.n_regs && r < XYLEM_FUSED_MAX_REGS; ++r) {
        if (!reg_written[r]) continue;
        s += first ? "        float r" : ", r";
        s += std::to_string(r);
        first = false;
    }
    if (!first) s += ";\n";
    for (uint32_t i = 0; i < n; ++i) {
        const xylem_fused_instr& in = at.code[i];
        switch (in.op) {
        case XYLEM_FUSED_INPUT:
            append(s, "        r%u = %s;\n", in.dst, input_value(in.a, at.input_modes[in.a]).c_str());
            break;
        case XYLEM_FUSED_PARAM: append(s, "        r%u = p.param[%u];\n", in.dst, in.a); break;
        case XYLEM_FUSED_CONST: append(s, "        r%u = %s;\n", in.dst, float_literal(in.imm).c_str()); break;
        case XYLEM_FUSED_OUTPUT: append(s, "        out%u[i] = r%u;\n", in.dst, in.a); break;
        default: {
            char a[8], b[8], c[8], expr[96];
            std::snprintf(a, sizeof a, "r%u", in.a);
            std::snprintf(b, sizeof b, "r%u", in.b);
            std::snprintf(c, sizeof c, "r%u", in.c);
            pk::fused_expr(in.op, a, b, c, expr, sizeof expr);
            append(s, "        r%u = %s;\n", in.dst, expr);
        }
        }
    }
    if (needs_row_col)
        s += "        row += step_rows;\n"
             "        col += step_cols;\n"
             "        if (col >= p.cols) {\n"
             "            col -= p.cols;\n"
             "            ++row;\n"
             "        }\n";
    s += "    }\n}\n";
    return s;
}

std::string describe(const xylem_fused_attrs& at, uint32_t n_inputs, uint32_t n_outputs, size_t cap) {
    std::string s = std::to_string(n_inputs) + (n_inputs == 1 ? " input" : " inputs");
    if (n_inputs) {
        s += " (";
        for (uint32_t k = 0; k < n_inputs && k < XYLEM_FUSED_MAX_INPUTS; ++k)
            s += std::string(k ? ", " : "") + pk::fused_mode_name(at.input_modes[k]);
        s += ")";
    }
    s += ", " + std::to_string(n_outputs) + (n_outputs == 1 ? " output, " : " outputs, ") + std::to_string(at.n_instrs) +
         " instructions:";
    const uint32_t n = at.n_instrs < XYLEM_FUSED_MAX_INSTRS ? at.n_instrs : XYLEM_FUSED_MAX_INSTRS;
    for (uint32_t i = 0; i < n && s.size() <= cap; ++i) {
        const xylem_fused_instr& in = at.code[i];
        const pk::FusedOpcodeInfo info = pk::fused_opcode_info(in.op);
        char t[64];
        switch (in.op) {
        case XYLEM_FUSED_INPUT: std::snprintf(t, sizeof t, " r%u=in%u", in.dst, in.a); break;
        case XYLEM_FUSED_PARAM: std::snprintf(t, sizeof t, " r%u=p%u", in.dst, in.a); break;
        case XYLEM_FUSED_CONST: std::snprintf(t, sizeof t, " r%u=%g", in.dst, static_cast<double>(in.imm)); break;
        case XYLEM_FUSED_OUTPUT: std::snprintf(t, sizeof t, " out%u=r%u", in.dst, in.a); break;
        default:
            if (info.arity == 1) std::snprintf(t, sizeof t, " r%u=%s(r%u)", in.dst, info.name, in.a);
            else if (info.arity == 2) std::snprintf(t, sizeof t, " r%u=%s(r%u,r%u)", in.dst, info.name, in.a, in.b);
            else std::snprintf(t, sizeof t, " r%u=%s(r%u,r%u,r%u)", in.dst, info.name, in.a, in.b, in.c);
        }
        s += t;
    }
    if (s.size() > cap) s = s.substr(0, cap > 3 ? cap - 3 : 0) + "...";
    return s;
}

}  // namespace xylem::cuda::fused
