// The native plugin's fused_elementwise executor (plugins/native/ops/fused.cpp), where its tiling
// can go wrong: broadcast inputs on tiles that start mid-row and span rows, inputs that are also
// outputs, sizes 0, 1 and around the 512-element tile, iteration spaces big enough to be split
// over threads, every opcode, and the memory overlaps it refuses. The reference evaluates the
// program per element in float64 with the kit's own arithmetic (fused_apply<double>).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "support/backends.h"
#include "support/reference.h"
#include "xylem/error.h"
#include "xylem/fused_builder.h"
#include "xylem/op_calls.h"
#include "xylem/plugin_kit/fused.h"

namespace xylem::test {
namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr double kTol = 1e-5;  // ops.h: relative to max(1, max|ref|), per output

// The program's outputs over a rows x cols space, per element in float64.
std::vector<std::vector<double>> reference(const xylem_fused_attrs& at, const std::vector<std::vector<float>>& inputs,
                                           int64_t rows, int64_t cols, uint32_t n_outputs) {
    std::vector<std::vector<double>> out(n_outputs, std::vector<double>(static_cast<size_t>(rows * cols)));
    double reg[XYLEM_FUSED_MAX_REGS] = {};
    for (int64_t e = 0; e < rows * cols; ++e) {
        const int64_t r = e / cols, c = e % cols;
        for (uint32_t k = 0; k < at.n_instrs; ++k) {
            const xylem_fused_instr& in = at.code[k];
            switch (in.op) {
            case XYLEM_FUSED_INPUT: {
                const uint8_t mode = at.input_modes[in.a];
                const int64_t i = mode == XYLEM_FUSED_FULL ? e : mode == XYLEM_FUSED_ROW ? c : mode == XYLEM_FUSED_COL ? r : 0;
                reg[in.dst] = inputs[in.a][static_cast<size_t>(i)];
                break;
            }
            case XYLEM_FUSED_PARAM: reg[in.dst] = at.params[in.a]; break;
            case XYLEM_FUSED_CONST: reg[in.dst] = in.imm; break;
            case XYLEM_FUSED_OUTPUT: out[in.dst][static_cast<size_t>(e)] = reg[in.a]; break;
            default: {
                const int arity = plugin_kit::fused_opcode_info(in.op).arity;
                reg[in.dst] = plugin_kit::fused_apply<double>(in.op, reg[in.a], arity > 1 ? reg[in.b] : 0.0,
                                                              arity > 2 ? reg[in.c] : 0.0);
            }
            }
        }
    }
    return out;
}

class NativeFused : public ::testing::Test {
protected:
    void SetUp() override {
        backend_ = backend_named("native");
        ASSERT_TRUE(backend_) << "the native plugin was not found";
        dev_ = backend_->device(0);
    }
    Device& dev() { return *dev_; }

    // Runs `at` on fresh output tensors of `out_shape` (pre-filled with NaN) and compares each
    // output with the reference.
    void check(const xylem_fused_attrs& at, const std::vector<Shape>& in_shapes,
               const std::vector<std::vector<float>>& in_values, const Shape& out_shape, uint32_t n_outputs) {
        std::vector<Tensor> ins, outs;
        for (size_t i = 0; i < in_shapes.size(); ++i) ins.push_back(upload(dev(), in_shapes[i], in_values[i]));
        for (uint32_t o = 0; o < n_outputs; ++o)
            outs.push_back(upload(dev(), out_shape, std::vector<float>(static_cast<size_t>(numel(out_shape)), kNaN)));
        std::vector<const Tensor*> in_ptrs;
        std::vector<Tensor*> out_ptrs;
        for (Tensor& t : ins) in_ptrs.push_back(&t);
        for (Tensor& t : outs) out_ptrs.push_back(&t);
        ops::fused_elementwise(dev(), at, in_ptrs, out_ptrs);
        const int64_t cols = out_shape.empty() ? 1 : out_shape.back();
        const int64_t rows = cols ? numel(out_shape) / cols : 0;
        const auto want = reference(at, in_values, rows, cols, n_outputs);
        for (uint32_t o = 0; o < n_outputs; ++o)
            EXPECT_TRUE(near(outs[o].to_vector(), want[o], kTol)) << "output " << o;
    }

private:
    std::shared_ptr<Backend> backend_;
    std::shared_ptr<Device> dev_;
};

// Two outputs over one input of each mode: y0 = fma(full, row, col) * scalar + p,
// y1 = select(full > col, row, -scalar).
xylem_fused_attrs broadcast_program() {
    FusedBuilder b;
    const auto full = b.input(0), row = b.input(1), col = b.input(2), scalar = b.input(3);
    const auto t = b.apply(XYLEM_FUSED_FMA, full, row, col);
    b.output(0, b.apply(XYLEM_FUSED_ADD, b.apply(XYLEM_FUSED_MUL, t, scalar), b.param(0.25f)));
    const auto gt = b.apply(XYLEM_FUSED_GT, full, col);
    b.output(1, b.apply(XYLEM_FUSED_SELECT, gt, row, b.apply(XYLEM_FUSED_NEG, scalar)));
    return b.finish({XYLEM_FUSED_FULL, XYLEM_FUSED_ROW, XYLEM_FUSED_COL, XYLEM_FUSED_SCALAR});
}

// Column counts around and across the 512-element tile, so tiles start mid-row and hold many rows
// (cols 3 and 33, either side of the executor's element-by-element broadcast of short rows), a
// row's end (511, 513) or part of one row (1537); one row and one column make ROW and COL read as
// FULL or SCALAR.
TEST_F(NativeFused, BroadcastModesOnTileAndRowBoundaries) {
    Rng rng;
    const xylem_fused_attrs at = broadcast_program();
    for (int64_t rows : {1, 2, 7, 700})
        for (int64_t cols : {1, 3, 33, 511, 512, 513, 1537}) {
            SCOPED_TRACE("rows " + std::to_string(rows) + " cols " + std::to_string(cols));
            check(at, {{rows, cols}, {cols}, {rows, 1}, {}},
                  {rng.uniform(rows * cols), rng.uniform(cols), rng.uniform(rows), rng.uniform(1)}, {rows, cols}, 2);
        }
}

// Element counts 0, 1, around one and two tiles, and big enough for several workers (the
// executor splits above 32k elements per worker when the machine has the CPUs).
TEST_F(NativeFused, SizesAroundTheTileAndAcrossThreads) {
    Rng rng;
    FusedBuilder b;
    const auto x = b.input(0), y = b.input(1);
    b.output(0, b.apply(XYLEM_FUSED_TANH, b.apply(XYLEM_FUSED_FMA, x, y, b.constant(0.5f))));
    const xylem_fused_attrs at = b.finish({XYLEM_FUSED_FULL, XYLEM_FUSED_FULL});
    for (int64_t n : {0, 1, 7, 511, 512, 513, 1024, 1025, 100003, 1 << 20}) {
        SCOPED_TRACE("n " + std::to_string(n));
        check(at, {{n}, {n}}, {rng.uniform(n, -3.0f, 3.0f), rng.uniform(n, -3.0f, 3.0f)}, {n}, 1);
    }
}

// Rank 0 (one element) and an empty last axis with rows (nothing to do, nothing read).
TEST_F(NativeFused, RankZeroAndEmptyRows) {
    FusedBuilder b;
    b.output(0, b.apply(XYLEM_FUSED_SQUARE, b.input(0)));
    const xylem_fused_attrs at = b.finish({XYLEM_FUSED_FULL});
    check(at, {{}}, {{-1.5f}}, {}, 1);
    check(at, {{4, 0}}, {{}}, {4, 0}, 1);
}

// x is input 0 and output 0, and output 1 is computed from x after output 0 has overwritten it
// (written by hand: FusedBuilder stores every output last): the executor must copy x into its
// register, not read it in place. Sizes span tiles and threads.
TEST_F(NativeFused, InputAliasesOutputInPlace) {
    xylem_fused_attrs at{};
    at.version = XYLEM_FUSED_VERSION;
    at.n_regs = 3;
    at.n_params = 1;
    at.params[0] = 0.1f;
    at.input_modes[0] = at.input_modes[1] = XYLEM_FUSED_FULL;
    const xylem_fused_instr code[] = {
        {XYLEM_FUSED_INPUT, 0, 0, 0, 0, {}, 0.0f},   // r0 = x
        {XYLEM_FUSED_INPUT, 1, 1, 0, 0, {}, 0.0f},   // r1 = g
        {XYLEM_FUSED_PARAM, 2, 0, 0, 0, {}, 0.0f},   // r2 = 0.1
        {XYLEM_FUSED_MUL, 1, 1, 2, 0, {}, 0.0f},     // r1 = g * 0.1
        {XYLEM_FUSED_SUB, 1, 0, 1, 0, {}, 0.0f},     // r1 = x - g * 0.1
        {XYLEM_FUSED_OUTPUT, 0, 1, 0, 0, {}, 0.0f},  // x = r1
        {XYLEM_FUSED_MUL, 0, 0, 0, 0, {}, 0.0f},     // r0 = old x * old x
        {XYLEM_FUSED_OUTPUT, 1, 0, 0, 0, {}, 0.0f},
    };
    at.n_instrs = sizeof code / sizeof code[0];
    std::copy(std::begin(code), std::end(code), at.code);
    Rng rng;
    for (int64_t n : {1, 513, 300001}) {
        SCOPED_TRACE("n " + std::to_string(n));
        const auto xv = rng.uniform(n), gv = rng.uniform(n);
        Tensor tx = upload(dev(), {n}, xv), tg = upload(dev(), {n}, gv);
        Tensor t1 = upload(dev(), {n}, std::vector<float>(static_cast<size_t>(n), kNaN));
        ops::fused_elementwise(dev(), at, {&tx, &tg}, {&tx, &t1});
        const auto want = reference(at, {xv, gv}, 1, n, 2);
        EXPECT_TRUE(near(tx.to_vector(), want[0], kTol)) << "x updated in place";
        EXPECT_TRUE(near(t1.to_vector(), want[1], kTol)) << "x*x from the old x";
    }
}

// Every arithmetic opcode in one program, on values inside each one's domain; hand-packed so
// registers are reused as destinations of instructions that read them.
TEST_F(NativeFused, EveryOpcode) {
    Rng rng;
    FusedBuilder b;
    const auto x = b.input(0), pos = b.input(1), z = b.input(2);  // x in [-2, 2], pos in [0.1, 3]
    std::vector<FusedBuilder::Value> terms;
    for (uint32_t op = XYLEM_FUSED_ADD; op < XYLEM_FUSED_OPCODE_COUNT_; ++op) {
        const auto code = static_cast<xylem_fused_opcode>(op);
        const int arity = plugin_kit::fused_opcode_info(op).arity;
        const bool needs_positive = op == XYLEM_FUSED_LOG || op == XYLEM_FUSED_SQRT || op == XYLEM_FUSED_RSQRT ||
                                    op == XYLEM_FUSED_RECIP;
        const auto a = needs_positive ? pos : op == XYLEM_FUSED_SELECT || op == XYLEM_FUSED_EQ ? z : x;
        terms.push_back(arity == 1 ? b.apply(code, a) : arity == 2 ? b.apply(code, a, op == XYLEM_FUSED_DIV ? pos : x)
                                                                   : b.apply(code, a, x, pos));
    }
    // Outputs of sums of a few terms each (an output per opcode would exceed the 8 outputs).
    for (size_t t = 0; t < terms.size(); t += 4) {
        auto sum = terms[t];
        for (size_t k = t + 1; k < std::min(terms.size(), t + 4); ++k) sum = b.apply(XYLEM_FUSED_ADD, sum, terms[k]);
        b.output(static_cast<uint32_t>(t / 4), sum);
    }
    const uint32_t n_out = static_cast<uint32_t>((terms.size() + 3) / 4);
    const xylem_fused_attrs at = b.finish({XYLEM_FUSED_FULL, XYLEM_FUSED_FULL, XYLEM_FUSED_FULL});
    const int64_t n = 2000;
    std::vector<float> zv = rng.uniform(n);
    for (size_t i = 0; i < zv.size(); i += 3) zv[i] = 0.0f;  // SELECT's and EQ's both branches
    auto xv = rng.uniform(n, -2.0f, 2.0f);
    for (size_t i = 0; i < xv.size(); i += 5) xv[i] = zv[i];  // EQ true somewhere
    check(at, {{n}, {n}, {n}}, {xv, rng.uniform(n, 0.1f, 3.0f), zv}, {n}, n_out);
}

// NaN and infinities through the opcodes whose rules name them (min/max propagate NaN, relu of
// NaN is 0, x/0 is inf, log 0 is -inf): NaN where the reference is NaN, the same infinity, else near.
TEST_F(NativeFused, NaNAndInfinityRules) {
    const uint32_t ops[] = {XYLEM_FUSED_MIN, XYLEM_FUSED_MAX, XYLEM_FUSED_RELU, XYLEM_FUSED_DIV,
                            XYLEM_FUSED_LOG, XYLEM_FUSED_ABS, XYLEM_FUSED_SELECT, XYLEM_FUSED_RELU_GRAD};
    const float inf = std::numeric_limits<float>::infinity();
    const std::vector<float> a = {kNaN, 1.0f, kNaN, 0.0f, -1.0f, inf, -inf, 2.0f, 0.0f};
    const std::vector<float> bv = {1.0f, kNaN, kNaN, 0.0f, 0.0f, 1.0f, 3.0f, -inf, kNaN};
    const int64_t n = static_cast<int64_t>(a.size());
    for (uint32_t op : ops) {
        SCOPED_TRACE(plugin_kit::fused_opcode_info(op).name);
        FusedBuilder b;
        const auto x = b.input(0), y = b.input(1);
        const int arity = plugin_kit::fused_opcode_info(op).arity;
        b.output(0, b.apply(static_cast<xylem_fused_opcode>(op), x, y, arity > 2 ? b.constant(-5.0f) : 0));
        const xylem_fused_attrs at = b.finish({XYLEM_FUSED_FULL, XYLEM_FUSED_FULL});
        Tensor ta = upload(dev(), {n}, a), tb = upload(dev(), {n}, bv), out(Shape{n}, DType::F32, dev());
        ops::fused_elementwise(dev(), at, {&ta, &tb}, {&out});
        const auto got = out.to_vector();
        const auto want = reference(at, {a, bv}, 1, n, 1)[0];
        for (size_t i = 0; i < got.size(); ++i) {
            if (std::isnan(want[i])) EXPECT_TRUE(std::isnan(got[i])) << "element " << i << " got " << got[i];
            else if (std::isinf(want[i])) EXPECT_EQ(static_cast<double>(got[i]), want[i]) << "element " << i;
            else EXPECT_NEAR(got[i], want[i], 1e-6 * std::max(1.0, std::fabs(want[i]))) << "element " << i;
        }
    }
}

// exp, tanh, log, sigmoid and erf (the opcodes native computes with its own vectorised exp, tanh,
// log and erf, plugins/native/vecmath.h) over a sweep of every 4093rd float bit pattern: NaN where
// libm gives NaN, the same infinities and zeros, normal results within 1e-6 relative of libm's
// float functions, subnormal ones within two units of the last place.
TEST_F(NativeFused, TranscendentalsMatchLibmAcrossTheFloats) {
    std::vector<float> x;
    for (uint64_t bits = 0; bits < (uint64_t{1} << 32); bits += 4093) {
        const uint32_t b = static_cast<uint32_t>(bits);
        float v;
        std::memcpy(&v, &b, sizeof v);
        x.push_back(v);
    }
    const uint32_t ops[] = {XYLEM_FUSED_EXP, XYLEM_FUSED_TANH, XYLEM_FUSED_LOG, XYLEM_FUSED_SIGMOID, XYLEM_FUSED_ERF};
    float (*const libm[])(float) = {[](float v) { return std::exp(v); }, [](float v) { return std::tanh(v); },
                                    [](float v) { return std::log(v); },
                                    [](float v) { return 1.0f / (1.0f + std::exp(-v)); },
                                    [](float v) { return std::erf(v); }};
    constexpr int kOps = 5;
    FusedBuilder b;
    const auto in = b.input(0);
    for (uint32_t k = 0; k < kOps; ++k) b.output(k, b.apply(static_cast<xylem_fused_opcode>(ops[k]), in));
    const xylem_fused_attrs at = b.finish({XYLEM_FUSED_FULL});
    const int64_t n = static_cast<int64_t>(x.size());
    Tensor tx = upload(dev(), {n}, x);
    std::vector<Tensor> outs;
    for (int k = 0; k < kOps; ++k) outs.emplace_back(Shape{n}, DType::F32, dev());
    ops::fused_elementwise(dev(), at, {&tx}, {&outs[0], &outs[1], &outs[2], &outs[3], &outs[4]});
    const float tiny = std::numeric_limits<float>::denorm_min();
    for (int k = 0; k < kOps; ++k) {
        SCOPED_TRACE(plugin_kit::fused_opcode_info(ops[k]).name);
        const std::vector<float> got = outs[static_cast<size_t>(k)].to_vector();
        int failures = 0;
        for (size_t i = 0; i < x.size() && failures < 5; ++i) {
            const float want = libm[k](x[i]), g = got[i];
            bool ok;
            if (std::isnan(want) || std::isinf(want) || want == 0.0f) ok = std::isnan(want) ? std::isnan(g) : g == want;
            else if (std::fabs(want) < std::numeric_limits<float>::min()) ok = std::fabs(g - want) <= 2 * tiny;
            else ok = std::fabs(static_cast<double>(g) - want) <= 1e-6 * std::fabs(want);
            if (!ok) {
                ++failures;
                ADD_FAILURE() << "x = " << std::hexfloat << x[i] << ": got " << g << ", libm " << want;
            }
        }
    }
}

// The GELUs and their gradients (the kit's formulas over vecmath's erf, exp and tanh) against the
// float64 definitions over [-12, 12] and the special values: within 1e-6 of max(1, |x|) (1 + erf
// cancels for negative x, in libm's float erf as in vecmath's), the infinities and NaN as the
// kit's formulas give them (gelu(-inf) is -inf * 0: NaN).
TEST_F(NativeFused, GeluMatchesItsDefinition) {
    std::vector<float> x;
    for (int i = -120000; i <= 120000; ++i) x.push_back(static_cast<float>(i) * 1e-4f);
    for (float v : {0.0f, -0.0f, 1e-30f, -1e-30f, 30.0f, -30.0f, 1e10f, -1e10f}) x.push_back(v);
    const uint32_t ops[] = {XYLEM_FUSED_GELU, XYLEM_FUSED_GELU_TANH, XYLEM_FUSED_GELU_GRAD, XYLEM_FUSED_GELU_TANH_GRAD};
    double (*const want[])(double) = {ref::gelu, ref::gelu_tanh, ref::gelu_grad, ref::gelu_tanh_grad};
    FusedBuilder b;
    const auto in = b.input(0), one = b.constant(1.0f);
    b.output(0, b.apply(XYLEM_FUSED_GELU, in));
    b.output(1, b.apply(XYLEM_FUSED_GELU_TANH, in));
    b.output(2, b.apply(XYLEM_FUSED_GELU_GRAD, one, in));
    b.output(3, b.apply(XYLEM_FUSED_GELU_TANH_GRAD, one, in));
    const xylem_fused_attrs at = b.finish({XYLEM_FUSED_FULL});
    const int64_t n = static_cast<int64_t>(x.size());
    Tensor tx = upload(dev(), {n}, x);
    std::vector<Tensor> outs;
    for (int k = 0; k < 4; ++k) outs.emplace_back(Shape{n}, DType::F32, dev());
    ops::fused_elementwise(dev(), at, {&tx}, {&outs[0], &outs[1], &outs[2], &outs[3]});
    for (int k = 0; k < 4; ++k) {
        SCOPED_TRACE(plugin_kit::fused_opcode_info(ops[k]).name);
        const std::vector<float> got = outs[static_cast<size_t>(k)].to_vector();
        int failures = 0;
        for (size_t i = 0; i < x.size() && failures < 5; ++i) {
            const double w = want[k](x[i]), g = got[i];
            const bool ok = std::isfinite(w) ? std::fabs(g - w) <= 1e-6 * std::max(1.0, std::fabs(double{x[i]}))
                                             : (std::isnan(w) ? std::isnan(g) : g == w);
            if (!ok) {
                ++failures;
                ADD_FAILURE() << "x = " << x[i] << ": got " << g << ", want " << w;
            }
        }
    }
    // act_fwd and act_bwd give the same bits as the opcodes.
    Tensor y({n}, DType::F32, dev()), dx({n}, DType::F32, dev());
    const Tensor ones = upload(dev(), {n}, std::vector<float>(static_cast<size_t>(n), 1.0f));
    ops::act_fwd(dev(), XYLEM_ACT_GELU, tx, y);
    EXPECT_EQ(y.to_vector(), outs[0].to_vector());
    ops::act_fwd(dev(), XYLEM_ACT_GELU_TANH, tx, y);
    EXPECT_EQ(y.to_vector(), outs[1].to_vector());
    ops::act_bwd(dev(), XYLEM_ACT_GELU, ones, tx, dx);
    EXPECT_EQ(dx.to_vector(), outs[2].to_vector());
    ops::act_bwd(dev(), XYLEM_ACT_GELU_TANH, ones, tx, dx);
    EXPECT_EQ(dx.to_vector(), outs[3].to_vector());
}

// The kit checks only the register fields an opcode reads; an arity-1 instruction whose b and c
// hold out-of-range values must still run (the executor may not index with them).
TEST_F(NativeFused, UnreadRegisterFieldsAreIgnored) {
    xylem_fused_attrs at{};
    at.version = XYLEM_FUSED_VERSION;
    at.n_regs = 2;
    at.input_modes[0] = XYLEM_FUSED_FULL;
    at.code[0] = {XYLEM_FUSED_INPUT, 0, 0, 255, 255, {}, 0.0f};
    at.code[1] = {XYLEM_FUSED_EXP, 1, 0, 255, 255, {}, 0.0f};
    at.code[2] = {XYLEM_FUSED_MUL, 1, 1, 0, 255, {}, 0.0f};
    at.code[3] = {XYLEM_FUSED_OUTPUT, 0, 1, 255, 255, {}, 0.0f};
    at.n_instrs = 4;
    Rng rng;
    check(at, {{1000}}, {rng.uniform(1000)}, {1000}, 1);
}

// Overlaps the op's rule forbids: an input sharing an output's memory at another offset, a ROW
// input sharing an output's start, two outputs on one memory. Each is a clear error.
TEST_F(NativeFused, RefusesPartialOverlaps) {
    FusedBuilder b;
    b.output(0, b.apply(XYLEM_FUSED_NEG, b.input(0)));
    const xylem_fused_attrs full = b.finish({XYLEM_FUSED_FULL});
    Tensor m = upload(dev(), {8, 4}, std::vector<float>(32, 1.0f));
    Tensor lo = m.rows(0, 4), hi = m.rows(2, 4);  // rows 2 and 3 shared
    try {
        ops::fused_elementwise(dev(), full, {&lo}, {&hi});
        ADD_FAILURE() << "a partial overlap ran";
    } catch (const Error& e) {
        EXPECT_TRUE(contains(e.what(), "input 0 (full) overlaps output 0"));
    }

    const xylem_fused_attrs row = b.finish({XYLEM_FUSED_ROW});
    Tensor first = m.rows(0, 1).reshaped({4});
    try {
        ops::fused_elementwise(dev(), row, {&first}, {&m});
        ADD_FAILURE() << "a row input inside its output ran";
    } catch (const Error& e) {
        EXPECT_TRUE(contains(e.what(), "input 0 (row) overlaps output 0"));
    }

    FusedBuilder two;
    const auto x = two.input(0);
    two.output(0, x);
    two.output(1, two.apply(XYLEM_FUSED_NEG, x));
    const xylem_fused_attrs two_out = two.finish({XYLEM_FUSED_FULL});
    Tensor src = upload(dev(), {4, 4}, std::vector<float>(16, 2.0f));
    Tensor o0 = m.rows(0, 4), o1 = m.rows(3, 4);
    try {
        ops::fused_elementwise(dev(), two_out, {&src}, {&o0, &o1});
        ADD_FAILURE() << "overlapping outputs ran";
    } catch (const Error& e) {
        EXPECT_TRUE(contains(e.what(), "output 0 overlaps output 1"));
    }
}


// The executor's rewrites (ops/fused.cpp, prepare: values filled once, instructions over values
// alone computed once, add/sub of scaled terms and min(max(x, lo), hi) as one pass, row inputs
// read in place, results stored straight into outputs) change no element's arithmetic: random
// programs built around those patterns give the same bits run whole as run one instruction at a
// time, each instruction its own program over full-size tensors (as the executor once ran them).
TEST_F(NativeFused, RewritesGiveTheSameBitsAsOneInstructionAtATime) {
    std::mt19937 g(2027);
    auto pick = [&](size_t n) { return static_cast<size_t>(g() % n); };
    auto value = [&] { return std::uniform_real_distribution<float>(-2.0f, 2.0f)(g); };
    const xylem_fused_opcode unary[] = {XYLEM_FUSED_TANH, XYLEM_FUSED_SIGMOID, XYLEM_FUSED_EXP, XYLEM_FUSED_NEG,
                                        XYLEM_FUSED_GELU, XYLEM_FUSED_SQUARE};
    const xylem_fused_opcode binary[] = {XYLEM_FUSED_ADD, XYLEM_FUSED_SUB, XYLEM_FUSED_MUL, XYLEM_FUSED_MIN,
                                         XYLEM_FUSED_MAX};
    for (int prog = 0; prog < 60; ++prog) {
        SCOPED_TRACE("program " + std::to_string(prog));
        const int64_t rows = 1 + static_cast<int64_t>(pick(9)), cols = 1 + static_cast<int64_t>(pick(700));
        const uint8_t all_modes[] = {XYLEM_FUSED_FULL, XYLEM_FUSED_ROW, XYLEM_FUSED_COL, XYLEM_FUSED_SCALAR};
        std::vector<uint8_t> modes;
        std::vector<Tensor> ins;
        const size_t n_in = 1 + pick(3);
        for (size_t i = 0; i < n_in; ++i) {
            const uint8_t m = i == 0 ? static_cast<uint8_t>(XYLEM_FUSED_FULL) : all_modes[pick(4)];
            modes.push_back(m);
            const Shape s = m == XYLEM_FUSED_FULL  ? Shape{rows, cols}
                            : m == XYLEM_FUSED_ROW ? Shape{cols}
                            : m == XYLEM_FUSED_COL ? Shape{rows, 1}
                                                   : Shape{1};
            std::vector<float> v(static_cast<size_t>(numel(s)));
            for (float& x : v) x = std::uniform_real_distribution<float>(-3.0f, 3.0f)(g);
            ins.push_back(upload(dev(), s, v));
        }
        FusedBuilder b;
        std::vector<FusedBuilder::Value> vals;
        for (size_t i = 0; i < n_in; ++i) vals.push_back(b.input(static_cast<uint32_t>(i)));
        auto any = [&] { return vals[pick(vals.size())]; };
        auto scalar = [&] { return pick(2) ? b.param(value()) : b.constant(value()); };
        for (size_t k = 0, n_ops = 3 + pick(10); k < n_ops; ++k) {
            switch (pick(6)) {
            case 0: {  // add/sub(mul(s, X), mul(Y, t)), X and Y possibly products
                const auto x = pick(2) ? b.apply(XYLEM_FUSED_MUL, any(), any()) : any();
                const auto y = pick(2) ? b.apply(XYLEM_FUSED_MUL, any(), any()) : any();
                vals.push_back(b.apply(pick(2) ? XYLEM_FUSED_ADD : XYLEM_FUSED_SUB, b.apply(XYLEM_FUSED_MUL, scalar(), x),
                                       b.apply(XYLEM_FUSED_MUL, y, scalar())));
                break;
            }
            case 1: vals.push_back(b.apply(XYLEM_FUSED_MIN, b.apply(XYLEM_FUSED_MAX, any(), scalar()), scalar())); break;
            case 2: vals.push_back(b.apply(unary[pick(6)], any())); break;
            case 3: vals.push_back(b.apply(binary[pick(5)], any(), pick(3) ? any() : scalar())); break;
            case 4: vals.push_back(b.apply(XYLEM_FUSED_FMA, scalar(), b.apply(XYLEM_FUSED_SUB, scalar(), scalar()), any()));
                break;
            default: vals.push_back(b.apply(XYLEM_FUSED_MUL, scalar(), any())); break;
            }
        }
        const size_t n_out = 1 + pick(2);
        for (size_t o = 0; o < n_out; ++o) b.output(static_cast<uint32_t>(o), vals[vals.size() - 1 - o]);
        if (!b.fits()) continue;
        const xylem_fused_attrs at = b.finish(modes);
        std::vector<const Tensor*> in_ptrs;
        for (Tensor& t : ins) in_ptrs.push_back(&t);
        std::vector<Tensor> whole;
        std::vector<Tensor*> whole_ptrs;
        for (size_t o = 0; o < n_out; ++o) whole.emplace_back(Shape{rows, cols}, DType::F32, dev());
        for (Tensor& t : whole) whole_ptrs.push_back(&t);
        ops::fused_elementwise(dev(), at, in_ptrs, whole_ptrs);

        // One instruction at a time: each register a full tensor, each instruction a program.
        std::vector<Tensor> reg;
        for (uint32_t r = 0; r < at.n_regs; ++r) reg.emplace_back(Shape{rows, cols}, DType::F32, dev());
        std::vector<std::vector<float>> out(n_out);
        for (uint32_t k = 0; k < at.n_instrs; ++k) {
            const xylem_fused_instr& in = at.code[k];
            xylem_fused_attrs one{};
            one.version = XYLEM_FUSED_VERSION;
            std::vector<const Tensor*> srcs;
            if (in.op == XYLEM_FUSED_OUTPUT) {
                out[in.dst] = reg[in.a].to_vector();
                continue;
            }
            if (in.op == XYLEM_FUSED_INPUT || in.op == XYLEM_FUSED_PARAM || in.op == XYLEM_FUSED_CONST) {
                one.code[0] = in;
                one.code[0].dst = 0;
                if (in.op == XYLEM_FUSED_INPUT) {
                    one.code[0].a = 0;
                    one.input_modes[0] = modes[in.a];
                    srcs.push_back(&ins[in.a]);
                } else if (in.op == XYLEM_FUSED_PARAM) {
                    one.code[0].a = 0;
                    one.n_params = 1;
                    one.params[0] = at.params[in.a];
                }
            } else {
                const int arity = plugin_kit::fused_opcode_info(in.op).arity;
                const uint8_t operand[3] = {in.a, in.b, in.c};
                for (int j = 0; j < arity; ++j) {
                    one.code[j] = {XYLEM_FUSED_INPUT, static_cast<uint8_t>(j), static_cast<uint8_t>(j), 0, 0, {}, 0.0f};
                    one.input_modes[j] = XYLEM_FUSED_FULL;
                    srcs.push_back(&reg[operand[j]]);
                }
                one.code[arity] = {in.op, 0, 0, static_cast<uint8_t>(arity > 1 ? 1 : 0),
                                   static_cast<uint8_t>(arity > 2 ? 2 : 0), {}, 0.0f};
                one.n_instrs = static_cast<uint32_t>(arity);
            }
            one.code[one.n_instrs + 1] = {XYLEM_FUSED_OUTPUT, 0, 0, 0, 0, {}, 0.0f};
            one.n_instrs += 2;
            one.n_regs = 3;
            Tensor result(Shape{rows, cols}, DType::F32, dev());
            ops::fused_elementwise(dev(), one, srcs, {&result});
            reg[in.dst] = std::move(result);
        }
        for (size_t o = 0; o < n_out; ++o) {
            const std::vector<float> got = whole[o].to_vector();
            ASSERT_EQ(got.size(), out[o].size());
            EXPECT_EQ(0, std::memcmp(got.data(), out[o].data(), got.size() * sizeof(float)))
                << "output " << o << " of " << plugin_kit::fused_opcode_info(at.code[0].op).name << "...";
        }
    }
}

}  // namespace
}  // namespace xylem::test
