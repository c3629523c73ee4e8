// Conformance, fused_elementwise (ABI 1.5): random programs (expression DAGs up to depth 8, random
// input modes, params, constants, several outputs, every opcode) on awkward shapes against the
// float64 reference (ops/fused_programs.h), outputs updated in place over their input, and
// malformed programs refused by the core's typed call and by the plugin itself.
#include <cmath>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "ops/conformance.h"
#include "ops/fused_programs.h"
#include "support/backends.h"
#include "xylem/error.h"
#include "xylem/op_calls.h"

namespace xylem::test {
namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();


// The shape an input of `mode` is given (only its element count matters), varied by `variant`.
Shape input_shape(uint8_t mode, const fused::RunData& d, int variant) {
    switch (mode) {
    case XYLEM_FUSED_FULL: return d.shape;
    case XYLEM_FUSED_ROW: return variant % 2 ? Shape{1, d.cols} : Shape{d.cols};
    case XYLEM_FUSED_COL: return variant % 2 ? Shape{d.rows} : Shape{d.rows, 1};
    default: return variant % 2 ? Shape{1, 1} : Shape{1};
    }
}

class FusedElementwiseConformance : public BackendTest {
protected:
    // The opcodes this plugin's ABI knows (a plugin built before ABI 1.7 has no erf or GELU).
    uint32_t opcode_count() { return fused::fused_opcode_count(backend().api().abi_minor); }

    // Runs `p` on `d` through ops::fused_elementwise and compares every output with the
    // reference. `alias`: the output written over FULL input `alias_input` (-1: none).
    // `flat_outputs`: outputs after the first are given flat ([numel]).
    void check_run(const fused::Program& p, const fused::RunData& d, int alias, int alias_input, bool flat_outputs,
                   int variant) {
        const xylem_fused_attrs attrs = p.attrs(d.params);
        std::vector<Tensor> ins, outs;
        ins.reserve(d.inputs.size());
        outs.reserve(p.n_outputs());
        for (size_t i = 0; i < d.inputs.size(); ++i) ins.push_back(upload(dev(), input_shape(p.modes[i], d, variant), d.inputs[i]));
        const int64_t n = d.rows * d.cols;
        for (uint32_t o = 0; o < p.n_outputs(); ++o)
            outs.push_back(upload(dev(), o > 0 && flat_outputs ? Shape{n} : d.shape, std::vector<float>(static_cast<size_t>(n), kNaN)));
        std::vector<const Tensor*> in_ptrs;
        std::vector<Tensor*> out_ptrs;
        for (Tensor& t : ins) in_ptrs.push_back(&t);
        for (Tensor& t : outs) out_ptrs.push_back(&t);
        if (alias >= 0) out_ptrs[static_cast<size_t>(alias)] = &ins[static_cast<size_t>(alias_input)];
        ops::fused_elementwise(dev(), attrs, in_ptrs, out_ptrs);
        const auto want = fused::reference(attrs, d.inputs_f64(), d.rows, d.cols, p.n_outputs());
        for (uint32_t o = 0; o < p.n_outputs(); ++o) {
            SCOPED_TRACE("output " + std::to_string(o) + (static_cast<int>(o) == alias ? " (written over input " + std::to_string(alias_input) + ")" : ""));
            EXPECT_TRUE(near(out_ptrs[o]->to_vector(), want[o], tol::kFused));
        }
        for (size_t i = 0; i < ins.size(); ++i) {
            if (alias >= 0 && static_cast<int>(i) == alias_input) continue;
            EXPECT_TRUE(near(ins[i].to_vector(), to_double(d.inputs[i]), tol::kCopy)) << "input " << i << " was modified";
        }
    }
};
XYLEM_INSTANTIATE_OVER_BACKENDS(FusedElementwiseConformance);

std::string describe(const fused::Program& p) {
    std::string modes;
    for (uint8_t m : p.modes) modes += std::string(modes.empty() ? "" : ", ") + plugin_kit::fused_mode_name(m);
    return "program (depth " + std::to_string(p.depth) + ", inputs " + modes + "): " + p.builder.describe();
}

// Each of the 12 structures on 3 shapes with fresh data and params each time (a backend that
// caches a compiled program per structure must bind the params of each run), one run writing an
// output over a FULL input, one giving outputs after the first flat.
TEST_P(FusedElementwiseConformance, RandomProgramsMatchTheFloat64Reference) {
    XYLEM_REQUIRE_OP(XYLEM_OP_FUSED_ELEMENTWISE);
    const auto programs = fused::conformance_programs(opcode_count());
    const auto shapes = fused::conformance_shapes();
    std::mt19937_64 rng(7);
    int aliased = 0;
    for (size_t k = 0; k < programs.size(); ++k) {
        const fused::Program& p = programs[k];
        SCOPED_TRACE("program " + std::to_string(k) + ": " + describe(p));
        for (int j = 0; j < 3; ++j) {
            const Shape& s = shapes[(3 * k + static_cast<size_t>(j)) % shapes.size()];
            const fused::RunData d = fused::make_run(p, s, rng);
            int alias = -1, alias_input = -1;
            if (j == 1)
                for (size_t i = 0; i < p.modes.size() && alias_input < 0; ++i)
                    if (p.modes[i] == XYLEM_FUSED_FULL) alias_input = static_cast<int>(i);
            if (alias_input >= 0) alias = static_cast<int>(rng() % p.n_outputs());
            aliased += alias >= 0;
            SCOPED_TRACE("shape " + to_string(s) + " run " + std::to_string(j));
            check_run(p, d, alias, alias_input, j == 2, static_cast<int>(k) + j);
        }
    }
    EXPECT_GE(aliased, 6) << "too few runs wrote an output over its input";
}

// An empty iteration space ([0], [4, 0]: no element, but 4 rows for a COL input) runs nothing and is no error.
TEST_P(FusedElementwiseConformance, EmptyIterationSpace) {
    XYLEM_REQUIRE_OP(XYLEM_OP_FUSED_ELEMENTWISE);
    const auto programs = fused::conformance_programs(opcode_count());
    std::mt19937_64 rng(8);
    for (const Shape& s : {Shape{0}, Shape{4, 0}}) {
        SCOPED_TRACE("shape " + to_string(s));
        const fused::RunData d = fused::make_run(programs[0], s, rng);
        check_run(programs[0], d, -1, -1, false, 0);
    }
}

// ---- malformed programs ---------------------------------------------------------------------

// One malformed descriptor: a program, operand shapes and the words its refusal must contain.
struct BadCase {
    std::string what;
    xylem_fused_attrs attrs;
    std::vector<Shape> inputs, outputs;
    std::string expect;
};

xylem_fused_instr instr(uint8_t op, uint8_t dst, uint8_t a = 0, uint8_t b = 0, uint8_t c = 0) {
    xylem_fused_instr in{};
    in.op = op;
    in.dst = dst;
    in.a = a;
    in.b = b;
    in.c = c;
    return in;
}

xylem_fused_attrs program(std::vector<xylem_fused_instr> code, uint32_t n_regs, std::vector<uint8_t> modes) {
    xylem_fused_attrs at{};
    at.version = XYLEM_FUSED_VERSION;
    at.n_instrs = static_cast<uint32_t>(code.size());
    at.n_regs = n_regs;
    for (size_t i = 0; i < code.size(); ++i) at.code[i] = code[i];
    for (size_t i = 0; i < modes.size(); ++i) at.input_modes[i] = modes[i];
    return at;
}

// out0 = fma(in0, in1, p0), out1 = tanh(in0) over [3, 7], in1 a row: the valid program the bad cases bend.
xylem_fused_attrs valid_program() {
    FusedBuilder b;
    const auto x = b.input(0), row = b.input(1), p = b.param(0.25f);
    b.output(0, b.apply(XYLEM_FUSED_FMA, x, row, p));
    b.output(1, b.apply(XYLEM_FUSED_TANH, x));
    return b.finish({XYLEM_FUSED_FULL, XYLEM_FUSED_ROW});
}

std::vector<BadCase> bad_cases() {
    const Shape s{3, 7}, row{7};
    std::vector<BadCase> cases;
    xylem_fused_attrs at = valid_program();
    at.version = XYLEM_FUSED_VERSION + 6;
    cases.push_back({"unknown version", at, {s, row}, {s, s}, "program version " + std::to_string(XYLEM_FUSED_VERSION + 6)});
    cases.push_back({"register read before it is written",
                     program({instr(XYLEM_FUSED_INPUT, 0, 0), instr(XYLEM_FUSED_ADD, 1, 0, 2), instr(XYLEM_FUSED_OUTPUT, 0, 1)}, 3,
                             {XYLEM_FUSED_FULL}),
                     {s}, {s}, "reads register 2 before it is written"});
    cases.push_back({"input read after an output",
                     program({instr(XYLEM_FUSED_INPUT, 0, 0), instr(XYLEM_FUSED_OUTPUT, 0, 0), instr(XYLEM_FUSED_INPUT, 1, 1),
                              instr(XYLEM_FUSED_OUTPUT, 1, 1)},
                             2, {XYLEM_FUSED_FULL, XYLEM_FUSED_ROW}),
                     {s, row}, {s, s}, "reads input 1 after an output was written"});
    cases.push_back({"output never written",
                     program({instr(XYLEM_FUSED_INPUT, 0, 0), instr(XYLEM_FUSED_OUTPUT, 0, 0)}, 1, {XYLEM_FUSED_FULL}), {s},
                     {s, s}, "output 1 is never written"});
    cases.push_back({"wrong input element count", valid_program(), {s, Shape{5}}, {s, s},
                     "input 1 (row) has 5 elements; the iteration space [3, 7] needs 7"});
    cases.push_back({"outputs of different counts", valid_program(), {s, row}, {s, Shape{3, 6}},
                     "output 1 has 18 elements but output 0 has 21"});
    at = valid_program();
    at.code[2].op = 200;
    cases.push_back({"unknown opcode", at, {s, row}, {s, s}, "unknown opcode 200"});
    at = valid_program();
    at.input_modes[1] = 9;
    cases.push_back({"unknown input mode", at, {s, row}, {s, s}, "input 1 has unknown mode 9"});
    at = valid_program();
    at.n_instrs = XYLEM_FUSED_MAX_INSTRS + 1;
    cases.push_back({"too many instructions", at, {s, row}, {s, s}, "instructions (1 to 192)"});
    return cases;
}

std::vector<Tensor> tensors(Device& dev, const std::vector<Shape>& shapes) {
    std::vector<Tensor> ts;
    for (const Shape& s : shapes) ts.push_back(upload(dev, s, std::vector<float>(static_cast<size_t>(numel(s)), 0.5f)));
    return ts;
}

// The core's typed call refuses each malformed program before anything reaches the device, with
// the kit's message (the rule of plugin_kit/fused.h): on every backend, whether it runs the op or not.
class FusedProgramRule : public BackendTest {};
XYLEM_INSTANTIATE_OVER_BACKENDS(FusedProgramRule);

TEST_P(FusedProgramRule, CoreRefusesMalformedPrograms) {
    for (const BadCase& c : bad_cases()) {
        SCOPED_TRACE(c.what);
        std::vector<Tensor> ins = tensors(dev(), c.inputs), outs = tensors(dev(), c.outputs);
        std::vector<const Tensor*> in_ptrs;
        std::vector<Tensor*> out_ptrs;
        for (Tensor& t : ins) in_ptrs.push_back(&t);
        for (Tensor& t : outs) out_ptrs.push_back(&t);
        const uint64_t launches = dev().launches();
        const std::string msg = error_of([&] { ops::fused_elementwise(dev(), c.attrs, in_ptrs, out_ptrs); });
        EXPECT_TRUE(contains(msg, "op fused_elementwise: "));
        EXPECT_TRUE(contains(msg, c.expect));
        EXPECT_EQ(dev().launches(), launches) << "a refused program reached the device";
    }
    Tensor x({3, 7}, DType::F32, dev());
    EXPECT_TRUE(contains(error_of([&] { ops::fused_elementwise(dev(), valid_program(), {&x, &x}, {}); }), "output"));
}

// The plugin checks every descriptor itself (another caller than the core may send one): each
// malformed program, sent as a raw descriptor, is refused with the plugin's name and the rule's
// words, never run; a valid program still runs afterwards.
TEST_P(FusedElementwiseConformance, PluginRefusesMalformedDescriptors) {
    XYLEM_REQUIRE_OP(XYLEM_OP_FUSED_ELEMENTWISE);
    std::vector<BadCase> cases = bad_cases();
    BadCase short_attrs{"attrs_size short of the struct", valid_program(), {{3, 7}, {7}}, {{3, 7}, {3, 7}}, "attrs_size"};
    cases.push_back(short_attrs);
    for (size_t k = 0; k < cases.size(); ++k) {
        const BadCase& c = cases[k];
        SCOPED_TRACE(c.what);
        std::vector<Tensor> ins = tensors(dev(), c.inputs), outs = tensors(dev(), c.outputs);
        const std::string msg = error_of([&] {
            std::vector<xylem_tensor_arg> in_args, out_args;
            for (const Tensor& t : ins) in_args.push_back(t.read(dev()));
            for (Tensor& t : outs) out_args.push_back(t.write(dev()));
            const uint32_t size = k + 1 == cases.size() ? sizeof(xylem_fused_attrs) - 4 : sizeof(xylem_fused_attrs);
            const xylem_op_desc d{XYLEM_OP_FUSED_ELEMENTWISE, static_cast<uint32_t>(in_args.size()),
                                  static_cast<uint32_t>(out_args.size()), size, in_args.data(), out_args.data(), &c.attrs};
            dev().run(d);
            dev().sync();
        });
        EXPECT_TRUE(contains(msg, backend().name()));
        EXPECT_TRUE(contains(msg, "fused_elementwise"));
        EXPECT_TRUE(contains(msg, c.expect));
    }
    // The valid program they bent: in1 = 1..7 as a row, p0 = 0.25.
    std::vector<float> x(21), row(7);
    for (int i = 0; i < 21; ++i) x[static_cast<size_t>(i)] = 0.1f * static_cast<float>(i) - 1.0f;
    for (int i = 0; i < 7; ++i) row[static_cast<size_t>(i)] = static_cast<float>(i + 1);
    Tensor tx = upload(dev(), {3, 7}, x), trow = upload(dev(), {7}, row);
    Tensor o0 = upload(dev(), {3, 7}, std::vector<float>(21, kNaN)), o1 = upload(dev(), {3, 7}, std::vector<float>(21, kNaN));
    ops::fused_elementwise(dev(), valid_program(), {&tx, &trow}, {&o0, &o1});
    std::vector<double> want0(21), want1(21);
    for (int i = 0; i < 21; ++i) {
        want0[static_cast<size_t>(i)] = static_cast<double>(x[static_cast<size_t>(i)]) * (i % 7 + 1) + 0.25;
        want1[static_cast<size_t>(i)] = std::tanh(static_cast<double>(x[static_cast<size_t>(i)]));
    }
    EXPECT_TRUE(near(o0.to_vector(), want0, tol::kFused));
    EXPECT_TRUE(near(o1.to_vector(), want1, tol::kFused));
}

}  // namespace
}  // namespace xylem::test
