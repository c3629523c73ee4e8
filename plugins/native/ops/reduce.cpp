// Reductions whose result stays in a device buffer: BIAS_GRAD, ACCURACY and REDUCE.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "native.h"

namespace xylem::native {

namespace {

// db = beta*db + acc, without reading db when beta == 0 (it may hold NaN).
inline float blend(float beta, float db, double acc) {
    return beta == 0.0f ? static_cast<float>(acc) : static_cast<float>(beta * db + acc);
}

}  // namespace

namespace {
// Per channel: kBiasLanes double lanes and a tail.
constexpr int64_t kBiasLanes = 16, kBiasAcc = kBiasLanes + 1;

// One (n, c) plane added into its channel's accumulators: 16 float lanes over blocks of 4096 (as
// lane_sum), each block's lanes added into 16 double lanes, the tail into *tail. The lanes are
// summed once per channel, not per plane: LeNet's [64, 50, 8, 8] gradients spent most of 67 us
// adding 16 lanes in order for each of 3,200 planes of 64 floats.
__attribute__((always_inline)) inline void plane_lanes(const float* __restrict plane, int64_t n,
                                                      double* __restrict lanes, double* __restrict tail) {
    constexpr int64_t kBlock = 4096;
    int64_t i = 0;
    while (n - i >= kBiasLanes) {
        float lane[kBiasLanes] = {};
        const int64_t end = i + ((n - i < kBlock ? n - i : kBlock) / kBiasLanes) * kBiasLanes;
        for (; i < end; i += kBiasLanes)
            for (int64_t l = 0; l < kBiasLanes; ++l) lane[l] += plane[i + l];
        for (int64_t l = 0; l < kBiasLanes; ++l) lanes[l] += lane[l];
    }
    for (; i < n; ++i) *tail += plane[i];
}
// Channels [lo, hi) of dy [n, c, inner], planes in memory order, into acc (kBiasAcc per channel).
// Compiled for each instruction-set level (isa.h), the same bits at every one.
XYLEM_KERNEL(void, bias_planes_add,
             (const float* __restrict dy, int64_t n, int64_t c, int64_t inner, int64_t lo, int64_t hi,
              double* __restrict acc),
             (dy, n, c, inner, lo, hi, acc)) {
    for (int64_t r = 0; r < n; ++r)
        for (int64_t ch = lo; ch < hi; ++ch) {
            double* a = acc + ch * kBiasAcc;
            plane_lanes(dy + (r * c + ch) * inner, inner, a, a + kBiasLanes);
        }
}

// Rows [0, n) of columns [j0, j0 + w) of dy [n, c] added into acc[w], row by row (each column's
// sum in row order). A kernel per level: as plain code, compiled for baseline x86-64, it added
// two doubles an instruction (the character GPT's [768, 384] gradients took 42 us on two CPUs).
XYLEM_KERNEL(void, bias_rows_add,
             (const float* __restrict dy, int64_t n, int64_t c, int64_t j0, int64_t w, double* __restrict acc),
             (dy, n, c, j0, w, acc)) {
    for (int64_t r = 0; r < n; ++r) {
        const float* row = dy + r * c + j0;
        for (int64_t j = 0; j < w; ++j) acc[j] += row[j];
    }
}

double bias_acc_total(const double* acc) {
    double total = acc[kBiasLanes];
    for (int64_t l = 0; l < kBiasLanes; ++l) total += acc[l];
    return total;
}
}  // namespace

void bias_grad_nc(const float* dy, int64_t n, int64_t c, int64_t inner, float beta, float* db, Arena& scratch) {
    if (inner == 1) {
        // [N,C]: add whole rows into a stack block of column sums, so dy is read once, in order.
        // Big ones split the columns, in blocks of 64, between threads (the character GPT's
        // [768, 512]: 67 us on one): each column still sums its rows in order.
        constexpr int64_t kCols = 512, kBlock = 64;
        const int64_t blocks = (c + kBlock - 1) / kBlock;
        split_work(blocks, split_workers(static_cast<double>(n * c), static_cast<double>(kMinSplitElements) / 4, blocks),
                   [&](int64_t lo, int64_t hi, int) {
                       double acc[kCols];
                       const int64_t end = std::min(c, hi * kBlock);
                       for (int64_t j0 = lo * kBlock; j0 < end; j0 += kCols) {
                           const int64_t w = end - j0 < kCols ? end - j0 : kCols;
                           for (int64_t j = 0; j < w; ++j) acc[j] = 0.0;
                           bias_rows_add(dy, n, c, j0, w, acc);
                           for (int64_t j = 0; j < w; ++j) db[j0 + j] = blend(beta, db[j0 + j], acc[j]);
                       }
                   });
        return;
    }
    // [N,C,H,W...]: each (n,c) plane is contiguous; the planes in memory order (one sequential
    // pass, which the prefetcher follows) into per-channel accumulators. Big ones split the
    // channels between threads: each channel still sums in the same order.
    double* acc = scratch.alloc<double>(c * kBiasAcc);
    std::fill_n(acc, c * kBiasAcc, 0.0);
    split_work(c, split_workers(n * c * inner, kMinSplitElements / 4, c),
               [&](int64_t lo, int64_t hi, int) { bias_planes_add(dy, n, c, inner, lo, hi, acc); });
    for (int64_t ch = 0; ch < c; ++ch) db[ch] = blend(beta, db[ch], bias_acc_total(acc + ch * kBiasAcc));
}

void op_bias_grad(const xylem_op_desc& desc, xylem_stream_s& stream) {
    OpArgs a(desc, 1, 1, 1);
    const float beta = a.attrs<xylem_bias_grad_attrs>().beta;
    const Tensor tdy = a.in(0, "dy"), tdb = a.out(0, "db");
    const plugin_kit::BiasGradShape b = plugin_kit::bias_grad_shape(a, tdy, tdb);
    bias_grad_nc(tdy.f32(), b.n, b.c, b.inner, beta, tdb.f32(), stream.scratch_);
}

void op_accuracy(const xylem_op_desc& desc, xylem_stream_s&) {
    OpArgs a(desc, 2, 2, 1);
    const Tensor tlogits = a.in(0, "logits"), tlabels = a.in(1, "labels", XYLEM_I32), tcorrect = a.out(0, "correct");
    a.check_classification(tlogits, tlabels);
    a.check_scalar(tcorrect, "correct");
    const int64_t n = tlogits.dims[0], c = tlogits.dims[1];
    const float* x = tlogits.f32();
    const int32_t* labels = tlabels.i32();
    int64_t count = 0;
    for (int64_t i = 0; i < n; ++i) {
        const float* row = x + i * c;
        int64_t best = 0;
        for (int64_t j = 1; j < c; ++j)
            if (row[j] > row[best]) best = j;  // strict: ties keep the first max
        count += best == labels[i];
    }
    tcorrect.f32()[0] += static_cast<float>(count);
}

// ---- REDUCE ----------------------------------------------------------------------------------
namespace {

// Elements per partial of one long run: a run longer than this (axis -1 over a big tensor) is cut
// into fixed chunks, summed by any thread and then added in chunk order, so the result does not
// depend on how many threads ran.
constexpr int64_t kRunChunk = int64_t{1} << 16;
// Columns one [outer, n, inner] item accumulates at once (its accumulators stay in L1).
constexpr int64_t kCols = 256;

// max that propagates NaN (a NaN on either side wins), as torch.amax; fmax would drop it.
inline double max_nan(double a, double b) { return a > b || a != a ? a : b; }

// A running max over 8 float lanes, each with a NaN flag. Written with GCC's vector extension:
// GCC leaves the plain-array form of this compare-and-select scalar (measured 4x slower than
// the sum over 16M floats; as vectors it streams as fast as the sum).
using F8 = float __attribute__((vector_size(32)));
using I8 = int32_t __attribute__((vector_size(32)));
struct Max8 {
    F8 m;
    I8 nan;

    static Max8 start() {
        const float inf = std::numeric_limits<float>::infinity();
        return {F8{-inf, -inf, -inf, -inf, -inf, -inf, -inf, -inf}, I8{}};
    }
    void add(const float* x) {
        F8 v;
        std::memcpy(&v, x, sizeof v);  // unaligned load
        m = v > m ? v : m;
        nan |= v != v;
    }
    double result() const {
        double best = -std::numeric_limits<double>::infinity();
        for (int l = 0; l < 8; ++l) best = max_nan(best, nan[l] ? std::nan("") : m[l]);
        return best;
    }
};

// The largest of x[0, n), NaN if any is NaN, -inf when n == 0.
XYLEM_KERNEL(float, run_max, (const float* __restrict x, int64_t n), (x, n)) {
    Max8 a = Max8::start(), b = Max8::start();
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        a.add(x + i);
        b.add(x + i + 8);
    }
    double best = max_nan(a.result(), b.result());
    for (; i < n; ++i) best = max_nan(best, x[i]);
    return static_cast<float>(best);
}

// Sum (double) or max of the contiguous run x[0, n).
double run_reduce(bool max, const float* x, int64_t n) {
    return max ? run_max(x, n) : lane_sum(n, [x](int64_t i) { return x[i]; });
}

struct Reduce {
    plugin_kit::ReduceShape r;
    bool max, mean;
    float beta;

    // The finished value of one output (its sum or max v) stored with beta.
    void store(float* out, double v) const {
        if (mean) v /= static_cast<double>(r.n);  // n == 0: 0/0 is NaN, as torch.mean of nothing
        *out = beta == 0.0f ? static_cast<float>(v) : static_cast<float>(beta * *out + v);
    }
    double identity() const { return max ? -std::numeric_limits<double>::infinity() : 0.0; }
    double combine(double a, double b) const { return max ? max_nan(a, b) : a + b; }
};

int reduce_workers(int64_t elements, int64_t items) {
    return split_workers(elements, kMinSplitElements, items);
}

// inner == 1: output o reduces the run x[o*n, (o+1)*n). Runs of one chunk are finished by the
// thread that reduced them; longer runs leave one partial per chunk, combined in chunk order.
void reduce_runs(const Reduce& rd, const float* x, float* out, int64_t numel, Arena& scratch) {
    const int64_t outer = rd.r.outer, n = rd.r.n;
    const int64_t chunks = n > kRunChunk ? (n + kRunChunk - 1) / kRunChunk : 1;
    if (chunks == 1) {
        split_work(outer, reduce_workers(numel, outer), [&](int64_t lo, int64_t hi, int) {
            for (int64_t o = lo; o < hi; ++o) rd.store(out + o, run_reduce(rd.max, x + o * n, n));
        });
        return;
    }
    double* partial = scratch.alloc<double>(outer * chunks);
    split_work(outer * chunks, reduce_workers(numel, outer * chunks), [&](int64_t lo, int64_t hi, int) {
        for (int64_t p = lo; p < hi; ++p) {
            const int64_t o = p / chunks, first = (p % chunks) * kRunChunk;
            partial[p] = run_reduce(rd.max, x + o * n + first, std::min(kRunChunk, n - first));
        }
    });
    for (int64_t o = 0; o < outer; ++o) {
        double v = rd.identity();
        for (int64_t c = 0; c < chunks; ++c) v = rd.combine(v, partial[o * chunks + c]);
        rd.store(out + o, v);
    }
}

// inner > 1: item (o, column block) walks the n rows of its block in order, each row contiguous.
XYLEM_KERNEL(void, reduce_columns,
             (const Reduce& rd, const float* x, float* out, int64_t o, int64_t j0, int64_t w),
             (rd, x, out, o, j0, w)) {
    const int64_t n = rd.r.n, inner = rd.r.inner;
    const float* base = x + o * n * inner + j0;
    float* dst = out + o * inner + j0;
    if (rd.max) {
        Max8 acc[kCols / 8];
        const int64_t vecs = w / 8;  // whole lanes; the rest of the block column by column
        std::fill_n(acc, vecs, Max8::start());
        for (int64_t k = 0; k < n; ++k)
            for (int64_t v = 0; v < vecs; ++v) acc[v].add(base + k * inner + v * 8);
        for (int64_t v = 0; v < vecs; ++v)
            for (int l = 0; l < 8; ++l) rd.store(dst + v * 8 + l, acc[v].nan[l] ? std::nan("") : acc[v].m[l]);
        for (int64_t j = vecs * 8; j < w; ++j) {
            double m = rd.identity();
            for (int64_t k = 0; k < n; ++k) m = max_nan(m, base[k * inner + j]);
            rd.store(dst + j, m);
        }
        return;
    }
    double acc[kCols] = {};
    for (int64_t k = 0; k < n; ++k)
        for (int64_t j = 0; j < w; ++j) acc[j] += base[k * inner + j];
    for (int64_t j = 0; j < w; ++j) rd.store(dst + j, acc[j]);
}

}  // namespace

// Deterministic: every output is reduced in a fixed order that does not depend on the thread count.
void op_reduce(const xylem_op_desc& desc, xylem_stream_s& stream) {
    OpArgs a(desc, 1, 1, 1);
    const auto at = a.attrs<xylem_reduce_attrs>();
    const Tensor tx = a.in(0, "x"), tout = a.out(0, "out");
    const Reduce rd{plugin_kit::reduce_shape(a, at, tx, tout), at.mode == XYLEM_REDUCE_MAX,
                    at.mode == XYLEM_REDUCE_MEAN, at.beta};
    if (overlap(tout, tx)) a.fail("out overlaps x");
    if (rd.r.outputs() == 0) return;
    const float* x = tx.f32();
    float* out = tout.f32();
    if (rd.r.inner == 1) return reduce_runs(rd, x, out, tx.numel, stream.scratch_);
    const int64_t blocks = (rd.r.inner + kCols - 1) / kCols, items = rd.r.outer * blocks;
    split_work(items, reduce_workers(tx.numel, items), [&](int64_t lo, int64_t hi, int) {
        for (int64_t i = lo; i < hi; ++i) {
            const int64_t o = i / blocks, j0 = (i % blocks) * kCols;
            reduce_columns(rd, x, out, o, j0, std::min(kCols, rd.r.inner - j0));
        }
    });
}

}  // namespace xylem::native
