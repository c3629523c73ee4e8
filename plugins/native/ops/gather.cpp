// GATHER_ROWS: picks rows of a device-resident dataset by index (the "shared variable" input path).
// SCATTER_ADD_ROWS: its gradient, rows added back by index.
#include <algorithm>
#include <cstdint>
#include <cstring>

#include "native.h"

namespace xylem::native {

namespace {

// Rows up to this many 4-byte elements are copied by a loop, longer ones by memcpy (the recurrent
// layers' permutations: rows of batch = 50 floats went from 514 to 386 us for 5 MB against a
// memcpy per row).
constexpr int64_t kShortGatherRow = 256;

// Indices checked per extra worker (a vectorised pass over 64k indices takes some microseconds).
constexpr int64_t kMinSplitIndices = int64_t{1} << 16;
// Elements copied per extra worker: a gather is a copy, and a spinning worker takes a job in about
// a microsecond (workers.cpp), where 64k floats take ~15 us to copy. With the general bound of
// the time (2^18) the LSTM's 1.28 MB permutations ran on one thread, at 190 us each.
constexpr int64_t kMinSplitGather = int64_t{1} << 16;

// One row of len 4-byte elements (f32 or i32: moved as bits). (no-tree-loop-distribute-patterns,
// here and in the callers it is inlined into: GCC would turn the loop back into a memcpy call.)
__attribute__((always_inline, optimize("no-tree-loop-distribute-patterns"))) inline void copy_row(
    uint32_t* __restrict d, const uint32_t* __restrict s, int64_t len) {
    if (len > kShortGatherRow) std::memcpy(d, s, static_cast<size_t>(len) * sizeof *s);
    else for (int64_t k = 0; k < len; ++k) d[k] = s[k];
}

// o's row i = s's row ix[i], for i in [0, n).
XYLEM_KERNEL_NO_LIBCALLS(void, copy_rows,
                         (const uint32_t* __restrict s, const int32_t* ix, int64_t n, int64_t len,
                          uint32_t* __restrict o),
                         (s, ix, n, len, o)) {
    for (int64_t i = 0; i < n; ++i) copy_row(o + i * len, s + ix[i] * len, len);
}

// Indices at or past `rows` (or negative: as unsigned they are past it) in ix[lo, hi): a count
// in one branch-free pass that vectorises (a test and a branch per index took 420 us for the
// recurrent layers' 320,000-element transposes, more than the transpose).
XYLEM_KERNEL(int64_t, count_out_of_range,
             (const int32_t* ix, int64_t lo, int64_t hi, int64_t rows),
             (ix, lo, hi, rows)) {
    // Every non-negative int32 is below 2^31 and every negative one at or above it as unsigned.
    const uint32_t limit = static_cast<uint32_t>(std::min<int64_t>(rows, int64_t{1} << 31));
    int64_t bad = 0;
    for (int64_t i = lo; i < hi; ++i) bad += static_cast<uint32_t>(ix[i]) >= limit;
    return bad;
}

// Fails naming the first index of ix[0, n) outside [0, rows). Big index lists are checked by the
// pool's workers in slices.
void check_indices(const OpArgs& a, const int32_t* ix, int64_t n, int64_t rows) {
    const int workers = split_workers(n, kMinSplitIndices, n);
    int64_t bad[kMaxSplit] = {};
    split_work(n, workers, [&](int64_t lo, int64_t hi, int w) { bad[w] = count_out_of_range(ix, lo, hi, rows); });
    if (std::none_of(bad, bad + workers, [](int64_t c) { return c > 0; })) return;
    for (int64_t i = 0; i < n; ++i)
        if (ix[i] < 0 || ix[i] >= rows)
            a.fail("index %d at position %lld is out of range [0, %lld)", ix[i], static_cast<long long>(i),
                   static_cast<long long>(rows));
}

// Whether ix[j*a + i] == i*b + j for the columns j in [j0, j1) (branch-free inside a column, so
// it vectorises).
XYLEM_KERNEL(bool, grid_columns_match,
             (const int32_t* ix, int64_t a, int64_t b, int64_t j0, int64_t j1),
             (ix, a, b, j0, j1)) {
    for (int64_t j = j0; j < j1; ++j) {
        const int32_t* col = ix + j * a;
        const int32_t first = static_cast<int32_t>(j), step = static_cast<int32_t>(b);
        int32_t differ = 0;
        for (int64_t i = 0; i < a; ++i) differ |= col[i] ^ (first + static_cast<int32_t>(i) * step);
        if (differ) return false;
    }
    return true;
}

// The number of rows a of the grid when idx is the transpose of an [a, b] grid of elements
// (idx[j*a + i] = i*b + j: the recurrent layers' (t, unit, b) <-> (b, t, unit) changes of
// layout), else 0. One pass over idx (over the pool's workers when it is big), far cheaper than
// the gather it saves; such an index is in range for any source of at least n rows.
int64_t transposed_grid(const int32_t* ix, int64_t n) {
    if (n < 4 || n > INT32_MAX || ix[0] != 0 || ix[1] <= 1 || n % ix[1] != 0) return 0;
    const int64_t b = ix[1], a = n / b;
    if (a < 2) return 0;
    const int workers = split_workers(n, kMinSplitIndices, b);
    bool match[kMaxSplit];
    split_work(b, workers, [&](int64_t lo, int64_t hi, int w) { match[w] = grid_columns_match(ix, a, b, lo, hi); });
    return std::all_of(match, match + workers, [](bool m) { return m; }) ? a : 0;
}

// out[j*a + i] = src[i*b + j] for j in [j0, j1), in square tiles: each tile reads kTile source
// rows and writes kTile output rows, both in cache, where element order strides b apart.
XYLEM_KERNEL(void, transpose_elements,
             (const uint32_t* __restrict src, int64_t a, int64_t b, int64_t j0, int64_t j1, uint32_t* __restrict out),
             (src, a, b, j0, j1, out)) {
    constexpr int64_t kTile = 32;
    for (int64_t jt = j0; jt < j1; jt += kTile)
        for (int64_t it = 0; it < a; it += kTile) {
            const int64_t je = std::min(jt + kTile, j1), ie = std::min(it + kTile, a);
            for (int64_t j = jt; j < je; ++j)
                for (int64_t i = it; i < ie; ++i) out[j * a + i] = src[i * b + j];
        }
}

// The same with rows of len elements (the recurrent layers' swaps of (t, unit) and (unit, t) row
// blocks): out row j*a + i = src row i*b + j, kRowTile x kRowTile rows at a time, so that both
// sides are runs of consecutive rows. Row by row in output order, the source rows were b rows
// apart (10-25 KB for char-rnn's swaps), past what the hardware prefetchers follow.
XYLEM_KERNEL_NO_LIBCALLS(void, transpose_rows,
                         (const uint32_t* __restrict src, int64_t a, int64_t b, int64_t len, int64_t j0, int64_t j1,
                          uint32_t* __restrict out),
                         (src, a, b, len, j0, j1, out)) {
    constexpr int64_t kRowTile = 8;
    for (int64_t jt = j0; jt < j1; jt += kRowTile)
        for (int64_t it = 0; it < a; it += kRowTile) {
            const int64_t je = std::min(jt + kRowTile, j1), ie = std::min(it + kRowTile, a);
            for (int64_t i = it; i < ie; ++i)
                for (int64_t j = jt; j < je; ++j) copy_row(out + (j * a + i) * len, src + (i * b + j) * len, len);
        }
}

// dst[j] += src[j] for j in [j0, j1): one row's slice of columns (src and out never overlap).
XYLEM_KERNEL(void, add_columns, (float* __restrict dst, const float* __restrict src, int64_t j0, int64_t j1),
             (dst, src, j0, j1)) {
    for (int64_t j = j0; j < j1; ++j) dst[j] += src[j];
}

}  // namespace

void op_gather_rows(const xylem_op_desc& desc, xylem_stream_s&) {
    OpArgs a(desc, 2, 2, 1);
    const auto g = plugin_kit::gather_rows_operands(a);
    const Tensor &src = g.src, &idx = g.idx, &out = g.out;
    if (overlap(out, src) || overlap(out, idx)) a.fail("out overlaps src or idx");
    const int64_t rows = g.rows, len = g.row_len;
    const int32_t* ix = idx.i32();
    const auto* s = static_cast<const uint32_t*>(src.data);  // f32 or i32: moved as bits
    auto* o = static_cast<uint32_t*>(out.data);
    // Big gathers (the recurrent layers' permutations of a whole sequence) split their rows.
    const double elements = static_cast<double>(idx.numel * len);
    const int64_t grid_rows = rows >= idx.numel ? transposed_grid(ix, idx.numel) : 0;
    if (!grid_rows) check_indices(a, ix, idx.numel, rows);  // (a transposing index is in range)
    if (const int64_t a = grid_rows) {  // a transpose: by tiles
        const int64_t b = idx.numel / a;
        split_work(b, split_workers(elements, kMinSplitGather, b), [&](int64_t lo, int64_t hi, int) {
            if (len == 1) transpose_elements(s, a, b, lo, hi, o);
            else transpose_rows(s, a, b, len, lo, hi, o);
        });
        return;
    }
    split_work(idx.numel, split_workers(elements, kMinSplitGather, idx.numel), [&](int64_t lo, int64_t hi, int) {
        copy_rows(s, ix + lo, hi - lo, len, o + lo * len);
    });
}

// out[idx[i], :] += src[i, :] for i in order, so repeated indices add in index order (the order
// every plugin uses: the same bits on each). Every index is checked before anything is written.
// A big one splits the columns between threads, each adding its columns of every row in order.
void op_scatter_add_rows(const xylem_op_desc& desc, xylem_stream_s&) {
    OpArgs a(desc, 2, 2, 1);
    const Tensor src = a.in(0, "src"), idx = a.in(1, "idx", XYLEM_I32), out = a.out(0, "out");
    const auto sh = plugin_kit::scatter_add_rows_shape(a, src, idx, out);
    if (overlap(out, src) || overlap(out, idx)) a.fail("out overlaps src or idx");
    const int32_t* ix = idx.i32();
    check_indices(a, ix, sh.n, sh.rows);
    const float* s = src.f32();
    float* o = out.f32();
    const int64_t len = sh.row_len;
    constexpr int64_t kBlock = 16;  // columns per slice unit (a cache line of floats)
    const int64_t blocks = (len + kBlock - 1) / kBlock;
    split_work(blocks, split_workers(sh.n * len, kMinSplitElements, blocks), [&](int64_t lo, int64_t hi, int) {
        const int64_t j0 = lo * kBlock, j1 = std::min(hi * kBlock, len);
        for (int64_t i = 0; i < sh.n; ++i) add_columns(o + ix[i] * len, s + i * len, j0, j1);
    });
}

}  // namespace xylem::native
