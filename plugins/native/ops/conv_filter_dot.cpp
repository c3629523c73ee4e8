// The filter gradient with positions in the vectors, for filters of few taps (a stem's 3x3 on
// one channel, LeNet's 5x5 on one).
//
// Why: the direct filter kernel (ops/conv_direct.cpp) vectorises over filters, with dY transposed
// to [position][filters rounded up to whole vectors]: for a filter of few taps that transposing
// pass costs as much as the multiply-adds, and LeNet's conv1 computes 32 lanes for its 20 filters
// at avx512 (1.6x the multiply-adds). Here dW[k][t] = sum over positions q of dY[k][q] * window_t[q] is a dot product
// of two contiguous rows: dY's rows as they are, and the windows of the unrolled layout
// (conv_direct.cpp: one plane per column tap, positions exactly the outputs). A tile holds KB
// filters x TB taps of vector accumulators; per vector of positions it loads KB rows of dY and TB
// windows, no broadcast, and nothing is computed past the outputs.
//
// Determinism: each accumulator sums its lanes' products in position order over a chunk of
// images (fixed by the shape), its lanes are then added by halves in float, and the result into
// float64 sums per slice of images (shape_slices), the slices added in order: the same bits for
// any thread count.
#include <algorithm>
#include <array>
#include <cstring>

#include "ops/conv_direct.h"
#include "simd.h"

namespace xylem::native {

namespace {

// Tiles per level: KB filters x TB taps accumulators, plus KB rows of dY and one window in
// registers (avx512: 24 + 4 + 1 of 32; avx2: 9 + 3 + 1 of 16). The baseline level has no FMA and
// keeps the direct kernel (dot_bwd_filter_fits).
template <class S>
struct DotTiles;
template <>
struct DotTiles<SimdAvx512> {
    static constexpr int kFilters = 4, kTaps = 6;
};
template <>
struct DotTiles<SimdAvx2> {
    static constexpr int kFilters = 3, kTaps = 3;
};
template <>
struct DotTiles<SimdBaseline> {
    static constexpr int kFilters = 2, kTaps = 2;
};

// The lanes of v added by halves in float (a fixed order).
template <class S>
__attribute__((always_inline)) inline float lanes_sum(typename S::V v) {
    float t[S::L];
    std::memcpy(t, &v, sizeof t);
    for (int w = S::L / 2; w >= 1; w /= 2)
        for (int e = 0; e < w; ++e) t[e] += t[e + w];
    return t[0];
}

// acc[a*lda + b] += sum over images j < m and positions q < P of dy[j*ldj + a*P + q] *
// xq[j*image + off[b] + q], for KB filters a (dY's rows from dy) and TB taps b; with BIAS also
// bacc[a] += the sum of those rows of dY (the bias gradient, from the loads the products make).
template <class S, int KB, int TB, bool BIAS = false>
__attribute__((always_inline)) inline void dot_tile(const float* __restrict xq, int64_t image,
                                                    const int32_t* __restrict off, const float* __restrict dy,
                                                    int64_t ldj, int64_t P, int64_t m, double* __restrict acc,
                                                    int64_t lda, double* __restrict bacc = nullptr) {
    using V = typename S::V;
    using Vu = typename S::Vu;
    V s[KB][TB], sb[KB];
    for (int a = 0; a < KB; ++a) {
        sb[a] = V{};
        for (int b = 0; b < TB; ++b) s[a][b] = V{};
    }
    for (int64_t j = 0; j < m; ++j) {
        const float* d = dy + j * ldj;
        const float* x = xq + j * image;
        for (int64_t q = 0; q < P; q += S::L) {
            V dv[KB];
            for (int a = 0; a < KB; ++a) dv[a] = *reinterpret_cast<const Vu*>(d + a * P + q);
            if constexpr (BIAS)
                for (int a = 0; a < KB; ++a) sb[a] = sb[a] + dv[a];
            for (int b = 0; b < TB; ++b) {
                const V xv = *reinterpret_cast<const Vu*>(x + off[b] + q);
                for (int a = 0; a < KB; ++a) s[a][b] = S::fma(dv[a], xv, s[a][b]);
            }
        }
    }
    for (int a = 0; a < KB; ++a)
        for (int b = 0; b < TB; ++b) acc[a * lda + b] += lanes_sum<S>(s[a][b]);
    if constexpr (BIAS)
        for (int a = 0; a < KB; ++a) bacc[a] += lanes_sum<S>(sb[a]);
}

// The last r < TB taps as one tile of r (R counts up to r at compile time).
template <class S, int KB, bool BIAS, int R = 1>
__attribute__((always_inline)) inline void dot_rest(int64_t r, const float* xq, int64_t image, const int32_t* off,
                                                    const float* dy, int64_t ldj, int64_t P, int64_t m, double* acc,
                                                    int64_t lda, double* bacc) {
    if constexpr (R < DotTiles<S>::kTaps) {
        if (r == R) return dot_tile<S, KB, R, BIAS>(xq, image, off, dy, ldj, P, m, acc, lda, bacc);
        dot_rest<S, KB, BIAS, R + 1>(r, xq, image, off, dy, ldj, P, m, acc, lda, bacc);
    }
}

// KB filters over every tap: tiles of TB taps, then the rest as one tile. With bacc, one tile also
// sums the filters' rows of dY into bacc: the rest's (free registers), or when the taps fill whole
// tiles the last one, split into TB - 1 taps and 1. Each tap's arithmetic is the same in any tile,
// so dW's bits do not depend on the tiling.
template <class S, int KB>
__attribute__((always_inline)) inline void dot_filters(const float* xq, int64_t image, const int32_t* off,
                                                       int64_t taps, const float* dy, int64_t ldj, int64_t P,
                                                       int64_t m, double* acc, double* bacc) {
    constexpr int TB = DotTiles<S>::kTaps;
    const int64_t rest = taps % TB, whole = taps - rest - (bacc && rest == 0 ? TB : 0);
    int64_t t = 0;
    for (; t < whole; t += TB) dot_tile<S, KB, TB>(xq, image, off + t, dy, ldj, P, m, acc + t, taps);
    if (rest && bacc) dot_rest<S, KB, true>(rest, xq, image, off + t, dy, ldj, P, m, acc + t, taps, bacc);
    else if (rest) dot_rest<S, KB, false>(rest, xq, image, off + t, dy, ldj, P, m, acc + t, taps, nullptr);
    else if (bacc) {
        if constexpr (TB > 1) {
            dot_tile<S, KB, TB - 1, true>(xq, image, off + t, dy, ldj, P, m, acc + t, taps, bacc);
            t += TB - 1;
            dot_tile<S, KB, 1>(xq, image, off + t, dy, ldj, P, m, acc + t, taps);
        } else {
            dot_tile<S, KB, 1, true>(xq, image, off + t, dy, ldj, P, m, acc + t, taps, bacc);
        }
    }
}

// acc[k*taps + t] += the filter gradient of one group over m images: xq the packed images
// (`image` floats apart, at the group's first channel), dy the group's first filter of the first
// image (images ldj floats apart), kg filters; bacc (else null) [kg] += their rows of dY summed.
XYLEM_KERNEL_LEVELS(void, dot_group,
                    (const float* xq, int64_t image, const int32_t* off, int64_t taps, const float* dy, int64_t ldj,
                     int64_t P, int64_t kg, int64_t m, double* acc, double* bacc),
                    (xq, image, off, taps, dy, ldj, P, kg, m, acc, bacc)) {
    constexpr int KB = DotTiles<S>::kFilters;
    auto b = [bacc](int64_t k) { return bacc ? bacc + k : nullptr; };
    int64_t k = 0;
    for (; k + KB <= kg; k += KB)
        dot_filters<S, KB>(xq, image, off, taps, dy + k * P, ldj, P, m, acc + k * taps, b(k));
    for (; k + 2 <= kg; k += 2) dot_filters<S, 2>(xq, image, off, taps, dy + k * P, ldj, P, m, acc + k * taps, b(k));
    for (; k < kg; ++k) dot_filters<S, 1>(xq, image, off, taps, dy + k * P, ldj, P, m, acc + k * taps, b(k));
}

// Images per chunk: at least 1024 positions, so that each lane sums 64 products or more in float
// before the lanes go into float64 (LeNet's conv1, 576 positions: 2 images). A tile's rows of dY
// for the chunk then stay in L1 across its blocks of taps (4 filters x 2 images x 576 floats);
// 2048 positions ran no faster.
int64_t dot_chunk(const ConvShape& v) { return std::clamp<int64_t>((1024 + v.oh * v.ow - 1) / (v.oh * v.ow), 1, 32); }

// Taken for filters of at most this many taps per group, measured on one core of the AVX-512
// Xeon at both FMA levels (ms per call, direct kernel -> this one): ResNet's 3x3 stem (9 taps)
// 1.17 -> 0.78 at avx512, 1.44 -> 0.88 at avx2; LeNet's conv1 (25) 0.62 -> 0.33 and 0.72 -> 0.44.
// With many taps the direct kernel wins (ResNet's 16->16 3x3 on 28x28, 144 taps: 3.6 against
// 4.3; LeNet's conv2, 500: 1.43 against 1.95): its pass transposing dY is then shared by many
// taps, while each of this kernel's blocks of filters reads every window of the chunk again.
constexpr int64_t kMaxTaps = 64;

}  // namespace

bool dot_bwd_filter_fits(const ConvShape& v) {
    return direct_multiply_fma() && v.cg * v.r * v.s <= kMaxTaps &&
           (v.oh * v.ow) % direct_filter_lanes() == 0 &&  // the level's vector width
           direct_unrolled_fits(v);
}

void dot_bwd_filter(const ConvShape& v, const float* x, const float* dy, float beta, float* dw, float* db,
                    Arena& scratch) {
    const DirectLayout l = direct_unrolled_layout(v, scratch);
    const int64_t P = v.oh * v.ow, m = dot_chunk(v);
    const int64_t size = v.g * v.kg * l.taps;  // one slice's sums: [G][kg][taps], dW's order
    const double flops = 2.0 * static_cast<double>(v.n) * v.k * P * l.taps;
    int64_t slices = shape_slices(flops, kConvMinSplitFlops, v.n);
    while (slices > 1 && static_cast<double>(slices) * size * sizeof(double) > kConvMaxPartialBytes) slices /= 2;
    double* acc = scratch.alloc<double>(slices * size);
    std::fill_n(acc, slices * size, 0.0);
    // The bias gradient: one tile of each block of filters also sums the dY it loads (dot_filters),
    // per slice, the slices added in order. Read by itself, dY took bias_grad 64 us a call on
    // LeNet's conv1, a quarter of its backward pass; this way, 9 us more than dW alone.
    double* bacc = db ? scratch.alloc<double>(slices * v.k) : nullptr;
    if (db) std::fill_n(bacc, slices * v.k, 0.0);
    std::array<float*, kMaxSplit> xq{};
    for (int w = 0; w < slice_workers(slices); ++w) xq[w] = scratch.alloc<float>(m * l.image);
    run_slices(v.n, slices, [&](int64_t lo, int64_t hi, int w, int64_t s) {
        for (int64_t n0 = lo; n0 < hi; n0 += m) {
            const int64_t mm = std::min(m, hi - n0);
            for (int64_t j = 0; j < mm; ++j) direct_pack_image(v, l, x + (n0 + j) * v.c * v.hw(), xq[w] + j * l.image);
            for (int64_t g = 0; g < v.g; ++g)
                dot_group(xq[w] + g * v.cg * l.chan, l.image, l.off, l.taps, dy + (n0 * v.k + g * v.kg) * P, v.k * P,
                          P, v.kg, mm, acc + s * size + g * v.kg * l.taps, db ? bacc + s * v.k + g * v.kg : nullptr);
        }
    });
    for (int64_t i = 0; i < size; ++i) {
        double sum = acc[i];
        for (int64_t s = 1; s < slices; ++s) sum += acc[s * size + i];
        dw[i] = beta == 0.0f ? static_cast<float>(sum) : static_cast<float>(beta * dw[i] + sum);
    }
    for (int64_t k = 0; db && k < v.k; ++k) {
        double sum = bacc[k];
        for (int64_t s = 1; s < slices; ++s) sum += bacc[s * v.k + k];
        db[k] = beta == 0.0f ? static_cast<float>(sum) : static_cast<float>(beta * db[k] + sum);
    }
}

}  // namespace xylem::native
