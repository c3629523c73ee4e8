// fused_elementwise (ops.h, ABI 1.5) for tests: the float64 reference that runs any program, and a
// seeded generator of random, well-conditioned programs (random expression DAGs up to depth 8,
// random input modes, params, constants and several outputs) built with FusedBuilder.
//
// The reference runs the packed program a plugin receives, with each opcode's float64 arithmetic
// written independently of the kit's (tests/support/reference_fused.h: the kit's fused_apply is
// what the executors run, so it cannot be its own reference) and the broadcast rule of ops.h. The generator also
// keeps the expression DAG it handed the builder, so a second evaluator (eval_dag) checks the
// builder's packing and the reference's broadcasting against each other.
//
// Well-conditioned means a correct float32 executor stays far inside the op's 1e-5 tolerance:
//   - operands that could blow up are guarded: log, sqrt, rsqrt and recip read |x| + c
//     (c in {0.5, 1, 2}), div divides by |x| + 1, exp reads x only while |x| <= 2 (else tanh(x));
//   - every value carries a bound on its magnitude, and one past 6 is squashed (tanh, or a
//     multiply by 1/bound), so no intermediate is large enough for float32 rounding to matter;
//   - the discontinuous ops (gt, ge, eq, select's condition, relu_grad's b) read only "exact"
//     values, equal in float32 and float64: inputs, params, constants, their neg/abs/relu/min/max,
//     and comparison results. Some inputs hold only {-1, -0.5, 0, 0.5, 1}, so ties happen.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <random>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "xylem/fused_builder.h"
#include "xylem/ops.h"
#include "xylem/plugin_kit/fused.h"
#include "xylem/shape.h"
#include "support/reference_fused.h"

namespace xylem::test::fused {

// ---- the float64 reference ------------------------------------------------------------------

// The kit's Args for a program the reference is handed: a malformed one is a test bug.
struct ThrowingArgs {
    [[noreturn]] __attribute__((format(printf, 2, 3))) void fail(const char* fmt, ...) const {
        char msg[400];
        va_list args;
        va_start(args, fmt);
        std::vsnprintf(msg, sizeof msg, fmt, args);
        va_end(args);
        throw std::invalid_argument(std::string("fused reference: ") + msg);
    }
};

// Element e = (row, col) of input `mode`: FULL e, ROW col, COL row, SCALAR 0.
inline int64_t broadcast_index(uint8_t mode, int64_t row, int64_t col, int64_t cols) {
    switch (mode) {
    case XYLEM_FUSED_FULL: return row * cols + col;
    case XYLEM_FUSED_ROW: return col;
    case XYLEM_FUSED_COL: return row;
    default: return 0;
    }
}

// Runs `at` over the iteration space [rows, cols] in float64: one vector of rows*cols values per
// output. inputs[i] holds the elements its mode asks for (plugin_kit::FusedShape::input_numel).
inline std::vector<std::vector<double>> reference(const xylem_fused_attrs& at, const std::vector<std::vector<double>>& inputs,
                                                  int64_t rows, int64_t cols, uint32_t n_outputs) {
    const uint32_t n_inputs = static_cast<uint32_t>(inputs.size());
    plugin_kit::fused_program_check(ThrowingArgs{}, at, n_inputs, n_outputs);
    const plugin_kit::FusedShape space{rows, cols};
    for (uint32_t i = 0; i < n_inputs; ++i)
        if (static_cast<int64_t>(inputs[i].size()) != space.input_numel(at.input_modes[i]))
            throw std::invalid_argument("fused reference: input " + std::to_string(i) + " has the wrong element count");
    std::vector<std::vector<double>> out(n_outputs, std::vector<double>(static_cast<size_t>(rows * cols)));
    std::vector<double> r(at.n_regs, 0.0);
    for (int64_t row = 0; row < rows; ++row)
        for (int64_t col = 0; col < cols; ++col)
            for (uint32_t k = 0; k < at.n_instrs; ++k) {
                const xylem_fused_instr& in = at.code[k];
                switch (in.op) {
                case XYLEM_FUSED_INPUT:
                    r[in.dst] = inputs[in.a][static_cast<size_t>(broadcast_index(at.input_modes[in.a], row, col, cols))];
                    break;
                case XYLEM_FUSED_PARAM: r[in.dst] = at.params[in.a]; break;
                case XYLEM_FUSED_CONST: r[in.dst] = in.imm; break;
                case XYLEM_FUSED_OUTPUT: out[in.dst][static_cast<size_t>(row * cols + col)] = r[in.a]; break;
                default: {
                    const int arity = fused_reference_arity(in.op);
                    r[in.dst] = fused_reference_apply(in.op, r[in.a], arity > 1 ? r[in.b] : 0.0,
                                                      arity > 2 ? r[in.c] : 0.0);
                }
                }
            }
    return out;
}

// ---- random programs ------------------------------------------------------------------------

// One instruction as the generator handed it to FusedBuilder (node i is the builder's value i).
struct Node {
    uint8_t op;
    uint32_t a = 0, b = 0, c = 0;  // operand values; INPUT: the input; PARAM: the param slot
    float imm = 0.0f;
};

struct Program {
    FusedBuilder builder;
    std::vector<Node> nodes;
    std::vector<std::pair<uint32_t, uint32_t>> outputs;  // (output index, value), in the order given
    std::vector<uint8_t> modes;                          // per input
    std::vector<bool> exact_data;  // input holds only {-1, -0.5, 0, 0.5, 1} (ties for the comparisons)
    int depth = 0;                 // longest chain of the generator's ops (a guarded op counts once)
    uint32_t n_outputs() const { return static_cast<uint32_t>(outputs.size()); }
    uint32_t n_params() const { return builder.params(); }

    // The packed program with these params' values (one per slot).
    xylem_fused_attrs attrs(const std::vector<float>& params) const {
        FusedBuilder b = builder;
        b.set_params(params);
        return b.finish(modes);
    }

    // The DAG itself in float64, independent of the packing: node by node, element by element.
    std::vector<std::vector<double>> eval_dag(const std::vector<std::vector<double>>& inputs,
                                              const std::vector<float>& params, int64_t rows, int64_t cols) const {
        std::vector<std::vector<double>> out(outputs.size(), std::vector<double>(static_cast<size_t>(rows * cols)));
        std::vector<double> v(nodes.size());
        for (int64_t row = 0; row < rows; ++row)
            for (int64_t col = 0; col < cols; ++col) {
                for (size_t k = 0; k < nodes.size(); ++k) {
                    const Node& n = nodes[k];
                    if (n.op == XYLEM_FUSED_INPUT)
                        v[k] = inputs[n.a][static_cast<size_t>(broadcast_index(modes[n.a], row, col, cols))];
                    else if (n.op == XYLEM_FUSED_PARAM) v[k] = params[n.a];
                    else if (n.op == XYLEM_FUSED_CONST) v[k] = n.imm;
                    else v[k] = fused_reference_apply(n.op, v[n.a], v[n.b], v[n.c]);
                }
                for (const auto& [index, value] : outputs) out[index][static_cast<size_t>(row * cols + col)] = v[value];
            }
        return out;
    }
};

// One run of a program: its data, params and iteration space.
struct RunData {
    Shape shape;  // output 0's shape (every output has this shape)
    int64_t rows = 0, cols = 0;
    std::vector<std::vector<float>> inputs;
    std::vector<float> params;

    std::vector<std::vector<double>> inputs_f64() const {
        std::vector<std::vector<double>> v;
        for (const auto& in : inputs) v.emplace_back(in.begin(), in.end());
        return v;
    }
};

// Fresh data and params for `p` over `shape`.
inline RunData make_run(const Program& p, const Shape& shape, std::mt19937_64& rng) {
    RunData d;
    d.shape = shape;
    d.cols = shape.empty() ? 1 : shape.back();
    d.rows = d.cols ? numel(shape) / d.cols : 1;
    if (d.cols == 0)
        for (size_t i = 0; i + 1 < shape.size(); ++i) d.rows *= shape[i];
    const plugin_kit::FusedShape space{d.rows, d.cols};
    std::uniform_real_distribution<float> u(-1.0f, 1.0f), up(-2.0f, 2.0f);
    std::uniform_int_distribution<int> tick(-2, 2);
    for (size_t i = 0; i < p.modes.size(); ++i) {
        std::vector<float> v(static_cast<size_t>(space.input_numel(p.modes[i])));
        for (float& x : v) x = p.exact_data[i] ? 0.5f * static_cast<float>(tick(rng)) : u(rng);
        d.inputs.push_back(std::move(v));
    }
    for (uint32_t k = 0; k < p.n_params(); ++k) d.params.push_back(up(rng));
    return d;
}

// The opcodes a plugin built for ABI 1.<abi_minor> knows: ERF and the GELUs came with 1.7. The
// kit gives an older plugin programs of the opcodes it knows (the programs it was given then).
inline uint32_t fused_opcode_count(uint32_t abi_minor) {
    return abi_minor < 7 ? XYLEM_FUSED_ERF : XYLEM_FUSED_OPCODE_COUNT_;
}

// The arithmetic opcodes (everything but INPUT, PARAM, CONST and OUTPUT) below `count`.
inline std::vector<uint8_t> arithmetic_opcodes(uint32_t count = XYLEM_FUSED_OPCODE_COUNT_) {
    std::vector<uint8_t> ops;
    for (uint32_t op = 0; op < count; ++op)
        if (op != XYLEM_FUSED_INPUT && op != XYLEM_FUSED_PARAM && op != XYLEM_FUSED_CONST && op != XYLEM_FUSED_OUTPUT)
            ops.push_back(static_cast<uint8_t>(op));
    return ops;
}

// Ops whose result jumps where an operand crosses a threshold: their operands must be exact.
inline bool is_comparison(uint8_t op) {
    return op == XYLEM_FUSED_GT || op == XYLEM_FUSED_GE || op == XYLEM_FUSED_EQ;
}

class Generator {
public:
    // Programs of the opcodes below opcode_count (fused_opcode_count).
    explicit Generator(std::mt19937_64& rng, uint32_t opcode_count = XYLEM_FUSED_OPCODE_COUNT_)
        : rng_(rng), opcode_count_(opcode_count) {}

    // A program whose deepest output is `depth` ops deep (1..8), using every opcode of `must_use`.
    // `all_broadcast`: no input is FULL (the iteration space comes from the outputs alone).
    Program make(int depth, std::vector<uint8_t> must_use, bool all_broadcast) {
        p_ = Program{};
        vals_.clear();
        const int n_inputs = pick(1, 6);
        for (int i = 0; i < n_inputs; ++i) {
            uint8_t mode = static_cast<uint8_t>(pick(0, 3));
            if (i == 0) mode = all_broadcast ? static_cast<uint8_t>(pick(1, 3)) : static_cast<uint8_t>(XYLEM_FUSED_FULL);
            if (all_broadcast && mode == XYLEM_FUSED_FULL) mode = XYLEM_FUSED_ROW;
            p_.modes.push_back(mode);
            p_.exact_data.push_back(chance(0.35));
        }
        if (std::find(p_.exact_data.begin(), p_.exact_data.end(), true) == p_.exact_data.end())
            p_.exact_data[static_cast<size_t>(pick(0, n_inputs - 1))] = true;  // ties for the comparisons
        for (int i = 0; i < n_inputs; ++i) {
            const bool ties = p_.exact_data[static_cast<size_t>(i)];
            leaf(input(static_cast<uint32_t>(i)), 1.0, ties);
            if (chance(0.15)) leaf(input(static_cast<uint32_t>(i)), 1.0, ties);  // read twice
        }
        for (int k = pick(0, 3); k > 0; --k) leaf(param(), 2.0, false);
        // Constants: one on the inputs' grid {-1, -0.5, 0, 0.5, 1} (ties), then maybe another.
        const float first = 0.5f * static_cast<float>(pick(-2, 2));
        leaf(constant(first), std::fabs(first), true);
        static const float kConsts[] = {0.5f, -1.5f, 2.0f, 0.25f, 1.0f, 0.0f, -0.75f};
        if (chance(0.6)) {
            const float c = chance(0.5) ? kConsts[pick(0, 6)] : std::uniform_real_distribution<float>(-2.0f, 2.0f)(rng_);
            leaf(constant(c), std::fabs(c), std::fabs(2.0f * c - std::round(2.0f * c)) == 0.0f && std::fabs(c) <= 1.0f);
        }
        std::shuffle(must_use.begin(), must_use.end(), rng_);
        std::vector<uint8_t> off_spine;  // comparisons and ops left over: placed beside the spine
        // The spine: `depth` ops, each reading the previous one, so the deepest output is exactly `depth` deep.
        uint32_t spine = any_value(depth, false, true);
        for (int d = 0; d < depth; ++d) {
            uint8_t op = 0;
            while (!must_use.empty() && !op) {
                const uint8_t m = must_use.back();
                must_use.pop_back();
                if (is_comparison(m)) off_spine.push_back(m);
                else op = m;
            }
            if (!op) op = random_continuous_op();
            spine = apply(op, spine, depth);
        }
        for (uint8_t m : must_use) off_spine.push_back(m);
        // Beside the spine: the ops left over, then random ones. Every value no op reads becomes an
        // output, so once 6 are waiting a new op must read one of them (at most 8 outputs).
        for (uint8_t op : off_spine) vals_[apply(op, no_value, depth)].pinned = true;  // an output as is
        for (int k = pick(2, 10); k > 0; --k) {
            if (sinks().size() < 6) {
                apply(random_op(), no_value, depth);
                continue;
            }
            std::vector<uint32_t> open;  // waiting values shallow enough to read
            for (uint32_t v : sinks())
                if (vals_[v].depth < depth && !vals_[v].pinned) open.push_back(v);
            if (open.empty()) break;
            apply(random_continuous_op(), open[static_cast<size_t>(pick(0, static_cast<int>(open.size()) - 1))], depth);
        }
        // Outputs: every value no op reads (spine end included), sometimes a value twice or a leaf.
        std::vector<uint32_t> sinks = this->sinks();
        if (sinks.size() < XYLEM_FUSED_MAX_OUTPUTS && chance(0.3)) sinks.push_back(sinks[pick(0, static_cast<int>(sinks.size()) - 1)]);
        if (sinks.size() < XYLEM_FUSED_MAX_OUTPUTS && chance(0.2)) sinks.push_back(any_value(depth));
        if (sinks.size() > XYLEM_FUSED_MAX_OUTPUTS) throw std::logic_error("fused generator: more sinks than outputs");
        std::shuffle(sinks.begin(), sinks.end(), rng_);
        for (size_t o = 0; o < sinks.size(); ++o) {
            p_.builder.output(static_cast<uint32_t>(o), vals_[sinks[o]].id);
            p_.outputs.emplace_back(static_cast<uint32_t>(o), vals_[sinks[o]].id);
            p_.depth = std::max(p_.depth, vals_[sinks[o]].depth);
        }
        return std::move(p_);
    }

private:
    static constexpr uint32_t no_value = ~0u;

    struct Val {
        uint32_t id;   // the builder's value
        double bound;  // |value| <= bound
        int depth;     // generator ops on the longest path from a leaf
        bool exact;    // the same in float32 and float64
        bool ties;     // exact, and on the grid {-1, -0.5, 0, 0.5, 1} some inputs' data is drawn from
        bool leaf;
        bool data = false;    // depends on an input
        bool read = false;
        bool pinned = false;  // an output that no op reads (a forced op beside the spine: fully observable)
    };

    int pick(int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng_); }
    bool chance(double p) { return std::bernoulli_distribution(p)(rng_); }

    uint32_t node(Node n) {
        p_.nodes.push_back(n);
        return static_cast<uint32_t>(p_.nodes.size() - 1);
    }
    uint32_t input(uint32_t i) {
        const uint32_t id = p_.builder.input(i);
        node({XYLEM_FUSED_INPUT, i});
        return id;
    }
    uint32_t param() {
        const uint32_t id = p_.builder.param(0.0f);  // values come with each run (RunData::params)
        node({XYLEM_FUSED_PARAM, p_.builder.params() - 1});
        return id;
    }
    uint32_t constant(float c) {
        const uint32_t id = p_.builder.constant(c);
        Node n{XYLEM_FUSED_CONST};
        n.imm = c;
        node(n);
        return id;
    }
    // An instruction: into the builder and the node list (their numbering agrees).
    uint32_t emit(uint8_t op, uint32_t a, uint32_t b = 0, uint32_t c = 0) {
        const uint32_t id = p_.builder.apply(static_cast<xylem_fused_opcode>(op), a, b, c);
        const int arity = fused_reference_arity(op);
        node({op, a, arity > 1 ? b : 0, arity > 2 ? c : 0});
        if (id + 1 != p_.nodes.size()) throw std::logic_error("fused generator: value numbering differs from the builder's");
        return id;
    }
    // Inputs, params and constants: exact; `ties` where on the grid.
    void leaf(uint32_t id, double bound, bool ties) {
        if (id + 1 != p_.nodes.size()) throw std::logic_error("fused generator: value numbering differs from the builder's");
        vals_.push_back({id, bound, 0, true, ties, true, p_.nodes.back().op == XYLEM_FUSED_INPUT});
    }

    // Values (vals_ indices) no op reads yet: each will be an output.
    std::vector<uint32_t> sinks() const {
        std::vector<uint32_t> s;
        for (size_t v = 0; v < vals_.size(); ++v)
            if (!vals_[v].read && !vals_[v].leaf) s.push_back(static_cast<uint32_t>(v));
        return s;
    }

    // A value (index into vals_) at most max_depth - 1 deep, preferring ones nothing reads yet.
    // Whether two values are one: the same value, or two reads of one input.
    bool same(uint32_t v, uint32_t w) const {
        if (v == w) return true;
        const Node &a = p_.nodes[vals_[v].id], &b = p_.nodes[vals_[w].id];
        return vals_[v].leaf && vals_[w].leaf && a.op == XYLEM_FUSED_INPUT && b.op == XYLEM_FUSED_INPUT && a.a == b.a;
    }

    // A value (vals_ index) at most max_depth - 1 deep, drawn with weights: values no op reads yet
    // first (so every op reaches an output), then inputs, then the rest; constants and params
    // seldom (an op of constants alone checks one point). With exact_only, mostly values on the
    // grid, so comparisons see ties. `need_data`: one that depends on an input. Never one of `avoid`
    // while another qualifies (sub(x, x) checks little).
    uint32_t any_value(int max_depth, bool exact_only = false, bool need_data = false, std::vector<uint32_t> avoid = {}) {
        const bool grid_only = exact_only && chance(0.85);  // both sides of a comparison on the grid: ties
        for (int pass = grid_only ? 0 : 1; pass < 3; ++pass) {
            std::vector<uint32_t> cand;
            std::vector<double> weight;
            for (size_t v = 0; v < vals_.size(); ++v) {
                const Val& x = vals_[v];
                if (x.pinned || x.depth >= max_depth || (exact_only && !x.exact) || (need_data && !x.data) || (pass == 0 && !x.ties)) continue;
                if (pass < 2 && std::any_of(avoid.begin(), avoid.end(), [&](uint32_t a) { return same(a, static_cast<uint32_t>(v)); }))
                    continue;
                cand.push_back(static_cast<uint32_t>(v));
                weight.push_back(!x.leaf && !x.read ? 8.0 : x.leaf && x.data ? 3.0 : x.leaf ? 0.4 : 1.0);
            }
            if (!cand.empty()) return cand[std::discrete_distribution<size_t>(weight.begin(), weight.end())(rng_)];
        }
        throw std::logic_error("fused generator: no value qualifies as an operand");
    }

    uint8_t random_op() {
        const auto ops = arithmetic_opcodes(opcode_count_);
        return ops[pick(0, static_cast<int>(ops.size()) - 1)];
    }
    uint8_t random_continuous_op() {
        for (;;)
            if (const uint8_t op = random_op(); !is_comparison(op)) return op;
    }

    // A guard |x| + c for the ops that need a positive operand away from 0.
    uint32_t abs_plus(uint32_t x, float c) { return emit(XYLEM_FUSED_ADD, emit(XYLEM_FUSED_ABS, x), constant(c)); }

    // Applies `op` (guarded as the file comment says) to `first` (a vals_ index, or no_value for a
    // random operand) and random further operands; returns the result's vals_ index.
    uint32_t apply(uint8_t op, uint32_t first, int max_depth) {
        const int arity = fused_reference_arity(op);
        uint32_t x[3] = {0, 0, 0};
        for (int k = 0; k < arity; ++k) {
            const bool must_be_exact = is_comparison(op) || (op == XYLEM_FUSED_SELECT && k == 0) ||
                                       (op == XYLEM_FUSED_RELU_GRAD && k == 1);
            const bool take_first = first != no_value && !(must_be_exact && !vals_[first].exact) &&
                                    (k == 0 || (op == XYLEM_FUSED_SELECT && k == 1) || (op == XYLEM_FUSED_RELU_GRAD && k == 0));
            if (take_first) {
                x[k] = first;
                first = no_value;
            } else {
                // The last operand depends on an input if none before it does.
                bool data = false;
                for (int j = 0; j < k; ++j) data = data || vals_[x[j]].data;
                const bool need_data = k + 1 == arity && !data && !(first != no_value && vals_[first].data);
                x[k] = any_value(max_depth, must_be_exact, need_data, std::vector<uint32_t>(x, x + k));
            }
        }
        if (first != no_value) throw std::logic_error("fused generator: the spine value found no operand slot");
        int depth = 0;
        bool exact_in = true, ties_in = true, data = false;
        for (int k = 0; k < arity; ++k) {
            data = data || vals_[x[k]].data;
            vals_[x[k]].read = true;
            depth = std::max(depth, vals_[x[k]].depth);
            exact_in = exact_in && vals_[x[k]].exact;
            ties_in = ties_in && vals_[x[k]].ties;
        }
        const uint32_t a = vals_[x[0]].id, b = arity > 1 ? vals_[x[1]].id : 0, c = arity > 2 ? vals_[x[2]].id : 0;
        const double ba = vals_[x[0]].bound, bb = arity > 1 ? vals_[x[1]].bound : 0, bc = arity > 2 ? vals_[x[2]].bound : 0;
        static const float kGuards[] = {0.5f, 1.0f, 2.0f};
        const double g = kGuards[pick(0, 2)];
        uint32_t id;
        double bound;
        bool exact = false;
        switch (op) {
        case XYLEM_FUSED_ADD: case XYLEM_FUSED_SUB: id = emit(op, a, b); bound = ba + bb; break;
        case XYLEM_FUSED_MUL: id = emit(op, a, b); bound = ba * bb; break;
        case XYLEM_FUSED_DIV: id = emit(op, a, abs_plus(b, 1.0f)); bound = ba; break;
        case XYLEM_FUSED_MIN: case XYLEM_FUSED_MAX: id = emit(op, a, b); bound = std::max(ba, bb); exact = exact_in; break;
        case XYLEM_FUSED_NEG: case XYLEM_FUSED_ABS: case XYLEM_FUSED_RELU: id = emit(op, a); bound = ba; exact = exact_in; break;
        case XYLEM_FUSED_EXP:
            id = emit(op, ba <= 2.0 ? a : emit(XYLEM_FUSED_TANH, a));
            bound = std::exp(std::min(ba, 2.0));
            break;
        case XYLEM_FUSED_LOG: id = emit(op, abs_plus(a, static_cast<float>(g))); bound = std::max(std::fabs(std::log(g)), std::log(ba + g)); break;
        case XYLEM_FUSED_SQRT: id = emit(op, abs_plus(a, static_cast<float>(g))); bound = std::sqrt(ba + g); break;
        case XYLEM_FUSED_RSQRT: case XYLEM_FUSED_RECIP: id = emit(op, abs_plus(a, static_cast<float>(g))); bound = op == XYLEM_FUSED_RECIP ? 1.0 / g : 1.0 / std::sqrt(g); break;
        case XYLEM_FUSED_TANH: case XYLEM_FUSED_SIGMOID: id = emit(op, a); bound = 1.0; break;
        case XYLEM_FUSED_FMA: id = emit(op, a, b, c); bound = ba * bb + bc; break;
        case XYLEM_FUSED_SELECT: id = emit(op, a, b, c); bound = std::max(bb, bc); exact = exact_in; break;
        case XYLEM_FUSED_GT: case XYLEM_FUSED_GE: case XYLEM_FUSED_EQ: id = emit(op, a, b); bound = 1.0; exact = true; break;
        case XYLEM_FUSED_TANH_GRAD: id = emit(op, a, b); bound = ba * (1.0 + bb * bb); break;
        case XYLEM_FUSED_SIGMOID_GRAD: id = emit(op, a, b); bound = ba * bb * (1.0 + bb); break;
        case XYLEM_FUSED_RELU_GRAD: id = emit(op, a, b); bound = ba; break;
        case XYLEM_FUSED_SQUARE: id = emit(op, a); bound = ba * ba; break;
        case XYLEM_FUSED_ERF: id = emit(op, a); bound = 1.0; break;
        case XYLEM_FUSED_GELU: case XYLEM_FUSED_GELU_TANH: id = emit(op, a); bound = std::max(ba, 0.2); break;  // |gelu x| <= |x|, >= -0.17
        case XYLEM_FUSED_GELU_GRAD: case XYLEM_FUSED_GELU_TANH_GRAD: id = emit(op, a, b); bound = 1.13 * ba; break;  // |gelu'| < 1.13
        default: throw std::logic_error("fused generator: opcode " + std::to_string(op) + " is not arithmetic");
        }
        if (bound > 6.0) {  // squash: float32 rounding of a large intermediate would dominate the error
            id = chance(0.5) ? emit(XYLEM_FUSED_TANH, id) : emit(XYLEM_FUSED_MUL, id, constant(static_cast<float>(1.0 / bound)));
            bound = 1.0;
            exact = false;
        }
        // neg, abs, relu, min, max and select keep values on the grid; comparisons give 0 or 1.
        const bool ties = exact && (is_comparison(op) || ties_in);
        vals_.push_back({id, bound, depth + 1, exact, ties, false, data});
        return static_cast<uint32_t>(vals_.size() - 1);
    }

    std::mt19937_64& rng_;
    uint32_t opcode_count_;
    Program p_;
    std::vector<Val> vals_;
};

// The conformance suite's programs: 12 structures from a fixed seed (the same on every backend),
// depths 8 down to 1, then 8, 6, 4, 2, every arithmetic opcode forced into one of them, every fourth
// with no FULL input. Each distinct structure costs a code-generating backend one kernel build.
inline std::vector<Program> conformance_programs(uint32_t opcode_count = XYLEM_FUSED_OPCODE_COUNT_) {
    std::mt19937_64 rng(20240615);
    Generator gen(rng, opcode_count);
    const std::vector<uint8_t> ops = arithmetic_opcodes(opcode_count);
    constexpr int kPrograms = 12;
    std::vector<Program> programs;
    for (int k = 0; k < kPrograms; ++k) {
        std::vector<uint8_t> must;
        for (size_t i = static_cast<size_t>(k); i < ops.size(); i += kPrograms) must.push_back(ops[i]);
        const int depth = k < 8 ? 8 - k : 8 - (k - 8) * 2;  // 8, 7, ..., 1, then 8, 6, 4, 2
        programs.push_back(gen.make(depth, must, k % 4 == 3));
    }
    return programs;
}

// Output shapes the suite cycles through: ones, a row and a column, primes, sizes just past
// 256- and 1024-element tiles, ranks 1 to 4.
inline std::vector<Shape> conformance_shapes() {
    return {{1},    {1, 1},     {1, 257},     {257, 1}, {7},     {13, 17},   {2, 3, 5, 7},
            {1025}, {3, 1031},  {2, 1, 1, 3}, {5, 256}, {4099},  {33, 2049}, {1, 1, 1, 1}};
}

}  // namespace xylem::test::fused
