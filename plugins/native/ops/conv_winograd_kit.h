// What both Winograd passes share (ops/conv_winograd.cpp: F(2x2, 3x3); ops/conv_winograd_f4.cpp:
// F(4x4, 3x3)): unaligned vector loads and stores of any width, 4-float shuffles, per-worker
// scratch cut from one arena allocation, and the loop over chunks of images.
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <type_traits>
#include <utility>

#include "ops/conv_direct.h"

namespace xylem::native::winograd {

constexpr int64_t kAlign = 16;       // tile columns per chunk are padded to this (the widest vector)
constexpr int64_t kChunkTiles = 128;  // tiles per product at least (images per chunk follow)
inline int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

// A vector of T (a level's vector type, 4 or 8 floats, or float) at p, unaligned.
template <class T, class Tu>
__attribute__((always_inline)) inline T load(const float* p) {
    return *reinterpret_cast<const Tu*>(p);
}
template <class T, class Tu>
__attribute__((always_inline)) inline void store(float* p, T x) {
    *reinterpret_cast<Tu*>(p) = x;
}

// 8 and 4 floats (two SSE registers, or one, at the baseline level), for the (de)interleaving
// copies and the narrow rows of tiles.
using V8 = float __attribute__((vector_size(32)));
using V8u = float __attribute__((vector_size(32), aligned(4), may_alias));
using I8 = int __attribute__((vector_size(32)));
using V4 = float __attribute__((vector_size(16)));
using V4u = float __attribute__((vector_size(16), aligned(4), may_alias));
using I4 = int __attribute__((vector_size(16)));

// The 4x4 transpose of a0..a3 (rows) in place: a_m[k] becomes a_k[m].
__attribute__((always_inline)) inline void transpose4(V4& a0, V4& a1, V4& a2, V4& a3) {
    const V4 t0 = __builtin_shuffle(a0, a1, I4{0, 4, 1, 5}), t1 = __builtin_shuffle(a2, a3, I4{0, 4, 1, 5}),
             t2 = __builtin_shuffle(a0, a1, I4{2, 6, 3, 7}), t3 = __builtin_shuffle(a2, a3, I4{2, 6, 3, 7});
    a0 = __builtin_shuffle(t0, t1, I4{0, 1, 4, 5});
    a1 = __builtin_shuffle(t0, t1, I4{2, 3, 6, 7});
    a2 = __builtin_shuffle(t2, t3, I4{0, 1, 4, 5});
    a3 = __builtin_shuffle(t2, t3, I4{2, 3, 6, 7});
}

// Per-worker buffers of the given sizes (floats), each worker's list[i][w], cut from one
// allocation: the arena takes a bounded number of blocks per op (a cold one gives each its own).
template <size_t N>
void carve(Arena& scratch, int workers, const int64_t (&sizes)[N], std::array<std::array<float*, kMaxSplit>*, N> list) {
    int64_t per = 0;
    for (int64_t size : sizes) per += round_up(size, kAlign);
    float* base = scratch.alloc<float>(workers * per);
    for (int w = 0; w < workers; ++w)
        for (size_t i = 0; i < N; ++i) {
            (*list[i])[static_cast<size_t>(w)] = base;
            base += round_up(sizes[i], kAlign);
        }
}

// f(integral_constant<int, 0>) ... f(integral_constant<int, N - 1>): in each call the index is a
// constant.
template <int N, class F>
__attribute__((always_inline)) inline void unrolled(const F& f) {
    [&]<int... I>(std::integer_sequence<int, I...>) { (f(std::integral_constant<int, I>{}), ...); }(
        std::make_integer_sequence<int, N>{});
}

// u[(xi*cin + c)*kout + k] = (G g G^T)[xi], xi = i*Alpha + j, for g = filter(k, c) (3x3,
// row-major), row i of G applied to (a, b, d) by g_row(i, a, b, d): F(2x2)'s 4 rows, F(4x4)'s 6.
// Filters in blocks of kBlock along k, channel by channel inside a block: each of the Alpha^2
// rows written gets kBlock consecutive floats and the block's filters stay in cache between
// channels. (Filter by filter, a 512 -> 512 filter's 4M values went to addresses 2 KB apart: a
// 7x7 call at batch 1 took 45 ms instead of 15, one core, avx512.) Blocks are shared out among
// the workers (each writes only its own filters' U: the same bits): 16 MB for a 512 -> 512 conv
// in F(2x2), which took ResNet-18's 7x7 layers at batch 16 23 ms a call on the calling thread.
// Within a block, channel by channel, the block's filters are gathered into g[tap][filter] and
// transformed as loops over the filters, which the compiler vectorizes (one filter at a time
// was 28% of that call on one core).
template <int Alpha, class Filter, class GRow>
void transform_filters(int64_t cin, int64_t kout, const Filter& filter, const GRow& g_row, float* u) {
    constexpr int64_t kBlock = 64;
    const int64_t blocks = (kout + kBlock - 1) / kBlock;
    const int workers = split_workers(double{Alpha * Alpha} * static_cast<double>(cin * kout), kMinSplitElements, blocks);
    parallel_items(blocks, workers, [&](int, int64_t block) {
        const int64_t k0 = block * kBlock, kn = std::min(kBlock, kout - k0);
        alignas(64) float g[9][kBlock];
        alignas(64) float t[3][kBlock];  // one row of G g
        const int64_t next = cin * kout;  // from xi to xi + 1
        for (int64_t c = 0; c < cin; ++c) {
            for (int64_t k = 0; k < kn; ++k) {
                const float* f = filter(k0 + k, c);
                for (int e = 0; e < 9; ++e) g[e][k] = f[e];
            }
            // The rows of G as constants (g_row's switch folded away), so that the loops over
            // the filters vectorize: with i and j variables each value went through the switch's
            // jump table, one scalar at a time (a quarter of ResNet-18's 256-channel 14x14 pass
            // at batch 16). The same arithmetic per value, so the same bits.
            unrolled<Alpha>([&](auto i) {
                for (int j = 0; j < 3; ++j)
                    for (int64_t k = 0; k < kn; ++k) t[j][k] = g_row(i(), g[j][k], g[3 + j][k], g[6 + j][k]);
                float* row = u + (i() * Alpha * cin + c) * kout + k0;  // xi = i*Alpha + j, j = 0
                unrolled<Alpha>([&](auto j) {
                    for (int64_t k = 0; k < kn; ++k) row[j() * next + k] = g_row(j(), t[0][k], t[1][k], t[2][k]);
                });
            });
        }
    });
}

// What a pass's chunk loop needs to know of its plan: `elements` products per tile (16 or 36),
// per-worker scratch for the transforms (`plane_floats` zeroed once, `rows_floats`), and V's and
// M's rows of ld floats (qpad of them computed).
struct Chunks {
    int64_t n, cin, kout, oh, ow, in_image;  // in_image: floats of one input image
    int64_t tiles, chunk, ld, qpad, elements, plane_floats, rows_floats;
};

// The pass over every image: chunks of images handed out one at a time to the workers; each
// chunk's images transformed into V (input(x_j, column, plane, v)), the `elements` products
// M[xi] = U[xi] V[xi] by the direct kernels' multiply, each image transformed back
// (output(m, column, rows, y_j): with the conv's epilogue, channel by channel while in L1).
template <class Input, class Output>
void run_chunks(const Chunks& p, const float* x, const float* u, float* y, Arena& scratch,
                const Input& input, const Output& output) {
    const int64_t chunks = (p.n + p.chunk - 1) / p.chunk;
    const double flops = 2.0 * static_cast<double>(p.elements * p.n * p.tiles) * p.cin * p.kout;
    const int workers = split_workers(flops, kConvMinSplitFlops, chunks);
    int32_t* off = scratch.alloc<int32_t>(p.cin);
    for (int64_t c = 0; c < p.cin; ++c) off[c] = static_cast<int32_t>(c * p.ld);
    std::array<float*, kMaxSplit> plane{}, rows{}, v{}, m{};
    const int64_t sizes[4] = {p.plane_floats, p.rows_floats, p.elements * p.cin * p.ld, p.elements * p.kout * p.ld};
    carve(scratch, workers, sizes, {&plane, &rows, &v, &m});
    for (int w = 0; w < workers; ++w) {
        std::fill_n(plane[w], p.plane_floats, 0.0f);
        std::fill_n(v[w], p.elements * p.cin * p.ld, 0.0f);  // the columns past the tiles: finite, dropped
        std::fill_n(m[w], p.elements * p.kout * p.ld, 0.0f);
    }
    const int64_t out_plane = p.oh * p.ow, out_image = p.kout * out_plane;
    parallel_items(chunks, workers, [&](int w, int64_t ch) {
        const int64_t n0 = ch * p.chunk, n1 = std::min(p.n, n0 + p.chunk);
        for (int64_t j = n0; j < n1; ++j) input(x + j * p.in_image, (j - n0) * p.tiles, plane[w], v[w]);
        for (int64_t xi = 0; xi < p.elements; ++xi)
            direct_multiply(v[w] + xi * p.cin * p.ld, off, p.cin, u + xi * p.cin * p.kout, p.kout, p.qpad,
                            m[w] + xi * p.kout * p.ld, p.ld);
        for (int64_t j = n0; j < n1; ++j) {
            float* yj = y + j * out_image;
            output(m[w], (j - n0) * p.tiles, rows[w], yj);
        }
    });
}

}  // namespace xylem::native::winograd
