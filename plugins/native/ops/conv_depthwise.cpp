// Depthwise convolutions, forward: each group reads one input channel (MobileNetV2's 3x3s,
// groups = channels).
//
// Why: the direct kernels (ops/conv_direct.cpp) took these as groups of one filter: the whole
// image packed first (on one thread at batch 1), a one-filter tile of 3 vector accumulators per
// group (3 FMA chains: latency-bound), then the compaction and the bias + activation as two more
// passes over Y in memory. Here a block of channels of one image (one channel at 56x56 and up,
// up to all of them at 7x7) is packed into a per-worker buffer (the same layout, so stride,
// padding and dilation are handled alike) that stays in L1/L2; each filter is multiplied with
// enough vector accumulators to cover the FMA latency, its bias and ReLU/ReLU6 applied in
// registers, and its rows copied into Y less the padding columns. Blocks of all images are
// shared out among the workers. (MobileNetV2's 32-channel 112x112 depthwise 3x3 at batch 1, two
// threads: 385 -> 95 us; 144 channels 56x56 stride 2: 262 -> 202 us; 960 channels 7x7: 83 -> 75.)
//
// "Same" stride-1 planes and stride 2 onto half-size planes (all of MobileNetV2's) take a
// faster flat path instead (below: one copy of each plane, masks for the columns that leave a
// row, outputs written in place).
//
// Each output is its taps' multiply-adds in tap order from zero, as in the direct kernels: the
// same bits as they gave, whatever the thread count or the cut.
#include "ops/conv_depthwise.h"

#include <algorithm>
#include <array>
#include <climits>
#include <cstdlib>
#include <cstring>

#include "simd.h"

namespace xylem::native {

namespace {

// Vector accumulators per tile: 8 covers avx512's and avx2's FMA latency x throughput (4 x 2);
// at baseline (16 SSE registers, no FMA) 4.
template <class S>
struct DwTiles {
    static constexpr int kVectors = 8;
};
template <>
struct DwTiles<SimdBaseline> {
    static constexpr int kVectors = 4;
};

// The activations applied in registers (the rest as a pass of channel_bias_activate): the
// same expressions as ops/elementwise.cpp's, so the same bits.
enum class Act { kNone, kRelu, kRelu6 };

template <class S, Act A>
__attribute__((always_inline)) inline typename S::V finish(typename S::V v, typename S::V bias) {
    using V = typename S::V;
    v = v + bias;  // as channel_bias_activate: + 0 where there is no bias
    if constexpr (A != Act::kNone) v = v > V{} ? v : V{};
    if constexpr (A == Act::kRelu6) v = v < S::splat(6.0f) ? v : S::splat(6.0f);
    return v;
}

// y[q] = act(bias + sum over taps t of w[t] * xq[off[t] + q]) for NV vectors of positions from
// xq, y.
template <class S, int NV, Act A>
__attribute__((always_inline)) inline void dw_tile(const float* __restrict xq, const int32_t* __restrict off,
                                                   int64_t taps, const float* __restrict w, typename S::V bias,
                                                   float* __restrict y) {
    using V = typename S::V;
    using Vu = typename S::Vu;
    V acc[NV];
    for (int b = 0; b < NV; ++b) acc[b] = V{};
    for (int64_t t = 0; t < taps; ++t) {
        const float* xt = xq + off[t];
        const V wv = S::splat(w[t]);
        for (int b = 0; b < NV; ++b) acc[b] = S::fma(wv, *reinterpret_cast<const Vu*>(xt + b * S::L), acc[b]);
    }
    for (int b = 0; b < NV; ++b) *reinterpret_cast<Vu*>(y + b * S::L) = finish<S, A>(acc[b], bias);
}

// One filter over one packed channel, q < qpad (a multiple of 16), in tiles of NV vectors, then
// NV/2, NV/4 and single vectors.
template <class S, Act A>
__attribute__((always_inline)) inline void dw_positions(const float* xq, const int32_t* off, int64_t taps,
                                                        const float* w, float bias, int64_t qpad, float* yq) {
    constexpr int NV = DwTiles<S>::kVectors;
    const typename S::V bv = S::splat(bias);
    const int64_t vectors = qpad / S::L;
    int64_t q = 0;
    for (; q + NV <= vectors; q += NV) dw_tile<S, NV, A>(xq + q * S::L, off, taps, w, bv, yq + q * S::L);
    for (; q + NV / 2 <= vectors; q += NV / 2) dw_tile<S, NV / 2, A>(xq + q * S::L, off, taps, w, bv, yq + q * S::L);
    if constexpr (NV >= 8)
        for (; q + NV / 4 <= vectors; q += NV / 4)
            dw_tile<S, NV / 4, A>(xq + q * S::L, off, taps, w, bv, yq + q * S::L);
    for (; q < vectors; ++q) dw_tile<S, 1, A>(xq + q * S::L, off, taps, w, bv, yq + q * S::L);
}

// out[0..n) = in[0..n) in whole pieces of 8 (the last overlapping the one before; 4 to 7 floats
// as two pieces of 4): 7-to-56-float rows, where a call or a scalar tail per row would cost more
// than the copy.
__attribute__((always_inline)) inline void copy_row(float* __restrict out, const float* __restrict in, int64_t n) {
    if (n < 8) {
        if (n >= 4) {
            for (int e = 0; e < 4; ++e) out[e] = in[e];
            for (int e = 0; e < 4; ++e) out[n - 4 + e] = in[n - 4 + e];
        } else {
            for (int64_t e = 0; e < n; ++e) out[e] = in[e];
        }
        return;
    }
    int64_t o = 0;
    for (; o + 8 <= n; o += 8)
        for (int e = 0; e < 8; ++e) out[o + e] = in[o + e];
    if (o < n)
        for (int e = 0; e < 8; ++e) out[n - 8 + e] = in[n - 8 + e];
}

// yk[oh*ow + j] = act(bias + the filter's taps over xq) for one filter of one packed channel:
// computed into yq (rows wq apart), then its rows copied into Y less the columns past OW. Other
// activations: computed without, then a channel_bias_activate pass (b_row: the bias per row). With
// a residual r (yk's plane in R): computed with the bias, then r added and the activation applied
// as the rows go into Y (the same bits as the pass without r followed by an add).
XYLEM_KERNEL_LEVELS(void, dw_filter,
                    (const ConvShape& v, const DirectLayout& l, const float* xq, const float* w, const float* b,
                     int act, const float* r, float* yq, float* b_row, float* yk),
                    (v, l, xq, w, b, act, r, yq, b_row, yk)) {
    const float bias = b ? *b : 0.0f;
    if (r) {
        dw_positions<S, Act::kNone>(xq, l.off, l.taps, w, bias, l.qpad, yq);
        return channel_bias_activate(act, nullptr, yq, l.wq, yk, v.ow, v.oh, v.ow, r, v.ow);
    }
    switch (act) {
    case XYLEM_ACT_NONE: dw_positions<S, Act::kNone>(xq, l.off, l.taps, w, bias, l.qpad, yq); break;
    case XYLEM_ACT_RELU: dw_positions<S, Act::kRelu>(xq, l.off, l.taps, w, bias, l.qpad, yq); break;
    case XYLEM_ACT_RELU6: dw_positions<S, Act::kRelu6>(xq, l.off, l.taps, w, bias, l.qpad, yq); break;
    default:
        dw_positions<S, Act::kNone>(xq, l.off, l.taps, w, 0.0f, l.qpad, yq);
        std::fill_n(b_row, v.oh, bias);
        return channel_bias_activate(act, b ? b_row : nullptr, yq, l.wq, yk, v.ow, v.oh, v.ow);
    }
    for (int64_t oh = 0; oh < v.oh; ++oh) copy_row(yk + oh * v.ow, yq + oh * l.wq, v.ow);
}

// ---- flat planes: stride 1 "same" convolutions, and stride 2 onto half-size planes ------------
//
// Where the output plane has the input plane's size (stride 1, padding (R-1)*dh/2 rows and
// (S-1)*dw/2 columns on each side: MobileNet's 3x3s with padding 1), output q = oh*W + ow reads
// input q + (r*dh - ph)*W + (s*dw - pw) for tap (r, s): one offset per tap over the whole plane
// taken as one flat run. The plane is copied (one memcpy) between zeros that stand for the rows
// above and below it; a column tap that crosses a row's end reads the neighbouring row, so its
// lanes there are masked to zero (masks per column tap, by position or by column, made once per
// call). The outputs are computed where they belong in Y: no packing row by row, no positions
// past each row computed and dropped, no compaction (the phase layout's three passes cost ~450
// cycles per 14x14 channel; its packing alone, row by row, ~40%). A plane's (or row's) last
// partial vector is computed as the vector ending at its end, over outputs already written (the
// same values).
//
// Stride 2 where the input is exactly twice the output each way (MobileNetV2's 3x3 padding 1 on
// even maps: 112 -> 56, ..., 14 -> 7): the input is split into its four phase planes (rows and
// columns even or odd), each the output's size, and tap (r, s) reads phase ((r*dh - ph) mod 2,
// (s*dw - pw) mod 2) at a whole-row and whole-column shift of the output position: the same flat
// runs, masks and zeros between the planes.
//
// Each output is its taps' multiply-adds in tap order from zero with zeros for the padding, as
// in the phase layout: the same bits.

// The layout, offsets and masks of one call, in scratch.
struct FlatPlane {
    int64_t stride = 1;           // 1, or 2: four phase planes
    int64_t plane = 0;            // OH*OW: positions per output plane, and per phase plane
    int64_t gap = 0;              // zeros before each phase plane and after the last: the largest |shift|
    int64_t pitch = 0;            // floats from one phase plane to the next: plane + gap
    int64_t buffer = 0;           // a worker's buffer: gap + phases * pitch
    int64_t taps = 0;
    int32_t* off = nullptr;       // [taps]: each tap's offset from the output position (from phase 0)
    int64_t ow = 0;               // positions per output row
    int64_t dj_lo = 0, dj_hi = 0; // the column taps' shifts, lowest and highest
    // [taps]: the tap's mask row in `masks` (s * plane) and in `col_masks` (s * OW); -1 for a
    // column shift of 0 (the tap never leaves the row).
    int32_t* mask_pos = nullptr;
    int32_t* mask_col = nullptr;
    // -1 where column tap s stays in the row, else 0: [S][plane] by position, for planes of up to
    // kFlatMaxPositionMasked positions (null past that), and [S][OW] by column.
    int32_t* masks = nullptr;
    int32_t* col_masks = nullptr;
};

// The widest vector: a plane must hold one. Up to 4096 positions the plane is one run of
// vectors that go on into the next row, masked by position ([S][plane] ints, read with every
// plane, still in L1 or L2), unless its rows are whole vectors; past that, or with rows of whole
// vectors, it goes row by row with masks by column, which needs rows of a vector at least (and
// computes a vector column twice where a row is no multiple of it: 28 and 56 stay runs).
constexpr int64_t kFlatMinPlane = 16, kFlatMaxPositionMasked = 64 * 64;

inline int64_t floor_div(int64_t a, int64_t b) { return a >= 0 ? a / b : -((-a + b - 1) / b); }

bool flat_fits(const ConvShape& v) {
    const int64_t st = v.sh, plane = v.oh * v.ow;
    if (v.cg != 1 || (st != 1 && st != 2) || v.sw != st || v.h != st * v.oh || v.w != st * v.ow) return false;
    if (plane < kFlatMinPlane || (v.ow < kFlatMinPlane && plane > kFlatMaxPositionMasked)) return false;
    // Offsets within int32: shifts of at most (R*dh + ph) / st rows and as many columns.
    const int64_t reach = (std::max(v.r * v.dh, v.s * v.dw) + std::max(v.ph, v.pw)) / st + 1;
    return (reach * (v.ow + 1) + plane) * 5 < INT_MAX / 2;
}

// Tap (r, s)'s phase plane (row phase a, column phase b) and shifts (rows di, columns dj) for
// the input row st*oh + r*dh - ph = st*(oh + di) + a, and likewise for columns.
struct FlatTap {
    int64_t phase = 0, di = 0, dj = 0;
};
FlatTap flat_tap(const ConvShape& v, int64_t r, int64_t s) {
    const int64_t st = v.sh, rr = r * v.dh - v.ph, cc = s * v.dw - v.pw;
    FlatTap t;
    t.di = floor_div(rr, st), t.dj = floor_div(cc, st);
    t.phase = (rr - t.di * st) * st + (cc - t.dj * st);
    return t;
}

FlatPlane flat_plane(const ConvShape& v, Arena& scratch) {
    FlatPlane f;
    f.stride = v.sh, f.plane = v.oh * v.ow, f.taps = v.r * v.s;
    for (int64_t r = 0; r < v.r; ++r)
        for (int64_t s = 0; s < v.s; ++s) {
            const FlatTap t = flat_tap(v, r, s);
            f.gap = std::max(f.gap, std::abs(t.di * v.ow + t.dj));
        }
    f.pitch = f.plane + f.gap, f.buffer = f.gap + f.stride * f.stride * f.pitch;
    f.ow = v.ow;
    f.off = scratch.alloc<int32_t>(f.taps);
    const bool by_position = f.plane <= kFlatMaxPositionMasked;
    f.mask_pos = scratch.alloc<int32_t>(f.taps);
    f.mask_col = scratch.alloc<int32_t>(f.taps);
    if (by_position) f.masks = scratch.alloc<int32_t>(v.s * f.plane);
    f.col_masks = scratch.alloc<int32_t>(v.s * v.ow);
    for (int64_t s = 0; s < v.s; ++s) {
        const int64_t dj = flat_tap(v, 0, s).dj;
        f.dj_lo = std::min(f.dj_lo, dj), f.dj_hi = std::max(f.dj_hi, dj);
        for (int64_t j = 0; j < v.ow; ++j) f.col_masks[s * v.ow + j] = j + dj >= 0 && j + dj < v.ow ? -1 : 0;
        if (by_position)
            for (int64_t q = 0; q < f.plane; ++q) f.masks[s * f.plane + q] = f.col_masks[s * v.ow + q % v.ow];
        for (int64_t r = 0; r < v.r; ++r) {
            const FlatTap t = flat_tap(v, r, s);
            f.off[r * v.s + s] = static_cast<int32_t>(t.phase * f.pitch + t.di * v.ow + t.dj);
            f.mask_pos[r * v.s + s] = t.dj == 0 ? -1 : static_cast<int32_t>(s * f.plane);
            f.mask_col[r * v.s + s] = t.dj == 0 ? -1 : static_cast<int32_t>(s * v.ow);
        }
    }
    return f;
}

// The phase planes of one input plane x [2*OH][2*OW] at xq (phase a*2 + b at a * 2 * pitch +
// b * pitch: rows of parity a, columns of parity b).
XYLEM_KERNEL_NO_LIBCALLS(void, flat_split_phases,
                         (const float* __restrict x, int64_t oh, int64_t ow, int64_t pitch, float* __restrict xq),
                         (x, oh, ow, pitch, xq)) {
    for (int64_t ih = 0; ih < 2 * oh; ++ih) {
        const float* row = x + ih * 2 * ow;
        float* even = xq + (ih & 1) * 2 * pitch + (ih >> 1) * ow;
        float* odd = even + pitch;
        for (int64_t j = 0; j < ow; ++j) {
            even[j] = row[2 * j];
            odd[j] = row[2 * j + 1];
        }
    }
}

// y[q] = act(bias + sum over taps t of w[t] * x[q + off[t]]) for NV vectors of positions, the
// lanes of a masked tap that leave the row read as zero. A run (Rows false): consecutive
// vectors, tap t's masks at masks + mask_pos[t], by position. Rows: the same columns of NV
// consecutive rows (`row_step` apart), one mask for all at masks + mask_col[t]; masks null: the
// columns are inside their rows for every tap.
template <class S, int NV, Act A, bool Rows>
__attribute__((always_inline)) inline void flat_tile(const float* __restrict x, const FlatPlane& f,
                                                     const int32_t* __restrict masks, int64_t row_step,
                                                     const float* __restrict w, typename S::V bias,
                                                     float* __restrict y) {
    const int64_t step = Rows ? row_step : S::L, mstep = Rows ? 0 : S::L;
    const int32_t* __restrict mask_of = Rows ? f.mask_col : f.mask_pos;
    using V = typename S::V;
    using Vu = typename S::Vu;
    using Vi = typename S::Vi;
    using Viu = typename S::Viu;
    V acc[NV];
    for (int b = 0; b < NV; ++b) acc[b] = V{};
    for (int64_t t = 0; t < f.taps; ++t) {
        const float* xt = x + f.off[t];
        const V wv = S::splat(w[t]);
        if ((Rows && !masks) || mask_of[t] < 0) {
            for (int b = 0; b < NV; ++b) acc[b] = S::fma(wv, *reinterpret_cast<const Vu*>(xt + b * step), acc[b]);
        } else {
            const int32_t* m = masks + mask_of[t];
            for (int b = 0; b < NV; ++b) {
                const Vi keep = *reinterpret_cast<const Viu*>(m + b * mstep);
                const V xv = *reinterpret_cast<const Vu*>(xt + b * step);
                acc[b] = S::fma(wv, keep != Vi{} ? xv : V{}, acc[b]);
            }
        }
    }
    for (int b = 0; b < NV; ++b) *reinterpret_cast<Vu*>(y + b * step) = finish<S, A>(acc[b], bias);
}

// The plane as one run of vectors, masked by position (rows narrower than a vector, or no
// multiple of it).
template <class S, Act A>
__attribute__((always_inline)) inline void flat_run(const float* x, const FlatPlane& f, const float* w,
                                                    typename S::V bv, float* y) {
    constexpr int NV = DwTiles<S>::kVectors;
    constexpr int64_t L = S::L;
    const int64_t P = f.plane;
    int64_t q = 0;
    for (; q + NV * L <= P; q += NV * L) flat_tile<S, NV, A, false>(x + q, f, f.masks + q, 0, w, bv, y + q);
    for (; q + NV / 2 * L <= P; q += NV / 2 * L) flat_tile<S, NV / 2, A, false>(x + q, f, f.masks + q, 0, w, bv, y + q);
    if constexpr (NV >= 8)
        for (; q + NV / 4 * L <= P; q += NV / 4 * L) flat_tile<S, NV / 4, A, false>(x + q, f, f.masks + q, 0, w, bv, y + q);
    for (; q + L <= P; q += L) flat_tile<S, 1, A, false>(x + q, f, f.masks + q, 0, w, bv, y + q);
    if (q < P) {  // the last vector, ending at the plane's end (plane >= L)
        q = P - L;
        flat_tile<S, 1, A, false>(x + q, f, f.masks + q, 0, w, bv, y + q);
    }
}

// Rows of whole vectors: each vector column (the last one ending at the row's end, over outputs
// already written) down the rows in tiles of NV rows, masked by column where a tap can leave the row.
template <class S, Act A>
__attribute__((always_inline)) inline void flat_rows(const float* x, const FlatPlane& f, const float* w,
                                                     typename S::V bv, float* y) {
    constexpr int NV = DwTiles<S>::kVectors;
    constexpr int64_t L = S::L;
    const int64_t ow = f.ow, rows = f.plane / ow;
    for (int64_t j = 0; j < ow; j += L) {
        const int64_t j0 = std::min(j, ow - L);
        const int32_t* m = j0 + f.dj_lo < 0 || j0 + L - 1 + f.dj_hi >= ow ? f.col_masks + j0 : nullptr;
        int64_t r = 0;
        for (; r + NV <= rows; r += NV) flat_tile<S, NV, A, true>(x + r * ow + j0, f, m, ow, w, bv, y + r * ow + j0);
        for (; r + NV / 2 <= rows; r += NV / 2)
            flat_tile<S, NV / 2, A, true>(x + r * ow + j0, f, m, ow, w, bv, y + r * ow + j0);
        if constexpr (NV >= 8)
            for (; r + NV / 4 <= rows; r += NV / 4)
                flat_tile<S, NV / 4, A, true>(x + r * ow + j0, f, m, ow, w, bv, y + r * ow + j0);
        for (; r < rows; ++r) flat_tile<S, 1, A, true>(x + r * ow + j0, f, m, ow, w, bv, y + r * ow + j0);
    }
}

template <class S, Act A>
__attribute__((always_inline)) inline void flat_positions(const float* x, const FlatPlane& f, const float* w,
                                                          float bias, float* y) {
    const typename S::V bv = S::splat(bias);
    if (f.ow >= S::L && (f.ow % S::L == 0 || !f.masks)) flat_rows<S, A>(x, f, w, bv, y);
    else flat_run<S, A>(x, f, w, bv, y);
}

// One filter over one plane: x at its copy or its first phase plane (zeros around), y at the
// filter's output plane. Other activations: computed without, then a channel_bias_activate pass;
// a residual r (y's plane in R) after the bias, as dw_filter adds it.
XYLEM_KERNEL_LEVELS(void, flat_filter, (const FlatPlane& f, const float* x, const float* w, const float* b, int act,
                                        const float* r, float* y),
                    (f, x, w, b, act, r, y)) {
    const float bias = b ? *b : 0.0f;
    if (r) {
        flat_positions<S, Act::kNone>(x, f, w, bias, y);
        return channel_bias_activate(act, nullptr, y, f.plane, y, f.plane, 1, f.plane, r, f.plane);
    }
    switch (act) {
    case XYLEM_ACT_NONE: return flat_positions<S, Act::kNone>(x, f, w, bias, y);
    case XYLEM_ACT_RELU: return flat_positions<S, Act::kRelu>(x, f, w, bias, y);
    case XYLEM_ACT_RELU6: return flat_positions<S, Act::kRelu6>(x, f, w, bias, y);
    default:
        flat_positions<S, Act::kNone>(x, f, w, 0.0f, y);
        return channel_bias_activate(act, b, y, f.plane, y, f.plane, 1, f.plane);
    }
}

// One block of up to cb channels of one image as a conv of its own (groups of one channel).
ConvShape block_shape(const ConvShape& v, int64_t cb) {
    ConvShape c = v;
    c.n = 1, c.c = cb, c.cg = 1, c.g = cb, c.k = cb * v.kg;
    return c;
}

// Work per item handed to a worker (a block of channels: 16 at 7x7, 1 at 56x56): a claim and a
// packing call cost about a microsecond.
constexpr double kMinItemFlops = 1e5;
// A worker from a tenth of the other paths' kConvMinSplitFlops (ops/conv_direct.h): a depthwise
// filter does 9 multiply-adds per output where packing and copying rows cost as much again, so
// its FLOPs take ~10x a GEMM's time. MobileNetV2 at batch 1, two threads (xylem-bench-conv, fastest
// of 15): 144 channels 56x56 stride 2 197 -> 110 us, 576 at 14x14 100 -> 55, 960 at 7x7 73 -> 40,
// all three on one thread before (under 2e6 FLOPs); the model's forward 7.4 -> 6.5 ms.
constexpr double kMinSplitFlops = kConvMinSplitFlops / 10;

// Per-worker scratch: one packed block of channels, one filter's computed positions, the bias per
// output row.
struct Scratch {
    float* xq = nullptr;
    float* yq = nullptr;
    float* b_row = nullptr;
};

// Channels [c0, c0 + cn) of image n: packed at once, then each channel's kg filters.
void dw_block(const ConvShape& v, const DirectLayout& l, const float* x, const float* w, const ConvEpilogue& e,
              float* y, int64_t n, int64_t c0, int64_t cn, const Scratch& s) {
    const int64_t hw = v.hw(), P = v.oh * v.ow;
    direct_pack_image(block_shape(v, cn), l, x + (n * v.c + c0) * hw, s.xq);
    for (int64_t c = c0; c < c0 + cn; ++c)
        for (int64_t k = 0; k < v.kg; ++k) {
            const int64_t f = c * v.kg + k;  // the filter (group c's k-th)
            const int64_t at = (n * v.k + f) * P;
            dw_filter(v, l, s.xq + (c - c0) * l.chan, w + f * l.taps, e.bias(f), e.act, e.r ? e.r + at : nullptr, s.yq,
                      s.b_row, y + at);
        }
}

// The flat path's pass: items of cb channels of one image; each worker's buffer holds one
// plane's copy (stride 1) or its four phase planes (stride 2) between zeros (zeroed once: only
// the planes are rewritten).
void flat_fwd(const ConvShape& v, const float* x, const float* w, const ConvEpilogue& e, float* y, int64_t cb,
              double per_channel, Arena& scratch) {
    const FlatPlane f = flat_plane(v, scratch);
    const int64_t blocks = (v.c + cb - 1) / cb, items = v.n * blocks, in_plane = v.h * v.w, P = f.plane;
    const int workers = split_workers(per_channel * static_cast<double>(v.n * v.c), kMinSplitFlops, items);
    std::array<float*, kMaxSplit> buf{};
    for (int wk = 0; wk < workers; ++wk) {  // before the workers start: the arena has no lock
        buf[wk] = scratch.alloc<float>(f.buffer);
        std::fill_n(buf[wk], f.buffer, 0.0f);
    }
    parallel_items(items, workers, [&](int wk, int64_t item) {
        const int64_t n = item / blocks, c0 = item % blocks * cb, c1 = std::min(v.c, c0 + cb);
        float* xq = buf[wk] + f.gap;  // phase 0
        for (int64_t c = c0; c < c1; ++c) {
            const float* in = x + (n * v.c + c) * in_plane;
            if (f.stride == 1) std::memcpy(xq, in, static_cast<size_t>(in_plane) * sizeof(float));
            else flat_split_phases(in, v.oh, v.ow, f.pitch, xq);
            for (int64_t k = 0; k < v.kg; ++k) {
                const int64_t filter = c * v.kg + k;
                const int64_t at = (n * v.k + filter) * P;
                flat_filter(f, xq, w + filter * f.taps, e.bias(filter), e.act, e.r ? e.r + at : nullptr, y + at);
            }
        }
    });
}

}  // namespace

// One channel's layout must fit (a block's is checked before it is used).
bool depthwise_fwd_fits(const ConvShape& v) { return v.cg == 1 && v.g > 1 && direct_layout_fits(block_shape(v, 1)); }

void depthwise_fwd(const ConvShape& v, const float* x, const float* w, const ConvEpilogue& e, float* y,
                   Arena& scratch) {
    const double per_channel = 2.0 * static_cast<double>(v.kg) * v.oh * v.ow * v.r * v.s;
    int64_t cb = std::clamp<int64_t>(static_cast<int64_t>(kMinItemFlops / per_channel), 1, v.c);
    if (flat_fits(v)) return flat_fwd(v, x, w, e, y, cb, per_channel, scratch);
    while (cb > 1 && !direct_layout_fits(block_shape(v, cb))) cb /= 2;
    const DirectLayout l = direct_layout(block_shape(v, cb), scratch);
    const int64_t blocks = (v.c + cb - 1) / cb, items = v.n * blocks;
    const int workers = split_workers(per_channel * static_cast<double>(v.n * v.c), kMinSplitFlops, items);
    std::array<Scratch, kMaxSplit> s{};
    for (int wk = 0; wk < workers; ++wk) {  // before the workers start: the arena has no lock
        s[wk].xq = scratch.alloc<float>(l.image);
        s[wk].yq = scratch.alloc<float>(l.qpad);
        s[wk].b_row = scratch.alloc<float>(v.oh);
    }
    parallel_items(items, workers, [&](int wk, int64_t item) {
        const int64_t n = item / blocks, c0 = item % blocks * cb;
        dw_block(v, l, x, w, e, y, n, c0, std::min(cb, v.c - c0), s[wk]);
    });
}

}  // namespace xylem::native
