// The fused_elementwise suite's own guards (no backend needed): the float64 reference gives
// hand-computed values; it agrees with a second evaluator that walks the generator's DAG (so the
// builder's packing and the reference's broadcasting check each other); the random programs use
// every opcode, reach depth 8 and stay well-conditioned (a float32 executor lands far inside the
// tolerance); and a wrong opcode or swapped operands in any of them is caught.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <cstdio>
#include <random>
#include <set>

#include "ops/conformance.h"
#include "ops/fused_programs.h"
#include "support/backends.h"

namespace xylem::test {
namespace {

// The program run the way a float32 backend runs it: the kit's arithmetic on float registers.
std::vector<std::vector<float>> run_float32(const xylem_fused_attrs& at, const std::vector<std::vector<float>>& inputs,
                                            int64_t rows, int64_t cols, uint32_t n_outputs) {
    std::vector<std::vector<float>> out(n_outputs, std::vector<float>(static_cast<size_t>(rows * cols)));
    std::vector<float> r(at.n_regs, 0.0f);
    for (int64_t row = 0; row < rows; ++row)
        for (int64_t col = 0; col < cols; ++col)
            for (uint32_t k = 0; k < at.n_instrs; ++k) {
                const xylem_fused_instr& in = at.code[k];
                if (in.op == XYLEM_FUSED_INPUT)
                    r[in.dst] = inputs[in.a][static_cast<size_t>(fused::broadcast_index(at.input_modes[in.a], row, col, cols))];
                else if (in.op == XYLEM_FUSED_PARAM) r[in.dst] = at.params[in.a];
                else if (in.op == XYLEM_FUSED_CONST) r[in.dst] = in.imm;
                else if (in.op == XYLEM_FUSED_OUTPUT) out[in.dst][static_cast<size_t>(row * cols + col)] = r[in.a];
                else r[in.dst] = plugin_kit::fused_apply<float>(in.op, r[in.a], r[in.b], r[in.c]);
            }
    return out;
}

// The largest normalized error over the outputs.
double worst_error(const std::vector<std::vector<double>>& got, const std::vector<std::vector<double>>& want) {
    double worst = 0.0;
    for (size_t o = 0; o < want.size(); ++o) worst = std::max(worst, compare(to_float(got[o]), want[o]).error);
    return worst;
}

// The kit's fused_apply (what the native interpreter runs, and what the code generators' helpers
// spell) and the tests' independent table (tests/support/reference_fused.h) agree on every
// opcode over ordinary and special values: a wrong formula in either is caught here, and the
// programs' reference never shares code with what it checks.
// The GELUs are formulas of several steps; written independently they round differently in the
// last bits (x/sqrt(2) against x*0.7071...), so they agree to 1e-14 rather than exactly.
bool composite(uint32_t op) {
    return op == XYLEM_FUSED_GELU || op == XYLEM_FUSED_GELU_TANH || op == XYLEM_FUSED_GELU_GRAD ||
           op == XYLEM_FUSED_GELU_TANH_GRAD;
}

TEST(FusedReference, KitArithmeticMatchesTheIndependentTable) {
    const double inf = std::numeric_limits<double>::infinity(), nan = std::numeric_limits<double>::quiet_NaN();
    const std::vector<double> values = {-3.5, -1.0, -0.25, -0.0, 0.0, 0.3, 0.5, 1.0, 2.0, 7.25, -inf, inf, nan};
    for (uint32_t op = 0; op < XYLEM_FUSED_OPCODE_COUNT_; ++op) {
        EXPECT_EQ(plugin_kit::fused_opcode_info(op).arity, fused_reference_arity(op)) << "opcode " << op;
        if (op == XYLEM_FUSED_INPUT || op == XYLEM_FUSED_PARAM || op == XYLEM_FUSED_CONST || op == XYLEM_FUSED_OUTPUT)
            continue;
        for (double a : values)
            for (double b : values)
                for (double c : {-1.5, 0.0, 2.5}) {
                    const double kit = plugin_kit::fused_apply<double>(op, a, b, c);
                    const double mine = fused_reference_apply(op, a, b, c);
                    if (std::isnan(kit) || std::isnan(mine)) {
                        EXPECT_EQ(std::isnan(kit), std::isnan(mine))
                            << plugin_kit::fused_opcode_info(op).name << "(" << a << ", " << b << ", " << c << ")";
                    } else if (composite(op) && std::isfinite(mine)) {
                        EXPECT_NEAR(kit, mine, 1e-14 * std::max(1.0, std::fabs(mine)))
                            << plugin_kit::fused_opcode_info(op).name << "(" << a << ", " << b << ", " << c << ")";
                    } else {
                        EXPECT_EQ(kit, mine) << plugin_kit::fused_opcode_info(op).name << "(" << a << ", " << b << ", "
                                             << c << ")";
                    }
                }
    }
}

TEST(FusedReference, KnownValues) {
    // out0 = fma(x, row, p0) and out1 = select(gt(col, 0), sqrt(x), scalar) over [2, 3].
    FusedBuilder b;
    const auto x = b.input(0), row = b.input(1), col = b.input(2), scalar = b.input(3), p = b.param(0.5f);
    b.output(0, b.apply(XYLEM_FUSED_FMA, x, row, p));
    const auto zero = b.constant(0.0f);
    b.output(1, b.apply(XYLEM_FUSED_SELECT, b.apply(XYLEM_FUSED_GT, col, zero), b.apply(XYLEM_FUSED_SQRT, x), scalar));
    const auto at = b.finish({XYLEM_FUSED_FULL, XYLEM_FUSED_ROW, XYLEM_FUSED_COL, XYLEM_FUSED_SCALAR});
    const auto out = fused::reference(at, {{1, 4, 9, 16, 25, 36}, {1, 2, 3}, {-1, 1}, {7}}, 2, 3, 2);
    EXPECT_EQ(out[0], (std::vector<double>{1.5, 8.5, 27.5, 16.5, 50.5, 108.5}));
    EXPECT_EQ(out[1], (std::vector<double>{7, 7, 7, 4, 5, 6}));
    // A malformed program or a wrong input count is a test bug the reference names.
    EXPECT_THROW(fused::reference(at, {{1}, {1, 2, 3}, {-1, 1}, {7}}, 2, 3, 2), std::invalid_argument);
    xylem_fused_attrs bad = at;
    bad.version = 99;
    EXPECT_THROW(fused::reference(bad, {{1, 4, 9, 16, 25, 36}, {1, 2, 3}, {-1, 1}, {7}}, 2, 3, 2), std::invalid_argument);
}

TEST(FusedReference, ProgramsCoverEveryOpcodeAndDepth8) {
    const auto programs = fused::conformance_programs();
    std::set<uint32_t> seen;
    std::set<uint8_t> modes;
    int deepest = 0;
    uint32_t most_outputs = 0;
    for (const fused::Program& p : programs) {
        const xylem_fused_attrs at = p.attrs(std::vector<float>(p.n_params(), 1.0f));
        for (uint32_t k = 0; k < at.n_instrs; ++k) seen.insert(at.code[k].op);
        modes.insert(p.modes.begin(), p.modes.end());
        deepest = std::max(deepest, p.depth);
        EXPECT_LE(p.depth, 8);
        most_outputs = std::max(most_outputs, p.n_outputs());
    }
    EXPECT_EQ(seen.size(), static_cast<size_t>(XYLEM_FUSED_OPCODE_COUNT_));
    EXPECT_EQ(modes.size(), 4u);
    EXPECT_EQ(deepest, 8);
    EXPECT_GE(most_outputs, 3u);
}

// Two float64 evaluators, one on the DAG the generator built and one on the packed program a
// plugin receives, agree on every program, shape and run.
TEST(FusedReference, PackedProgramMatchesItsDag) {
    const auto programs = fused::conformance_programs();
    const auto shapes = fused::conformance_shapes();
    std::mt19937_64 rng(1);
    for (size_t k = 0; k < programs.size(); ++k)
        for (size_t j = 0; j < 3; ++j) {
            const fused::Program& p = programs[k];
            const fused::RunData d = fused::make_run(p, shapes[(3 * k + j) % shapes.size()], rng);
            const auto ref = fused::reference(p.attrs(d.params), d.inputs_f64(), d.rows, d.cols, p.n_outputs());
            const auto dag = p.eval_dag(d.inputs_f64(), d.params, d.rows, d.cols);
            for (uint32_t o = 0; o < p.n_outputs(); ++o)
                EXPECT_TRUE(near(to_float(ref[o]), dag[o], 1e-7)) << "program " << k << " output " << o << ": " << p.builder.describe();
        }
}

// A correct float32 executor passes with at least 10x headroom under the op's tolerance, so a
// backend's failure means a bug, not float32 rounding.
TEST(FusedReference, Float32ExecutionStaysFarInsideTheTolerance) {
    const auto programs = fused::conformance_programs();
    const auto shapes = fused::conformance_shapes();
    std::mt19937_64 rng(2);
    double worst = 0.0;
    for (size_t k = 0; k < programs.size(); ++k)
        for (size_t j = 0; j < shapes.size(); ++j) {
            const fused::Program& p = programs[k];
            const fused::RunData d = fused::make_run(p, shapes[j], rng);
            const xylem_fused_attrs at = p.attrs(d.params);
            const auto want = fused::reference(at, d.inputs_f64(), d.rows, d.cols, p.n_outputs());
            const auto got = run_float32(at, d.inputs, d.rows, d.cols, p.n_outputs());
            for (uint32_t o = 0; o < p.n_outputs(); ++o) {
                const double e = compare(got[o], want[o]).error;
                worst = std::max(worst, e);
                EXPECT_LE(e, tol::kFused / 10) << "program " << k << " output " << o << " shape " << to_string(shapes[j])
                                               << ": " << p.builder.describe();
            }
        }
    std::printf("[ fused    ] worst float32 error over the suite's programs: %.3g (tolerance %.3g)\n", worst, tol::kFused);
}

// A plugin that computes the wrong opcode, or a non-commutative one with its operands swapped,
// fails the suite: for every opcode X and every other opcode Y of X's arity, computing Y in place
// of X in some instance of X changes an output by more than the tolerance (on two runs of small
// shapes; the suite's own runs have more elements).
TEST(FusedReference, WrongOpcodesAndSwappedOperandsAreCaught) {
    const auto programs = fused::conformance_programs();
    std::mt19937_64 rng(3);
    std::set<std::pair<uint32_t, uint32_t>> tried, caught;
    std::set<uint32_t> present, swap_present, swap_caught;
    const auto ops = fused::arithmetic_opcodes();
    for (const fused::Program& p : programs) {
        std::vector<fused::RunData> runs;
        std::vector<std::vector<std::vector<double>>> want;
        for (const Shape& s : {Shape{13, 17}, Shape{2, 3, 5, 7}}) {
            runs.push_back(fused::make_run(p, s, rng));
            want.push_back(fused::reference(p.attrs(runs.back().params), runs.back().inputs_f64(), runs.back().rows,
                                            runs.back().cols, p.n_outputs()));
        }
        const xylem_fused_attrs at = p.attrs(runs[0].params);
        const auto detected = [&](xylem_fused_attrs wrong) {
            for (size_t r = 0; r < runs.size(); ++r) {
                const fused::RunData& d = runs[r];
                std::copy(d.params.begin(), d.params.end(), wrong.params);
                if (worst_error(fused::reference(wrong, d.inputs_f64(), d.rows, d.cols, p.n_outputs()), want[r]) > tol::kFused)
                    return true;
            }
            return false;
        };
        for (uint32_t i = 0; i < at.n_instrs; ++i) {
            const uint8_t op = at.code[i].op;
            if (std::find(ops.begin(), ops.end(), op) == ops.end()) continue;
            const int arity = plugin_kit::fused_opcode_info(op).arity;
            present.insert(op);
            for (uint8_t other : ops) {
                if (other == op || plugin_kit::fused_opcode_info(other).arity != arity || caught.count({op, other})) continue;
                tried.insert({op, other});
                xylem_fused_attrs wrong = at;
                wrong.code[i].op = other;
                if (detected(wrong)) caught.insert({op, other});
            }
            // The operands whose order matters: fma's product and addend, select's branches, the rest's a and b.
            const bool commutative = op == XYLEM_FUSED_ADD || op == XYLEM_FUSED_MUL || op == XYLEM_FUSED_MIN ||
                                     op == XYLEM_FUSED_MAX || op == XYLEM_FUSED_EQ;
            xylem_fused_attrs wrong = at;
            xylem_fused_instr& in = wrong.code[i];
            uint8_t* first = op == XYLEM_FUSED_SELECT ? &in.b : &in.a;
            uint8_t* second = arity == 3 ? &in.c : &in.b;
            if (arity >= 2 && !commutative && *first != *second) {
                swap_present.insert(op);
                std::swap(*first, *second);
                if (detected(wrong)) swap_caught.insert(op);
            }
        }
    }
    EXPECT_EQ(present.size(), ops.size());
    for (const auto& [op, other] : tried)
        EXPECT_TRUE(caught.count({op, other})) << "computing " << plugin_kit::fused_opcode_info(other).name << " in place of "
                                               << plugin_kit::fused_opcode_info(op).name << " goes unnoticed";
    for (uint32_t op : swap_present)
        EXPECT_TRUE(swap_caught.count(op)) << "swapped operands of " << plugin_kit::fused_opcode_info(op).name << " go unnoticed";
}

}  // namespace
}  // namespace xylem::test
