// FUSED_ELEMENTWISE: runs the descriptor's program (ops.h, plugin_kit/fused.h) without compiling
// it. The iteration space is cut into tiles and each register holds one tile: the program runs
// one instruction at a time over a whole tile, so the opcode's switch runs once per tile and its
// element loop vectorises, while the tile's registers stay in L1. An interpreter that runs the
// program per element pays the switch per element per instruction and never vectorises
// (bench/src/native_fused_exec.cpp measures both). Tiles are spread over the plugin's workers
// when the space is big enough to pay for waking them.
//
// Before the tiles run, prepare() turns the program into steps that do less per tile (issue 27:
// bench/src/fusion_chain_ops.cpp, docs/benchmarks.md): params, constants and scalar inputs are
// values filled into their own tiles once per worker, not once per tile, and instructions over
// values alone are computed once; the core's lowering of add/axpby (add(mul(p, x), mul(q, y)),
// x or y possibly a product) and of clamp (min(max(x, lo), hi)) run as one pass each; a row
// input inside one row is read where it lies; the last instruction before an output's store
// writes the output itself. Every element's arithmetic is unchanged (the same operations on the
// same values in the same order): the results are the same bits as one instruction at a time.
#include <algorithm>
#include <cstring>

#include "native.h"
#include "simd.h"
#include "vecmath.h"
#include "xylem/plugin_kit/fused.h"

namespace xylem::native {

namespace {

using plugin_kit::FusedShape;

// Elements below which one thread does everything: handing a worker items costs about a
// microsecond while it spins (workers.cpp), tens once it sleeps; 2k elements of an LSTM cell's
// program take ~10 us. char-rnn's 6,400-element cell programs run on two workers.
constexpr int64_t kMinPerWorker = 2 * 1024;

// Rows shorter than this are broadcast element by element: a memcpy or fill call per row
// would cost more than the row.
constexpr int64_t kShortRow = 32;


// One element of opcode OP: the kit's arithmetic (fused_apply), with vecmath's exp, tanh, log and
// erf in place of libm's in the opcodes that use them (sigmoid is the kit's 1 / (1 + e^-a) with
// vecmath's exp, the GELUs the kit's formulas, vecmath.h), so that every opcode's loop vectorises.
// Fma: the level's (simd.h's S::kFma), for the exact GELU and erf as act_fwd/act_bwd compute them.
template <uint32_t OP, bool Fma = false>
__attribute__((always_inline)) inline float apply(float a, float b, float c) {
    if constexpr (OP == XYLEM_FUSED_EXP) return vecmath::exp(a);
    else if constexpr (OP == XYLEM_FUSED_TANH) return vecmath::tanh(a);
    else if constexpr (OP == XYLEM_FUSED_LOG) return vecmath::log(a);
    else if constexpr (OP == XYLEM_FUSED_SIGMOID) return vecmath::sigmoid(a);
    else if constexpr (OP == XYLEM_FUSED_ERF) return vecmath::erf<Fma>(a);
    else if constexpr (OP == XYLEM_FUSED_GELU) return vecmath::gelu<Fma>(a);
    else if constexpr (OP == XYLEM_FUSED_GELU_TANH) return vecmath::gelu_tanh(a);
    else if constexpr (OP == XYLEM_FUSED_GELU_GRAD) return a * vecmath::gelu_derivative<Fma>(b);
    else if constexpr (OP == XYLEM_FUSED_GELU_TANH_GRAD) return a * vecmath::gelu_tanh_derivative(b);
    else return plugin_kit::fused_apply<float>(OP, a, b, c);
}

// d[i] = OP over the tile. OP is a constant, so the kit's switch folds away and the loop
// vectorises. The movers (INPUT, PARAM, CONST, OUTPUT) are instantiated too but never get here.
template <uint32_t OP, int ARITY, bool Fma>
__attribute__((always_inline)) inline void elementwise(float* d, const float* a, const float* b, const float* c,
                                                       int64_t n) {
    if constexpr (ARITY == 1) {
        for (int64_t i = 0; i < n; ++i) d[i] = apply<OP, Fma>(a[i], 0.0f, 0.0f);
    } else if constexpr (ARITY == 2) {
        for (int64_t i = 0; i < n; ++i) d[i] = apply<OP, Fma>(a[i], b[i], 0.0f);
    } else if constexpr (ARITY == 3) {
        for (int64_t i = 0; i < n; ++i) d[i] = apply<OP, Fma>(a[i], b[i], c[i]);
    }
}

// One arithmetic instruction over n elements; d may equal any source (registers are reused).
XYLEM_KERNEL_LEVELS(void, arithmetic,
                    (uint32_t op, float* d, const float* a, const float* b, const float* c, int64_t n),
                    (op, d, a, b, c, n)) {
    switch (op) {
#define XYLEM_FUSED_CASE_(number, ENUM, name, arity) \
    case XYLEM_FUSED_##ENUM: return elementwise<XYLEM_FUSED_##ENUM, arity, S::kFma>(d, a, b, c, n);
        XYLEM_FUSED_OPCODE_LIST(XYLEM_FUSED_CASE_)
#undef XYLEM_FUSED_CASE_
    }
}

// Two or three instructions as one pass over the tile, the same arithmetic in the same order
// (prepare finds them): the forms the core's lowering of add, axpby and clamp makes.
//   kAxpby (+ kXProduct, kYProduct, kSub): d = s1*X + s2*Y (kSub: -), X = x1 or x1*x2 (kXProduct),
//     Y = y1 or y1*y2; s1*X is mul(s1, X) whichever operand order the program had (the same bits);
//   kClamp: d = min(max(x1, s1), s2), the kit's min and max.
enum CompoundForm : uint8_t { kAxpby = 0, kXProduct = 1, kYProduct = 2, kSub = 4, kClamp = 8 };

template <int FORM>
__attribute__((always_inline)) inline void compound_form(float* d, const float* x1, const float* x2, const float* y1,
                                                         const float* y2, float s1, float s2, int64_t n) {
    if constexpr (FORM == kClamp) {
        for (int64_t i = 0; i < n; ++i)
            d[i] = apply<XYLEM_FUSED_MIN>(apply<XYLEM_FUSED_MAX>(x1[i], s1, 0.0f), s2, 0.0f);
    } else {
        for (int64_t i = 0; i < n; ++i) {
            const float x = (FORM & kXProduct) ? x1[i] * x2[i] : x1[i];
            const float y = (FORM & kYProduct) ? y1[i] * y2[i] : y1[i];
            d[i] = (FORM & kSub) ? s1 * x - s2 * y : s1 * x + s2 * y;
        }
    }
}

XYLEM_KERNEL(void, compound,
             (uint32_t form, float* d, const float* x1, const float* x2, const float* y1, const float* y2, float s1,
              float s2, int64_t n),
             (form, d, x1, x2, y1, y2, s1, s2, n)) {
    switch (form) {
#define XYLEM_COMPOUND_CASE_(F) \
    case F: return compound_form<F>(d, x1, x2, y1, y2, s1, s2, n);
        XYLEM_COMPOUND_CASE_(0) XYLEM_COMPOUND_CASE_(1) XYLEM_COMPOUND_CASE_(2) XYLEM_COMPOUND_CASE_(3)
        XYLEM_COMPOUND_CASE_(4) XYLEM_COMPOUND_CASE_(5) XYLEM_COMPOUND_CASE_(6) XYLEM_COMPOUND_CASE_(7)
        XYLEM_COMPOUND_CASE_(kClamp)
#undef XYLEM_COMPOUND_CASE_
    }
}

// Where operands live while a tile runs: the program's registers first, then one tile per
// distinct value known before the run (PARAM, CONST, SCALAR inputs and what the program computes
// from those alone), filled once per worker and call rather than once per tile.
constexpr int kMaxSlots = XYLEM_FUSED_MAX_REGS + XYLEM_FUSED_MAX_INSTRS;

// One step of the program as run_tile runs it (prepare's output).
struct Step {
    enum Kind : uint8_t { kInput, kArith, kCompound, kOutput, kDropped } kind;
    uint8_t op;       // kArith: the opcode; kCompound: the CompoundForm
    uint8_t index;    // kInput: the input; kOutput and kArith/kCompound with direct: the output
    bool direct;      // kArith, kCompound: write straight into output `index` (see prepare)
    uint16_t dst;     // the slot written (kInput, kArith, kCompound)
    uint16_t a, b, c; // slots read (kArith; kOutput: a; kCompound: x1, x2, y1)
    uint16_t e = 0;   // kCompound: y2
    float s1 = 0, s2 = 0;  // kCompound's values
};

// The validated descriptor: where each operand is, how each input is read, and the steps.
struct Program {
    FusedShape shape;
    int64_t tile = 128;  // elements per register
    const float* in[XYLEM_FUSED_MAX_INPUTS];
    uint8_t mode[XYLEM_FUSED_MAX_INPUTS];  // the declared mode, or FULL/SCALAR where that reads the same
    bool in_place[XYLEM_FUSED_MAX_INPUTS];  // FULL and no output overlaps it: read where it lies
    float* out[XYLEM_FUSED_MAX_OUTPUTS];
    int n_regs = 0, n_consts = 0;  // slots [0, n_regs) are registers, [n_regs, n_regs + n_consts) values
    float consts[kMaxSlots];
    int n_steps = 0;
    Step steps[XYLEM_FUSED_MAX_INSTRS];
};

// Input i's values at elements [start, start + n) of the iteration space, into d; returns where
// they are (d, or the input itself when it can be read in place).
const float* load_input(const Program& p, uint32_t i, int64_t start, int64_t n, float* d) {
    const float* src = p.in[i];
    const int64_t cols = p.shape.cols;
    switch (p.mode[i]) {
    case XYLEM_FUSED_FULL:
        if (p.in_place[i]) return src + start;
        std::memcpy(d, src + start, static_cast<size_t>(n) * sizeof(float));
        break;
    case XYLEM_FUSED_SCALAR: std::fill_n(d, n, src[0]); break;  // (prepare makes these values)
    case XYLEM_FUSED_ROW: {  // the tile may start mid-row and span several rows
        const int64_t col0 = start % cols;
        if (col0 + n <= cols) return src + col0;  // inside one row: the row's elements, in place
        if (cols < kShortRow) {
            for (int64_t k = 0, col = col0; k < n; ++k, col = col + 1 == cols ? 0 : col + 1) d[k] = src[col];
            break;
        }
        for (int64_t k = 0, col = col0; k < n; col = 0) {
            const int64_t len = std::min(n - k, cols - col);
            std::memcpy(d + k, src + col, static_cast<size_t>(len) * sizeof(float));
            k += len;
        }
        break;
    }
    case XYLEM_FUSED_COL:
        if (cols < kShortRow) {
            int64_t row = start / cols, col = start % cols;
            for (int64_t k = 0; k < n; ++k) {
                d[k] = src[row];
                if (++col == cols) col = 0, ++row;
            }
            break;
        }
        for (int64_t k = 0, row = start / cols, col = start % cols; k < n; ++row, col = 0) {
            const int64_t len = std::min(n - k, cols - col);
            std::fill_n(d + k, len, src[row]);
            k += len;
        }
        break;
    }
    return d;
}

// The program over elements [start, start + n), n <= p.tile; regs holds the worker's slots (the
// value slots already filled).
void run_tile(const Program& p, float* regs, int64_t start, int64_t n) {
    const float* at[kMaxSlots];  // where each slot's values are now
    const int64_t tile = p.tile;
    for (int k = p.n_regs; k < p.n_regs + p.n_consts; ++k) at[k] = regs + k * tile;
    for (int k = 0; k < p.n_steps; ++k) {
        const Step& s = p.steps[k];
        switch (s.kind) {
        case Step::kInput: at[s.dst] = load_input(p, s.index, start, n, regs + s.dst * tile); break;
        case Step::kArith: {
            float* d = s.direct ? p.out[s.index] + start : regs + s.dst * tile;
            arithmetic(s.op, d, at[s.a], at[s.b], at[s.c], n);
            at[s.dst] = d;
            break;
        }
        case Step::kCompound: {
            float* d = s.direct ? p.out[s.index] + start : regs + s.dst * tile;
            compound(s.op, d, at[s.a], at[s.b], at[s.c], at[s.e], s.s1, s.s2, n);
            at[s.dst] = d;
            break;
        }
        case Step::kDropped: break;
        case Step::kOutput: {
            float* o = p.out[s.index] + start;
            if (at[s.a] != o) std::memcpy(o, at[s.a], static_cast<size_t>(n) * sizeof(float));
            break;
        }
        }
    }
}

// A ROW or COL input that is the same as FULL or SCALAR for this shape is read as such (no
// per-row pieces): [rows, 1] makes a column every element and a row one value; [1, cols] the reverse.
uint8_t effective_mode(uint8_t mode, const FusedShape& s) {
    const bool one_row = s.rows == 1, one_col = s.cols == 1;
    if (mode == XYLEM_FUSED_ROW && (one_row || one_col)) return one_row ? XYLEM_FUSED_FULL : XYLEM_FUSED_SCALAR;
    if (mode == XYLEM_FUSED_COL && (one_row || one_col)) return one_col ? XYLEM_FUSED_FULL : XYLEM_FUSED_SCALAR;
    return mode;
}

// Elements per register: as many as keep a worker's slots within kTileBudget bytes, a multiple of
// 64 from 128 to 1024. The 20-30 registers of an LSTM cell's program stay at 128 (measured on
// char-rnn, native, one thread: 512 -> 128 took the step from 56.4 to 54.5 ms; 64 and 256 were
// slower than 128); a short chain's few registers take longer tiles, so each instruction's call
// and loop set-up are paid over more elements.
constexpr int64_t kTileBudget = 24 * 1024;

// The checked descriptor as run_tile reads it. Values known before the run (params, constants,
// scalar inputs, and any instruction over those alone, computed here by the same kernel) become
// value slots; the core's add/axpby and clamp patterns become one compound step each; an
// instruction whose result goes to an output, and that no input is read after, writes the output
// directly (no copy through a register). No element's arithmetic changes: the same operations
// run on the same values in the same order.
Program prepare(const xylem_fused_attrs& at, const FusedShape& shape, const Tensor* ins, uint32_t n_in,
                const Tensor* outs, uint32_t n_out) {
    Program p;
    p.shape = shape;
    for (uint32_t i = 0; i < n_in; ++i) {
        p.in[i] = ins[i].f32();
        p.mode[i] = effective_mode(at.input_modes[i], shape);
        // An input that is also an output is copied into its register before the output overwrites it.
        p.in_place[i] = p.mode[i] == XYLEM_FUSED_FULL &&
                        std::none_of(outs, outs + n_out, [&](const Tensor& o) { return overlap(ins[i], o); });
    }
    for (uint32_t o = 0; o < n_out; ++o) p.out[o] = outs[o].f32();
    p.n_regs = static_cast<int>(at.n_regs);
    const uint32_t n = at.n_instrs;

    // Operands of each instruction (unread ones: the first; the kit checks only those an opcode
    // reads), the instruction that defined each operand, and how often each result is read.
    uint8_t ops[XYLEM_FUSED_MAX_INSTRS][3];
    int def_of[XYLEM_FUSED_MAX_INSTRS][3], uses[XYLEM_FUSED_MAX_INSTRS] = {};
    int arity[XYLEM_FUSED_MAX_INSTRS];
    {
        int last_def[XYLEM_FUSED_MAX_REGS];
        std::fill_n(last_def, XYLEM_FUSED_MAX_REGS, -1);
        for (uint32_t k = 0; k < n; ++k) {
            const xylem_fused_instr& in = at.code[k];
            arity[k] = in.op == XYLEM_FUSED_OUTPUT ? 1 : std::max(0, plugin_kit::fused_opcode_info(in.op).arity);
            ops[k][0] = in.a, ops[k][1] = arity[k] >= 2 ? in.b : in.a, ops[k][2] = arity[k] >= 3 ? in.c : in.a;
            for (int j = 0; j < 3; ++j) def_of[k][j] = -1;
            for (int j = 0; j < arity[k]; ++j) {
                def_of[k][j] = last_def[ops[k][j]];
                if (def_of[k][j] >= 0) ++uses[def_of[k][j]];
            }
            if (in.op != XYLEM_FUSED_OUTPUT) last_def[in.dst] = static_cast<int>(k);
        }
    }

    int slot[XYLEM_FUSED_MAX_REGS];         // the slot each register's value is in now
    bool known[XYLEM_FUSED_MAX_REGS] = {};  // ... a value slot
    int step_of[XYLEM_FUSED_MAX_INSTRS];    // the step an instruction became (-1: none)
    auto value_slot = [&](float v) {
        for (int k = 0; k < p.n_consts; ++k)
            if (std::memcmp(&p.consts[k], &v, sizeof v) == 0) return p.n_regs + k;
        p.consts[p.n_consts] = v;
        return p.n_regs + p.n_consts++;
    };
    auto value = [&](int sl) { return p.consts[sl - p.n_regs]; };
    auto is_value = [&](int sl) { return sl >= p.n_regs; };
    uint32_t last_input = 0;
    for (uint32_t k = 0; k < n; ++k)
        if (at.code[k].op == XYLEM_FUSED_INPUT) last_input = k;

    // Instruction i (a MUL step read only by the instruction being built) as s * X, X a slot or a
    // product of two (itself a MUL step read only there).
    struct Term {
        int i = -1, product = -1;  // the MUL, and the inner MUL when X is a product
        float s = 0;
        uint16_t x1 = 0, x2 = 0;  // X = x1 * x2 (a product) or x1 (= x2)
        uint16_t plain = 0;       // the MUL's own operand: X as a plain term
    };
    auto as_term = [&](int i, Term& t) {
        if (i < 0 || uses[i] != 1 || step_of[i] < 0 || at.code[i].op != XYLEM_FUSED_MUL) return false;
        const Step& st = p.steps[step_of[i]];
        if (st.kind != Step::kArith || st.direct) return false;
        int v = -1;  // which operand is the value
        if (is_value(st.a) && !is_value(st.b)) v = 0;
        else if (is_value(st.b) && !is_value(st.a)) v = 1;
        if (v < 0) return false;
        t.i = i, t.s = value(v == 0 ? st.a : st.b), t.product = -1;
        t.x1 = t.x2 = t.plain = v == 0 ? st.b : st.a;
        const int inner = def_of[i][1 - v];
        if (inner >= 0 && uses[inner] == 1 && step_of[inner] >= 0 && at.code[inner].op == XYLEM_FUSED_MUL) {
            const Step& is = p.steps[step_of[inner]];
            if (is.kind == Step::kArith && !is.direct && !is_value(is.a) && !is_value(is.b))
                t.product = inner, t.x1 = is.a, t.x2 = is.b;
        }
        return true;
    };
    // Whether the slots a compound step at instruction k reads still hold, when it runs, what
    // they held when instruction `from` read them: no step that runs in between (the ones the
    // compound replaces, `dropped`, do not) writes them. Value slots never change.
    auto still_hold = [&](std::initializer_list<uint16_t> reads, int from, uint32_t k,
                          std::initializer_list<int> dropped) {
        for (uint32_t j = static_cast<uint32_t>(from) + 1; j < k; ++j) {
            if (step_of[j] < 0 || std::find(dropped.begin(), dropped.end(), static_cast<int>(j)) != dropped.end())
                continue;
            const Step& w = p.steps[step_of[j]];
            if (w.kind == Step::kDropped || w.kind == Step::kOutput) continue;
            for (uint16_t r : reads)
                if (!is_value(r) && w.dst == r) return false;
        }
        return true;
    };

    for (uint32_t k = 0; k < n; ++k) {
        const xylem_fused_instr& in = at.code[k];
        step_of[k] = -1;
        switch (in.op) {
        case XYLEM_FUSED_INPUT:
            if (p.mode[in.a] == XYLEM_FUSED_SCALAR) {
                slot[in.dst] = value_slot(p.in[in.a][0]), known[in.dst] = true;
            } else {
                step_of[k] = p.n_steps;
                p.steps[p.n_steps++] = Step{Step::kInput, 0, in.a, false, in.dst, 0, 0, 0};
                slot[in.dst] = in.dst, known[in.dst] = false;
            }
            continue;
        case XYLEM_FUSED_PARAM:
        case XYLEM_FUSED_CONST:
            slot[in.dst] = value_slot(in.op == XYLEM_FUSED_PARAM ? at.params[in.a] : in.imm), known[in.dst] = true;
            continue;
        case XYLEM_FUSED_OUTPUT:
            p.steps[p.n_steps++] = Step{Step::kOutput, 0, in.dst, false, 0, static_cast<uint16_t>(slot[in.a]), 0, 0};
            continue;
        default: break;
        }
        const uint8_t ra = ops[k][0], rb = ops[k][1], rc = ops[k][2];
        if (known[ra] && known[rb] && known[rc]) {  // a value: computed once, here
            const float a = value(slot[ra]), b = value(slot[rb]), c = value(slot[rc]);
            float r;
            arithmetic(in.op, &r, &a, &b, &c, 1);
            slot[in.dst] = value_slot(r), known[in.dst] = true;
            continue;
        }
        Step st{Step::kArith, in.op, 0, false, in.dst, static_cast<uint16_t>(slot[ra]),
                static_cast<uint16_t>(slot[rb]), static_cast<uint16_t>(slot[rc])};
        // add/sub of two scaled terms (axpby, add with alpha and beta), and clamp's min of a max.
        Term tx, ty;
        if ((in.op == XYLEM_FUSED_ADD || in.op == XYLEM_FUSED_SUB) && def_of[k][0] != def_of[k][1] &&
            as_term(def_of[k][0], tx) && as_term(def_of[k][1], ty)) {
            auto holds = [&](const Term& t) {
                const int from = t.product >= 0 ? t.product : t.i;
                return still_hold({t.x1, t.x2}, from, k, {tx.i, tx.product, ty.i, ty.product});
            };
            // A product whose factors changed in between is kept as its own step, X its result.
            for (Term* t : {&tx, &ty})
                if (t->product >= 0 && !holds(*t)) t->product = -1, t->x1 = t->x2 = t->plain;
            if (holds(tx) && holds(ty)) {
                st.kind = Step::kCompound;
                st.op = static_cast<uint8_t>(kAxpby | (tx.product >= 0 ? kXProduct : 0) |
                                             (ty.product >= 0 ? kYProduct : 0) | (in.op == XYLEM_FUSED_SUB ? kSub : 0));
                st.a = tx.x1, st.b = tx.x2, st.c = ty.x1, st.e = ty.x2, st.s1 = tx.s, st.s2 = ty.s;
                for (int i : {tx.i, tx.product, ty.i, ty.product})
                    if (i >= 0) p.steps[step_of[i]].kind = Step::kDropped;
            }
        } else if (in.op == XYLEM_FUSED_MIN && is_value(slot[rb]) && !is_value(slot[ra]) && def_of[k][0] >= 0) {
            const int i = def_of[k][0];
            if (uses[i] == 1 && step_of[i] >= 0 && at.code[i].op == XYLEM_FUSED_MAX) {
                const Step& ms = p.steps[step_of[i]];
                if (ms.kind == Step::kArith && !ms.direct && !is_value(ms.a) && is_value(ms.b) &&
                    still_hold({ms.a}, i, k, {i})) {
                    st.kind = Step::kCompound, st.op = kClamp;
                    st.a = st.b = st.c = st.e = ms.a, st.s1 = value(ms.b), st.s2 = value(slot[rb]);
                    p.steps[step_of[i]].kind = Step::kDropped;
                }
            }
        }
        // Straight into an output: when the next use of the result is that output's store and no
        // input is read after this (an input may share its output's memory).
        if (k > last_input)
            for (uint32_t j = k + 1; j < n; ++j) {
                const xylem_fused_instr& u = at.code[j];
                if (u.op == XYLEM_FUSED_OUTPUT && u.a == in.dst) {
                    st.direct = true, st.index = u.dst;
                    break;
                }
                const bool reads = (arity[j] >= 1 && u.a == in.dst) || (arity[j] >= 2 && u.b == in.dst) ||
                                   (arity[j] >= 3 && u.c == in.dst);
                if (reads || (u.op != XYLEM_FUSED_OUTPUT && u.dst == in.dst)) break;
            }
        step_of[k] = p.n_steps;
        p.steps[p.n_steps++] = st;
        slot[in.dst] = in.dst, known[in.dst] = false;
    }
    int kept = 0;
    for (int k = 0; k < p.n_steps; ++k)
        if (p.steps[k].kind != Step::kDropped) p.steps[kept++] = p.steps[k];
    p.n_steps = kept;
    const int64_t slots = p.n_regs + p.n_consts;
    p.tile = std::clamp<int64_t>(kTileBudget / (slots * static_cast<int64_t>(sizeof(float))) / 64 * 64, 128, 1024);
    return p;
}

}  // namespace

void op_fused_elementwise(const xylem_op_desc& desc, xylem_stream_s& stream) {
    // Operand counts and the program are the kit's rule (fused_check); the output count is taken
    // as given here and checked there, before any operand is read.
    OpArgs a(desc, 0, XYLEM_FUSED_MAX_INPUTS, desc.n_outputs);
    const auto at = a.attrs<xylem_fused_attrs>();
    const uint32_t n_in = desc.n_inputs, n_out = desc.n_outputs;
    plugin_kit::fused_program_check(a, at, n_in, n_out);
    Tensor ins[XYLEM_FUSED_MAX_INPUTS] = {}, outs[XYLEM_FUSED_MAX_OUTPUTS] = {};
    for (uint32_t i = 0; i < n_in; ++i) ins[i] = a.in(i, "x");
    for (uint32_t o = 0; o < n_out; ++o) outs[o] = a.out(o, "y");
    const FusedShape shape = plugin_kit::fused_check(a, at, ins, n_in, outs, n_out);
    plugin_kit::fused_check_sharing(a, at, ins, n_in, outs, n_out, overlap,
                                    [](const Tensor& x, const Tensor& y) { return x.data == y.data; });
    const Program p = prepare(at, shape, ins, n_in, outs, n_out);

    const int64_t numel = p.shape.numel();
    if (numel == 0) return;
    const int64_t tile = p.tile, tiles = (numel + tile - 1) / tile;
    const int workers = static_cast<int>(std::clamp<int64_t>(numel / kMinPerWorker, 1, kernel_threads()));
    // Items of several tiles, about four per worker, so one atomic claim covers a few microseconds
    // and a worker that started late still gets a share.
    const int64_t per_item = std::max<int64_t>(1, tiles / (4 * static_cast<int64_t>(workers)));
    const int64_t items = (tiles + per_item - 1) / per_item;
    const int64_t slots_per_worker = static_cast<int64_t>(p.n_regs + p.n_consts) * tile;
    // Before the threads: the arena has no lock.
    float* scratch = stream.scratch_.alloc<float>(slots_per_worker * workers);
    bool* filled = stream.scratch_.alloc<bool>(workers);
    std::fill_n(filled, workers, false);
    parallel_items(items, workers, [&](int worker, int64_t item) {
        float* regs = scratch + worker * slots_per_worker;
        if (!filled[worker]) {  // the value slots, once per worker (in its own cache)
            for (int k = 0; k < p.n_consts; ++k) std::fill_n(regs + (p.n_regs + k) * tile, tile, p.consts[k]);
            filled[worker] = true;
        }
        const int64_t end = std::min(numel, (item + 1) * per_item * tile);
        for (int64_t start = item * per_item * tile; start < end; start += tile)
            run_tile(p, regs, start, std::min(tile, end - start));
    });
}

}  // namespace xylem::native
