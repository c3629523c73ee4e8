// Winograd F(4x4, 3x3) (Lavin and Gray, 2016; the interpolation points 0, +-1, +-2 and infinity):
// each image's padded input is cut into 6x6 tiles overlapping by 2 (one per 4x4 outputs), each
// tile d becomes V = B^T d B, each filter g becomes U = G g G^T (6x6 both), and element xi of the
// 36 is one product M[xi] = U[xi] (K x C) * V[xi] (C x tiles) by the direct kernels' register-
// tiled multiply (ops/conv_direct.cpp) over the tiles of a chunk of images; the outputs are
// A^T M A. 2.25 multiply-adds per output and channel pair, against F(2x2)'s 4 and the direct
// kernels' 9; the transforms read and write fewer values per output than F(2x2)'s (36 per 16
// outputs, not 16 per 4). The price is rounding: the transforms scale by up to 8 (A) and 1/24
// (G), so the error is a few times F(2x2)'s (tests/ops/native_conv_paths_test.cpp checks both
// against float64). Each output's arithmetic is fixed by the shape (not by the chunk, the vector
// width or the thread count): the same bits for any XYLEM_NUM_THREADS.
//
// Layout. The padded plane is kept as its 16 phases (row and column index mod 4), each
// (th + 1) x we with we = tw + 1, so value (r, j) of tile (a, b) sits at
// (a + r/4)*we + b + j/4 of phase (r%4, j%4): a row of tiles reads unit-stride windows. V and M
// hold the tiles compactly (q = a*tw + b: no computed-and-dropped column), so the transforms go
// row of tiles by row, in vectors of 4, 8 or 16 tiles by the row's length (ResNet-18's 28x28 maps
// have rows of 7 tiles, its 14x14 maps rows of 4); where rows are too short to fill vectors, the
// tiles go as one flat run of th*we with the extra column computed and dropped (tq = we).
#include "ops/conv_winograd_f4.h"

#include <algorithm>
#include <climits>
#include <cstring>

#include "simd.h"
#include "ops/conv_winograd_kit.h"

namespace xylem::native {

namespace {

using namespace winograd;
using Plan = Winograd4Plan;

// src[o, o + 4) with zeros outside [0, n), for n >= 4, without reading outside [0, n): one load
// and a shuffle with zeros at the row's ends.
__attribute__((always_inline)) inline V4 load_part(const float* __restrict src, int64_t n, int64_t o) {
    if (o >= 0 && o + 4 <= n) return load<V4, V4u>(src + o);
    const V4 z{0.0f, 0.0f, 0.0f, 0.0f};
    if (o + 4 <= 0 || o >= n) return z;
    if (o < 0) {  // zeros, then src[0 ..]
        const V4 l = load<V4, V4u>(src);
        switch (-o) {
        case 1: return __builtin_shuffle(z, l, I4{0, 4, 5, 6});
        case 2: return __builtin_shuffle(z, l, I4{0, 1, 4, 5});
        default: return __builtin_shuffle(z, l, I4{0, 1, 2, 4});
        }
    }
    const V4 r = load<V4, V4u>(src + n - 4);  // .. src[n - 1], then zeros
    switch (n - o) {
    case 1: return __builtin_shuffle(r, z, I4{3, 4, 4, 4});
    case 2: return __builtin_shuffle(r, z, I4{2, 3, 4, 4});
    default: return __builtin_shuffle(r, z, I4{1, 2, 3, 4});
    }
}

// out[k][at + c] = src[4c + k - pad] for c < cols (rounded up to 4: the zeros past a plane row go
// into the next row's first columns, which the row 4 below writes next or which stay zero), 0
// where that index is outside [0, n): a row, zero-padded, split into its 4 column phases, 16
// floats at a time by shuffles straight from the row. (A copy into a padded row first made each
// load wait for the copy's stores: a third of the transform.)
__attribute__((always_inline)) inline void deinterleave4(const float* __restrict src, int64_t n, int64_t pad,
                                                         int64_t cols, float* __restrict const out[4], int64_t at) {
    for (int64_t c = 0; c < cols; c += 4) {
        const int64_t x0 = 4 * c - pad;  // source of out[0][at + c]
        V4 a0, a1, a2, a3;
        if (x0 >= 0 && x0 + 16 <= n) {
            a0 = load<V4, V4u>(src + x0), a1 = load<V4, V4u>(src + x0 + 4), a2 = load<V4, V4u>(src + x0 + 8),
            a3 = load<V4, V4u>(src + x0 + 12);
        } else if (n >= 4) {
            a0 = load_part(src, n, x0), a1 = load_part(src, n, x0 + 4), a2 = load_part(src, n, x0 + 8),
            a3 = load_part(src, n, x0 + 12);
        } else {
            float v[16];
            for (int64_t i = 0; i < 16; ++i) v[i] = x0 + i >= 0 && x0 + i < n ? src[x0 + i] : 0.0f;
            a0 = load<V4, V4u>(v), a1 = load<V4, V4u>(v + 4), a2 = load<V4, V4u>(v + 8), a3 = load<V4, V4u>(v + 12);
        }
        transpose4(a0, a1, a2, a3);
        store<V4, V4u>(out[0] + at + c, a0);
        store<V4, V4u>(out[1] + at + c, a1);
        store<V4, V4u>(out[2] + at + c, a2);
        store<V4, V4u>(out[3] + at + c, a3);
    }
}

// out[4c + j] = s[j][at + c] for 4c + j < n (the inverse): blocks of 16 by shuffles (the last one
// overlapping the ones before where n is a multiple of 4), the rest value by value.
__attribute__((always_inline)) inline void interleave4(const float* const s[4], int64_t at, int64_t n,
                                                       float* __restrict out) {
    auto block = [&](int64_t x) {  // out[x, x + 16), x a multiple of 4
        const int64_t c = at + x / 4;
        V4 a0 = load<V4, V4u>(s[0] + c), a1 = load<V4, V4u>(s[1] + c), a2 = load<V4, V4u>(s[2] + c),
           a3 = load<V4, V4u>(s[3] + c);
        transpose4(a0, a1, a2, a3);
        store<V4, V4u>(out + x, a0);
        store<V4, V4u>(out + x + 4, a1);
        store<V4, V4u>(out + x + 8, a2);
        store<V4, V4u>(out + x + 12, a3);
    };
    int64_t x = 0;
    for (; x + 16 <= n; x += 16) block(x);
    if (x < n && n >= 16) {
        block((n - 16) / 4 * 4);
        x = (n - 16) / 4 * 4 + 16;
    }
    for (; x < n; ++x) out[x] = s[x % 4][at + x / 4];
}

// t = B^T x for one column of 6:
//   B^T = [4 0 -5 0 1 0; 0 -4 -4 1 1 0; 0 4 -4 -1 1 0; 0 -2 -1 2 1 0; 0 2 -1 -2 1 0; 0 4 0 -5 0 1]
template <class V>
__attribute__((always_inline)) inline void bt6(const V (&x)[6], V (&t)[6]) {
    const V a = x[4] - 4.0f * x[2], b = x[3] - 4.0f * x[1];
    const V c = x[4] - x[2], e = 2.0f * (x[3] - x[1]);
    t[0] = 4.0f * x[0] - 5.0f * x[2] + x[4];
    t[1] = a + b;
    t[2] = a - b;
    t[3] = c + e;
    t[4] = c - e;
    t[5] = 4.0f * x[1] - 5.0f * x[3] + x[5];
}

// y = A^T m for one column of 6: A^T = [1 1 1 1 1 0; 0 1 -1 2 -2 0; 0 1 1 4 4 0; 0 1 -1 8 -8 1]
template <class V>
__attribute__((always_inline)) inline void at6(const V (&m)[6], V (&y)[4]) {
    const V s = m[1] + m[2], d = m[1] - m[2], s2 = m[3] + m[4], d2 = m[3] - m[4];
    y[0] = m[0] + s + s2;
    y[1] = d + 2.0f * d2;
    y[2] = s + 4.0f * s2;
    y[3] = d + 8.0f * d2 + m[5];
}

// The tiles per vector both transforms take at level S: the level's own for a flat run or rows of
// more than half of it, else 8 or 4, the widest that rows of tiles fill more than half of.
template <class S>
__attribute__((always_inline)) inline int tile_lanes(const Plan& p) {
    const bool flat = p.tq == p.we;
    if (S::L >= 16 && (flat || p.tw > 8)) return 16;
    if (S::L >= 8 && (flat || p.tw > 4)) return 8;
    return 4;
}

// V for one channel's tiles, row of tiles by row: out[xi*step + a*tw + b] for b < tw, in vectors
// of VL tiles (the last of a row spills into the next row's, which it writes next; the last
// row's into the next image's or the slack of the row).
template <class V, class Vu, int VL>
__attribute__((always_inline)) inline void input_tiles(const Plan& p, const float* __restrict planes,
                                                       float* __restrict out, int64_t step) {
    const bool flat = p.tq == p.we;  // one run of th*we tiles, the extra column's included
    const int64_t rows = flat ? 1 : p.th, len = flat ? p.th * p.we : p.tw;
    for (int64_t a = 0; a < rows; ++a)
        for (int64_t b0 = 0; b0 < len; b0 += VL) {
            const int64_t q = a * p.we + b0;
            V t[6][6];  // B^T d, column by column
            #pragma GCC unroll 6
            for (int j = 0; j < 6; ++j) {
                V col[6];
                #pragma GCC unroll 6
                for (int r = 0; r < 6; ++r)
                    col[r] = load<V, Vu>(planes + ((r % 4) * 4 + j % 4) * p.phase + q + (r / 4) * p.we + j / 4);
                V tc[6];
                bt6(col, tc);
                #pragma GCC unroll 6
                for (int i = 0; i < 6; ++i) t[i][j] = tc[i];
            }
            float* o = out + a * p.tq + b0;
            #pragma GCC unroll 6
            for (int i = 0; i < 6; ++i) {  // (B^T d) B
                V row[6];
                bt6(t[i], row);
                #pragma GCC unroll 6
                for (int j = 0; j < 6; ++j) store<V, Vu>(o + (i * 6 + j) * step, row[j]);
            }
        }
}

// v[(xi*cin + c)*ld + col0 + q] = (B^T d B)[xi] of tile q for each of the image's channels.
// planes: 16 phase planes, zero where the padding falls (every channel writes the same places);
XYLEM_KERNEL_LEVELS(void, input_transform4,
                    (const Plan& p, const float* __restrict x, int64_t col0, float* __restrict planes,
                     float* __restrict v),
                    (p, x, col0, planes, v)) {
    const int64_t step = p.cin * p.ld;
    for (int64_t c = 0; c < p.cin; ++c) {
        for (int64_t i = 0; i < p.h; ++i) {  // padded row y = i + ph: phase row y%4, plane row y/4
            const int64_t y = i + p.ph;
            float* const out[4] = {planes + (y % 4 * 4) * p.phase, planes + (y % 4 * 4 + 1) * p.phase,
                                   planes + (y % 4 * 4 + 2) * p.phase, planes + (y % 4 * 4 + 3) * p.phase};
            deinterleave4(x + (c * p.h + i) * p.w, p.w, p.pw, p.we, out, y / 4 * p.we);
        }
        float* out = v + c * p.ld + col0;
        const int lanes = tile_lanes<S>(p);
        if (lanes == S::L) input_tiles<typename S::V, typename S::Vu, S::L>(p, planes, out, step);
        else if (lanes == 8) input_tiles<V8, V8u, 8>(p, planes, out, step);
        else input_tiles<V4, V4u, 4>(p, planes, out, step);
    }
}

// rows[(i*4 + j)*rs + q] = (A^T M A)[i][j] of tile q for one filter, row of tiles by row.
template <class V, class Vu, int VL>
__attribute__((always_inline)) inline void output_tiles(const Plan& p, const float* __restrict mk, int64_t step,
                                                        float* __restrict rows, int64_t rs) {
    const bool flat = p.tq == p.we;
    const int64_t nrows = flat ? 1 : p.th, len = flat ? p.th * p.we : p.tw;
    for (int64_t a = 0; a < nrows; ++a)
        for (int64_t b0 = 0; b0 < len; b0 += VL) {
            const int64_t q = a * p.tq + b0;
            V t[4][6];  // A^T M, column by column
            #pragma GCC unroll 6
            for (int j = 0; j < 6; ++j) {
                V col[6];
                #pragma GCC unroll 6
                for (int i = 0; i < 6; ++i) col[i] = load<V, Vu>(mk + (i * 6 + j) * step + q);
                V tc[4];
                at6(col, tc);
                #pragma GCC unroll 6
                for (int i = 0; i < 4; ++i) t[i][j] = tc[i];
            }
            #pragma GCC unroll 6
            for (int i = 0; i < 4; ++i) {  // (A^T M) A
                V y[4];
                at6(t[i], y);
                #pragma GCC unroll 6
                for (int j = 0; j < 4; ++j) store<V, Vu>(rows + (i * 4 + j) * rs + q, y[j]);
            }
        }
}

// y[k][4a + i][4b + j] = (A^T M A)[i][j] of tile (a, b) for the outputs inside oh x ow, from
// m[(xi*kout + k)*ld + col0 + q], then the epilogue channel by channel (in L1: y is one image).
// rows: 16 rows of tiles + a vector.
XYLEM_KERNEL_LEVELS(void, output_transform4,
                    (const Plan& p, const float* __restrict m, int64_t col0, float* __restrict rows,
                     const ConvEpilogue& e, float* __restrict y),
                    (p, m, col0, rows, e, y)) {
    const int64_t plane = p.oh * p.ow;
    const int64_t step = p.kout * p.ld, rs = p.tiles + kAlign;
    for (int64_t k = 0; k < p.kout; ++k) {
        const float* mk = m + k * p.ld + col0;
        const int lanes = tile_lanes<S>(p);
        if (lanes == S::L) output_tiles<typename S::V, typename S::Vu, S::L>(p, mk, step, rows, rs);
        else if (lanes == 8) output_tiles<V8, V8u, 8>(p, mk, step, rows, rs);
        else output_tiles<V4, V4u, 4>(p, mk, step, rows, rs);
        for (int64_t a = 0; a < p.th; ++a)
            for (int64_t i = 0; i < 4 && 4 * a + i < p.oh; ++i) {
                const float* const s[4] = {rows + (i * 4) * rs, rows + (i * 4 + 1) * rs, rows + (i * 4 + 2) * rs,
                                           rows + (i * 4 + 3) * rs};
                interleave4(s, a * p.tq, p.ow, y + (k * p.oh + 4 * a + i) * p.ow);
            }
        e.finish(k, y + k * plane, plane, y + k * plane, plane, 1, plane);
    }
}

// U for F(4x4), g = filters[k][c] (winograd::transform_filters), with
//   G = [1/4 0 0; -1/6 -1/6 -1/6; -1/6 1/6 -1/6; 1/24 1/12 1/6; 1/24 -1/12 1/6; 0 0 1].
// (A lambda, not a function: transform_filters inlines it into its loops over the filters; as a
// function pointer it was a call per value, 20% of ResNet-18's 256-channel 14x14 pass.)
constexpr auto g6 = [](int i, float a, float b, float d) {
    switch (i) {
    case 0: return 0.25f * a;
    case 1: return (a + b + d) * (-1.0f / 6.0f);
    case 2: return (a - b + d) * (-1.0f / 6.0f);
    case 3: return a * (1.0f / 24.0f) + b * (1.0f / 12.0f) + d * (1.0f / 6.0f);
    case 4: return a * (1.0f / 24.0f) - b * (1.0f / 12.0f) + d * (1.0f / 6.0f);
    default: return d;
    }
};

void filter_transform4(const Plan& p, const float* filters, float* u) {
    transform_filters<6>(p.cin, p.kout, [&](int64_t k, int64_t c) { return filters + (k * p.cin + c) * 9; }, g6, u);
}

// Rows of tiles shorter than a quarter of a vector, or of 2 tiles or fewer, run as one flat run of
// th*we tiles, the extra column's included: it computes we/tw more products, where rows of tiles
// would leave most lanes empty. One core of the 2-vCPU AVX-512 Xeon, batch 16, ms per call, flat
// against rows: ResNet-18's 128 channels on 28x28 (7 tiles a row) 15.6 / 15.2 against 15.5 / 14.8,
// 256 on 14x14 (4) 20.0 against 19.2 / 18.6. Its 512 on 7x7 (2) by rows: 44.8 / 43.3, against
// F(2x2)'s 27.0 / 26.3; flat, 7x7 drops too many outputs (kMaxWaste) and F(2x2) takes it.
XYLEM_KERNEL_LEVELS(int, winograd4_lanes, (), ()) { return S::L; }

// Channels in and out at least: below, the transforms dominate and F(2x2)'s, on four times as many
// tiles but all in registers, are no slower. One core, avx512, ms per call, F(4x4) against F(2x2):
// ResNet-18 at batch 16, 64 channels on 56x56 14.6-16.2 against 20.9-21.1, 128 on 28x28 14.8-15.6
// against 17.9-18.4, 256 on 14x14 18.6-19.2 against 20.6-20.7; ResNet-20 at batch 128, 16 on 28x28
// 2.9-3.2 against 2.8-3.0, 32 on 14x14 2.8-2.9 against 2.7-3.0. At avx2 64 on 56x56 21.2 against
// 33.7, 256 on 14x14 22.9 against 28.8; at baseline 41.5 against 71.6 and 47.6 against 77.7.
constexpr int64_t kMinChannels = 64;
constexpr int64_t kMinOutputs = 1024;  // per pass: F(2x2)'s 256 tiles
constexpr int64_t kMinChunks = 2;
// Computed outputs per kept one at most (ResNet's 14x14 and 7x7 maps: 1.31).
constexpr double kMaxWaste = 1.5;
// A chunk's V and M at most, and its columns at least (2 threads, avx512, ms per call at batch 16:
// ResNet-18's 128 channels on 28x28 7.5-7.7 in chunks of 1 image against 8.0-8.3 in chunks of 3;
// its 256 on 14x14 in chunks of 1 image, 16 columns, 14.4-15.6, of 4 10.1, of 8 10.5).
constexpr int64_t kChunkBytes = 1536 * 1024;
constexpr int64_t kMinChunkCols = 64;

}  // namespace

Winograd4Plan winograd4_plan(int64_t n, int64_t cin, int64_t h, int64_t w, int64_t kout, int64_t ph, int64_t pw) {
    Plan p{n, cin, h, w, kout, ph, pw, h + 2 * ph - 2, w + 2 * pw - 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0};
    p.th = (p.oh + 3) / 4, p.tw = (p.ow + 3) / 4;
    p.we = p.tw + 1;
    p.tq = 4 * p.tw < winograd4_lanes() || p.tw <= 2 ? p.we : p.tw;
    p.tiles = p.th * p.tq;
    // Rows th + 1 (a tile's last two rows reach the next plane row), a row's last block of 4
    // columns past we, and the widest vector read past a row's last tile.
    p.phase = (p.th + 1) * p.we + 4 + 2 * kAlign;
    // Two chunks at least where there are two images (one chunk runs on one CPU).
    // Images per chunk: enough for 128 tiles, as F(2x2), but V and M within kChunkBytes (with 36
    // rows of each they overflow a core's L2 long before F(2x2)'s 16 do) and at least 64 columns.
    const int64_t fit = kChunkBytes / std::max<int64_t>(1, 36 * (cin + kout) * p.tiles * int64_t{sizeof(float)});
    const int64_t want = std::max(std::min((kChunkTiles + p.tiles - 1) / std::max<int64_t>(p.tiles, 1), fit),
                                  (kMinChunkCols + p.tiles - 1) / std::max<int64_t>(p.tiles, 1));
    p.chunk = std::clamp<int64_t>(want, 1, std::clamp<int64_t>((n + 1) / 2, 1, 16));
    p.cols = p.chunk * p.tiles;
    p.qpad = round_up(p.cols, kAlign);
    p.ld = p.qpad + kAlign;
    return p;
}

bool winograd4_takes(const Winograd4Plan& p) {
    if (p.oh < 1 || p.ow < 1 || p.ph > 2 || p.pw > 2) return false;
    if (36 * std::max(p.cin, p.kout) * p.ld >= INT_MAX / 2 || 16 * p.phase >= INT_MAX / 2) return false;
    return p.cin >= kMinChannels && p.kout >= kMinChannels && 16 * p.n * p.tiles >= kMinOutputs &&
           (p.n + p.chunk - 1) / p.chunk >= kMinChunks &&
           16.0 * static_cast<double>(p.tiles) <= kMaxWaste * static_cast<double>(p.oh * p.ow);
}

void winograd4_pass(const Winograd4Plan& p, const float* x, const float* filters, const ConvEpilogue& e, float* y,
                    Arena& scratch) {
    float* u = scratch.alloc<float>(36 * p.cin * p.kout);
    filter_transform4(p, filters, u);
    const Chunks c{p.n, p.cin, p.kout, p.oh, p.ow, p.cin * p.h * p.w, p.tiles, p.chunk, p.ld, p.qpad, 36,
                   16 * p.phase, 16 * (p.tiles + kAlign)};
    run_chunks(
        c, x, u, y, scratch,
        [&](const float* xj, int64_t col0, float* planes, float* v) { input_transform4(p, xj, col0, planes, v); },
        [&](const float* m, int64_t col0, float* rows, float* yj) { output_transform4(p, m, col0, rows, e, yj); });
}

}  // namespace xylem::native
