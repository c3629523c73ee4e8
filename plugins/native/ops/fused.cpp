// FUSED_ELEMENTWISE: runs the descriptor's program (ops.h, plugin_kit/fused.h) without compiling
// it. The iteration space is cut into tiles of kTile elements and each register holds one tile:
// the program runs one instruction at a time over a whole tile, so the opcode's switch runs once
// per tile and its element loop vectorises, while the tile's registers stay in L1/L2. An
// interpreter that runs the program per element pays the switch per element per instruction and
// never vectorises (bench/src/native_fused_exec.cpp measures both). Tiles are spread over the
// plugin's workers when the space is big enough to pay for waking them.
#include <algorithm>
#include <cstring>

#include "native.h"
#include "vecmath.h"
#include "xylem/plugin_kit/fused.h"

namespace xylem::native {

namespace {

using plugin_kit::FusedShape;

// Elements per register: the 20-30 registers of an LSTM cell's program (512 B each) stay in L1
// with their inputs, and the per-tile switch is still amortised over 128 elements. Measured on
// char-rnn (native, one thread): 512 -> 128 took the step from 56.4 to 54.5 ms; 64 and 256 were
// slower than 128.
constexpr int64_t kTile = 128;
// Elements below which one thread does everything: handing a worker items costs about a
// microsecond while it spins (workers.cpp), tens once it sleeps; 2k elements of an LSTM cell's
// program take ~10 us. char-rnn's 6,400-element cell programs run on two workers.
constexpr int64_t kMinPerWorker = 2 * 1024;

// Rows shorter than this are broadcast element by element: a memcpy or fill call per row
// would cost more than the row.
constexpr int64_t kShortRow = 32;

// The validated descriptor: where each operand is, and how each input is read.
struct Program {
    xylem_fused_attrs at;
    FusedShape shape;
    const float* in[XYLEM_FUSED_MAX_INPUTS];
    uint8_t mode[XYLEM_FUSED_MAX_INPUTS];  // the declared mode, or FULL/SCALAR where that reads the same
    bool in_place[XYLEM_FUSED_MAX_INPUTS];  // FULL and no output overlaps it: read where it lies
    float* out[XYLEM_FUSED_MAX_OUTPUTS];
};

// One element of opcode OP: the kit's arithmetic (fused_apply), with vecmath's exp, tanh, log and
// erf in place of libm's in the opcodes that use them (sigmoid is the kit's 1 / (1 + e^-a), the
// GELUs the kit's formulas, vecmath.h), so that every opcode's loop vectorises.
template <uint32_t OP>
__attribute__((always_inline)) inline float apply(float a, float b, float c) {
    if constexpr (OP == XYLEM_FUSED_EXP) return vecmath::exp(a);
    else if constexpr (OP == XYLEM_FUSED_TANH) return vecmath::tanh(a);
    else if constexpr (OP == XYLEM_FUSED_LOG) return vecmath::log(a);
    else if constexpr (OP == XYLEM_FUSED_SIGMOID) return 1.0f / (1.0f + vecmath::exp(-a));
    else if constexpr (OP == XYLEM_FUSED_ERF) return vecmath::erf(a);
    else if constexpr (OP == XYLEM_FUSED_GELU) return vecmath::gelu(a);
    else if constexpr (OP == XYLEM_FUSED_GELU_TANH) return vecmath::gelu_tanh(a);
    else if constexpr (OP == XYLEM_FUSED_GELU_GRAD) return a * vecmath::gelu_derivative(b);
    else if constexpr (OP == XYLEM_FUSED_GELU_TANH_GRAD) return a * vecmath::gelu_tanh_derivative(b);
    else return plugin_kit::fused_apply<float>(OP, a, b, c);
}

// d[i] = OP over the tile. OP is a constant, so the kit's switch folds away and the loop
// vectorises. The movers (INPUT, PARAM, CONST, OUTPUT) are instantiated too but never get here.
template <uint32_t OP, int ARITY>
__attribute__((always_inline)) inline void elementwise(float* d, const float* a, const float* b, const float* c,
                                                       int64_t n) {
    if constexpr (ARITY == 1) {
        for (int64_t i = 0; i < n; ++i) d[i] = apply<OP>(a[i], 0.0f, 0.0f);
    } else if constexpr (ARITY == 2) {
        for (int64_t i = 0; i < n; ++i) d[i] = apply<OP>(a[i], b[i], 0.0f);
    } else if constexpr (ARITY == 3) {
        for (int64_t i = 0; i < n; ++i) d[i] = apply<OP>(a[i], b[i], c[i]);
    }
}

// One arithmetic instruction over n elements; d may equal any source (registers are reused).
XYLEM_KERNEL(void, arithmetic,
             (uint32_t op, float* d, const float* a, const float* b, const float* c, int64_t n),
             (op, d, a, b, c, n)) {
    switch (op) {
#define XYLEM_FUSED_CASE_(number, ENUM, name, arity) \
    case XYLEM_FUSED_##ENUM: return elementwise<XYLEM_FUSED_##ENUM, arity>(d, a, b, c, n);
        XYLEM_FUSED_OPCODE_LIST(XYLEM_FUSED_CASE_)
#undef XYLEM_FUSED_CASE_
    }
}

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
    case XYLEM_FUSED_SCALAR: std::fill_n(d, n, src[0]); break;
    case XYLEM_FUSED_ROW:  // the tile may start mid-row and span several rows
        if (cols < kShortRow) {
            for (int64_t k = 0, col = start % cols; k < n; ++k, col = col + 1 == cols ? 0 : col + 1) d[k] = src[col];
            break;
        }
        for (int64_t k = 0, col = start % cols; k < n; col = 0) {
            const int64_t len = std::min(n - k, cols - col);
            std::memcpy(d + k, src + col, static_cast<size_t>(len) * sizeof(float));
            k += len;
        }
        break;
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

// The program over elements [start, start + n), n <= kTile; regs holds n_regs tiles.
void run_tile(const Program& p, float* regs, int64_t start, int64_t n) {
    const float* reg[XYLEM_FUSED_MAX_REGS];  // where each register's values are now
    for (uint32_t k = 0; k < p.at.n_instrs; ++k) {
        const xylem_fused_instr& in = p.at.code[k];
        if (in.op == XYLEM_FUSED_OUTPUT) {  // after every input read (the kit's rule): aliasing is safe
            std::memcpy(p.out[in.dst] + start, reg[in.a], static_cast<size_t>(n) * sizeof(float));
            continue;
        }
        float* d = regs + in.dst * kTile;
        switch (in.op) {
        case XYLEM_FUSED_INPUT: reg[in.dst] = load_input(p, in.a, start, n, d); continue;
        case XYLEM_FUSED_PARAM: std::fill_n(d, n, p.at.params[in.a]); break;
        case XYLEM_FUSED_CONST: std::fill_n(d, n, in.imm); break;
        default: arithmetic(in.op, d, reg[in.a], reg[in.b], reg[in.c], n); break;
        }
        reg[in.dst] = d;
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

// The checked descriptor as run_tile reads it.
Program prepare(const xylem_fused_attrs& at, const FusedShape& shape, const Tensor* ins, uint32_t n_in,
                const Tensor* outs, uint32_t n_out) {
    Program p;
    p.at = at;
    p.shape = shape;
    for (uint32_t i = 0; i < n_in; ++i) {
        p.in[i] = ins[i].f32();
        p.mode[i] = effective_mode(at.input_modes[i], shape);
        // An input that is also an output is copied into its register before the output overwrites it.
        p.in_place[i] = p.mode[i] == XYLEM_FUSED_FULL &&
                        std::none_of(outs, outs + n_out, [&](const Tensor& o) { return overlap(ins[i], o); });
    }
    for (uint32_t o = 0; o < n_out; ++o) p.out[o] = outs[o].f32();
    // The kit checks only the registers an opcode reads: point the unread ones at one it does, so
    // run_tile can pass all three without reading past its table.
    for (uint32_t k = 0; k < at.n_instrs; ++k) {
        xylem_fused_instr& in = p.at.code[k];
        const int arity = plugin_kit::fused_opcode_info(in.op).arity;
        if (arity < 1) continue;
        if (arity < 2) in.b = in.a;
        if (arity < 3) in.c = in.a;
    }
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
    const int64_t tiles = (numel + kTile - 1) / kTile;
    const int workers = static_cast<int>(std::clamp<int64_t>(numel / kMinPerWorker, 1, kernel_threads()));
    // Items of several tiles, about four per worker, so one atomic claim covers a few microseconds
    // and a worker that started late still gets a share.
    const int64_t per_item = std::max<int64_t>(1, tiles / (4 * static_cast<int64_t>(workers)));
    const int64_t items = (tiles + per_item - 1) / per_item;
    const int64_t regs_per_worker = static_cast<int64_t>(p.at.n_regs) * kTile;
    float* scratch = stream.scratch_.alloc<float>(regs_per_worker * workers);  // before the threads: the arena has no lock
    parallel_items(items, workers, [&](int worker, int64_t item) {
        float* regs = scratch + worker * regs_per_worker;
        const int64_t end = std::min(numel, (item + 1) * per_item * kTile);
        for (int64_t start = item * per_item * kTile; start < end; start += kTile)
            run_tile(p, regs, start, std::min(kTile, end - start));
    });
}

}  // namespace xylem::native
