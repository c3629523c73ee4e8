// fused_elementwise on CUDA. Without a GPU: the generated CUDA C (every opcode's helper, each
// instruction's spelling, exact constants), NVRTC compiling it (NVRTC needs no GPU) to a cubin for
// sm_90 and to PTX for an architecture it only reaches through PTX, the target choice, and the disk
// cache (round trip; short, corrupt, foreign and stale files refused; an unwritable folder). With a
// GPU (docs/gpu-runbook.md): the plugin runs the every-opcode program against a float64 reference,
// writes its disk cache, and records the op in a captured graph. NVRTC tests skip when NVRTC
// cannot compile here.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <string>
#include <vector>

#include "cuda/cuda_test_util.h"
#include "fused/codegen.h"
#include "fused/disk_cache.h"
#include "fused/nvrtc.h"
#include "support/files.h"
#include "support/backends.h"
#include "xylem/error.h"
#include "xylem/fused_builder.h"
#include "xylem/graph.h"
#include "xylem/op_calls.h"
#include "xylem/plugin_kit/fused.h"

namespace xylem {
namespace {

namespace fs = std::filesystem;
using xylem::test::read_file;
namespace fz = cuda::fused;
namespace pk = plugin_kit;

// ---- programs ------------------------------------------------------------------------------

// One program with every arithmetic opcode (the ABI 1.7 erf and GELUs too), every input mode (in0
// full, in1 row, in2 col, in3 scalar), a param and constants; three outputs. Values stay where every
// opcode is defined (log, sqrt and rsqrt read |.| + 0.5).
xylem_fused_attrs every_opcode_program(float param = 0.75f) {
    FusedBuilder b;
    const auto x0 = b.input(0), x1 = b.input(1), x2 = b.input(2), x3 = b.input(3);
    const auto p = b.param(param), c = b.constant(1.5f), half = b.constant(0.5f);
    const auto sum = b.apply(XYLEM_FUSED_ADD, x0, x1);
    const auto diff = b.apply(XYLEM_FUSED_SUB, x2, x3);
    const auto scaled = b.apply(XYLEM_FUSED_MUL, sum, p);
    const auto ratio = b.apply(XYLEM_FUSED_DIV, diff, c);
    const auto lo = b.apply(XYLEM_FUSED_MIN, scaled, ratio), hi = b.apply(XYLEM_FUSED_MAX, scaled, ratio);
    const auto pos = b.apply(XYLEM_FUSED_ADD, b.apply(XYLEM_FUSED_ABS, b.apply(XYLEM_FUSED_NEG, lo)), half);
    const auto ex = b.apply(XYLEM_FUSED_EXP, hi), lg = b.apply(XYLEM_FUSED_LOG, pos);
    const auto sq = b.apply(XYLEM_FUSED_SQRT, pos), rs = b.apply(XYLEM_FUSED_RSQRT, pos);
    const auto th = b.apply(XYLEM_FUSED_TANH, sum), sg = b.apply(XYLEM_FUSED_SIGMOID, diff);
    const auto rl = b.apply(XYLEM_FUSED_RELU, sum);
    const auto f = b.apply(XYLEM_FUSED_FMA, ex, lg, sq);
    const auto gt = b.apply(XYLEM_FUSED_GT, sum, diff), ge = b.apply(XYLEM_FUSED_GE, sum, diff);
    const auto eq = b.apply(XYLEM_FUSED_EQ, x3, x3);
    const auto sel = b.apply(XYLEM_FUSED_SELECT, gt, rs, th);
    const auto tg = b.apply(XYLEM_FUSED_TANH_GRAD, sg, th), sgg = b.apply(XYLEM_FUSED_SIGMOID_GRAD, rl, sg);
    const auto rg = b.apply(XYLEM_FUSED_RELU_GRAD, f, sum);
    const auto s2 = b.apply(XYLEM_FUSED_SQUARE, sel), rc = b.apply(XYLEM_FUSED_RECIP, pos);
    const auto er = b.apply(XYLEM_FUSED_ERF, diff), gl = b.apply(XYLEM_FUSED_GELU, ratio);
    const auto glt = b.apply(XYLEM_FUSED_GELU_TANH, sum);
    const auto gg = b.apply(XYLEM_FUSED_GELU_GRAD, sg, diff), gtg = b.apply(XYLEM_FUSED_GELU_TANH_GRAD, rl, sum);
    const auto gelus = b.apply(XYLEM_FUSED_ADD, b.apply(XYLEM_FUSED_ADD, er, gl), b.apply(XYLEM_FUSED_ADD, glt, gg));
    b.output(0, b.apply(XYLEM_FUSED_ADD, b.apply(XYLEM_FUSED_ADD, f, sel), b.apply(XYLEM_FUSED_ADD, tg, gelus)));
    b.output(1, b.apply(XYLEM_FUSED_ADD, b.apply(XYLEM_FUSED_ADD, sgg, rg),
                        b.apply(XYLEM_FUSED_ADD, b.apply(XYLEM_FUSED_MUL, s2, rc), gtg)));
    b.output(2, b.apply(XYLEM_FUSED_ADD, b.apply(XYLEM_FUSED_ADD, ge, eq), gt));
    return b.finish({XYLEM_FUSED_FULL, XYLEM_FUSED_ROW, XYLEM_FUSED_COL, XYLEM_FUSED_SCALAR});
}
constexpr uint32_t kInputs = 4, kOutputs = 3;

// The opcodes a program uses.
std::vector<bool> opcodes_of(const xylem_fused_attrs& at) {
    std::vector<bool> used(XYLEM_FUSED_OPCODE_COUNT_, false);
    for (uint32_t i = 0; i < at.n_instrs; ++i) used[at.code[i].op] = true;
    return used;
}

// Records failures of the kit's rule as test failures (the rule's Args).
struct RuleArgs {
    [[noreturn]] void fail(const char* fmt, ...) const {
        char msg[400];
        va_list args;
        va_start(args, fmt);
        std::vsnprintf(msg, sizeof msg, fmt, args);
        va_end(args);
        throw std::runtime_error(msg);
    }
};

// ---- NVRTC availability ------------------------------------------------------------------------

// The architecture the tests compile for: sm_90 (the plugin's own kernels' SASS) when NVRTC has it.
int test_arch() {
    const auto& archs = fz::nvrtc_info().archs;
    for (int a : archs)
        if (a == 90) return 90;
    return archs.empty() ? 0 : archs.back();
}

// "" when NVRTC answers and compiles a trivial kernel; else why not (no libnvrtc-builtins, ...).
const std::string& nvrtc_unusable() {
    static const std::string why = [] {
        const fz::NvrtcInfo& nv = fz::nvrtc_info();
        if (!nv.error.empty()) return nv.error;
        fz::Target t;
        std::string reason;
        if (!fz::choose_target(test_arch(), nv.archs, &t, &reason)) return reason;
        const fz::Compiled c = fz::compile("extern \"C\" __global__ void xylem_probe() {}\n", "xylem_probe", t);
        return c.ok ? std::string() : "NVRTC cannot compile a trivial kernel here: " + c.log;
    }();
    return why;
}
#define REQUIRE_NVRTC()                                                                          \
    do {                                                                                         \
        if (!nvrtc_unusable().empty()) GTEST_SKIP() << "NVRTC unusable: " << nvrtc_unusable(); \
    } while (0)

using cuda_test::have_gpu;

// A fresh folder under the system's temporary folder, removed with the object.
struct TempDir {
    fs::path path;
    TempDir() {
        std::string t = (fs::temp_directory_path() / "xylem-cuda-fused-XXXXXX").string();
        if (!mkdtemp(&t[0])) throw std::runtime_error("mkdtemp failed");
        path = t;
    }
    ~TempDir() {
        std::error_code ec;
        fs::remove_all(path, ec);
    }
};

// Sets an environment variable for one scope.
struct ScopedEnv {
    std::string name, old;
    bool had;
    ScopedEnv(const char* n, const char* value) : name(n), had(std::getenv(n) != nullptr) {
        if (had) old = std::getenv(n);
        if (value) setenv(n, value, 1);
        else unsetenv(n);
    }
    ~ScopedEnv() {
        if (had) setenv(name.c_str(), old.c_str(), 1);
        else unsetenv(name.c_str());
    }
};

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// ---- the generated CUDA C --------------------------------------------------------------------

// Exactly the opcodes that fused_expr spells as a call have a helper, each taking as many floats as
// the opcode reads, and the prelude defines each one once.
TEST(CudaFusedCodegen, EveryArithmeticOpcodeHasItsHelperInThePrelude) {
    const std::string prelude = fz::prelude();
    for (uint32_t op = 0; op < XYLEM_FUSED_OPCODE_COUNT_; ++op) {
        const pk::FusedOpcodeInfo info = pk::fused_opcode_info(op);
        char call[64];
        const bool spelled = pk::fused_expr(op, "a", "b", "c", call, sizeof call);
        const char* def = fz::helper_definition(op);
        ASSERT_EQ(spelled, def != nullptr) << info.name;
        if (!def) continue;
        std::string params = "float a";
        if (info.arity > 1) params += ", float b";
        if (info.arity > 2) params += ", float c";
        const std::string head = std::string("float xf_") + info.name + "(" + params + ")";
        EXPECT_TRUE(contains(def, head)) << def;
        const size_t first = prelude.find(head);
        EXPECT_NE(first, std::string::npos) << head;
        EXPECT_EQ(prelude.find(head, first + 1), std::string::npos) << head << " twice";
    }
    EXPECT_EQ(fz::helper_definition(XYLEM_FUSED_OPCODE_COUNT_), nullptr);
}

// Each instruction kind spelled as the kernel needs it: loads by mode (scalars read once before
// the loop), params from the argument block, outputs at the element, arithmetic through fused_expr.
TEST(CudaFusedCodegen, SourceSpellsEachInstructionAndEveryInputMode) {
    const xylem_fused_attrs at = every_opcode_program();
    const uint64_t key = pk::fused_program_key(at, kInputs, kOutputs);
    const std::string name = fz::kernel_name(key);
    EXPECT_EQ(name.size(), std::string("xylem_fused_").size() + 16);
    const std::string src = fz::kernel_source(at, kInputs, kOutputs, name);
    EXPECT_TRUE(contains(src, "extern \"C\" __global__ void __launch_bounds__(256) " + name + "(const XfArgs p)"));
    EXPECT_TRUE(contains(src, "static_assert(sizeof(XfArgs) == " + std::to_string(sizeof(fz::KernelArgs))));
    EXPECT_TRUE(contains(src, "const float in3 = p.in[3][0];  // scalar"));
    EXPECT_TRUE(contains(src, "long long row = i / p.cols, col = i - row * p.cols;"));
    for (uint32_t i = 0; i < at.n_instrs; ++i) {
        const xylem_fused_instr& in = at.code[i];
        std::string want;
        char a[8], b[8], c[8], expr[96];
        std::snprintf(a, sizeof a, "r%u", in.a);
        std::snprintf(b, sizeof b, "r%u", in.b);
        std::snprintf(c, sizeof c, "r%u", in.c);
        char dst_text[16];
        std::snprintf(dst_text, sizeof dst_text, "r%u = ", in.dst);
        const std::string dst = dst_text;
        switch (in.op) {
        case XYLEM_FUSED_INPUT: {
            const char* index[] = {"[i]", "[col]", "[row]", ""};
            want = dst + "in" + std::to_string(in.a) + index[at.input_modes[in.a]] + ";";
            break;
        }
        case XYLEM_FUSED_PARAM: want = dst + "p.param[" + std::to_string(in.a) + "];"; break;
        case XYLEM_FUSED_CONST: want = dst + fz::float_literal(in.imm) + ";"; break;
        case XYLEM_FUSED_OUTPUT: want = "out" + std::to_string(in.dst) + "[i] = " + a + ";"; break;
        default:
            ASSERT_TRUE(pk::fused_expr(in.op, a, b, c, expr, sizeof expr));
            want = dst + expr + ";";
        }
        EXPECT_TRUE(contains(src, "        " + want + "\n")) << "instruction " << i << ": " << want;
    }
    // Without ROW or COL inputs there is no division per element.
    FusedBuilder plain;
    plain.output(0, plain.apply(XYLEM_FUSED_EXP, plain.input(0)));
    const xylem_fused_attrs at2 = plain.finish({XYLEM_FUSED_FULL});
    EXPECT_FALSE(contains(fz::kernel_source(at2, 1, 1, "k"), " / p.cols"));
}

// Constants keep their exact bits: finite values as hex float literals, the rest by bit pattern.
TEST(CudaFusedCodegen, ConstantsAreExactLiterals) {
    const float finite[] = {1.5f, -0.0f, 0.1f, 1e-45f, std::numeric_limits<float>::min(),
                            std::numeric_limits<float>::max(), -3.25e-7f, 16777217.0f};
    for (float v : finite) {
        const std::string lit = fz::float_literal(v);
        ASSERT_EQ(lit.back(), 'f') << lit;
        const float back = std::strtof(lit.substr(0, lit.size() - 1).c_str(), nullptr);
        EXPECT_EQ(std::memcmp(&back, &v, 4), 0) << lit << " for " << v;
    }
    EXPECT_EQ(fz::float_literal(-0.0f), "-0x0p+0f");
    EXPECT_EQ(fz::float_literal(std::numeric_limits<float>::infinity()), "__int_as_float(0x7f800000)");
    EXPECT_EQ(fz::float_literal(-std::numeric_limits<float>::infinity()), "__int_as_float(0xff800000)");
    uint32_t payload_bits = 0x7fc01234;
    float payload;
    std::memcpy(&payload, &payload_bits, 4);
    EXPECT_EQ(fz::float_literal(payload), "__int_as_float(0x7fc01234)");
}

// What an error message says of the program: its inputs' modes, outputs and instructions.
TEST(CudaFusedCodegen, DescribeNamesTheProgram) {
    FusedBuilder b;
    const auto x = b.input(0), y = b.input(1);
    b.output(0, b.apply(XYLEM_FUSED_ADD, x, y));
    const xylem_fused_attrs at = b.finish({XYLEM_FUSED_FULL, XYLEM_FUSED_ROW});
    EXPECT_EQ(fz::describe(at, 2, 1), "2 inputs (full, row), 1 output, 4 instructions: r0=in0 r1=in1 r1=add(r0,r1) out0=r1");
    const std::string long_one = fz::describe(every_opcode_program(), kInputs, kOutputs, 80);
    EXPECT_EQ(long_one.size(), 80u);
    EXPECT_EQ(long_one.substr(77), "...");
}

// ---- NVRTC -----------------------------------------------------------------------------------

TEST(CudaFusedNvrtc, TargetIsTheDevicesSassElsePtxForTheNewestArchitectureBelow) {
    const std::vector<int> archs = {75, 80, 86, 89, 90, 100, 120};
    fz::Target t;
    std::string why;
    ASSERT_TRUE(fz::choose_target(90, archs, &t, &why));
    EXPECT_EQ(t.arch_option, "sm_90");
    EXPECT_TRUE(t.cubin);
    ASSERT_TRUE(fz::choose_target(103, archs, &t, &why));  // unknown to this NVRTC: PTX the driver compiles
    EXPECT_EQ(t.arch_option, "compute_100");
    EXPECT_FALSE(t.cubin);
    ASSERT_TRUE(fz::choose_target(130, archs, &t, &why));
    EXPECT_EQ(t.arch_option, "compute_120");
    EXPECT_FALSE(fz::choose_target(70, archs, &t, &why));
    EXPECT_EQ(why, "NVRTC cannot compile for compute capability 7.0 (it supports 75 80 86 89 90 100 120)");
    const auto options = fz::compile_options(fz::Target{"sm_90", true});
    EXPECT_EQ(options[0], "--gpu-architecture=sm_90");
    EXPECT_NE(std::find(options.begin(), options.end(), "--fmad=false"), options.end());
}

TEST(CudaFusedNvrtc, ReportsItsVersionAndArchitectures) {
    REQUIRE_NVRTC();
    const fz::NvrtcInfo& nv = fz::nvrtc_info();
    EXPECT_GE(nv.major, 12);
    EXPECT_TRUE(std::is_sorted(nv.archs.begin(), nv.archs.end()));
    EXPECT_NE(std::find(nv.archs.begin(), nv.archs.end(), 90), nv.archs.end()) << "NVRTC without sm_90";
}

// The every-opcode, every-mode program compiles to an ELF cubin for sm_90 holding its kernel.
TEST(CudaFusedNvrtc, CompilesEveryOpcodeAndInputModeToACubin) {
    REQUIRE_NVRTC();
    const xylem_fused_attrs at = every_opcode_program();
    pk::fused_program_check(RuleArgs{}, at, kInputs, kOutputs);
    const std::vector<bool> used = opcodes_of(at);
    for (uint32_t op = 0; op < XYLEM_FUSED_OPCODE_COUNT_; ++op)
        ASSERT_TRUE(used[op]) << "the test program lacks " << pk::fused_opcode_info(op).name;
    const std::string name = fz::kernel_name(pk::fused_program_key(at, kInputs, kOutputs));
    fz::Target t;
    std::string why;
    ASSERT_TRUE(fz::choose_target(test_arch(), fz::nvrtc_info().archs, &t, &why)) << why;
    ASSERT_TRUE(t.cubin);
    const fz::Compiled c = fz::compile(fz::kernel_source(at, kInputs, kOutputs, name), name, t);
    ASSERT_TRUE(c.ok) << c.log;
    ASSERT_GT(c.image.size(), 4u);
    EXPECT_EQ(std::string(c.image.data(), 4), "\x7f" "ELF");
    EXPECT_NE(std::search(c.image.begin(), c.image.end(), name.begin(), name.end()), c.image.end())
        << "the cubin has no symbol " << name;
}

// An architecture NVRTC knows only through PTX: the image is PTX text for the one below, ending in
// its NUL, with the kernel as an entry.
TEST(CudaFusedNvrtc, CompilesToPtxForAnArchitectureItHasNoSassFor) {
    REQUIRE_NVRTC();
    const auto& archs = fz::nvrtc_info().archs;
    const int arch = archs.back() + 1;  // newer than any it knows
    fz::Target t;
    std::string why;
    ASSERT_TRUE(fz::choose_target(arch, archs, &t, &why)) << why;
    ASSERT_FALSE(t.cubin);
    const xylem_fused_attrs at = every_opcode_program();
    const std::string name = fz::kernel_name(pk::fused_program_key(at, kInputs, kOutputs));
    const fz::Compiled c = fz::compile(fz::kernel_source(at, kInputs, kOutputs, name), name, t);
    ASSERT_TRUE(c.ok) << c.log;
    ASSERT_FALSE(c.image.empty());
    EXPECT_EQ(c.image.back(), '\0');
    const std::string ptx(c.image.data());
    EXPECT_TRUE(contains(ptx, ".entry " + name)) << ptx.substr(0, 400);
    EXPECT_TRUE(contains(ptx, ".target sm_" + std::to_string(archs.back())));
}

// A compile failure comes back with NVRTC's log naming the file and the error.
TEST(CudaFusedNvrtc, ACompileErrorReturnsTheLog) {
    REQUIRE_NVRTC();
    fz::Target t;
    std::string why;
    ASSERT_TRUE(fz::choose_target(test_arch(), fz::nvrtc_info().archs, &t, &why));
    const fz::Compiled c = fz::compile("extern \"C\" __global__ void k() { undeclared_name(); }\n", "broken_kernel", t);
    EXPECT_FALSE(c.ok);
    EXPECT_TRUE(c.image.empty());
    EXPECT_TRUE(contains(c.log, "broken_kernel.cu")) << c.log;
    EXPECT_TRUE(contains(c.log, "undeclared_name")) << c.log;
}

std::vector<char> bytes_of(const std::string& s) { return {s.begin(), s.end()}; }

void write_all(const fs::path& p, const std::string& s) {
    std::ofstream f(p, std::ios::binary | std::ios::trunc);
    f.write(s.data(), static_cast<std::streamsize>(s.size()));
}

// Float64 reference: the program interpreted with the kit's fused_apply<double>.
std::vector<std::vector<double>> reference(const xylem_fused_attrs& at, const std::vector<std::vector<float>>& in,
                                           int64_t rows, int64_t cols, uint32_t n_outputs) {
    std::vector<std::vector<double>> out(n_outputs, std::vector<double>(static_cast<size_t>(rows * cols)));
    std::vector<double> r(XYLEM_FUSED_MAX_REGS);
    for (int64_t row = 0; row < rows; ++row)
        for (int64_t col = 0; col < cols; ++col) {
            const int64_t i = row * cols + col;
            for (uint32_t k = 0; k < at.n_instrs; ++k) {
                const xylem_fused_instr& x = at.code[k];
                switch (x.op) {
                case XYLEM_FUSED_INPUT: {
                    const int64_t index[] = {i, col, row, 0};
                    r[x.dst] = in[x.a][static_cast<size_t>(index[at.input_modes[x.a]])];
                    break;
                }
                case XYLEM_FUSED_PARAM: r[x.dst] = at.params[x.a]; break;
                case XYLEM_FUSED_CONST: r[x.dst] = x.imm; break;
                case XYLEM_FUSED_OUTPUT: out[x.dst][static_cast<size_t>(i)] = r[x.a]; break;
                default: r[x.dst] = pk::fused_apply<double>(x.op, r[x.a], r[x.b], r[x.c]);
                }
            }
        }
    return out;
}

// ---- the generated kernel, run on the CPU ------------------------------------------------------

// The generated CUDA C is C++ once a few CUDA names are defined. Compiled by the host compiler
// (-ffp-contract=off, as NVRTC's --fmad=false) and run with an emulated grid, every block and
// thread in turn, it checks the kernel's arithmetic, broadcasting and grid-stride stepping against
// the float64 reference without a GPU.
constexpr const char* kHostShim = R"(#include <math.h>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <vector>
struct XfDim { unsigned x = 1; };
static XfDim blockIdx, threadIdx, blockDim, gridDim;
#define __global__
#define __device__
#define __forceinline__ inline
#define __launch_bounds__(n)
static inline float __int_as_float(unsigned bits) { float f; std::memcpy(&f, &bits, 4); return f; }
)";

// Reads argv[1]: i64 rows, cols; u32 inputs, outputs, grid, block; f32 params[32]; each input as
// i64 count + floats. Writes argv[2]: each output's rows*cols floats.
constexpr const char* kHostMain = R"(
int main(int argc, char** argv) {
    if (argc != 3) return 2;
    FILE* f = std::fopen(argv[1], "rb");
    if (!f) return 3;
    long long rows, cols;
    unsigned n_in, n_out, grid, block;
    XfArgs p{};
    std::fread(&rows, 8, 1, f); std::fread(&cols, 8, 1, f);
    std::fread(&n_in, 4, 1, f); std::fread(&n_out, 4, 1, f); std::fread(&grid, 4, 1, f); std::fread(&block, 4, 1, f);
    std::fread(p.param, 4, 32, f);
    std::vector<std::vector<float>> in(n_in), out(n_out, std::vector<float>(rows * cols, -12345.0f));
    for (unsigned k = 0; k < n_in; ++k) {
        long long count;
        std::fread(&count, 8, 1, f);
        in[k].resize(count);
        if (std::fread(in[k].data(), 4, count, f) != (size_t)count) return 4;
        p.in[k] = in[k].data();
    }
    std::fclose(f);
    for (unsigned o = 0; o < n_out; ++o) p.out[o] = out[o].data();
    p.rows = rows;
    p.cols = cols;
    gridDim.x = grid;
    blockDim.x = block;
    for (blockIdx.x = 0; blockIdx.x < grid; ++blockIdx.x)
        for (threadIdx.x = 0; threadIdx.x < block; ++threadIdx.x) XF_KERNEL(p);
    FILE* g = std::fopen(argv[2], "wb");
    for (unsigned o = 0; o < n_out; ++o) std::fwrite(out[o].data(), 4, out[o].size(), g);
    return std::fclose(g) == 0 ? 0 : 5;
}
)";

// The program's kernel built for the host in `dir`; "" with a GTEST_SKIP reason in `why` when no
// host compiler is at hand (a machine that only runs a bundled build).
std::string build_host_kernel(const xylem_fused_attrs& at, uint32_t n_in, uint32_t n_out, const fs::path& dir,
                              std::string* why) {
    const std::string cxx = XYLEM_TEST_HOST_CXX;
    if (!fs::exists(cxx)) {
        *why = "no host compiler at " + cxx;
        return {};
    }
    const std::string name = fz::kernel_name(pk::fused_program_key(at, n_in, n_out));
    const fs::path src = dir / "kernel_on_host.cpp", exe = dir / "kernel_on_host";
    std::ofstream(src) << kHostShim << fz::kernel_source(at, n_in, n_out, name) << "#define XF_KERNEL " << name << "\n"
                       << kHostMain;
    const std::string cmd = "'" + cxx + "' -std=c++17 -O1 -ffp-contract=off -w -o '" + exe.string() + "' '" +
                            src.string() + "' 2>'" + (dir / "cxx.log").string() + "'";
    if (std::system(cmd.c_str()) != 0) {
        ADD_FAILURE() << "the generated kernel does not compile as C++: " << read_file(dir / "cxx.log");
        return {};
    }
    return exe.string();
}

// Runs the host-built kernel over rows x cols with `grid` blocks of `block` threads.
std::vector<std::vector<float>> run_on_host(const std::string& exe, const fs::path& dir, const xylem_fused_attrs& at,
                                            const std::vector<std::vector<float>>& in, uint32_t n_out, int64_t rows,
                                            int64_t cols, uint32_t grid, uint32_t block) {
    std::string data;
    auto put = [&data](const void* p, size_t n) { data.append(static_cast<const char*>(p), n); };
    const uint32_t head[4] = {static_cast<uint32_t>(in.size()), n_out, grid, block};
    put(&rows, 8);
    put(&cols, 8);
    put(head, sizeof head);
    put(at.params, sizeof at.params);
    for (const auto& v : in) {
        const int64_t count = static_cast<int64_t>(v.size());
        put(&count, 8);
        put(v.data(), v.size() * 4);
    }
    write_all(dir / "in.bin", data);
    const std::string cmd = "'" + exe + "' '" + (dir / "in.bin").string() + "' '" + (dir / "out.bin").string() + "'";
    EXPECT_EQ(std::system(cmd.c_str()), 0) << cmd;
    const std::string raw = read_file(dir / "out.bin");
    std::vector<std::vector<float>> out(n_out, std::vector<float>(static_cast<size_t>(rows * cols)));
    const size_t bytes = static_cast<size_t>(n_out * rows * cols) * 4;
    EXPECT_EQ(raw.size(), bytes);
    for (uint32_t o = 0; o < n_out && raw.size() == bytes; ++o)
        std::memcpy(out[o].data(), raw.data() + o * rows * cols * 4, static_cast<size_t>(rows * cols) * 4);
    return out;
}

// Grids whose stride is and is not a multiple of the row, shorter and longer than a row, more
// threads than elements, and one thread for everything.
TEST(CudaFusedOnHost, EveryOpcodeAndModeMatchesTheReferenceUnderAnyGrid) {
    TempDir tmp;
    const xylem_fused_attrs at = every_opcode_program(0.75f);
    std::string why;
    const std::string exe = build_host_kernel(at, kInputs, kOutputs, tmp.path, &why);
    if (exe.empty() && !why.empty()) GTEST_SKIP() << why;
    ASSERT_FALSE(exe.empty());
    test::Rng rng;
    struct Case {
        int64_t rows, cols;
        uint32_t grid, block;
    };
    for (const Case& c : {Case{37, 23, 3, 32}, Case{5, 300, 2, 64}, Case{1000, 1, 4, 32}, Case{7, 7, 1, 1},
                          Case{2, 3, 2, 256}, Case{64, 16, 4, 64}}) {
        SCOPED_TRACE(std::to_string(c.rows) + "x" + std::to_string(c.cols) + " on " + std::to_string(c.grid) + "x" +
                     std::to_string(c.block));
        const std::vector<std::vector<float>> in = {rng.uniform(c.rows * c.cols, -2, 2), rng.uniform(c.cols, -2, 2),
                                                    rng.uniform(c.rows, -2, 2), rng.uniform(1, -2, 2)};
        const auto got = run_on_host(exe, tmp.path, at, in, kOutputs, c.rows, c.cols, c.grid, c.block);
        const auto want = reference(at, in, c.rows, c.cols, kOutputs);
        for (uint32_t o = 0; o < kOutputs; ++o) EXPECT_TRUE(test::near(got[o], want[o], 1e-5)) << "output " << o;
    }
}

// The helpers' comparisons on NaN, infinities and signed zeros give exactly the kit's
// fused_apply<float>, bit for bit (two programs: at most 8 outputs each).
TEST(CudaFusedOnHost, SpecialValuesGiveTheKitsBits) {
    const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
    const float values[] = {nan, inf, -inf, 0.0f, -0.0f, 1.0f, -2.5f, 1e-40f};
    std::vector<float> xs, ys;
    for (float a : values)
        for (float c : values) xs.push_back(a), ys.push_back(c);
    const int64_t n = static_cast<int64_t>(xs.size());
    const std::vector<std::vector<uint32_t>> groups = {
        {XYLEM_FUSED_MIN, XYLEM_FUSED_MAX, XYLEM_FUSED_ABS, XYLEM_FUSED_RELU, XYLEM_FUSED_GT, XYLEM_FUSED_GE},
        {XYLEM_FUSED_EQ, XYLEM_FUSED_SELECT, XYLEM_FUSED_RELU_GRAD, XYLEM_FUSED_DIV, XYLEM_FUSED_NEG,
         XYLEM_FUSED_SIGMOID}};
    for (const auto& ops : groups) {
        TempDir tmp;
        const uint32_t n_out = static_cast<uint32_t>(ops.size());
        FusedBuilder b;
        const auto x = b.input(0), y = b.input(1);
        for (uint32_t k = 0; k < n_out; ++k) b.output(k, b.apply(static_cast<xylem_fused_opcode>(ops[k]), x, y, x));
        const xylem_fused_attrs at = b.finish({XYLEM_FUSED_FULL, XYLEM_FUSED_FULL});
        std::string why;
        const std::string exe = build_host_kernel(at, 2, n_out, tmp.path, &why);
        if (exe.empty() && !why.empty()) GTEST_SKIP() << why;
        ASSERT_FALSE(exe.empty());
        const auto got = run_on_host(exe, tmp.path, at, {xs, ys}, n_out, 1, n, 2, 16);
        for (uint32_t k = 0; k < n_out; ++k)
            for (int64_t i = 0; i < n; ++i) {
                const float want = pk::fused_apply<float>(ops[k], xs[i], ys[i], xs[i]);
                EXPECT_EQ(std::memcmp(&got[k][i], &want, 4), 0)
                    << pk::fused_opcode_info(ops[k]).name << "(" << xs[i] << ", " << ys[i] << "): " << got[k][i]
                    << " vs " << want;
            }
    }
}

// ---- the disk cache ----------------------------------------------------------------------------

TEST(CudaFusedDiskCache, FolderFollowsXdgCacheHomeElseHome) {
    {
        ScopedEnv xdg("XDG_CACHE_HOME", "/some/cache");
        EXPECT_EQ(fz::cache_dir(), "/some/cache/xylem/cuda-fused");
    }
    ScopedEnv home("HOME", "/home/someone");
    {
        ScopedEnv xdg("XDG_CACHE_HOME", "relative/cache");  // the XDG spec ignores relative paths
        EXPECT_EQ(fz::cache_dir(), "/home/someone/.cache/xylem/cuda-fused");
    }
    {
        ScopedEnv xdg("XDG_CACHE_HOME", nullptr);
        EXPECT_EQ(fz::cache_dir(), "/home/someone/.cache/xylem/cuda-fused");
        ScopedEnv no_home("HOME", nullptr);
        EXPECT_EQ(fz::cache_dir(), "");
    }
    EXPECT_EQ(fz::cache_file_name("xylem_fused_00000000000000ff", "sm_90", 13, 0),
              "xylem_fused_00000000000000ff-sm_90-nvrtc13.0.bin");
}

// Written atomically into a folder it creates, read back byte for byte; no temporary file stays.
TEST(CudaFusedDiskCache, RoundTrip) {
    TempDir tmp;
    const std::string dir = (tmp.path / "a" / "b").string();
    const std::string recipe = "--opt\n\nsource text";
    const std::vector<char> image = bytes_of(std::string("\x7f" "ELF and some \0 bytes", 22));
    ASSERT_TRUE(fz::cache_write(dir, "k.bin", recipe, true, image));
    std::vector<char> back;
    ASSERT_TRUE(fz::cache_read(dir + "/k.bin", recipe, true, &back));
    EXPECT_EQ(back, image);
    size_t files = 0;
    for (const auto& e : fs::directory_iterator(dir)) files += e.path().filename() == "k.bin" ? 1 : 100;
    EXPECT_EQ(files, 1u) << "a temporary file was left behind";
    // A second write replaces the file.
    const std::vector<char> other = bytes_of("another image");
    ASSERT_TRUE(fz::cache_write(dir, "k.bin", recipe, true, other));
    ASSERT_TRUE(fz::cache_read(dir + "/k.bin", recipe, true, &back));
    EXPECT_EQ(back, other);
    // PTX must end in its NUL to be loaded as text.
    std::vector<char> ptx = bytes_of("// ptx");
    ptx.push_back('\0');
    ASSERT_TRUE(fz::cache_write(dir, "p.bin", recipe, false, ptx));
    ASSERT_TRUE(fz::cache_read(dir + "/p.bin", recipe, false, &back));
    EXPECT_EQ(back, ptx);
    ASSERT_TRUE(fz::cache_write(dir, "p2.bin", recipe, false, bytes_of("no terminator")));
    EXPECT_FALSE(fz::cache_read(dir + "/p2.bin", recipe, false, &back));
}

// A link planted at the cache file's name is replaced, never written through; the file is not
// writable by others.
TEST(CudaFusedDiskCache, APlantedLinkIsReplacedNotWrittenThrough) {
    TempDir tmp;
    const std::string dir = tmp.path.string();
    write_all(tmp.path / "victim", "precious");
    fs::create_symlink(tmp.path / "victim", tmp.path / "k.bin");
    ASSERT_TRUE(fz::cache_write(dir, "k.bin", "recipe", true, bytes_of("image")));
    EXPECT_EQ(read_file(tmp.path / "victim"), "precious");
    EXPECT_FALSE(fs::is_symlink(tmp.path / "k.bin"));
    EXPECT_EQ(fs::status(tmp.path / "k.bin").permissions() & fs::perms::others_write, fs::perms::none);
}

// Every damaged or foreign file is refused, never trusted, never a crash; `back` stays untouched.
TEST(CudaFusedDiskCache, ShortCorruptForeignAndStaleFilesAreRefused) {
    TempDir tmp;
    const std::string dir = tmp.path.string();
    const std::string recipe = "--gpu-architecture=sm_90\n\nkernel source";
    const std::vector<char> image = bytes_of(std::string(1000, 'x') + "end");
    ASSERT_TRUE(fz::cache_write(dir, "good.bin", recipe, true, image));
    const std::string good = read_file(tmp.path / "good.bin");
    const std::vector<char> sentinel = bytes_of("untouched");
    auto refused = [&](const std::string& content, const std::string& what) {
        write_all(tmp.path / "bad.bin", content);
        std::vector<char> back = sentinel;
        EXPECT_FALSE(fz::cache_read(dir + "/bad.bin", recipe, true, &back)) << what;
        EXPECT_EQ(back, sentinel) << what;
    };
    for (size_t n : {size_t{0}, size_t{7}, size_t{39}, size_t{40}, size_t{41}, good.size() - 1})
        refused(good.substr(0, n), "truncated to " + std::to_string(n) + " bytes");
    refused(good + "z", "trailing byte");
    std::string flipped = good;
    flipped[flipped.size() - 500] ^= 0x20;
    refused(flipped, "a flipped image byte");
    std::string magic = good;
    magic[0] = 'Q';
    refused(magic, "wrong magic");
    std::string huge = good;
    const uint64_t big = ~uint64_t{0};
    std::memcpy(&huge[24], &big, 8);  // image size field
    refused(huge, "absurd image size");
    refused(std::string(5000, '\0'), "zeros");
    std::vector<char> back;
    EXPECT_FALSE(fz::cache_read(dir + "/good.bin", recipe + " (another generator)", true, &back)) << "stale recipe";
    EXPECT_FALSE(fz::cache_read(dir + "/good.bin", recipe, false, &back)) << "a cubin asked for as PTX";
    EXPECT_FALSE(fz::cache_read(dir + "/missing.bin", recipe, true, &back));
    EXPECT_FALSE(fz::cache_read(dir, recipe, true, &back)) << "a folder";
    ASSERT_TRUE(fz::cache_read(dir + "/good.bin", recipe, true, &back));
    EXPECT_EQ(back, image);
}

// A folder that cannot be made (here: below a regular file, which holds even for root) only means
// no disk cache.
TEST(CudaFusedDiskCache, AnUnwritableFolderOnlyDisablesTheCache) {
    TempDir tmp;
    write_all(tmp.path / "file", "not a folder");
    EXPECT_FALSE(fz::cache_write((tmp.path / "file" / "cache").string(), "k.bin", "r", true, bytes_of("image")));
    EXPECT_FALSE(fz::cache_write("", "k.bin", "r", true, bytes_of("image")));
    EXPECT_FALSE(fz::cache_write(tmp.path.string(), "k.bin", "r", true, {}));
    size_t entries = 0;
    for (const auto& e : fs::directory_iterator(tmp.path)) entries += e.path().filename() == "file" ? 0 : 1;
    EXPECT_EQ(entries, 0u);
}

// The real thing end to end without a device: NVRTC's cubin for the every-opcode program goes
// through the cache under the name the plugin uses and comes back identical.
TEST(CudaFusedDiskCache, CompiledProgramRoundTripsUnderItsName) {
    REQUIRE_NVRTC();
    TempDir tmp;
    ScopedEnv xdg("XDG_CACHE_HOME", tmp.path.c_str());
    const xylem_fused_attrs at = every_opcode_program();
    const std::string name = fz::kernel_name(pk::fused_program_key(at, kInputs, kOutputs));
    fz::Target t;
    std::string why;
    ASSERT_TRUE(fz::choose_target(test_arch(), fz::nvrtc_info().archs, &t, &why));
    const std::string source = fz::kernel_source(at, kInputs, kOutputs, name);
    const fz::Compiled c = fz::compile(source, name, t);
    ASSERT_TRUE(c.ok) << c.log;
    const fz::NvrtcInfo& nv = fz::nvrtc_info();
    const std::string file = fz::cache_file_name(name, t.arch_option, nv.major, nv.minor);
    const std::string recipe = fz::cache_recipe(fz::compile_options(t), source);
    ASSERT_TRUE(fz::cache_write(fz::cache_dir(), file, recipe, t.cubin, c.image));
    EXPECT_TRUE(fs::exists(tmp.path / "xylem" / "cuda-fused" / file));
    std::vector<char> back;
    ASSERT_TRUE(fz::cache_read(fz::cache_dir() + "/" + file, recipe, t.cubin, &back));
    EXPECT_EQ(back, c.image);
    // A param's value is a kernel argument: another value is the same key, source and file.
    const xylem_fused_attrs other = every_opcode_program(-2.0f);
    EXPECT_EQ(pk::fused_program_key(other, kInputs, kOutputs), pk::fused_program_key(at, kInputs, kOutputs));
    EXPECT_EQ(fz::kernel_source(other, kInputs, kOutputs, name), source);
}

// ---- the plugin ------------------------------------------------------------------------------

Device& cuda_device() {
    static std::shared_ptr<Device> dev = test::backend_named("cuda")->device(0);
    return *dev;
}

// Every opcode and input mode on the GPU, shapes past one block and a grid-stride loop, against
// float64; the op's disk cache then holds the program's cubin.
TEST(CudaFusedPlugin, RunsEveryOpcodeAgainstTheReferenceAndCachesIt) {
    if (!have_gpu()) GTEST_SKIP() << "no GPU here";
    TempDir tmp;
    ScopedEnv xdg("XDG_CACHE_HOME", tmp.path.c_str());
    Device& dev = cuda_device();
    test::Rng rng;
    // A program no other test runs (its constant is its own), so it is compiled here, into tmp.
    FusedBuilder b;
    const auto x = b.input(0), unique = b.constant(1.0625f);
    b.output(0, b.apply(XYLEM_FUSED_MUL, x, unique));
    const xylem_fused_attrs fresh = b.finish({XYLEM_FUSED_FULL});
    for (const Shape& s : std::vector<Shape>{{1}, {3, 5}, {257, 129}, {4000, 1100}}) {
        SCOPED_TRACE(to_string(s));
        const int64_t cols = s.back(), rows = xylem::numel(s) / cols;
        const xylem_fused_attrs at = every_opcode_program(0.75f);
        std::vector<std::vector<float>> in = {rng.uniform(rows * cols, -2, 2), rng.uniform(cols, -2, 2),
                                              rng.uniform(rows, -2, 2), rng.uniform(1, -2, 2)};
        Tensor t0 = test::upload(dev, s, in[0]), t1 = test::upload(dev, {cols}, in[1]),
               t2 = test::upload(dev, {rows, 1}, in[2]), t3 = test::upload(dev, {1}, in[3]);
        Tensor o0(s, DType::F32, dev), o1(s, DType::F32, dev), o2(s, DType::F32, dev);
        ops::fused_elementwise(dev, at, {&t0, &t1, &t2, &t3}, {&o0, &o1, &o2});
        const auto want = reference(at, in, rows, cols, 3);
        EXPECT_TRUE(test::near(o0.to_vector(), want[0], 1e-5));
        EXPECT_TRUE(test::near(o1.to_vector(), want[1], 1e-5));
        EXPECT_TRUE(test::near(o2.to_vector(), want[2], 1e-5));
    }
    Tensor x0 = test::upload(dev, {3}, {1, 2, 3}), y({3}, DType::F32, dev);
    ops::fused_elementwise(dev, fresh, {&x0}, {&y});
    const float c = fresh.code[1].imm;
    EXPECT_EQ(y.to_vector(), (std::vector<float>{c, 2 * c, 3 * c}));
    size_t cached = 0;
    for (const auto& e : fs::directory_iterator(tmp.path / "xylem" / "cuda-fused"))
        cached += contains(e.path().filename().string(), fz::kernel_name(pk::fused_program_key(fresh, 1, 1)));
    EXPECT_EQ(cached, 1u) << "the new program's kernel is not in the disk cache";
}

// In a captured graph the op's params are part of the recorded launch: replays accumulate with the
// value the capture saw, and an input aliasing its output exactly is read before it is written.
TEST(CudaFusedPlugin, CapturedLaunchReplaysWithItsParams) {
    if (!have_gpu()) GTEST_SKIP() << "no GPU here";
    Device& dev = cuda_device();
    ASSERT_TRUE(dev.supports_capture());
    FusedBuilder b;
    const auto acc = b.input(0), x = b.input(1);
    b.output(0, b.apply(XYLEM_FUSED_FMA, x, b.param(0.5f), acc));  // acc += 0.5 * x
    const xylem_fused_attrs at = b.finish({XYLEM_FUSED_FULL, XYLEM_FUSED_ROW});
    Tensor a = test::upload(dev, {2, 3}, {0, 0, 0, 0, 0, 0}), row = test::upload(dev, {3}, {2, 4, 6});
    Graph g = Graph::capture(dev, [&] { ops::fused_elementwise(dev, at, {&a, &row}, {&a}); });
    for (float k : {1.0f, 2.0f, 3.0f}) {
        g.launch();
        EXPECT_EQ(a.to_vector(), (std::vector<float>{k, 2 * k, 3 * k, k, 2 * k, 3 * k}));
    }
}

// The program TheNextProcessLoadsTheKernelFromDisk runs in child processes: out = x * 3 + 1.
xylem_fused_attrs child_program() {
    FusedBuilder b;
    b.output(0, b.apply(XYLEM_FUSED_FMA, b.input(0), b.constant(3.0f), b.constant(1.0f)));
    return b.finish({XYLEM_FUSED_FULL});
}

// Only as a child of TheNextProcessLoadsTheKernelFromDisk (skipped otherwise).
TEST(CudaFusedPlugin, ChildProcessRunsOneProgram) {
    if (!std::getenv("XYLEM_TEST_FUSED_CHILD")) GTEST_SKIP() << "run by TheNextProcessLoadsTheKernelFromDisk";
    Device& dev = cuda_device();
    Tensor x = test::upload(dev, {4}, {0, 1, 2, -1}), y({4}, DType::F32, dev);
    ops::fused_elementwise(dev, child_program(), {&x}, {&y});
    EXPECT_EQ(y.to_vector(), (std::vector<float>{1, 4, 7, -2}));
}

// A second process loads the first one's cubin (the file is not replaced), and a damaged file is
// rebuilt (replaced) without an error.
TEST(CudaFusedPlugin, TheNextProcessLoadsTheKernelFromDisk) {
    if (!have_gpu()) GTEST_SKIP() << "no GPU here";
    TempDir tmp;
    const std::string cmd = "XDG_CACHE_HOME='" + tmp.path.string() + "' XYLEM_TEST_FUSED_CHILD=1 '" +
                            fs::read_symlink("/proc/self/exe").string() +
                            "' --gtest_filter=CudaFusedPlugin.ChildProcessRunsOneProgram > '" +
                            (tmp.path / "child.log").string() + "' 2>&1";
    const xylem_fused_attrs at = child_program();
    const std::string name = fz::kernel_name(pk::fused_program_key(at, 1, 1));
    auto cached_file = [&]() -> fs::path {
        for (const auto& e : fs::directory_iterator(tmp.path / "xylem" / "cuda-fused"))
            if (contains(e.path().filename().string(), name)) return e.path();
        return {};
    };
    auto inode = [](const fs::path& p) {
        struct stat st {};
        return ::stat(p.c_str(), &st) == 0 ? st.st_ino : 0;
    };
    ASSERT_EQ(std::system(cmd.c_str()), 0) << read_file(tmp.path / "child.log");
    const fs::path file = cached_file();
    ASSERT_FALSE(file.empty()) << "the first process wrote no cache file";
    const auto first = inode(file);
    const auto size = fs::file_size(file);
    ASSERT_EQ(std::system(cmd.c_str()), 0) << read_file(tmp.path / "child.log");
    EXPECT_EQ(inode(file), first) << "the second process compiled again instead of loading the file";
    write_all(file, read_file(file).substr(0, size / 2));  // truncated: refused, rebuilt
    ASSERT_EQ(std::system(cmd.c_str()), 0) << read_file(tmp.path / "child.log");
    EXPECT_EQ(fs::file_size(file), size);
}

// Inputs sharing an output's memory other than exactly are refused before anything runs.
TEST(CudaFusedPlugin, PartialAliasIsRefused) {
    if (!have_gpu()) GTEST_SKIP() << "no GPU here";
    Device& dev = cuda_device();
    FusedBuilder b;
    b.output(0, b.apply(XYLEM_FUSED_NEG, b.input(0)));
    const xylem_fused_attrs at = b.finish({XYLEM_FUSED_FULL});
    Tensor t = test::upload(dev, {4, 2}, {1, 2, 3, 4, 5, 6, 7, 8});
    Tensor head = t.rows(0, 3), tail = t.rows(1, 3);
    try {
        ops::fused_elementwise(dev, at, {&head}, {&tail});
        ADD_FAILURE() << "a shifted alias ran";
    } catch (const Error& e) {
        EXPECT_TRUE(contains(e.what(), "input 0 (full) overlaps output 0")) << e.what();
    }
}

}  // namespace
}  // namespace xylem
