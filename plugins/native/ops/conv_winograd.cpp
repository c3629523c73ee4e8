// Winograd F(2x2, 3x3) for stride-1 undilated 3x3 convolutions (Lavin and Gray, 2016): the forward
// pass and the data gradient (the forward pass of dY with the filters flipped), 16 multiply-adds
// per 2x2 outputs and channel where the direct kernels spend 36.
//
// Each image's input, padded, is cut into 4x4 tiles overlapping by 2 (one per 2x2 outputs); each
// tile d becomes V = B^T d B, each filter g becomes U = G g G^T (4x4 both), and element xi of
// the 16 is one product M[xi] = U[xi] (K x C) * V[xi] (C x tiles), run by the direct kernels'
// register-tiled multiply (ops/conv_direct.cpp) over the tiles of a chunk of images. The outputs
// are A^T M A. The transforms are additions and halvings, each output's arithmetic fixed by the
// shape (not by the chunk, the tile or the thread count), so the bits are the same for any
// XYLEM_NUM_THREADS; against the direct kernels they differ by float rounding (within the ops'
// tolerance: tests/ops/native_conv_paths_test.cpp checks both against float64).
#include "ops/conv_winograd.h"

#include <algorithm>
#include <array>
#include <climits>

#include "simd.h"
#include "ops/conv_direct.h"
#include "ops/conv_winograd_f4.h"
#include "ops/conv_winograd_kit.h"

namespace xylem::native {

namespace {

using namespace winograd;

// One Winograd pass: `cin` planes h x w per image, padded by (ph, pw), into `kout` planes
// oh x ow with oh = h + 2*ph - 2 (and ow alike). The padded plane (2*th + 2 rows, 2*tw + 2
// columns) is kept as its four phases (row and column parity), each (th + 1) x we with
// we = tw + 1, so that value (r, j) of tile (a, b) sits at q + (r/2)*we + j/2 of phase
// (r%2, j%2), q = a*we + b: every tile's values are shifted unit-stride windows, and a vector
// holds consecutive q. Each row of tiles carries one extra column (b = tw), computed and dropped
// (as the direct kernels do with the columns past each output row), except where the last tile
// of a row may read the next row's first columns instead of its own right padding: the values
// it needs there are zero on both sides (padding of 2 or more; or padding 1 with an odd output
// width, whose last tile's second column is dropped). ResNet's 7x7: 16 tiles, not 20.
struct Plan {
    int64_t n, cin, h, w, kout, ph, pw, oh, ow;
    int64_t th, tw, we, tiles;  // we: tw or tw + 1; tiles: th*we positions q per image
    int64_t phase;              // floats per phase plane: (th + 1)*we, plus a vector of zeros
    int64_t chunk, cols, qpad, ld;  // images per chunk; chunk*tiles; cols rounded up to kAlign;
                                    // row length of V and M (one vector more: the last image's spill)
};

Plan make_plan(int64_t n, int64_t cin, int64_t h, int64_t w, int64_t kout, int64_t ph, int64_t pw) {
    Plan p{n, cin, h, w, kout, ph, pw, h + 2 * ph - 2, w + 2 * pw - 2, 0, 0, 0, 0, 0, 0, 0, 0, 0};
    p.th = (p.oh + 1) / 2, p.tw = (p.ow + 1) / 2;
    const bool wrap = p.pw >= 2 || (p.pw == 1 && p.ow % 2 == 1);
    p.we = wrap ? p.tw : p.tw + 1, p.tiles = p.th * p.we;
    p.phase = (p.th + 1) * p.we + 2 * kAlign;
    // No more images per chunk than the batch has: a chunk's products run over all its columns.
    p.chunk = std::clamp<int64_t>((kChunkTiles + p.tiles - 1) / p.tiles, 1, std::clamp<int64_t>(n, 1, 16));
    p.cols = p.chunk * p.tiles;
    p.qpad = round_up(p.cols, kAlign);
    p.ld = p.qpad + kAlign;
    return p;
}

bool plan_fits(const Plan& p) {
    return p.oh >= 1 && p.ow >= 1 && 16 * std::max(p.cin, p.kout) * p.ld < INT_MAX / 2 && 4 * p.phase < INT_MAX / 2;
}


// s0[i] = src[2i], s1[i] = src[2i + 1] for 2i (+ 1) < n: blocks of 16 floats (8 for rows of 8 to
// 15: ResNet's 14x14 maps), the last one overlapping the one before from an even start (it
// rewrites the same values), an odd n's last float alone.
__attribute__((always_inline)) inline void deinterleave(const float* __restrict src, int64_t n, float* __restrict s0,
                                                        float* __restrict s1) {
    auto block16 = [&](int64_t i) {  // src[2i, 2i + 16)
        const V8 a = *reinterpret_cast<const V8u*>(src + 2 * i), b = *reinterpret_cast<const V8u*>(src + 2 * i + 8);
        *reinterpret_cast<V8u*>(s0 + i) = __builtin_shuffle(a, b, I8{0, 2, 4, 6, 8, 10, 12, 14});
        *reinterpret_cast<V8u*>(s1 + i) = __builtin_shuffle(a, b, I8{1, 3, 5, 7, 9, 11, 13, 15});
    };
    auto block8 = [&](int64_t i) {  // src[2i, 2i + 8)
        const V4 a = *reinterpret_cast<const V4u*>(src + 2 * i), b = *reinterpret_cast<const V4u*>(src + 2 * i + 4);
        *reinterpret_cast<V4u*>(s0 + i) = __builtin_shuffle(a, b, I4{0, 2, 4, 6});
        *reinterpret_cast<V4u*>(s1 + i) = __builtin_shuffle(a, b, I4{1, 3, 5, 7});
    };
    if (n >= 16) {
        for (int64_t i = 0; 2 * i + 16 <= n; i += 8) block16(i);
        block16((n - 16 - n % 2) / 2);
    } else if (n >= 8) {
        block8(0);
        block8((n - 8 - n % 2) / 2);
    } else {
        for (int64_t i = 0; 2 * i + 1 < n; ++i) s0[i] = src[2 * i], s1[i] = src[2 * i + 1];
    }
    if (n % 2) s0[n / 2] = src[n - 1];
}

// out[2i] = s0[i], out[2i + 1] = s1[i] for 2i (+ 1) < n, in blocks as deinterleave.
__attribute__((always_inline)) inline void interleave(const float* __restrict s0, const float* __restrict s1, int64_t n,
                                                      float* __restrict out) {
    auto block16 = [&](int64_t i) {  // out[2i, 2i + 16)
        const V8 a = *reinterpret_cast<const V8u*>(s0 + i), b = *reinterpret_cast<const V8u*>(s1 + i);
        *reinterpret_cast<V8u*>(out + 2 * i) = __builtin_shuffle(a, b, I8{0, 8, 1, 9, 2, 10, 3, 11});
        *reinterpret_cast<V8u*>(out + 2 * i + 8) = __builtin_shuffle(a, b, I8{4, 12, 5, 13, 6, 14, 7, 15});
    };
    auto block8 = [&](int64_t i) {  // out[2i, 2i + 8)
        const V4 a = *reinterpret_cast<const V4u*>(s0 + i), b = *reinterpret_cast<const V4u*>(s1 + i);
        *reinterpret_cast<V4u*>(out + 2 * i) = __builtin_shuffle(a, b, I4{0, 4, 1, 5});
        *reinterpret_cast<V4u*>(out + 2 * i + 4) = __builtin_shuffle(a, b, I4{2, 6, 3, 7});
    };
    if (n >= 16) {
        for (int64_t i = 0; 2 * i + 16 <= n; i += 8) block16(i);
        block16((n - 16 - n % 2) / 2);
    } else if (n >= 8) {
        block8(0);
        block8((n - 8 - n % 2) / 2);
    } else {
        for (int64_t i = 0; 2 * i + 1 < n; ++i) out[2 * i] = s0[i], out[2 * i + 1] = s1[i];
    }
    if (n % 2) out[n - 1] = s0[n / 2];
}

// v[(xi*cin + c)*ld + col0 + q] = (B^T d B)[xi] for q < tiles, rounded up to whole vectors (the
// rest spills into the next image's columns, which it writes next, or the row's last vector):
// each of the image's channels. scratch: 4 phase planes, zero where the padding falls (every
// channel writes the same places).
XYLEM_KERNEL_LEVELS(void, input_transform,
                    (const Plan& p, const float* __restrict x, int64_t col0, float* __restrict scratch,
                     float* __restrict v),
                    (p, x, col0, scratch, v)) {
    using V = typename S::V;
    using Vu = typename S::Vu;
    const int64_t we = p.we, step = p.cin * p.ld;  // step: from xi to xi + 1
    for (int64_t c = 0; c < p.cin; ++c) {
        for (int64_t i = 0; i < p.h; ++i) {  // padded row i + ph, column j + pw
            const float* src = x + (c * p.h + i) * p.w;
            const int64_t y = i + p.ph;
            float* even = scratch + (y % 2 * 2) * p.phase + y / 2 * we;  // phase (y%2, 0)
            float* odd = even + p.phase;                                // phase (y%2, 1)
            // source column j lands in column (j + pw)/2 of phase (j + pw)%2
            if (p.pw % 2 == 0) deinterleave(src, p.w, even + p.pw / 2, odd + p.pw / 2);
            else deinterleave(src, p.w, odd + p.pw / 2, even + (p.pw + 1) / 2);
        }
        const float *p00 = scratch, *p01 = scratch + p.phase, *p10 = scratch + 2 * p.phase,
                    *p11 = scratch + 3 * p.phase;
        float* out = v + c * p.ld + col0;
        for (int64_t q = 0; q < p.tiles; q += S::L) {
            // d[r][j] = phase (r%2, j%2) at q + (r/2)*we + j/2
            const V d[4][4] = {
                {load<V, Vu>(p00 + q), load<V, Vu>(p01 + q), load<V, Vu>(p00 + q + 1), load<V, Vu>(p01 + q + 1)},
                {load<V, Vu>(p10 + q), load<V, Vu>(p11 + q), load<V, Vu>(p10 + q + 1), load<V, Vu>(p11 + q + 1)},
                {load<V, Vu>(p00 + q + we), load<V, Vu>(p01 + q + we), load<V, Vu>(p00 + q + we + 1),
                 load<V, Vu>(p01 + q + we + 1)},
                {load<V, Vu>(p10 + q + we), load<V, Vu>(p11 + q + we), load<V, Vu>(p10 + q + we + 1),
                 load<V, Vu>(p11 + q + we + 1)}};
            V t[4][4];  // B^T d
            for (int j = 0; j < 4; ++j) {
                t[0][j] = d[0][j] - d[2][j];
                t[1][j] = d[1][j] + d[2][j];
                t[2][j] = d[2][j] - d[1][j];
                t[3][j] = d[1][j] - d[3][j];
            }
            for (int i = 0; i < 4; ++i) {  // (B^T d) B
                float* o = out + i * 4 * step + q;
                store<V, Vu>(o, t[i][0] - t[i][2]);
                store<V, Vu>(o + step, t[i][1] + t[i][2]);
                store<V, Vu>(o + 2 * step, t[i][2] - t[i][1]);
                store<V, Vu>(o + 3 * step, t[i][1] - t[i][3]);
            }
        }
    }
}

// y[k][2a + i][2b + j] = (A^T M A)[i][j] of tile (a, b), for the outputs inside oh x ow, from
// m[(xi*kout + k)*ld + col0 + q], then the epilogue channel by channel (in L1: y is one image).
// scratch: 4 rows of tiles + a vector (by i and j).
XYLEM_KERNEL_LEVELS(void, output_transform,
                    (const Plan& p, const float* __restrict m, int64_t col0, float* __restrict scratch,
                     const ConvEpilogue& e, float* __restrict y),
                    (p, m, col0, scratch, e, y)) {
    const int64_t plane = p.oh * p.ow;
    using V = typename S::V;
    using Vu = typename S::Vu;
    const int64_t step = p.kout * p.ld, rs = p.tiles + S::L;  // rs: scratch rows
    for (int64_t k = 0; k < p.kout; ++k) {
        const float* mk = m + k * p.ld + col0;
        for (int64_t q = 0; q < p.tiles; q += S::L) {
            V r[2][4];  // A^T M
            for (int j = 0; j < 4; ++j) {
                const V m0 = load<V, Vu>(mk + j * step + q), m1 = load<V, Vu>(mk + (4 + j) * step + q),
                        m2 = load<V, Vu>(mk + (8 + j) * step + q), m3 = load<V, Vu>(mk + (12 + j) * step + q);
                r[0][j] = m0 + m1 + m2;
                r[1][j] = m1 - m2 - m3;
            }
            for (int i = 0; i < 2; ++i) {  // (A^T M) A
                store<V, Vu>(scratch + 2 * i * rs + q, r[i][0] + r[i][1] + r[i][2]);
                store<V, Vu>(scratch + (2 * i + 1) * rs + q, r[i][1] - r[i][2] - r[i][3]);
            }
        }
        for (int64_t a = 0; a < p.th; ++a)
            for (int64_t i = 0; i < 2 && 2 * a + i < p.oh; ++i) {
                const float *ye = scratch + 2 * i * rs + a * p.we, *yo = ye + rs;
                interleave(ye, yo, p.ow, y + (k * p.oh + 2 * a + i) * p.ow);
            }
        e.finish(k, y + k * plane, plane, y + k * plane, plane, 1, plane);
    }
}

// z[(xi*kout + k)*ld + col0 + q] = (A y A^T)[xi] for the 2x2 block y of dY at tile q (zero where
// it lies past oh x ow): the filter gradient's transform of dY, the adjoint of output_transform.
// dY's channels are split into their four phases (row and column parity), th x we each: y's four
// values are the phases at q. scratch: 4 phase planes, zero where no dY value lands (every
// channel writes the same places).
XYLEM_KERNEL_LEVELS(void, grad_transform,
                    (const Plan& p, const float* __restrict dy, int64_t col0, float* __restrict scratch,
                     float* __restrict z),
                    (p, dy, col0, scratch, z)) {
    using V = typename S::V;
    using Vu = typename S::Vu;
    const int64_t step = p.kout * p.ld;
    for (int64_t k = 0; k < p.kout; ++k) {
        for (int64_t i = 0; i < p.oh; ++i) {
            float* even = scratch + (i % 2 * 2) * p.phase + i / 2 * p.we;
            deinterleave(dy + (k * p.oh + i) * p.ow, p.ow, even, even + p.phase);
        }
        const float *p00 = scratch, *p01 = scratch + p.phase, *p10 = scratch + 2 * p.phase,
                    *p11 = scratch + 3 * p.phase;
        float* out = z + k * p.ld + col0;
        for (int64_t q = 0; q < p.tiles; q += S::L) {
            const V y00 = load<V, Vu>(p00 + q), y01 = load<V, Vu>(p01 + q), y10 = load<V, Vu>(p10 + q),
                    y11 = load<V, Vu>(p11 + q);
            const V t[4][2] = {{y00, y01}, {y00 + y10, y01 + y11}, {y00 - y10, y01 - y11}, {-y10, -y11}};  // A y
            for (int i = 0; i < 4; ++i) {  // (A y) A^T
                float* o = out + i * 4 * step + q;
                store<V, Vu>(o, t[i][0]);
                store<V, Vu>(o + step, t[i][0] + t[i][1]);
                store<V, Vu>(o + 2 * step, t[i][0] - t[i][1]);
                store<V, Vu>(o + 3 * step, -t[i][1]);
            }
        }
    }
}

// U for F(2x2): G = [1 0 0; 1/2 1/2 1/2; 1/2 -1/2 1/2; 0 0 1] (winograd::transform_filters).
template <class F>
void filter_transform(const Plan& p, F filter, float* u) {
    transform_filters<4>(p.cin, p.kout, filter, [](int i, float a, float b, float d) {
        return i == 0 ? a : i == 1 ? 0.5f * (a + b + d) : i == 2 ? 0.5f * (a - b + d) : d;
    }, u);
}

// The pass over every image (winograd::run_chunks).
void run(const Plan& p, const float* x, const float* u, const ConvEpilogue& e, float* y, Arena& scratch) {
    const Chunks c{p.n, p.cin, p.kout, p.oh, p.ow, p.cin * p.h * p.w, p.tiles, p.chunk, p.ld, p.qpad, 16,
                   4 * p.phase, 4 * (p.tiles + kAlign)};
    run_chunks(
        c, x, u, y, scratch,
        [&](const float* xj, int64_t col0, float* plane, float* v) { input_transform(p, xj, col0, plane, v); },
        [&](const float* m, int64_t col0, float* rows, float* yj) { output_transform(p, m, col0, rows, e, yj); });
}

// How many more positions than the outputs' a pass may compute (4 per tile, with the column past
// each row where it is kept) and still beat the direct kernels, per level (one core of the
// 2-vCPU AVX-512 Xeon, ResNet-20's 3x3 convs at batch 128, forward / data gradient in ms, CPU
// time): avx512 1.4 (28x28, 1.07: 3.0-3.3 / 3.0-3.2 against 3.9-4.3 / 4.0-4.3; 14x14, 1.14:
// 3.2-3.3 / 3.2-3.4 against 3.8-4.2 / 3.9-4.1; 7x7, 16 tiles, 1.31: 2.6-2.8 / 2.7-2.8 against
// 3.9-4.4 / 3.9-4.3; with the extra column, 20 tiles and 1.63, it lost: 4.5 against 4.2); avx2
// and baseline 2 (7x7 at avx2: 4.2 / 4.2 against 6.8 / 6.4).
XYLEM_KERNEL_LEVELS(double, winograd_waste_limit, (), ()) { return S::L == 16 ? 1.4 : 2.0; }

// The filter gradient by Winograd won only at avx2 (one core, ResNet's 28x28 / 14x14 / 7x7 in
// ms: 4.4 / 5.3 / 4.8 against the direct kernels' 5.8 / 6.0 / 6.3); at avx512 it tied (4.2 /
// 3.8 / 3.2 against 4.4 / 3.7 / 3.3), at baseline it lost (19.6 / 16.9 / 13.5 against 15.8 /
// 14.7 / 14.5).
XYLEM_KERNEL_LEVELS(bool, winograd_filter_level, (), ()) { return S::L == 8; }

bool shape_takes(const ConvShape& v) {
    return v.r == 3 && v.s == 3 && v.sh == 1 && v.sw == 1 && v.dh == 1 && v.dw == 1 && v.g == 1 && v.ph <= 2 &&
           v.pw <= 2;
}

// The transforms cost per channel in and out, the products per pair: with few channels the
// transforms dominate (ResNet's stem, 1 -> 16 channels: 1.36 against 0.55-0.6 ms at avx512).
constexpr int64_t kMinChannels = 8;

// The filters are transformed on every call (16 values per 3x3 filter, written and read again: 16 MB
// for a 512 -> 512 conv), which only enough tiles pay for. One core, avx512, batch 1, direct vs
// Winograd in ms: ResNet-18's 512 channels on 7x7 (16 tiles) 5.9 vs 16.2, 256 on 14x14 (49) 3.3 vs
// 4.5, 128 on 28x28 (196) 1.7 vs 1.9, 64 on 56x56 (784) 1.5 vs 1.5; at batch 16 on 7x7 (256
// tiles) 69 vs 33. ResNet-20's training batches (128 images) have 2048 tiles or more.
constexpr int64_t kMinTiles = 256;
// And two chunks at least: one chunk runs on one CPU, where the direct kernels share a single image
// out by blocks of filters (at batch 1 Winograd gained at most 1.05x on one core: 56x56 above).
constexpr int64_t kMinChunks = 2;

bool plan_takes(const Plan& p) {
    return plan_fits(p) && p.cin >= kMinChannels && p.kout >= kMinChannels && p.n * p.tiles >= kMinTiles &&
           (p.n + p.chunk - 1) / p.chunk >= kMinChunks &&
           4.0 * static_cast<double>(p.tiles) <= winograd_waste_limit() * static_cast<double>(p.oh * p.ow);
}

// F(4x4) where it takes the shape and computes fewer products than F(2x2) (36 per 16 outputs
// against 16 per 4, tiles that cross the map's edge included), else F(2x2) where it takes it.
enum class Tiles { kNone, kF2, kF4 };
Tiles choose_tiles(int64_t n, int64_t cin, int64_t h, int64_t w, int64_t kout, int64_t ph, int64_t pw) {
    const Plan p2 = make_plan(n, cin, h, w, kout, ph, pw);
    const Winograd4Plan p4 = winograd4_plan(n, cin, h, w, kout, ph, pw);
    const bool f2 = plan_takes(p2), f4 = winograd4_takes(p4);
    if (f4 && (!f2 || 36 * p4.tiles < 16 * p2.tiles)) return Tiles::kF4;
    return f2 ? Tiles::kF2 : Tiles::kNone;
}

}  // namespace

bool winograd_fwd_fits(const ConvShape& v) {
    return shape_takes(v) && choose_tiles(v.n, v.c, v.h, v.w, v.k, v.ph, v.pw) != Tiles::kNone;
}

bool winograd_bwd_filter_fits(const ConvShape& v) {
    return winograd_filter_level() && shape_takes(v) && plan_takes(make_plan(v.n, v.c, v.h, v.w, v.k, v.ph, v.pw));
}

bool winograd_bwd_data_fits(const ConvShape& v) {
    return shape_takes(v) && choose_tiles(v.n, v.k, v.oh, v.ow, v.c, 2 - v.ph, 2 - v.pw) != Tiles::kNone;
}

void winograd_fwd(const ConvShape& v, const float* x, const float* w, const ConvEpilogue& e, float* y,
                  Arena& scratch) {
    if (choose_tiles(v.n, v.c, v.h, v.w, v.k, v.ph, v.pw) == Tiles::kF4)
        return winograd4_pass(winograd4_plan(v.n, v.c, v.h, v.w, v.k, v.ph, v.pw), x, w, e, y, scratch);
    const Plan p = make_plan(v.n, v.c, v.h, v.w, v.k, v.ph, v.pw);
    float* u = scratch.alloc<float>(16 * p.cin * p.kout);
    filter_transform(p, [&](int64_t k, int64_t c) { return w + (k * v.c + c) * 9; }, u);
    run(p, x, u, e, y, scratch);
}

// dX is the stride-1 conv of dY, padded by 2 - p, with each filter turned 180 degrees and the
// roles of K and C swapped.
void winograd_bwd_data(const ConvShape& v, const float* dy, const float* w, float* dx, Arena& scratch) {
    const Plan p = make_plan(v.n, v.k, v.oh, v.ow, v.c, 2 - v.ph, 2 - v.pw);
    float* flipped = scratch.alloc<float>(v.c * v.k * 9);  // [c][k][3][3], turned
    constexpr int64_t kBlock = 64;  // filters at a time, as filter_transform: both sides stay in cache
    for (int64_t k0 = 0; k0 < v.k; k0 += kBlock)
        for (int64_t c = 0; c < v.c; ++c)
            for (int64_t k = k0; k < std::min(v.k, k0 + kBlock); ++k)
                for (int64_t e = 0; e < 9; ++e) flipped[(c * v.k + k) * 9 + e] = w[(k * v.c + c) * 9 + 8 - e];
    if (choose_tiles(v.n, v.k, v.oh, v.ow, v.c, 2 - v.ph, 2 - v.pw) == Tiles::kF4)
        return winograd4_pass(winograd4_plan(v.n, v.k, v.oh, v.ow, v.c, 2 - v.ph, 2 - v.pw), dy, flipped,
                              ConvEpilogue{}, dx, scratch);
    float* u = scratch.alloc<float>(16 * p.cin * p.kout);
    filter_transform(p, [&](int64_t c, int64_t k) { return flipped + (c * v.k + k) * 9; }, u);
    run(p, dy, u, ConvEpilogue{}, dx, scratch);
}

// dW = G^T dU G with dU[xi] (K x C) = sum over the tiles of every image of Z[xi] V[xi]^T, Z the
// transformed dY and V the transformed X: the adjoint of the forward pass. Slices of chunks fixed
// by the shape (shape_slices); each chunk's products are float sums over its tiles (the direct
// filter gradient's register tiles, Z transposed to [tile][filter]) added into the slice's
// float64 sums, the slices added in order: the same bits for any thread count.
void winograd_bwd_filter(const ConvShape& v, const float* x, const float* dy, float beta, float* dw, Arena& scratch) {
    const Plan p = make_plan(v.n, v.c, v.h, v.w, v.k, v.ph, v.pw);
    const int64_t ldk = round_up(p.kout, direct_filter_lanes()), size = 16 * p.cin * ldk;
    const int64_t chunks = (p.n + p.chunk - 1) / p.chunk;
    const double flops = 2.0 * 16.0 * static_cast<double>(p.n * p.tiles) * p.cin * p.kout;
    const int64_t slices = shape_slices(flops, kConvMinSplitFlops, chunks);
    double* acc = scratch.alloc<double>(slices * size);
    std::fill_n(acc, slices * size, 0.0);
    int32_t* off = scratch.alloc<int32_t>(p.cin);
    for (int64_t c = 0; c < p.cin; ++c) off[c] = static_cast<int32_t>(c * p.ld);
    std::array<float*, kMaxSplit> xplane{}, yplane{}, vt{}, zt{}, ztt{};
    const int64_t sizes[5] = {4 * p.phase, 4 * p.phase, 16 * p.cin * p.ld, 16 * p.kout * p.ld, p.ld * ldk};
    carve(scratch, slice_workers(slices), sizes, {&xplane, &yplane, &vt, &zt, &ztt});
    for (int w = 0; w < slice_workers(slices); ++w) {
        std::fill_n(xplane[w], 4 * p.phase, 0.0f);
        std::fill_n(yplane[w], 4 * p.phase, 0.0f);
        std::fill_n(vt[w], 16 * p.cin * p.ld, 0.0f);
        std::fill_n(zt[w], 16 * p.kout * p.ld, 0.0f);
    }
    const int64_t in_image = p.cin * p.h * p.w, out_image = p.kout * p.oh * p.ow;
    run_slices(chunks, slices, [&](int64_t lo, int64_t hi, int w, int64_t sl) {
        for (int64_t ch = lo; ch < hi; ++ch) {
            const int64_t n0 = ch * p.chunk, n1 = std::min(p.n, n0 + p.chunk), cols = (n1 - n0) * p.tiles;
            for (int64_t j = n0; j < n1; ++j) {
                input_transform(p, x + j * in_image, (j - n0) * p.tiles, xplane[w], vt[w]);
                grad_transform(p, dy + j * out_image, (j - n0) * p.tiles, yplane[w], zt[w]);
            }
            for (int64_t xi = 0; xi < 16; ++xi) {
                direct_transpose(zt[w] + xi * p.kout * p.ld, p.kout, p.ld, ldk, ztt[w]);  // rows ld apart
                direct_filter_multiply(vt[w] + xi * p.cin * p.ld, off, p.cin, ztt[w], ldk, cols,
                                       acc + sl * size + xi * p.cin * ldk);
            }
        }
    });
    for (int64_t s = 1; s < slices; ++s)
        for (int64_t i = 0; i < size; ++i) acc[i] += acc[s * size + i];
    // dW[k][c][r][s] = sum over i, j of G[i][r] dU[i*4 + j][k][c] G[j][s]
    constexpr double G[4][3] = {{1, 0, 0}, {0.5, 0.5, 0.5}, {0.5, -0.5, 0.5}, {0, 0, 1}};
    for (int64_t k = 0; k < p.kout; ++k)
        for (int64_t c = 0; c < p.cin; ++c)
            for (int r = 0; r < 3; ++r)
                for (int q = 0; q < 3; ++q) {
                    double sum = 0.0;
                    for (int i = 0; i < 4; ++i)
                        for (int j = 0; j < 4; ++j)
                            sum += G[i][r] * acc[((i * 4 + j) * p.cin + c) * ldk + k] * G[j][q];
                    float& out = dw[((k * v.c + c) * 3 + r) * 3 + q];
                    out = beta == 0.0f ? static_cast<float>(sum) : static_cast<float>(beta * out + sum);
                }
}

}  // namespace xylem::native
