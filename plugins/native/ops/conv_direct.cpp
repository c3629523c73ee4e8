// Direct convolutions: the forward pass, the data gradient (per phase of dX, a forward pass of dY
// with the filters flipped: see "data gradient" below) and the filter gradient as register-tiled
// multiply-adds over shifted windows of a padded copy of each image, with no im2col and no GEMM
// call.
//
// Why: ResNet's and LeNet's convolutions are GEMMs with one small side (per image 16 x 784 x 144
// for a 16-channel 3x3 conv on 28x28, 64 x 49 x 576 on 7x7), where OpenBLAS packs both operands
// for every call and ran at 15-30 GFLOP/s on one core of the AVX-512 Xeon; im2col's copy, 9x
// the input for a 3x3 filter, came on top. These kernels run those shapes at 110-150 GFLOP/s
// there (ResNet-20's convolutions: 387 -> 184 ms per step on one core; docs/architecture.md,
// "Convolutions").
//
// The layout. Each channel of an image, padded, is cut into sh x sw phase planes (rows i*sh + a,
// columns j*sw + b of the padded plane; a stride-1 conv has one phase, the padded plane), each
// hq x wq, keeping only the phases some tap reads. Tap (c, r, s) then reads phase
// ((r*dh) % sh, (s*dw) % sw) at row (r*dh)/sh and column (s*dw)/sw, so output (oh, ow) and tap t
// read element q + off[t] of the packed image, with q = oh*wq + ow: every tap is one shifted
// window, with no stride, padding or bounds test. Positions q with ow >= OW (the wq - OW columns
// past each output row) are computed and dropped. Where those are many (narrow outputs), the
// forward pass takes the unrolled layout instead (unrolled_sizes: a plane per column tap, no
// position dropped), and so does the filter gradient of ops/conv_filter_dot.cpp.
//
// The kernels (XYLEM_KERNEL_LEVELS, simd.h: FMA at avx512 and avx2):
//   - forward: a tile of KB filters x NV vectors of positions in registers; per tap, NV vector
//     loads of the window and KB broadcast weights. Each output is its taps' multiply-adds in tap
//     order, whatever the tile, the image split or the thread count.
//   - filter gradient: a tile of TB taps x KV vectors of filters (dY transposed to [position][K])
//     in registers; per output position, KV loads of dY and TB broadcasts of the window. Float
//     sums over a chunk of images (fixed by the shape), added into float64 per slice of images
//     (shape_slices), slices added in order: the same bits for any thread count.
#include "ops/conv_direct.h"

#include <algorithm>
#include <climits>
#include <cstring>

#include "ops/transpose8.h"
#include "simd.h"

namespace xylem::native {

namespace {

constexpr int64_t kAlign = 16;  // positions per image and packed images are padded to this (the widest vector)
inline int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

// Register tiles per level (measured on one core of the 2-vCPU AVX-512 Xeon, each level capped
// by XYLEM_NATIVE_ISA; ResNet-20's convolutions at batch 128, per step):
//   - forward: kFilters x kVectors accumulators. avx512 8 x 3. avx2 6 x 2: 4 x 3 spilled an
//     accumulator to the stack, 3 x 3 and 5 x 2 were slower (312, 325, 313 ms against 296).
//     baseline (no FMA: each product needs a register) 3 x 3: 5 x 2 spilled.
//   - filter gradient: kFilterAcc accumulators (taps x vectors of filters): 24 / 12 / 12 (at
//     baseline 8 and 10 were slower). At baseline, filters with fewer than kMinFilterTaps taps
//     per group stay on im2col: transposing dY then costs more than the multiply-adds (ResNet's
//     3x3 stem, 9 taps: 2.9 vs 1.4 ms; LeNet's conv1, 25: 1.9 vs 1.6).
//   - kWasteLimit: how much more than the output's positions the forward kernel may compute
//     (each image's positions rounded up to whole vectors, the columns past each output row)
//     and still beat im2col + OpenBLAS, measured in the phase layout; the unrolled layout, where
//     taken, computes fewer (LeNet's conv2: 1.0, and since then 1.95 against im2col's 2.8 ms at
//     avx2, 5.3 against 5.7 at baseline, 1.30 against the phase layout's 1.52 at avx512). avx512 1.6 (LeNet's conv2, 1.5: 1.8 vs 2.7 ms); avx2 1.4
//     (LeNet's conv2: 2.95 vs 2.76 ms, ResNet's 7x7, 1.31: 6.4 vs 7.1); baseline 1.1: without
//     FMA the kernels are no faster than OpenBLAS's SSE ones (ResNet's 28x28, 1.08: 15.0 vs
//     15.4 ms; 14x14, 1.14: 14.8 vs 13.5; 7x7: 16.2 vs 13.1).
//   - kDataWasteLimit: the same for the data gradient, over its phases' multiply-adds against
//     im2col's. avx512 1.5 (LeNet's conv2, 3.0: 3.8 vs 2.4 ms); avx2 1.2 (ResNet's 7x7 and its
//     stride-2 32->64, both 1.31: 6.7 vs 6.4 and 3.8 vs 3.3 ms; at 1.14 it won, 6.1 vs 7.3);
//     baseline 1.1.
template <class S>
struct Tiles;
template <>
struct Tiles<SimdAvx512> {
    static constexpr int kFilters = 8, kVectors = 3, kFilterAcc = 24, kMinFilterTaps = 1;
    static constexpr double kWasteLimit = 1.6, kDataWasteLimit = 1.5;
};
template <>
struct Tiles<SimdAvx2> {
    static constexpr int kFilters = 6, kVectors = 2, kFilterAcc = 12, kMinFilterTaps = 1;
    static constexpr double kWasteLimit = 1.4, kDataWasteLimit = 1.2;
};
template <>
struct Tiles<SimdBaseline> {
    static constexpr int kFilters = 3, kVectors = 3, kFilterAcc = 12, kMinFilterTaps = 32;
    static constexpr double kWasteLimit = 1.1, kDataWasteLimit = 1.1;
};

// The running level's vector width and limits (the level the kernels below were picked at).
XYLEM_KERNEL_LEVELS(int64_t, level_lanes, (), ()) { return S::L; }
XYLEM_KERNEL_LEVELS(int64_t, level_filter_tile, (), ()) { return Tiles<S>::kFilters; }
XYLEM_KERNEL_LEVELS(double, level_waste_limit, (), ()) { return Tiles<S>::kWasteLimit; }
XYLEM_KERNEL_LEVELS(double, level_data_waste_limit, (), ()) { return Tiles<S>::kDataWasteLimit; }
XYLEM_KERNEL_LEVELS(int64_t, level_min_filter_taps, (), ()) { return Tiles<S>::kMinFilterTaps; }

constexpr double kMinSplitFlops = kConvMinSplitFlops, kMaxPartialBytes = kConvMaxPartialBytes;  // ops/conv_direct.h

using Layout = DirectLayout;  // ops/conv_direct.h

// The layout's sizes without allocating (for the fits checks): false when an offset would not
// fit in int32.
bool layout_sizes(const ConvShape& v, Layout& l, int64_t& phases) {
    l.sh = v.sh, l.sw = v.sw;
    l.hq = (v.h + 2 * v.ph + v.sh - 1) / v.sh;
    l.wq = (v.w + 2 * v.pw + v.sw - 1) / v.sw;
    l.plane = l.hq * l.wq;
    // Phases read: a tap's row phase is (r*dh) % sh, at most min(R, sh) of them per axis.
    phases = std::min(v.r, v.sh) * std::min(v.s, v.sw);
    l.chan = phases * l.plane;
    l.q = v.oh * l.wq;
    l.qpad = round_up(l.q, kAlign);
    l.taps = v.cg * v.r * v.s;
    const int64_t reach = ((v.r - 1) * v.dh / v.sh) * l.wq + (v.s - 1) * v.dw / v.sw;  // largest in-plane offset
    // Reads: [group base + off, + qpad) with off < cg*chan; the last group's base is (c - cg)*chan.
    const int64_t last = (v.c - 1) * l.chan + (phases - 1) * l.plane + reach + l.qpad;
    l.image = round_up(std::max(v.c * l.chan, last), kAlign);
    return l.image < INT_MAX / 2 && l.qpad * v.k < INT_MAX / 2 && l.taps * v.k < INT_MAX / 2;
}

// The forward pass's second layout, for stride-1 rows and narrow outputs ("unrolled"): each
// channel's padded rows copied once per column tap s into a plane of hq x OW, element [i][ow]
// the padded plane's [i][ow*sw + s*dw], so tap (c, r, s) reads element q + c*chan + s*plane +
// r*dh*OW with q = oh*OW + ow. Its positions are exactly the outputs: no columns past each row to
// compute and drop. It packs S times the image, cheap next to the K*R multiply-adds each packed
// float then feeds. LeNet's conv2 (8x8 outputs of 12-wide padded rows) computes 64 positions per
// filter where the phase layout computes 96.
bool unrolled_sizes(const ConvShape& v, Layout& l) {
    l = Layout{};
    l.unrolled = true;
    l.sh = 1, l.sw = v.sw;
    l.hq = v.h + 2 * v.ph, l.wq = v.ow, l.plane = l.hq * l.wq, l.chan = v.s * l.plane;
    l.q = v.oh * l.wq;
    l.qpad = round_up(l.q, kAlign);
    l.taps = v.cg * v.r * v.s;
    const int64_t reach = (v.r - 1) * v.dh * l.wq + (v.s - 1) * l.plane;  // largest in-channel offset
    const int64_t last = (v.c - 1) * l.chan + reach + l.qpad;
    l.image = round_up(std::max(v.c * l.chan, last), kAlign);
    return l.image < INT_MAX / 2 && l.qpad * v.k < INT_MAX / 2 && l.taps * v.k < INT_MAX / 2;
}

// The unrolled layout is taken where it computes at most this share of the phase layout's
// positions (LeNet's conv2: 64 / 96; ResNet-18's 56x56 maps, 3136 / 3248, are not worth S times
// the packing).
constexpr double kUnrolledShare = 0.85;

// The forward pass's layout sizes: the phase layout, or the unrolled one where it pays.
bool fwd_layout_sizes(const ConvShape& v, Layout& l) {
    int64_t phases = 0;
    const bool fits = layout_sizes(v, l, phases);
    Layout u;
    if (v.sh == 1 && unrolled_sizes(v, u) &&
        (!fits || static_cast<double>(u.qpad) <= kUnrolledShare * static_cast<double>(l.qpad))) {
        l = u;
        return true;
    }
    return fits;
}

Layout make_layout(const ConvShape& v, Arena& scratch);

// The unrolled layout (unrolled_sizes must hold) with its offsets in scratch.
Layout make_unrolled(const ConvShape& v, Arena& scratch) {
    Layout l;
    unrolled_sizes(v, l);
    l.off = scratch.alloc<int32_t>(l.taps);
    for (int64_t c = 0; c < v.cg; ++c)
        for (int64_t r = 0; r < v.r; ++r)
            for (int64_t s = 0; s < v.s; ++s)
                l.off[(c * v.r + r) * v.s + s] = static_cast<int32_t>(c * l.chan + s * l.plane + r * v.dh * l.wq);
    return l;
}

// The forward pass's layout with its offsets in scratch.
Layout make_fwd_layout(const ConvShape& v, Arena& scratch) {
    Layout l;
    return fwd_layout_sizes(v, l) && l.unrolled ? make_unrolled(v, scratch) : make_layout(v, scratch);
}

Layout make_layout(const ConvShape& v, Arena& scratch) {
    Layout l;
    int64_t phases = 0;
    layout_sizes(v, l, phases);
    l.phase_of = scratch.alloc<int32_t>(v.sh * v.sw);
    std::fill_n(l.phase_of, v.sh * v.sw, -1);
    int32_t kept = 0;
    for (int64_t r = 0; r < v.r; ++r)
        for (int64_t s = 0; s < v.s; ++s) {
            int32_t& p = l.phase_of[((r * v.dh) % v.sh) * v.sw + (s * v.dw) % v.sw];
            if (p < 0) p = kept++;
        }
    l.chan = kept * l.plane;  // at most the phases layout_sizes counted
    l.off = scratch.alloc<int32_t>(l.taps);
    for (int64_t c = 0; c < v.cg; ++c)
        for (int64_t r = 0; r < v.r; ++r)
            for (int64_t s = 0; s < v.s; ++s) {
                const int64_t a = (r * v.dh) % v.sh, b = (s * v.dw) % v.sw;
                l.off[(c * v.r + r) * v.s + s] = static_cast<int32_t>(
                    c * l.chan + l.phase_of[a * v.sw + b] * l.plane + (r * v.dh / v.sh) * l.wq + s * v.dw / v.sw);
            }
    return l;
}

// The outputs [lo, hi) (of n) whose input index o*stride + off lies inside [0, size).
inline void valid_range(int64_t off, int64_t stride, int64_t size, int64_t n, int64_t& lo, int64_t& hi) {
    lo = off >= 0 ? 0 : (-off + stride - 1) / stride;
    hi = off > size - 1 ? 0 : (size - 1 - off) / stride + 1;
    lo = std::min(lo, n);
    hi = std::max(lo, std::min(hi, n));
}

// out[o] = in[o*SW] for o < n, in whole pieces of 8 (the last one overlapping the one before; 4
// to 7 floats as two overlapping pieces of 4): GCC turns each piece into vector moves (and, for
// SW = 2, permutes), where a loop over a 7-to-30-float row left a scalar tail per row (packing
// 7x7 maps took ~10% of their conv).
template <int SW>
__attribute__((always_inline)) inline void copy_row(float* __restrict out, const float* __restrict in, int64_t n) {
    constexpr int64_t kPiece = 8;
    if (n < kPiece) {
        if (n >= 4) {  // two pieces of 4 (7x7 maps: 7-float rows)
            for (int64_t e = 0; e < 4; ++e) out[e] = in[e * SW];
            for (int64_t e = 0; e < 4; ++e) out[n - 4 + e] = in[(n - 4 + e) * SW];
            return;
        }
        for (int64_t o = 0; o < n; ++o) out[o] = in[o * SW];
        return;
    }
    int64_t o = 0;
    for (; o + kPiece <= n; o += kPiece)
        for (int64_t e = 0; e < kPiece; ++e) out[o + e] = in[(o + e) * SW];
    if (o < n)
        for (int64_t e = 0; e < kPiece; ++e) out[n - kPiece + e] = in[(n - kPiece + e) * SW];
}

// row[j] = in[j*sw] for j in [jlo, jhi), zero for the rest of [0, n): one packed row, `in` at
// column 0's input (the columns outside [jlo, jhi) read the padding).
__attribute__((always_inline)) inline void strided_row(float* __restrict row, const float* __restrict in, int64_t jlo,
                                                       int64_t jhi, int64_t n, int64_t sw) {
    for (int64_t j = 0; j < jlo; ++j) row[j] = 0.0f;
    if (sw == 1) copy_row<1>(row + jlo, in + jlo, jhi - jlo);
    else if (sw == 2) copy_row<2>(row + jlo, in + 2 * jlo, jhi - jlo);
    else for (int64_t j = jlo; j < jhi; ++j) row[j] = in[j * sw];
    for (int64_t j = jhi; j < n; ++j) row[j] = 0.0f;
}

// xq = one image x [C, H, W] in the unrolled layout (unrolled_sizes), zeros in the padding and
// past the channels.
XYLEM_KERNEL_NO_LIBCALLS(void, pack_unrolled,
                         (const ConvShape& v, const Layout& l, const float* __restrict x, float* __restrict xq),
                         (v, l, x, xq)) {
    for (int64_t c = 0; c < v.c; ++c)
        for (int64_t s = 0; s < v.s; ++s) {
            int64_t jlo, jhi;
            valid_range(s * v.dw - v.pw, l.sw, v.w, l.wq, jlo, jhi);
            float* dst = xq + c * l.chan + s * l.plane;
            for (int64_t i = 0; i < l.hq; ++i) {
                float* row = dst + i * l.wq;
                const int64_t ih = i - v.ph;
                if (ih < 0 || ih >= v.h) {
                    for (int64_t j = 0; j < l.wq; ++j) row[j] = 0.0f;
                    continue;
                }
                strided_row(row, x + (c * v.h + ih) * v.w + s * v.dw - v.pw, jlo, jhi, l.wq, l.sw);
            }
        }
    for (int64_t e = v.c * l.chan; e < l.image; ++e) xq[e] = 0.0f;
}

// xq = one image x [C, H, W] in the packed layout, zeros in the padding and past the channels.
// Channel by channel and row by row, each input row copied into its phases' rows while in L1.
XYLEM_KERNEL_NO_LIBCALLS(void, pack_image,
                         (const ConvShape& v, const Layout& l, const float* __restrict x, float* __restrict xq),
                         (v, l, x, xq)) {
    if (l.unrolled) return pack_unrolled(v, l, x, xq);
    // Each column phase's valid range, once: two 64-bit divisions per row were most of the cost
    // of packing small maps (a depthwise 14x14 channel: 14 rows).
    constexpr int64_t kMaxPhases = 8;
    int64_t jlo[kMaxPhases], jhi[kMaxPhases];
    const bool cached = l.sw <= kMaxPhases;
    if (cached)
        for (int64_t b = 0; b < l.sw; ++b) valid_range(b - v.pw, l.sw, v.w, l.wq, jlo[b], jhi[b]);
    for (int64_t c = 0; c < v.c; ++c)
        for (int64_t a = 0; a < l.sh; ++a) {
            int64_t ilo, ihi;
            valid_range(a - v.ph, l.sh, v.h, l.hq, ilo, ihi);
            for (int64_t b = 0; b < l.sw; ++b) {  // the rows no input row reaches
                const int32_t p = l.phase_of[a * l.sw + b];
                if (p < 0) continue;
                float* dst = xq + c * l.chan + p * l.plane;
                for (int64_t e = 0; e < ilo * l.wq; ++e) dst[e] = 0.0f;
                for (int64_t e = ihi * l.wq; e < l.plane; ++e) dst[e] = 0.0f;
            }
            for (int64_t i = ilo; i < ihi; ++i) {
                const float* src = x + (c * v.h + i * l.sh + a - v.ph) * v.w;
                for (int64_t b = 0; b < l.sw; ++b) {
                    const int32_t p = l.phase_of[a * l.sw + b];
                    if (p < 0) continue;
                    int64_t lo, hi;
                    if (cached) lo = jlo[b], hi = jhi[b];
                    else valid_range(b - v.pw, l.sw, v.w, l.wq, lo, hi);
                    strided_row(xq + c * l.chan + p * l.plane + i * l.wq, src + b - v.pw, lo, hi, l.wq, l.sw);
                }
            }
        }
    for (int64_t e = v.c * l.chan; e < l.image; ++e) xq[e] = 0.0f;
}

// ---- forward --------------------------------------------------------------------------------

// y[a*ldy + q] = sum over taps t of wt[t*ldw + a] * xq[off[t] + q], for KB filters a and the
// NV vectors of positions at xq (the tile's first position).
template <class S, int KB, int NV>
__attribute__((always_inline)) inline void fwd_tile(const float* __restrict xq, const int32_t* __restrict off,
                                                    int64_t taps, const float* __restrict wt, int64_t st, int64_t sf,
                                                    float* __restrict y, int64_t ldy) {
    using V = typename S::V;
    using Vu = typename S::Vu;
    V acc[KB][NV];
    for (int a = 0; a < KB; ++a)
        for (int b = 0; b < NV; ++b) acc[a][b] = V{};
    for (int64_t t = 0; t < taps; ++t) {
        const float* xt = xq + off[t];
        V xv[NV];
        for (int b = 0; b < NV; ++b) xv[b] = *reinterpret_cast<const Vu*>(xt + b * S::L);
        const float* w = wt + t * st;
        for (int a = 0; a < KB; ++a) {
            const V wv = S::splat(w[a * sf]);
            for (int b = 0; b < NV; ++b) acc[a][b] = S::fma(wv, xv[b], acc[a][b]);
        }
    }
    for (int a = 0; a < KB; ++a)
        for (int b = 0; b < NV; ++b) *reinterpret_cast<Vu*>(y + a * ldy + b * S::L) = acc[a][b];
}

// KB filters from wt's column k0 over every position vector.
template <class S, int KB, int NV>
__attribute__((always_inline)) inline void fwd_filters(const float* xq, const int32_t* off, int64_t taps,
                                                       const float* wt, int64_t st, int64_t sf, int64_t vectors,
                                                       float* y, int64_t ldy) {
    int64_t q = 0;
    for (; q + NV <= vectors; q += NV) fwd_tile<S, KB, NV>(xq + q * S::L, off, taps, wt, st, sf, y + q * S::L, ldy);
    switch (vectors - q) {
    case 1: fwd_tile<S, KB, 1>(xq + q * S::L, off, taps, wt, st, sf, y + q * S::L, ldy); break;
    case 2: fwd_tile<S, KB, 2>(xq + q * S::L, off, taps, wt, st, sf, y + q * S::L, ldy); break;
    case 3: fwd_tile<S, KB, 3>(xq + q * S::L, off, taps, wt, st, sf, y + q * S::L, ldy); break;
    default: break;
    }
}

// Filters [0, kg) in tiles of KB (then 4, 2 and 1) x NV vectors; filter k's weight of tap t at
// wt[t*st + k*sf].
template <class S, int KB, int NV>
__attribute__((always_inline)) inline void fwd_all(const float* xq, const int32_t* off, int64_t taps, const float* wt,
                                                   int64_t st, int64_t sf, int64_t kg, int64_t vectors, float* y,
                                                   int64_t ldy) {
    int64_t k = 0;
    for (; k + KB <= kg; k += KB)
        fwd_filters<S, KB, NV>(xq, off, taps, wt + k * sf, st, sf, vectors, y + k * ldy, ldy);
    if constexpr (KB > 4)
        for (; k + 4 <= kg; k += 4) fwd_filters<S, 4, NV>(xq, off, taps, wt + k * sf, st, sf, vectors, y + k * ldy, ldy);
    for (; k + 2 <= kg; k += 2) fwd_filters<S, 2, NV>(xq, off, taps, wt + k * sf, st, sf, vectors, y + k * ldy, ldy);
    for (; k < kg; ++k) fwd_filters<S, 1, NV>(xq, off, taps, wt + k * sf, st, sf, vectors, y + k * ldy, ldy);
}

// y[k*ldy + q] = sum_t wt[t*st + k*sf] * xq[off[t] + q] for k < kg, q < qpad (a multiple of
// kAlign): one group of one image, or a block of its filters (wt at the block's first filter).
// The weights in either layout: a conv's own [K][taps] (st = 1, sf = taps: each tile's filters are
// broadcast one by one, so side by side buys nothing) or taps by filters (st = kg, sf = 1). Each
// output is its taps' multiply-adds in tap order, whatever the block or layout.
XYLEM_KERNEL_LEVELS(void, fwd_group,
                    (const float* xq, const int32_t* off, int64_t taps, const float* wt, int64_t st, int64_t sf,
                     int64_t kg, int64_t qpad, float* y, int64_t ldy),
                    (xq, off, taps, wt, st, sf, kg, qpad, y, ldy)) {
    constexpr int NV = Tiles<S>::kVectors;  // vectors of positions per tile
    constexpr int KB = Tiles<S>::kFilters;  // filters per tile
    const int64_t vectors = qpad / S::L;
    // 4 vectors (a 7x7 map at avx512: 9x7 positions) as 3 + 1 left a one-vector tile, its KB
    // accumulators one FMA chain each: one tile of 4 vectors, as many accumulators, instead.
    if (vectors % NV == 1 && vectors % 4 == 0)
        return fwd_all<S, KB * NV / 4, 4>(xq, off, taps, wt, st, sf, kg, vectors, y, ldy);
    fwd_all<S, KB, NV>(xq, off, taps, wt, st, sf, kg, vectors, y, ldy);
}

// y[k][oh][ow] = yq[k*qpad + oh*wq + ow]: the computed positions less the columns past each
// output row.
XYLEM_KERNEL_NO_LIBCALLS(void, compact_rows,
                         (const ConvShape& v, const Layout& l, const float* __restrict yq, float* __restrict y),
                         (v, l, yq, y)) {
    for (int64_t k = 0; k < v.k; ++k)
        for (int64_t oh = 0; oh < v.oh; ++oh)
            copy_row<1>(y + (k * v.oh + oh) * v.ow, yq + k * l.qpad + oh * l.wq, v.ow);
}

// Filters [k0, k0 + kn) of group g of one packed image (xq) into yq ([K][qpad]), the filters read
// in place ([K][taps]).
void fwd_filters_of(const ConvShape& v, const Layout& l, const float* xq, const float* w, int64_t g, int64_t k0,
                    int64_t kn, float* yq) {
    fwd_group(xq + g * v.cg * l.chan, l.off, l.taps, w + (g * v.kg + k0) * l.taps, 1, l.taps, kn, l.qpad,
              yq + (g * v.kg + k0) * l.qpad, l.qpad);
}

// Filters [k0, k1) of image n: yq's computed positions into Y, less the columns past each row,
// then the epilogue, by blocks of filters of about 4K outputs, each still in L1 when its
// epilogue reads it (a whole image's 50 KB went through L2 twice: ResNet-20's stem at batch 1000).
void finish_filters(const ConvShape& v, const Layout& l, const float* yq, const ConvEpilogue& e, float* y, int64_t n,
                    int64_t k0, int64_t k1) {
    const int64_t P = v.oh * v.ow, block = std::max<int64_t>(1, 4096 / P);
    ConvShape vk = v;
    for (int64_t kb = k0; kb < k1; kb += block) {
        vk.k = std::min(block, k1 - kb);
        float* yk = y + (n * v.k + kb) * P;
        compact_rows(vk, l, yq + kb * l.qpad, yk);
        e.finish(kb, yk, P, yk, P, vk.k, P);
    }
}

// The same for every filter of image n.
void finish_image(const ConvShape& v, const Layout& l, const float* yq, const ConvEpilogue& e, float* y, int64_t n) {
    finish_filters(v, l, yq, e, y, n, 0, v.k);
}

// Rows [oh0, oh1) of every filter of one image: yq's positions [q0, ...) (ldq apart per filter)
// into Y's rows less the columns past each row.
XYLEM_KERNEL_NO_LIBCALLS(void, compact_row_block,
                         (const ConvShape& v, const Layout& l, const float* __restrict yq, int64_t ldq, int64_t q0,
                          int64_t oh0, int64_t oh1, float* __restrict yn),
                         (v, l, yq, ldq, q0, oh0, oh1, yn)) {
    for (int64_t k = 0; k < v.k; ++k)
        for (int64_t oh = oh0; oh < oh1; ++oh)
            copy_row<1>(yn + (k * v.oh + oh) * v.ow, yq + k * ldq + oh * l.wq - q0, v.ow);
}

// An image's computed positions (filters x positions) from which it is computed and finished in
// blocks of whole output rows: its block then stays in L2 for the compaction, bias and
// activation. MobileNetV2's 32-filter stem at 112x112 computes 1.6 MB an image, ResNet-18's
// 64-filter 7x7 stem 3.3 MB.
constexpr int64_t kRowBlockFloats = 64 * 1024;

// Rows of at most kRowBlockFloats computed positions per block (at least one row), and the
// positions a block's filter takes in yq (its rows rounded out to whole vectors each side).
int64_t block_rows(const ConvShape& v, const Layout& l) { return std::max<int64_t>(1, kRowBlockFloats / (v.k * l.wq)); }
int64_t block_ldq(const ConvShape& v, const Layout& l) { return round_up(block_rows(v, l) * l.wq + 2 * kAlign, kAlign); }

// The forward pass of images [n0, n1) on one thread: xq holds one packed image, yq [K][qpad]
// (or, by blocks of rows, [K][block_ldq]).
void fwd_images(const ConvShape& v, const Layout& l, const float* x, const float* w, const ConvEpilogue& e,
                float* y, int64_t n0, int64_t n1, float* xq, float* yq) {
    const int64_t rows = block_rows(v, l), P = v.oh * v.ow;
    for (int64_t n = n0; n < n1; ++n) {
        pack_image(v, l, x + n * v.c * v.hw(), xq);
        if (rows >= v.oh) {
            for (int64_t g = 0; g < v.g; ++g) fwd_filters_of(v, l, xq, w, g, 0, v.kg, yq);
            finish_image(v, l, yq, e, y, n);
            continue;
        }
        const int64_t ldq = block_ldq(v, l);
        float* yn = y + n * v.k * P;
        for (int64_t oh0 = 0; oh0 < v.oh; oh0 += rows) {
            const int64_t oh1 = std::min(v.oh, oh0 + rows);
            // Whole vectors within [0, qpad): reads stay within the packed image's margin.
            const int64_t q0 = oh0 * l.wq / kAlign * kAlign, q1 = std::min(l.qpad, round_up(oh1 * l.wq, kAlign));
            for (int64_t g = 0; g < v.g; ++g)
                fwd_group(xq + g * v.cg * l.chan + q0, l.off, l.taps, w + g * v.kg * l.taps, 1, l.taps, v.kg, q1 - q0,
                          yq + g * v.kg * ldq, ldq);
            compact_row_block(v, l, yq, ldq, q0, oh0, oh1, yn);
            e.finish(0, yn + oh0 * v.ow, P, yn + oh0 * v.ow, P, v.k, (oh1 - oh0) * v.ow);
        }
    }
}

// Filters per block when fewer images than workers share out a pass: a multiple of every level's
// tile (8, 6, 3 filters), and about 30 MFLOP per block on ResNet-18's 512-channel 7x7 maps.
constexpr int64_t kFilterBlock = 48;

// Positions per block where the blocks of filters alone would leave a worker idle (MobileNetV2's
// 32-filter stem at batch 1 was one block on one CPU): a multiple of every level's tile (48, 16,
// 12 positions).
constexpr int64_t kPositionBlock = 48 * 8;

// Blocks of positions a pass of `blocks` blocks of filters is cut into: with fewer of those than
// twice the workers, enough (of kPositionBlock at least) to go round them twice.
int64_t position_parts(const Layout& l, int64_t blocks, int workers) {
    if (blocks >= 2 * workers) return 1;
    const int64_t want = (2 * workers + blocks - 1) / blocks;
    return std::min(want, std::max<int64_t>(1, l.qpad / kPositionBlock));
}

// The filters per block actually used: the multiple of this level's tile (8, 6 or 3 filters) from
// half of kFilterBlock to 64 whose blocks (each cut into position_parts) end soonest when the
// workers take them in rounds, the larger on a tie (fewer blocks each read the packed image
// once). Blocks of 48 alone left the last round short: 256 filters on two workers were 5 blocks of
// 48 and one of 16 (144 filters' time against 128 in blocks of 64: ResNet-18's 14x14 layers at
// batch 1), 512 were 11 of 48 (288 against 256 in blocks of 64). A block of 128 filters in 28x28
// took 5-10% longer in blocks of 24 than of 48: smaller blocks are not taken for free.
int64_t filter_block(const ConvShape& v, const Layout& l, int workers) {
    const int64_t tile = level_filter_tile();
    int64_t best = 0;
    double best_span = 0.0;
    for (int64_t fb = (kFilterBlock / 2 + tile - 1) / tile * tile; fb <= 64; fb += tile) {
        const int64_t blocks = v.g * ((v.kg + fb - 1) / fb), parts = position_parts(l, blocks, workers);
        const int64_t rounds = (blocks * parts + workers - 1) / workers;
        const double span = static_cast<double>(rounds * std::min(fb, v.kg)) / static_cast<double>(parts);
        if (best == 0 || span <= best_span) best = fb, best_span = span;
    }
    return best;
}
// Floats packed per image from which the channels are packed by the workers.
constexpr int64_t kSplitPackFloats = int64_t{1} << 16;

// Image n packed into xq, its channels shared out among the workers when it is big: each packs
// its channels' planes (a layout whose image is one channel: no zeroing past it), then the tail
// past the channels is zeroed.
void pack_shared(const ConvShape& v, const Layout& l, const float* x, float* xq, int workers) {
    if (workers <= 1 || v.c < 2 || v.c * v.hw() < kSplitPackFloats) return pack_image(v, l, x, xq);
    ConvShape vc = v;
    vc.c = 1;
    Layout lc = l;
    lc.image = l.chan;
    parallel_items(v.c, workers, [&](int, int64_t c) { pack_image(vc, lc, x + c * v.hw(), xq + c * l.chan); });
    std::fill(xq + v.c * l.chan, xq + l.image, 0.0f);
}


// Fewer images than workers (inference at batch 1): each image packed once (its channels shared
// out when big), then its groups' blocks of kFilterBlock filters (and, with fewer blocks than
// twice the workers, blocks of positions) shared out, then the compaction, bias and activation
// by blocks of filters; ResNet-18's 7x7 layers ran on one CPU of two before, the packing and the
// finishing passes on the calling thread. The same bits as image by image (each output's taps in
// tap order).
void fwd_filter_blocks(const ConvShape& v, const Layout& l, const float* x, const float* w, const ConvEpilogue& e,
                       float* y, int workers, float* xq, float* yq) {
    const int64_t fb = filter_block(v, l, workers), blocks = (v.kg + fb - 1) / fb;
    int64_t pchunk = l.qpad;
    if (const int64_t parts = position_parts(l, v.g * blocks, workers); parts > 1)
        pchunk = round_up((l.qpad + parts - 1) / parts, 48);  // a multiple of every level's tile and of kAlign
    const int64_t pblocks = (l.qpad + pchunk - 1) / pchunk;
    // Finishing: blocks of about 16K outputs (one filter at 112x112: the stem's 32 are one block of 48).
    const int64_t per_finish = std::clamp<int64_t>((int64_t{1} << 14) / (v.oh * v.ow), 1, kFilterBlock);
    const int64_t finish_blocks = (v.k + per_finish - 1) / per_finish;
    for (int64_t n = 0; n < v.n; ++n) {
        pack_shared(v, l, x + n * v.c * v.hw(), xq, workers);
        parallel_items(v.g * blocks * pblocks, workers, [&](int, int64_t item) {
            const int64_t p = item % pblocks, gb = item / pblocks;
            const int64_t g = gb / blocks, k0 = gb % blocks * fb, q0 = p * pchunk;
            fwd_group(xq + g * v.cg * l.chan + q0, l.off, l.taps, w + (g * v.kg + k0) * l.taps, 1, l.taps,
                      std::min(fb, v.kg - k0), std::min(pchunk, l.qpad - q0),
                      yq + (g * v.kg + k0) * l.qpad + q0, l.qpad);
        });
        parallel_items(finish_blocks, workers, [&](int, int64_t item) {
            const int64_t k0 = item * per_finish;
            finish_filters(v, l, yq, e, y, n, k0, std::min(v.k, k0 + per_finish));
        });
    }
}

// Images shared out among the workers one at a time (each output's arithmetic does not depend on
// the cut), so a worker the OS holds back delays no one by more than an image; blocks of filters
// when there are fewer images than workers.
void fwd_run(const ConvShape& v, const float* x, const float* w, const ConvEpilogue& e, float* y, Arena& scratch) {
    const Layout l = make_fwd_layout(v, scratch);
    const double flops = 2.0 * static_cast<double>(v.n) * v.k * v.oh * v.ow * l.taps;
    // Blocks of filters, or of positions where those are too few (fwd_filter_blocks).
    const int64_t blocks =
        v.n * std::max(v.g * ((v.kg + kFilterBlock - 1) / kFilterBlock), std::max<int64_t>(1, l.qpad / kPositionBlock));
    if (const int by_blocks = split_workers(flops, kMinSplitFlops, blocks); v.n < by_blocks) {
        float* xq = scratch.alloc<float>(l.image);
        float* yq = scratch.alloc<float>(v.k * l.qpad);
        return fwd_filter_blocks(v, l, x, w, e, y, by_blocks, xq, yq);
    }
    const int workers = split_workers(flops, kMinSplitFlops, v.n);
    std::array<float*, kMaxSplit> xq{}, yq{};
    for (int wk = 0; wk < workers; ++wk) {
        xq[wk] = scratch.alloc<float>(l.image);
        yq[wk] = scratch.alloc<float>(v.k * std::max(l.qpad, block_ldq(v, l)));
    }
    parallel_items(v.n, workers, [&](int wk, int64_t n) { fwd_images(v, l, x, w, e, y, n, n + 1, xq[wk], yq[wk]); });
}

// ---- filter gradient --------------------------------------------------------------------------

// acc[t*ldk + kv*L ...] += the tile's float sums: TB taps (from off) x KV vectors of filters,
// over the positions of m images.
template <class S, int TB, int KV>
__attribute__((always_inline)) inline void filter_tile(const ConvShape& v, const Layout& l, const float* __restrict xq,
                                                       const int32_t* __restrict off, const float* __restrict dyt,
                                                       int64_t ldk, int64_t m, double* __restrict acc) {
    using V = typename S::V;
    using Vu = typename S::Vu;
    V s[TB][KV];
    for (int a = 0; a < TB; ++a)
        for (int b = 0; b < KV; ++b) s[a][b] = V{};
    const int64_t P = v.oh * v.ow;
    for (int64_t j = 0; j < m; ++j)
        for (int64_t oh = 0; oh < v.oh; ++oh) {
            const float* xr = xq + j * l.image + oh * l.wq;
            const float* d = dyt + (j * P + oh * v.ow) * ldk;
            for (int64_t ow = 0; ow < v.ow; ++ow, d += ldk) {
                V dv[KV];
                for (int b = 0; b < KV; ++b) dv[b] = *reinterpret_cast<const Vu*>(d + b * S::L);
                for (int a = 0; a < TB; ++a) {
                    const V xv = S::splat(xr[off[a] + ow]);
                    for (int b = 0; b < KV; ++b) s[a][b] = S::fma(xv, dv[b], s[a][b]);
                }
            }
        }
    for (int a = 0; a < TB; ++a)
        for (int b = 0; b < KV; ++b) {
            double* o = acc + a * ldk + b * S::L;
            for (int e = 0; e < S::L; ++e) o[e] += s[a][b][e];
        }
}

template <class S, int TB, int KV>
__attribute__((always_inline)) inline void filter_taps(const ConvShape& v, const Layout& l, const float* xq,
                                                       const float* dyt, int64_t ldk, int64_t m, double* acc) {
    int64_t t = 0;
    for (; t + TB <= l.taps; t += TB) filter_tile<S, TB, KV>(v, l, xq, l.off + t, dyt, ldk, m, acc + t * ldk);
    if constexpr (TB > 4)
        for (; t + 4 <= l.taps; t += 4) filter_tile<S, 4, KV>(v, l, xq, l.off + t, dyt, ldk, m, acc + t * ldk);
    for (; t < l.taps; ++t) filter_tile<S, 1, KV>(v, l, xq, l.off + t, dyt, ldk, m, acc + t * ldk);
}

// acc[t*ldk + k] += sum over the m images at xq (packed, l.image apart) and dyt ([m][P][ldk]: dY
// transposed, zero past kg) of the window of tap t times dY of filter k: one group.
XYLEM_KERNEL_LEVELS(void, filter_group,
                    (const ConvShape& v, const Layout& l, const float* xq, const float* dyt, int64_t ldk, int64_t m,
                     double* acc),
                    (v, l, xq, dyt, ldk, m, acc)) {
    constexpr int kMaxTaps = 12;  // more taps per tile spill their window pointers
    const int64_t vectors = ldk / S::L;
    int64_t k = 0;
    // Filters in blocks of 4, 2 or 1 vectors, the taps per tile filling the accumulators.
    for (; k + 4 <= vectors; k += 4)
        filter_taps<S, std::min(kMaxTaps, Tiles<S>::kFilterAcc / 4), 4>(v, l, xq, dyt + k * S::L, ldk, m, acc + k * S::L);
    for (; k + 2 <= vectors; k += 2)
        filter_taps<S, std::min(kMaxTaps, Tiles<S>::kFilterAcc / 2), 2>(v, l, xq, dyt + k * S::L, ldk, m, acc + k * S::L);
    for (; k < vectors; ++k)
        filter_taps<S, std::min(kMaxTaps, Tiles<S>::kFilterAcc), 1>(v, l, xq, dyt + k * S::L, ldk, m, acc + k * S::L);
}

// dyt[j][p][k] = dy[j][k0 + k][p] for k < kg, 0 for kg <= k < ldk: m images' dY of one group,
// transposed.
XYLEM_KERNEL(void, transpose_dy,
             (const ConvShape& v, const float* __restrict dy, int64_t k0, int64_t m, int64_t ldk, float* __restrict dyt),
             (v, dy, k0, m, ldk, dyt)) {
    const int64_t P = v.oh * v.ow, kb = v.kg / 8 * 8, pb = P / 8 * 8;
    for (int64_t j = 0; j < m; ++j) {
        const float* src = dy + (j * v.k + k0) * P;
        float* dst = dyt + j * P * ldk;
        for (int64_t p = 0; p < pb; p += 8) {
            for (int64_t k = 0; k < kb; k += 8) transpose8(src + k * P + p, P, dst + p * ldk + k, ldk);
            for (int64_t e = p; e < p + 8; ++e)
                for (int64_t k = kb; k < ldk; ++k) dst[e * ldk + k] = k < v.kg ? src[k * P + e] : 0.0f;
        }
        for (int64_t e = pb; e < P; ++e)
            for (int64_t k = 0; k < ldk; ++k) dst[e * ldk + k] = k < v.kg ? src[k * P + e] : 0.0f;
    }
}

// Images per chunk: enough positions that the float sums flushed into float64 once per chunk
// cost little (7x7 maps: 6 images), fixed by the shape.
int64_t filter_chunk(const ConvShape& v) {
    const int64_t P = v.oh * v.ow;
    return std::clamp<int64_t>((256 + P - 1) / P, 1, 16);
}

// ---- data gradient -----------------------------------------------------------------------------
// dX[c][ih][iw] sums W[k][c][r][s] * dY[k][oh][ow] over the taps with oh*sh + r*dh = ih + ph and
// ow*sw + s*dw = iw + pw. Cut dX into sh x sw phases by (ih + ph) % sh = a, (iw + pw) % sw = b:
// phase (a, b) at (i, j) = ((ih + ph) / sh, (iw + pw) / sw) is a stride-1 correlation of dY with
// the taps whose r*dh % sh = a and s*dw % sw = b, tap (k, r, s) reading dY[k][i - (r*dh)/sh]
// [j - (s*dw)/sw] (zero outside dY). With dY packed once per image (padded so that every tap's
// window starts inside the plane), each phase is the forward kernel with its own taps, offsets
// and weights, and its outputs land on every sh-th row and sw-th column of dX. A stride-1 conv
// has one phase: the forward conv of dY with the filters flipped.
struct Phase {
    int64_t a = 0, b = 0;                    // the phase
    int64_t i_lo = 0, n_i = 0, j_lo = 0, n_j = 0;  // its dX rows i*sh + a - ph for i in [i_lo, i_lo + n_i), columns alike
    int64_t taps = 0, qpad = 0;              // kg * its r's * its s's; positions n_i * wq rounded up to kAlign
    int32_t* off = nullptr;                  // [taps]: offsets from a group's first dY channel in the packed image
    float* wt = nullptr;                     // [G][taps][cg]
};

struct DataPlan {
    ConvShape d;  // dY as the packed input: channels K, [OH, OW] placed at rows ph, columns pw of hq x wq
    Layout l;     // its layout (one phase)
    std::array<Phase, 64> phase{};
    int64_t phases = 0;    // phases with taps (the rest of dX is zero)
    bool zero_rest = false;
    int64_t max_qpad = 0;
    double computed = 0;   // multiply-adds per image and group, over every phase
};

// Taps r of one axis in phase a: r*d % st == a; their row offsets (r*d)/st.
int64_t axis_taps(int64_t n, int64_t d, int64_t st, int64_t a, int64_t* r_of, int64_t* rho) {
    int64_t count = 0;
    for (int64_t r = 0; r < n; ++r)
        if ((r * d) % st == a) {
            r_of[count] = r;
            rho[count++] = r * d / st;
        }
    return count;
}

// The phases, their taps and the packed dY's layout; with scratch, also each phase's offsets and
// weights (w: the filters), else only the sizes (for the fits check). False when the layout's
// offsets would not fit in int32, or the strides give more than 64 phases.
bool plan_data(const ConvShape& v, const float* w, Arena* scratch, DataPlan& p) {
    if (v.sh * v.sw > 64 || v.r > 64 || v.s > 64) return false;
    int64_t r_of[64], rho[64], s_of[64], sigma[64];
    // Padding of the packed dY: enough rows above that every tap's window starts inside, enough
    // below that every phase's last row reads inside.
    int64_t top = 0, left = 0, rows = v.oh, cols = v.ow;
    for (int64_t a = 0; a < v.sh; ++a) {
        int64_t lo, hi;
        valid_range(a - v.ph, v.sh, v.h, v.h + v.oh + v.r * v.dh, lo, hi);
        for (int64_t t = 0, n = axis_taps(v.r, v.dh, v.sh, a, r_of, rho); t < n; ++t) {
            top = std::max(top, rho[t] - lo);
            rows = std::max(rows, hi - rho[t]);  // rows [lo - rho, hi - rho) of dY, before the shift by top
        }
    }
    for (int64_t b = 0; b < v.sw; ++b) {
        int64_t lo, hi;
        valid_range(b - v.pw, v.sw, v.w, v.w + v.ow + v.s * v.dw, lo, hi);
        for (int64_t t = 0, n = axis_taps(v.s, v.dw, v.sw, b, s_of, sigma); t < n; ++t) {
            left = std::max(left, sigma[t] - lo);
            cols = std::max(cols, hi - sigma[t]);
        }
    }
    p.d = v;
    p.d.c = v.k, p.d.h = v.oh, p.d.w = v.ow, p.d.ph = top, p.d.pw = left, p.d.sh = p.d.sw = 1;
    Layout& l = p.l;
    l.hq = top + rows, l.wq = left + cols, l.plane = l.hq * l.wq, l.chan = l.plane;
    p.phases = 0, p.max_qpad = 0, p.computed = 0, p.zero_rest = false;
    int64_t last = 0;  // the furthest read past a group's first channel
    for (int64_t a = 0; a < v.sh; ++a)
        for (int64_t b = 0; b < v.sw; ++b) {
            const int64_t nr = axis_taps(v.r, v.dh, v.sh, a, r_of, rho), ns = axis_taps(v.s, v.dw, v.sw, b, s_of, sigma);
            Phase ph;
            int64_t hi;
            valid_range(a - v.ph, v.sh, v.h, v.h + v.oh + v.r * v.dh, ph.i_lo, hi);
            ph.n_i = hi - ph.i_lo;
            valid_range(b - v.pw, v.sw, v.w, v.w + v.ow + v.s * v.dw, ph.j_lo, hi);
            ph.n_j = hi - ph.j_lo;
            if (ph.n_i == 0 || ph.n_j == 0) continue;  // no dX element in this phase
            if (nr == 0 || ns == 0) {  // no tap reaches it: zero
                p.zero_rest = true;
                continue;
            }
            ph.a = a, ph.b = b;
            ph.taps = v.kg * nr * ns;
            ph.qpad = round_up(ph.n_i * l.wq, kAlign);
            p.max_qpad = std::max(p.max_qpad, ph.qpad);
            p.computed += static_cast<double>(ph.qpad) * ph.taps * v.cg;
            // Offsets: dY row i - rho + top for dX row i, i.e. (i_lo - rho + top) from output row 0.
            const int64_t reach = (ph.i_lo - rho[0] + top) * l.wq + ph.j_lo - sigma[0] + left;  // rho, sigma ascending
            last = std::max(last, (v.kg - 1) * l.chan + reach + ph.qpad);
            if (scratch) {
                ph.off = scratch->alloc<int32_t>(ph.taps);
                ph.wt = scratch->alloc<float>(v.g * ph.taps * v.cg);
                for (int64_t k = 0; k < v.kg; ++k)
                    for (int64_t ri = 0; ri < nr; ++ri)
                        for (int64_t si = 0; si < ns; ++si) {
                            const int64_t t = (k * nr + ri) * ns + si;
                            ph.off[t] = static_cast<int32_t>(k * l.chan + (ph.i_lo - rho[ri] + top) * l.wq + ph.j_lo -
                                                             sigma[si] + left);
                            for (int64_t g = 0; g < v.g; ++g)
                                for (int64_t c = 0; c < v.cg; ++c)
                                    ph.wt[(g * ph.taps + t) * v.cg + c] =
                                        w[(((g * v.kg + k) * v.cg + c) * v.r + r_of[ri]) * v.s + s_of[si]];
                        }
            }
            p.phase[static_cast<size_t>(p.phases++)] = ph;
        }
    l.image = round_up(std::max(v.k * l.chan, (v.k - v.kg) * l.chan + last), kAlign);
    l.sh = l.sw = 1;
    if (scratch) {
        l.phase_of = scratch->alloc<int32_t>(1);
        l.phase_of[0] = 0;
    }
    return l.image < INT_MAX / 2 && p.max_qpad * v.c < INT_MAX / 2;
}

// dx[c][i*sh + a - ph][j*sw + b - pw] = yq[c][(i - i_lo)*wq + j - j_lo] for the phase's rows and
// columns, channels [0, cg) of yq into dX's channels from c0.
XYLEM_KERNEL_NO_LIBCALLS(void, scatter_phase,
                         (const ConvShape& v, const Phase& ph, int64_t wq, const float* __restrict yq, int64_t c0,
                          float* __restrict dx),
                         (v, ph, wq, yq, c0, dx)) {
    for (int64_t c = 0; c < v.cg; ++c)
        for (int64_t i = 0; i < ph.n_i; ++i) {
            float* out = dx + ((c0 + c) * v.h + (ph.i_lo + i) * v.sh + ph.a - v.ph) * v.w + ph.j_lo * v.sw + ph.b - v.pw;
            const float* in = yq + c * ph.qpad + i * wq;
            if (v.sw == 1) copy_row<1>(out, in, ph.n_j);
            else for (int64_t j = 0; j < ph.n_j; ++j) out[j * v.sw] = in[j];
        }
}

// Images [n0, n1) of the data gradient, on one thread: xq holds one packed dY, yq one phase's
// outputs for a group.
void data_images(const ConvShape& v, const DataPlan& p, const float* dy, float* dx, int64_t n0, int64_t n1, float* xq,
                 float* yq) {
    for (int64_t n = n0; n < n1; ++n) {
        float* dxn = dx + n * v.c * v.hw();
        if (p.zero_rest) std::fill_n(dxn, v.c * v.hw(), 0.0f);
        pack_image(p.d, p.l, dy + n * v.k * v.oh * v.ow, xq);
        for (int64_t g = 0; g < v.g; ++g)
            for (int64_t f = 0; f < p.phases; ++f) {
                const Phase& ph = p.phase[static_cast<size_t>(f)];
                fwd_group(xq + g * v.kg * p.l.chan, ph.off, ph.taps, ph.wt + g * ph.taps * v.cg, v.cg, 1, v.cg, ph.qpad,
                          yq, ph.qpad);
                scatter_phase(v, ph, p.l.wq, yq, g * v.cg, dxn);
            }
    }
}

}  // namespace

// ---- entry points -----------------------------------------------------------------------------

// A 1x1 kernel with a stride (ResNet's projections) has one tap per channel: im2col is a plain
// subsampling copy, no bigger than the direct kernels' packed image, and its GEMM takes a chunk of
// images at once, where the direct kernels round each image's positions up to whole vectors: for
// 7x7 outputs (49 positions in 64) that lost (32->64 channels at batch 128: forward 0.62 vs 0.48
// ms, data gradient 0.81 vs 0.58), for 14x14 (196 in 208) it won (0.71 vs 0.84, 0.90 vs 1.03).
bool pointwise_wastes(const ConvShape& v) {
    const int64_t p = v.oh * v.ow;
    return v.r == 1 && v.s == 1 && static_cast<double>(round_up(p, kAlign)) > 1.2 * static_cast<double>(p);
}

bool direct_fwd_fits(const ConvShape& v) {
    Layout l;
    return fwd_layout_sizes(v, l) && !pointwise_wastes(v) &&
           static_cast<double>(l.qpad) <= level_waste_limit() * static_cast<double>(v.oh * v.ow);
}

// The phases compute their positions' full rows (wq columns for the n_j of dX) over taps that
// read dY's padding too: for a conv with little padding most of them read zeros (LeNet's conv2,
// 5x5 with no padding, 8x8 dY: 12x16 positions computed per 8x8 dY, 3x im2col's multiply-adds,
// and slower than it at avx512: 3.8 vs 2.4 ms per call). Taken where it computes at most the
// level's kDataWasteLimit times im2col's (ResNet's padded 3x3: 1.08x at 28x28, 1.14x at 14x14
// and at stride 2, 1.31x at 7x7; its 1x1 stride 2 to 14x14: 1.06x).
bool direct_bwd_data_fits(const ConvShape& v) {
    if (pointwise_wastes(v)) return false;
    DataPlan p;
    if (!plan_data(v, nullptr, nullptr, p)) return false;
    return p.computed <= level_data_waste_limit() * static_cast<double>(v.oh * v.ow) * v.kg * v.r * v.s * v.cg;
}

bool direct_bwd_filter_fits(const ConvShape& v) {
    Layout l;
    int64_t phases = 0;
    return layout_sizes(v, l, phases) && filter_chunk(v) * l.image < INT_MAX / 2 && !pointwise_wastes(v) &&
           v.cg * v.r * v.s >= level_min_filter_taps();
}

void direct_multiply(const float* xq, const int32_t* off, int64_t taps, const float* wt, int64_t kg, int64_t qpad,
                     float* y, int64_t ldy) {
    fwd_group(xq, off, taps, wt, kg, 1, kg, qpad, y, ldy);
}

void direct_multiply_rows(const float* xq, const int32_t* off, int64_t taps, const float* w, int64_t kg, int64_t qpad,
                          float* y, int64_t ldy) {
    fwd_group(xq, off, taps, w, 1, taps, kg, qpad, y, ldy);
}

bool direct_multiply_fma() { return level_lanes() > 4; }

int64_t direct_filter_lanes() { return level_lanes(); }

void direct_filter_multiply(const float* x, const int32_t* off, int64_t taps, const float* dyt, int64_t ldk,
                            int64_t positions, double* acc) {
    ConvShape v{};  // one image of one output row of `positions` columns
    v.oh = 1, v.ow = positions;
    Layout l;
    l.taps = taps;
    l.off = const_cast<int32_t*>(off);
    filter_group(v, l, x, dyt, ldk, 1, acc);
}

void direct_transpose(const float* src, int64_t rows, int64_t cols, int64_t ldk, float* dst) {
    ConvShape v{};  // one image of `rows` filters and cols positions
    v.k = v.kg = rows, v.oh = 1, v.ow = cols;
    transpose_dy(v, src, 0, 1, ldk, dst);
}

void direct_fwd(const ConvShape& v, const float* x, const float* w, const ConvEpilogue& e, float* y, Arena& scratch) {
    // The filters as they are, [K][taps]: the kernels broadcast a tile's weights one by one, so a
    // copy with a tap's filters side by side bought nothing, and at batch 1 the copy cost more than
    // the multiply-adds (ResNet-18's 512 -> 512 3x3 at batch 1, 2 threads: 2.4M floats moved per call).
    fwd_run(v, x, w, e, y, scratch);
}

void direct_bwd_data(const ConvShape& v, const float* dy, const float* w, float* dx, Arena& scratch) {
    DataPlan p;
    plan_data(v, w, &scratch, p);
    const int workers = split_workers(2.0 * p.computed * v.g * static_cast<double>(v.n), kMinSplitFlops, v.n);
    std::array<float*, kMaxSplit> xq{}, yq{};
    for (int i = 0; i < workers; ++i) {
        xq[i] = scratch.alloc<float>(p.l.image);
        yq[i] = scratch.alloc<float>(v.cg * p.max_qpad);
    }
    // Images shared out one at a time, as forward.
    parallel_items(v.n, workers, [&](int i, int64_t n) { data_images(v, p, dy, dx, n, n + 1, xq[i], yq[i]); });
}

void direct_bwd_filter(const ConvShape& v, const float* x, const float* dy, float beta, float* dw, float* db,
                       Arena& scratch) {
    if (dot_bwd_filter_fits(v)) return dot_bwd_filter(v, x, dy, beta, dw, db, scratch);
    if (db) bias_grad_nc(dy, v.n, v.k, v.oh * v.ow, beta, db, scratch);
    const Layout l = make_layout(v, scratch);
    // dY transposed to [position][ldk]: the filters rounded up to whole vectors of this level.
    const int64_t P = v.oh * v.ow, ldk = round_up(v.kg, level_lanes()), m = filter_chunk(v);
    const int64_t size = v.g * l.taps * ldk;  // one slice's sums: [G][taps][ldk]
    const double flops = 2.0 * static_cast<double>(v.n) * v.k * P * l.taps;
    // Each slice's float64 sums are the filter's size again: at most kMaxPartialBytes of them
    // (a 512x512 3x3 filter's sums are 19 MB; ResNet-20's largest, 0.3 MB), fewer slices past it.
    int64_t slices = shape_slices(flops, kMinSplitFlops, v.n);
    while (slices > 1 && static_cast<double>(slices) * size * sizeof(double) > kMaxPartialBytes) slices /= 2;
    double* acc = scratch.alloc<double>(slices * size);
    std::fill_n(acc, slices * size, 0.0);
    std::array<float*, kMaxSplit> xq{}, dyt{};
    for (int w = 0; w < slice_workers(slices); ++w) {
        xq[w] = scratch.alloc<float>(m * l.image);
        dyt[w] = scratch.alloc<float>(m * P * ldk);
    }
    run_slices(v.n, slices, [&](int64_t lo, int64_t hi, int w, int64_t s) {
        for (int64_t n0 = lo; n0 < hi; n0 += m) {
            const int64_t mm = std::min(m, hi - n0);
            for (int64_t j = 0; j < mm; ++j) pack_image(v, l, x + (n0 + j) * v.c * v.hw(), xq[w] + j * l.image);
            for (int64_t g = 0; g < v.g; ++g) {
                transpose_dy(v, dy + n0 * v.k * P, g * v.kg, mm, ldk, dyt[w]);
                filter_group(v, l, xq[w] + g * v.cg * l.chan, dyt[w], ldk, mm, acc + s * size + g * l.taps * ldk);
            }
        }
    });
    for (int64_t s = 1; s < slices; ++s)
        for (int64_t i = 0; i < size; ++i) acc[i] += acc[s * size + i];
    for (int64_t g = 0; g < v.g; ++g)
        for (int64_t k = 0; k < v.kg; ++k)
            for (int64_t t = 0; t < l.taps; ++t) {
                const double sum = acc[(g * l.taps + t) * ldk + k];
                float& out = dw[(g * v.kg + k) * l.taps + t];
                out = beta == 0.0f ? static_cast<float>(sum) : static_cast<float>(beta * out + sum);
            }
}

bool direct_layout_fits(const ConvShape& v) {
    DirectLayout l;
    int64_t phases = 0;
    return layout_sizes(v, l, phases);
}

DirectLayout direct_layout(const ConvShape& v, Arena& scratch) { return make_layout(v, scratch); }

bool direct_unrolled_fits(const ConvShape& v) {
    DirectLayout l;
    return v.sh == 1 && unrolled_sizes(v, l);
}

DirectLayout direct_unrolled_layout(const ConvShape& v, Arena& scratch) { return make_unrolled(v, scratch); }

void direct_pack_image(const ConvShape& v, const DirectLayout& l, const float* x, float* xq) { pack_image(v, l, x, xq); }

}  // namespace xylem::native
