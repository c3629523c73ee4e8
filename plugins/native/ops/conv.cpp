// CONV2D_FWD / BWD_DATA / BWD_FILTER, NCHW f32. Whole-input and 1x1 stride-1 kernels go straight
// to sgemm (MXNet #2011); the rest runs the depthwise kernel of ops/conv_depthwise.cpp (forward,
// groups of one input channel), the direct kernels of ops/conv_direct.cpp, or, for the
// shapes those leave (a data gradient whose flipped form would read mostly padding, as LeNet's
// unpadded 5x5; sizes past their int32 offsets), im2col over a chunk of images, then one big
// sgemm per group.

#include <algorithm>
#include <array>
#include <climits>
#include <cstring>

#include "blas.h"
#include "native.h"
#include "ops/conv_depthwise.h"
#include "ops/conv_direct.h"
#include "ops/conv_winograd.h"
#include "simd.h"

namespace xylem::native {

namespace {

using ll = long long;  // for printf

// Scratch floats per im2col chunk (columns + GEMM output): about 4 LeNet conv2 images, so the columns
// are still in L2 when the GEMM reads them; larger GEMMs gained nothing measurable, and 1 image per
// chunk was up to 10% slower.
constexpr int64_t kChunkFloats = 160 * 1024;
// Planes smaller than this are batched rather than handled image by image: a 1x1 conv on 2x2 maps
// ran 2x faster through the batched im2col path (a transposing copy) than as one GEMM per image;
// from 7x7 on, one GEMM per image (no copy at all) is faster.
constexpr int64_t kMinPlane = 32;

using plugin_kit::DimStr;

struct Conv : plugin_kit::Conv2dShape {
    int64_t crs() const { return cg * r * s; }  // rows of one group's column matrix
};

// The kit's shape rules, then the BLAS int limit that every GEMM size and leading dimension below
// is bounded by.
Conv conv_shape(const OpArgs& a, const xylem_conv2d_attrs& at, const Tensor& x, const char* xn, const Tensor& f,
                const char* fn, const Tensor& y, const char* yn) {
    const Conv v{plugin_kit::conv2d_shape(a, at, x, xn, f, fn, y, yn)};
    if (v.n > INT_MAX || v.c * v.hw() > INT_MAX || v.k * v.p() > INT_MAX || v.c * v.r * v.s > INT_MAX)
        a.fail("%s %s / %s %s exceed the BLAS limit of %d", xn, DimStr(x).s, yn, DimStr(y).s, INT_MAX);
    return v;
}

enum class Path {
    kLinear,     // the kernel covers the unpadded input: the output is 1x1 and the conv is a Linear layer
    kPointwise,  // 1x1, stride 1, no padding: Y[n] = W x X[n] per image
    kIm2col,
};

// The kit decides the GEMM cases (MXNet #2011); small pointwise planes take the batched im2col path.
Path choose_path(const Conv& v) {
    switch (plugin_kit::conv_gemm_case(v)) {
    case plugin_kit::ConvGemm::linear: return Path::kLinear;
    case plugin_kit::ConvGemm::pointwise: return v.hw() >= kMinPlane ? Path::kPointwise : Path::kIm2col;
    case plugin_kit::ConvGemm::none: break;
    }
    return Path::kIm2col;
}

// Row-major C = beta*C + op(A)*op(B); sizes were checked against INT_MAX by conv_shape. On the
// calling thread: the plugin's sgemm, spread over the pool in blocks fixed by the shape.
void gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, const float* b, int64_t ldb,
          float beta, float* c, int64_t ldc) {
    sgemm(ta, tb, m, n, k, 1.0f, a, lda, b, ldb, beta, c, ldc);
}

// The same as one single-threaded sgemm call, for a pool worker's slice (already on a worker:
// sgemm would only cut it into blocks to run on the same thread): the plugin's wide kernel where
// sgemm would take it, else OpenBLAS.
void gemm_in_worker(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, const float* b,
                    int64_t ldb, float beta, float* c, int64_t ldc) {
    if (use_wide_kernel(m, n, k)) return own_sgemm(ta, tb, m, n, k, 1.0f, a, lda, b, ldb, beta, c, ldc);
    cblas_sgemm_rm(ta, tb, static_cast<int>(m), static_cast<int>(n), static_cast<int>(k), 1.0f, a,
                   static_cast<int>(lda), b, static_cast<int>(ldb), beta, c, static_cast<int>(ldc));
}

// Images per im2col chunk for per_image scratch floats each.
int64_t chunk_images(const Conv& v, int64_t per_image) {
    int64_t nb = kChunkFloats / std::max<int64_t>(per_image, 1);
    nb = std::min({nb, v.n, INT_MAX / v.p()});
    return std::max<int64_t>(nb, 1);
}

// The outputs [lo, hi) (of n) whose input index o*stride + off lies inside [0, size).
inline void valid_range(int64_t off, int64_t stride, int64_t size, int64_t n, int64_t& lo, int64_t& hi) {
    lo = off >= 0 ? 0 : (-off + stride - 1) / stride;
    hi = off > size - 1 ? 0 : (size - 1 - off) / stride + 1;
    lo = std::min(lo, n);
    hi = std::max(lo, std::min(hi, n));
}

// Output rows are short (OW floats: 8 or 24 in LeNet), so copies go in whole 8-float pieces
// rather than a memcpy call or a vector loop with a scalar tail per row.
constexpr int64_t kPiece = 8;

// out[0..n) = in[0..n); the last piece overlaps the one before it.
inline void copy_run(float* __restrict out, const float* __restrict in, int64_t n) {
    if (n < kPiece) {
        for (int64_t o = 0; o < n; ++o) out[o] = in[o];
        return;
    }
    int64_t o = 0;
    for (; o + kPiece <= n; o += kPiece) std::memcpy(out + o, in + o, kPiece * sizeof(float));
    if (o < n) std::memcpy(out + n - kPiece, in + n - kPiece, kPiece * sizeof(float));
}

// One column-matrix row segment of n: out[o] = in[o*sw + off] for o in [lo, hi), zero elsewhere.
inline void gather_row(float* __restrict out, const float* __restrict in, int64_t off, int64_t sw, int64_t lo,
                       int64_t hi, int64_t n) {
    for (int64_t o = 0; o < lo; ++o) out[o] = 0.0f;
    if (sw == 1) copy_run(out + lo, in + lo + off, hi - lo);
    else for (int64_t o = lo; o < hi; ++o) out[o] = in[o * sw + off];
    for (int64_t o = hi; o < n; ++o) out[o] = 0.0f;
}

// col[(c*R + r)*S + s][j*P + oh*OW + ow] = x[j][c][oh*sh - ph + r*dh][ow*sw - pw + s*dw] (0 in the padding)
// for the m images at x; all groups at once (group g owns rows [g*crs, (g+1)*crs)).
XYLEM_KERNEL(void, im2col,
             (const Conv& v, const float* __restrict x, int64_t m, float* __restrict col),
             (v, x, m, col)) {
    const int64_t P = v.p(), ld = m * P, OW = v.ow;
    for (int64_t c = 0; c < v.c; ++c)
        for (int64_t r = 0; r < v.r; ++r) {
            const int64_t hoff = r * v.dh - v.ph;
            int64_t hlo, hhi;  // output rows that read an input row
            valid_range(hoff, v.sh, v.h, v.oh, hlo, hhi);
            for (int64_t s = 0; s < v.s; ++s) {
                float* row = col + ((c * v.r + r) * v.s + s) * ld;
                const int64_t woff = s * v.dw - v.pw;
                int64_t lo, hi;
                valid_range(woff, v.sw, v.w, OW, lo, hi);
                for (int64_t j = 0; j < m; ++j) {
                    const float* plane = x + (j * v.c + c) * v.hw();
                    float* blk = row + j * P;
                    std::fill(blk, blk + hlo * OW, 0.0f);
                    for (int64_t oh = hlo; oh < hhi; ++oh)
                        gather_row(blk + oh * OW, plane + (oh * v.sh + hoff) * v.w, woff, v.sw, lo, hi, OW);
                    std::fill(blk + hhi * OW, blk + P, 0.0f);
                }
            }
        }
}

using V8 = float __attribute__((vector_size(32)));  // two SSE registers at the baseline level
using V8u = float __attribute__((vector_size(32), aligned(4), may_alias));  // for unaligned loads

// The adjoint of im2col: dx[j][c][ih][iw] += every column entry that im2col read from there.
// Unit-stride rows add in pieces of 8: LeNet's conv2 adds 8-float rows (4,000 of them an image),
// where the vectorised loop's set-up for each cost more than the adds.
XYLEM_KERNEL(void, col2im,
             (const Conv& v, const float* __restrict col, int64_t m, float* __restrict dx),
             (v, col, m, dx)) {
    const int64_t P = v.p(), ld = m * P, OW = v.ow;
    for (int64_t c = 0; c < v.c; ++c)
        for (int64_t r = 0; r < v.r; ++r) {
            const int64_t hoff = r * v.dh - v.ph;
            int64_t hlo, hhi;
            valid_range(hoff, v.sh, v.h, v.oh, hlo, hhi);
            for (int64_t s = 0; s < v.s; ++s) {
                const float* row = col + ((c * v.r + r) * v.s + s) * ld;
                const int64_t woff = s * v.dw - v.pw;
                int64_t lo, hi;
                valid_range(woff, v.sw, v.w, OW, lo, hi);
                for (int64_t j = 0; j < m; ++j) {
                    float* plane = dx + (j * v.c + c) * v.hw();
                    for (int64_t oh = hlo; oh < hhi; ++oh) {
                        const float* in = row + j * P + oh * OW;
                        float* out = plane + (oh * v.sh + hoff) * v.w;
                        if (v.sw == 1) {
                            int64_t o = lo;
                            for (; o + 8 <= hi; o += 8) {
                                V8u* d = reinterpret_cast<V8u*>(out + o + woff);
                                *d = *d + *reinterpret_cast<const V8u*>(in + o);
                            }
                            for (; o < hi; ++o) out[o + woff] += in[o];
                        } else
                            for (int64_t o = lo; o < hi; ++o) out[o * v.sw + woff] += in[o];
                    }
                }
            }
        }
}

// dyt[k][j*P + p] = dy[j][k][p] for m images: the [K, m*P] matrix the batched GEMMs read.
void gather_dy(const Conv& v, const float* dy, int64_t m, float* dyt) {
    const int64_t P = v.p(), ld = m * P;
    for (int64_t j = 0; j < m; ++j)
        for (int64_t k = 0; k < v.k; ++k) std::memcpy(dyt + k * ld + j * P, dy + (j * v.k + k) * P, P * sizeof(float));
}

void scale_filters(float* dw, int64_t n, float beta) {
    if (beta == 0.0f) std::fill_n(dw, n, 0.0f);  // beta = 0 does not read dW (it may hold NaN)
    else if (beta != 1.0f) for (int64_t i = 0; i < n; ++i) dw[i] *= beta;
}

// ---- small filter gradients ----------------------------------------------------------------
// dW = dY x col^T with a tiny output (conv1: 20x25) and a long reduction (N*OH*OW): OpenBLAS splits
// only the output between its threads, and ran 3x slower with two than with one. This kernel runs
// on the calling thread at single-thread sgemm speed and sums into double.
constexpr int64_t kSmallFilter = 1024;  // outputs per group up to which the kernel is used


// acc[(i+ii)*n + j+jj] += sum_t a[(i+ii)*lda + t] * b[(j+jj)*ldb + t] for a TM x TN tile, t < len.
template <int TM, int TN>
__attribute__((always_inline)) inline void dot_tile(int64_t i, int64_t j, int64_t n, int64_t len, const float* a,
                                                    int64_t lda, const float* b, int64_t ldb, double* acc) {
    V8 lane[TM][TN] = {};
    const int64_t tv = len / 8 * 8;
    for (int64_t t = 0; t < tv; t += 8) {
        V8 av[TM], bv[TN];
        for (int ii = 0; ii < TM; ++ii) av[ii] = *reinterpret_cast<const V8u*>(a + (i + ii) * lda + t);
        for (int jj = 0; jj < TN; ++jj) bv[jj] = *reinterpret_cast<const V8u*>(b + (j + jj) * ldb + t);
        for (int ii = 0; ii < TM; ++ii)
            for (int jj = 0; jj < TN; ++jj) lane[ii][jj] += av[ii] * bv[jj];
    }
    for (int ii = 0; ii < TM; ++ii)
        for (int jj = 0; jj < TN; ++jj) {
            double sum = 0.0;
            for (int l = 0; l < 8; ++l) sum += lane[ii][jj][l];
            for (int64_t t = tv; t < len; ++t) sum += a[(i + ii) * lda + t] * b[(j + jj) * ldb + t];
            acc[(i + ii) * n + j + jj] += sum;
        }
}

// acc[i*n + j] += sum_t a[i*lda + t] * b[j*ldb + t] for i < m, j < n, t < len.
XYLEM_KERNEL(void, dot_accumulate,
             (int64_t m, int64_t n, int64_t len, const float* a, int64_t lda, const float* b, int64_t ldb,
              double* acc),
             (m, n, len, a, lda, b, ldb, acc)) {
    constexpr int64_t kBlock = 4096;  // float lanes flush to double per block; the block's rows stay in L2
    for (int64_t t0 = 0; t0 < len; t0 += kBlock) {
        const int64_t bl = std::min(kBlock, len - t0);
        int64_t i = 0;
        for (; i + 4 <= m; i += 4) {
            int64_t j = 0;
            for (; j + 2 <= n; j += 2) dot_tile<4, 2>(i, j, n, bl, a + t0, lda, b + t0, ldb, acc);
            for (; j < n; ++j) dot_tile<4, 1>(i, j, n, bl, a + t0, lda, b + t0, ldb, acc);
        }
        for (; i < m; ++i)
            for (int64_t j = 0; j < n; ++j) dot_tile<1, 1>(i, j, n, bl, a + t0, lda, b + t0, ldb, acc);
    }
}

// dw = beta*dw + acc (beta = 0 does not read dw).
void finish_filters(float* dw, const double* acc, int64_t n, float beta) {
    for (int64_t i = 0; i < n; ++i)
        dw[i] = beta == 0.0f ? static_cast<float>(acc[i]) : static_cast<float>(beta * dw[i] + acc[i]);
}

// ---- split over images between threads --------------------------------------------------------
// A big conv runs its images in slices, each doing im2col + single-threaded GEMMs on its own
// scratch, shared out among the plugin's workers: forward, backward
// data and backward filter (per-slice partials, added in slice order). Unlike OpenBLAS's second
// thread (bimodal runs, see docs/benchmarks.md) these threads share nothing and never spin: on
// the 2-vCPU VM two single-threaded sgemm processes at LeNet conv2's shape each kept their ~58
// GFLOP/s; LeNet inference went from ~8k to ~12.5k img/s, and training from 11.8 to 8.1 ms per
// step once the backward passes were split too. The im2col GEMMs take a chunk's images as
// columns, and OpenBLAS's result depends on the call's shape, so the slices are fixed by the
// shape (shape_slices), not by the CPUs. (The direct kernels split the same way: ops/conv_direct.cpp.)

constexpr double kMinSplitFlops = kConvMinSplitFlops;  // ops/conv_direct.h

double fwd_flops(const Conv& v) { return 2.0 * static_cast<double>(v.n) * v.k * v.p() * v.crs(); }

// An im2col op over images in slices fixed by the shape (their GEMMs' shapes follow the chunks,
// so the slices must not follow the CPUs): the slices, the images per chunk, and each worker's
// scratch for one chunk (col: the im2col columns; aux: [K, chunk*P] for the batched GEMM's
// output or gathered dY, null when a chunk is one image), taken before the workers start (the
// arena has no lock).
struct ImageSlices {
    int64_t slices = 1, nb = 1;
    std::array<float*, kMaxSplit> col{}, aux{};
};

ImageSlices image_slices(const Conv& v, Arena& scratch) {
    const int64_t P = v.p(), rows = v.c * v.r * v.s;
    ImageSlices s;
    s.slices = shape_slices(fwd_flops(v), kMinSplitFlops, v.n);
    s.nb = std::min(chunk_images(v, (rows + v.k) * P), (v.n + s.slices - 1) / s.slices);
    for (int w = 0; w < slice_workers(s.slices); ++w) {
        s.col[w] = scratch.alloc<float>(rows * s.nb * P);
        s.aux[w] = s.nb > 1 ? scratch.alloc<float>(v.k * s.nb * P) : nullptr;
    }
    return s;
}

// ---- forward --------------------------------------------------------------------------------

void fwd_linear(const Conv& v, const float* x, const float* wt, const ConvEpilogue& e, float* y) {
    const int64_t in = v.cg * v.hw();  // one group's inputs per image
    for (int64_t g = 0; g < v.g; ++g)
        gemm(false, true, v.n, v.kg, in, x + g * in, v.c * v.hw(), wt + g * v.kg * in, in, 0.0f, y + g * v.kg, v.k);
    if (!e.r) {
        if (e.any()) bias_activate(e.act, e.b, y, v.n, v.k);
        return;
    }
    // Y is [N, K] here, the residual too: (y + b) + r, then the activation.
    if (e.b) bias_activate(XYLEM_ACT_NONE, e.b, y, v.n, v.k);
    channel_bias_activate(e.act, nullptr, y, v.n * v.k, y, v.n * v.k, 1, v.n * v.k, e.r, v.n * v.k);
}

// The pointwise forward pass image by image (and group by group), each one single-threaded sgemm
// then its bias and activation, shared out among the workers; with fewer of those than the
// machine's slices (batch 1), each image's output is cut into equal blocks of columns (multiples
// of 16; of filters for the narrow kernel, which needs whole rows, and where a plane is too small
// for blocks of 256 columns) until there are enough.
// Before, each image was one sgemm cut in two by columns, then a pass of bias and activation over
// its output on the calling thread. Smaller tiles (32K outputs, in L2 for their bias pass) won in
// xylem-bench-conv, where every operand stays in cache, but lost in the model (MobileNetV2 under
// xylem run: 13.6 against 12.5 ms at batch 1, 115 against 107 at 16): OpenBLAS's unpacked
// small-matrix kernel took them. The blocks are fixed by the shape and the machine's slices (as
// shape_slices), not the thread count: OpenBLAS's result depends on the call.
struct PointwiseTiles {
    bool narrow = false;               // ops/gemm.cpp's narrow kernel (7x7 maps), blocks of filters
    int64_t rows = 0, cols = 0;        // one block: filters x positions
    int64_t row_tiles = 1, col_tiles = 1;
    int64_t per_image(const Conv& v) const { return v.g * row_tiles * col_tiles; }
    int64_t count(const Conv& v) const { return v.n * per_image(v); }
};

PointwiseTiles pointwise_tiles(const Conv& v) {
    const int64_t hw = v.hw();
    PointwiseTiles t;
    // 32 to 64 positions with a long reduction: the narrow kernel, faster than OpenBLAS there
    // (MobileNetV2's 320 -> 1280 on 7x7 at batch 1: 119 against 149 us), as sgemm() picks it.
    t.narrow = hw >= 32 && hw <= 64 && v.cg >= 100 && v.kg >= 32 && narrow_gemm_available();
    t.rows = v.kg, t.cols = hw;
    auto part = [](int64_t n, int64_t parts) { return ((n + parts - 1) / parts + 15) / 16 * 16; };
    // Columns first: each block then packs only its own columns of X against all of W.
    for (int64_t parts = 2; t.count(v) < machine_slices(); ++parts) {
        if (t.narrow ? part(v.kg, parts) < 32 : part(hw, parts) < 256) break;  // blocks too small to pay
        if (t.narrow) t.rows = part(v.kg, parts), t.row_tiles = (v.kg + t.rows - 1) / t.rows;
        else t.cols = part(hw, parts), t.col_tiles = (hw + t.cols - 1) / t.cols;
    }
    // Planes too small to cut by columns (14x14: 196 positions) are cut by filters instead, blocks
    // of at least 32: MobileNetV2's 14x14 expansions and projections at batch 1 (576 -> 96: 218 us
    // on one CPU, the other idle) had run as one block each (130 us in two).
    for (int64_t parts = 2; !t.narrow && t.count(v) < machine_slices(); ++parts) {
        if (part(v.kg, parts) < 32) break;
        t.rows = part(v.kg, parts), t.row_tiles = (v.kg + t.rows - 1) / t.rows;
    }
    return t;
}

// The pointwise forward pass by the direct kernels (ops/conv_direct.cpp's register tiles over
// the image in place: the input channels are the taps, plane by plane) where their tiles fit and
// the output dominates the work: planes of whole vectors (every 16 positions) and at most 32
// input channels (MobileNetV2's expansions: 16 -> 96 at 112x112 writes 4.8 MB an image for 16
// multiply-adds an output). OpenBLAS writes such an output twice (its beta = 0 pass zeroes C,
// then its kernel adds into it) and the bias and activation pass reads it once more; here each
// block of positions is computed, biased and activated in L2, then written once. With 64 input
// channels OpenBLAS's packed kernel won (ResNet-50's 64 -> 256 at 56x56: 417 against 455 us).
// Projections to at most 32 filters take it whatever their channels: OpenBLAS packs the big
// operand, X, for an output of few rows (MobileNetV2 at batch 16: 192 -> 32 on 28x28 955-1055 ->
// 720-735 us, 144 -> 24 on 56x56 3,050-3,840 -> 2,800-3,040).
//
// An output of kStreamMinBytes or more is computed into a per-worker block and stored past the
// caches: its reader comes after the whole output is written, by which time ordinary stores
// would have paid a read of every line and been evicted anyway. MobileNetV2 at batch 16
// (`xylem run`): the 16 -> 96 expansion 11.0 -> 5.8 ms, the model 103 -> 94 ms; with ordinary
// stores the direct kernel alone changed nothing measurable in the model.
constexpr int64_t kDirectPointwiseMaxChannels = 32;
constexpr int64_t kDirectPointwiseMaxFilters = 32;  // any number of channels
constexpr double kStreamMinBytes = 4.0 * 1024 * 1024;
// Positions per block: its output (filters x positions) within ~256 KB, 64 positions at least.
constexpr int64_t kDirectPointwiseBlockFloats = 64 * 1024;

// dst rows = src rows (cols floats each, a multiple of the vector; dst's rows aligned), stored
// past the caches.
XYLEM_KERNEL_LEVELS(void, stream_rows,
                    (const float* src, int64_t lds, float* dst, int64_t ldd, int64_t rows, int64_t cols),
                    (src, lds, dst, ldd, rows, cols)) {
    using Vu = typename S::Vu;
    for (int64_t r = 0; r < rows; ++r)
        for (int64_t j = 0; j < cols; j += S::L) S::stream(dst + r * ldd + j, *reinterpret_cast<const Vu*>(src + r * lds + j));
    nt_fence();
}

bool direct_pointwise_fits(const Conv& v) {
    return direct_multiply_fma() && v.hw() % 16 == 0 &&
           (v.cg <= kDirectPointwiseMaxChannels || v.kg <= kDirectPointwiseMaxFilters) && v.cg * v.hw() < INT_MAX / 2;
}

void fwd_pointwise_direct(const Conv& v, const float* x, const float* w, const ConvEpilogue& e, float* y,
                          Arena& scratch) {
    const int64_t hw = v.hw();
    // Equal blocks (multiples of 16), as many as the size bound needs; where there are few (batch
    // 1), as many as make whole rounds of the machine's slices while they keep 64 positions:
    // 3136 positions in 24 filters' bound of 2720 were 2720 + 416, one CPU doing most of the work.
    const int64_t most = std::max<int64_t>(64, kDirectPointwiseBlockFloats / v.kg / 16 * 16);
    int64_t blocks = (hw + most - 1) / most;
    const int64_t slices = machine_slices(), images = v.n * v.g;
    if (images * blocks < 4 * slices)
        while ((images * blocks) % slices != 0 && hw / (blocks + 1) >= 64) ++blocks;
    const int64_t block = std::min(hw, ((hw + blocks - 1) / blocks + 15) / 16 * 16);
    blocks = (hw + block - 1) / block;
    const int64_t per_image = v.g * blocks;
    int32_t* off = scratch.alloc<int32_t>(v.cg);
    for (int64_t c = 0; c < v.cg; ++c) off[c] = static_cast<int32_t>(c * hw);
    const int workers = split_workers(fwd_flops(v), kMinSplitFlops, v.n * per_image);
    // Streaming stores need aligned vectors: Y at a cache line (a view into a bigger tensor may
    // not be) and rows of whole vectors (hw is a multiple of 16).
    const bool nt = static_cast<double>(v.n * v.k * hw) * sizeof(float) >= kStreamMinBytes &&
                    reinterpret_cast<uintptr_t>(y) % 64 == 0;
    std::array<float*, kMaxSplit> tmp{};
    if (nt)  // before the workers start: the arena has no lock
        for (int wk = 0; wk < workers; ++wk) tmp[wk] = scratch.alloc<float>(v.kg * block);
    parallel_items(v.n * per_image, workers, [&](int wk, int64_t item) {
        const int64_t n = item / per_image, g = item % per_image / blocks, j0 = item % blocks * block;
        const int64_t cols = std::min(block, hw - j0);  // a multiple of 16, as hw is
        float* out = y + (n * v.k + g * v.kg) * hw + j0;
        float* dst = nt ? tmp[wk] : out;
        const int64_t ld = nt ? cols : hw;
        direct_multiply_rows(x + (n * v.c + g * v.cg) * hw + j0, off, v.cg, w + g * v.kg * v.cg, v.kg, cols, dst, ld);
        e.finish(g * v.kg, dst, ld, dst, ld, v.kg, cols, out, hw);
        if (nt) stream_rows(dst, ld, out, hw, v.kg, cols);
    });
}

void fwd_pointwise(const Conv& v, const float* x, const float* wt, const ConvEpilogue& e, float* y) {
    const int64_t hw = v.hw();
    const PointwiseTiles t = pointwise_tiles(v);
    const int64_t per_image = t.per_image(v), per_group = t.row_tiles * t.col_tiles;
    const int workers = split_workers(fwd_flops(v), kMinSplitFlops, t.count(v));
    parallel_items(t.count(v), workers, [&](int, int64_t item) {
        const int64_t n = item / per_image, g = item % per_image / per_group, tile = item % per_group;
        const int64_t k0 = tile / t.col_tiles * t.rows, j0 = tile % t.col_tiles * t.cols;
        const int64_t rows = std::min(t.rows, v.kg - k0), cols = std::min(t.cols, hw - j0);
        float* out = y + (n * v.k + g * v.kg + k0) * hw + j0;
        const float* a = wt + (g * v.kg + k0) * v.cg;
        const float* xb = x + (n * v.c + g * v.cg) * hw + j0;
        if (t.narrow) own_sgemm(false, false, rows, cols, v.cg, 1.0f, a, v.cg, xb, hw, 0.0f, out, hw);
        else gemm_in_worker(false, false, rows, cols, v.cg, a, v.cg, xb, hw, 0.0f, out, hw);
        e.finish(g * v.kg + k0, out, hw, out, hw, rows, cols);
    });
}

// Images [n_lo, n_hi) in chunks of nb; col and tmp hold one chunk (tmp is null when nb = 1).
void fwd_im2col_images(const Conv& v, const float* x, const float* wt, const ConvEpilogue& e, float* y, int64_t n_lo,
                       int64_t n_hi, int64_t nb, float* col, float* tmp) {
    const int64_t P = v.p(), crs = v.crs();
    for (int64_t n0 = n_lo; n0 < n_hi; n0 += nb) {
        const int64_t m = std::min(nb, n_hi - n0), ld = m * P;
        im2col(v, x + n0 * v.c * v.hw(), m, col);
        float* out = m == 1 ? y + n0 * v.k * P : tmp;  // one image's [K,P] is already Y's layout
        for (int64_t g = 0; g < v.g; ++g)
            gemm_in_worker(false, false, v.kg, ld, crs, wt + g * v.kg * crs, crs, col + g * crs * ld, ld, 0.0f,
                 out + g * v.kg * ld, ld);
        if (m == 1) {
            e.finish(0, out, P, out, P, v.k, P);
        } else {
            // [K, m*P] -> m images of [K, P], with the bias and activation in the same pass.
            for (int64_t j = 0; j < m; ++j)
                e.finish(0, tmp + j * P, ld, y + (n0 + j) * v.k * P, P, v.k, P);
        }
    }
}

void fwd_im2col(const Conv& v, const float* x, const float* wt, const ConvEpilogue& e, float* y, Arena& scratch) {
    if (v.n == 1) {
        // One image: its GEMMs cut over the pool (gemm), not one worker's single call (ResNet-18's
        // 256 -> 512 1x1 stride-2 conv onto 7x7 at batch 1 ran on one CPU of two).
        const int64_t P = v.p(), crs = v.crs();
        float* col = scratch.alloc<float>(v.c * v.r * v.s * P);
        im2col(v, x, 1, col);
        for (int64_t g = 0; g < v.g; ++g)
            gemm(false, false, v.kg, P, crs, wt + g * v.kg * crs, crs, col + g * crs * P, P, 0.0f, y + g * v.kg * P,
                 P);
        e.finish(0, y, P, y, P, v.k, P);
        return;
    }
    const ImageSlices is = image_slices(v, scratch);
    run_slices(v.n, is.slices, [&](int64_t lo, int64_t hi, int w, int64_t) {
        fwd_im2col_images(v, x, wt, e, y, lo, hi, is.nb, is.col[w], is.aux[w]);
    });
}

// ---- backward data --------------------------------------------------------------------------

void bwd_data_linear(const Conv& v, const float* dy, const float* wt, float* dx) {
    const int64_t in = v.cg * v.hw();
    for (int64_t g = 0; g < v.g; ++g)
        gemm(false, false, v.n, in, v.kg, dy + g * v.kg, v.k, wt + g * v.kg * in, in, 0.0f, dx + g * in, v.c * v.hw());
}

void bwd_data_pointwise(const Conv& v, const float* dy, const float* wt, float* dx) {
    const int64_t hw = v.hw();
    for (int64_t n = 0; n < v.n; ++n)
        for (int64_t g = 0; g < v.g; ++g)
            gemm(true, false, v.cg, hw, v.kg, wt + g * v.kg * v.cg, v.cg, dy + (n * v.k + g * v.kg) * hw, hw, 0.0f,
                 dx + (n * v.c + g * v.cg) * hw, hw);
}

// Images [n_lo, n_hi) in chunks of nb, on one thread: col and dyt hold one chunk (dyt is null
// when nb = 1).
void bwd_data_images(const Conv& v, const float* dy, const float* wt, float* dx, int64_t n_lo, int64_t n_hi,
                     int64_t nb, float* col, float* dyt, bool fma_multiply, int32_t* off) {
    const int64_t P = v.p(), crs = v.crs(), rows = v.c * v.r * v.s;
    std::fill(dx + n_lo * v.c * v.hw(), dx + n_hi * v.c * v.hw(), 0.0f);
    for (int64_t n0 = n_lo; n0 < n_hi; n0 += nb) {
        const int64_t m = std::min(nb, n_hi - n0), ld = m * P;
        const float* d = dy + n0 * v.k * P;
        if (m > 1) {
            gather_dy(v, d, m, dyt);
            d = dyt;
        }
        if (fma_multiply && ld % 16 == 0 && ld * v.k < INT_MAX / 2) {
            // col = W^T dY by the direct kernels' register tiles (the taps: dY's K rows), which
            // beat OpenBLAS here (LeNet's conv2, 500 x 64 x 50 per image)
            for (int64_t k = 0; k < v.kg; ++k) off[k] = static_cast<int32_t>(k * ld);
            for (int64_t g = 0; g < v.g; ++g)
                direct_multiply(d + g * v.kg * ld, off, v.kg, wt + g * v.kg * crs, crs, ld, col + g * crs * ld, ld);
        } else {
            // Zeroing ourselves and accumulating is faster than OpenBLAS's beta = 0 pass over C.
            std::memset(col, 0, static_cast<size_t>(rows * ld) * sizeof(float));
            for (int64_t g = 0; g < v.g; ++g)
                gemm_in_worker(true, false, crs, ld, v.kg, wt + g * v.kg * crs, crs, d + g * v.kg * ld, ld, 1.0f,
                               col + g * crs * ld, ld);
        }
        col2im(v, col, m, dx + n0 * v.c * v.hw());
    }
}

// Each slice writes its own images' dX: no sum between slices.
void bwd_data_im2col(const Conv& v, const float* dy, const float* wt, float* dx, Arena& scratch) {
    const ImageSlices is = image_slices(v, scratch);
    const bool fma_multiply = direct_multiply_fma();
    std::array<int32_t*, kMaxSplit> off{};
    int32_t* offsets = scratch.alloc<int32_t>(slice_workers(is.slices) * v.kg);  // one block: the arena's are few
    for (int w = 0; w < slice_workers(is.slices); ++w) off[w] = offsets + w * v.kg;
    run_slices(v.n, is.slices, [&](int64_t lo, int64_t hi, int w, int64_t) {
        bwd_data_images(v, dy, wt, dx, lo, hi, is.nb, is.col[w], is.aux[w], fma_multiply, off[w]);
    });
}

// ---- backward filter ------------------------------------------------------------------------

void bwd_filter_linear(const Conv& v, const float* x, const float* dy, float beta, float* dw) {
    const int64_t in = v.cg * v.hw();
    for (int64_t g = 0; g < v.g; ++g)
        gemm(true, false, v.kg, in, v.n, dy + g * v.kg, v.k, x + g * in, v.c * v.hw(), beta, dw + g * v.kg * in, in);
}

void bwd_filter_pointwise(const Conv& v, const float* x, const float* dy, float beta, float* dw, Arena& scratch) {
    const int64_t hw = v.hw();
    if (v.kg * v.cg <= kSmallFilter) {
        double* acc = scratch.alloc<double>(v.k * v.cg);
        std::fill_n(acc, v.k * v.cg, 0.0);
        for (int64_t n = 0; n < v.n; ++n)
            for (int64_t g = 0; g < v.g; ++g)
                dot_accumulate(v.kg, v.cg, hw, dy + (n * v.k + g * v.kg) * hw, hw, x + (n * v.c + g * v.cg) * hw, hw,
                               acc + g * v.kg * v.cg);
        return finish_filters(dw, acc, v.k * v.cg, beta);
    }
    for (int64_t n = 0; n < v.n; ++n)
        for (int64_t g = 0; g < v.g; ++g)
            gemm(false, true, v.kg, v.cg, hw, dy + (n * v.k + g * v.kg) * hw, hw, x + (n * v.c + g * v.cg) * hw, hw,
                 n == 0 ? beta : 1.0f, dw + g * v.kg * v.cg, v.cg);
}

// The filter gradient of images [n_lo, n_hi) in chunks of nb, on one thread: into dw (with beta)
// or, for a small filter, added to the float64 sums acc. col and dyt hold one chunk.
void bwd_filter_images(const Conv& v, const float* x, const float* dy, float beta, float* dw, double* acc,
                       int64_t n_lo, int64_t n_hi, int64_t nb, float* col, float* dyt) {
    const int64_t P = v.p(), crs = v.crs();
    for (int64_t n0 = n_lo; n0 < n_hi; n0 += nb) {
        const int64_t m = std::min(nb, n_hi - n0), ld = m * P;
        im2col(v, x + n0 * v.c * v.hw(), m, col);
        const float* d = dy + n0 * v.k * P;
        if (acc && P >= kMinPlane) {  // image by image: dY needs no gathering
            for (int64_t j = 0; j < m; ++j)
                for (int64_t g = 0; g < v.g; ++g)
                    dot_accumulate(v.kg, crs, P, d + (j * v.k + g * v.kg) * P, P, col + g * crs * ld + j * P, ld,
                                   acc + g * v.kg * crs);
            continue;
        }
        if (m > 1) {
            gather_dy(v, d, m, dyt);
            d = dyt;
        }
        for (int64_t g = 0; g < v.g; ++g) {
            if (acc)
                dot_accumulate(v.kg, crs, ld, d + g * v.kg * ld, ld, col + g * crs * ld, ld, acc + g * v.kg * crs);
            else
                gemm_in_worker(false, true, v.kg, crs, ld, d + g * v.kg * ld, ld, col + g * crs * ld, ld,
                               n0 == n_lo ? beta : 1.0f, dw + g * v.kg * crs, crs);
        }
    }
}

// Images in slices fixed by the shape, each summing its own filter gradient (float64 sums for a
// small filter, a float partial otherwise); the partials are then added in slice order on the
// calling thread, so the result does not depend on which worker ran which slice. One slice
// writes straight into dW.
void bwd_filter_im2col(const Conv& v, const float* x, const float* dy, float beta, float* dw, Arena& scratch) {
    const int64_t size = v.k * v.crs();
    const bool small = v.kg * v.crs() <= kSmallFilter;
    const ImageSlices is = image_slices(v, scratch);
    const int64_t slices = is.slices;
    double* acc = small ? scratch.alloc<double>(slices * size) : nullptr;
    if (small) std::fill_n(acc, slices * size, 0.0);
    float* partial = !small && slices > 1 ? scratch.alloc<float>(slices * size) : nullptr;
    run_slices(v.n, slices, [&](int64_t lo, int64_t hi, int w, int64_t s) {
        bwd_filter_images(v, x, dy, partial ? 0.0f : beta, partial ? partial + s * size : dw,
                          small ? acc + s * size : nullptr, lo, hi, is.nb, is.col[w], is.aux[w]);
    });
    if (small) {
        for (int64_t s = 1; s < slices; ++s)
            for (int64_t i = 0; i < size; ++i) acc[i] += acc[s * size + i];
        return finish_filters(dw, acc, size, beta);
    }
    if (!partial) return;
    for (int64_t i = 0; i < size; ++i) {
        float sum = partial[i];
        for (int64_t s = 1; s < slices; ++s) sum += partial[s * size + i];
        dw[i] = beta == 0.0f ? sum : beta * dw[i] + sum;
    }
}

}  // namespace

void op_conv2d_fwd(const xylem_op_desc& desc, xylem_stream_s& stream) {
    OpArgs a(desc, 2, 4, 1);
    const auto attrs = a.attrs<xylem_conv2d_attrs>();
    const int act = a.check_activation(attrs.activation);
    const Tensor tx = a.in(0, "X"), tw = a.in(1, "W"), ty = a.out(0, "Y");
    const Conv v = conv_shape(a, attrs, tx, "X", tw, "W", ty, "Y");
    ConvEpilogue e{nullptr, act, nullptr, ty.f32()};
    if (a.n_inputs() >= 3) {
        const Tensor tb = a.in(2, "b");
        if (tb.numel != v.k) a.fail("b holds %lld elements for K=%lld filters", ll(tb.numel), ll(v.k));
        if (overlap(ty, tb)) a.fail("Y overlaps b");
        e.b = tb.f32();
    }
    if (a.n_inputs() == 4) {  // ABI 1.10: the residual
        const Tensor tr = a.in(3, "R");
        plugin_kit::conv2d_residual_check(a, tr, ty, [](const Tensor& p, const Tensor& q) { return overlap(p, q); });
        e.r = tr.f32();
    }
    if (overlap(ty, tx) || overlap(ty, tw)) a.fail("Y overlaps X or W");
    if (v.n == 0) return;
    switch (choose_path(v)) {
    case Path::kLinear: fwd_linear(v, tx.f32(), tw.f32(), e, ty.f32()); break;
    case Path::kPointwise:
        if (direct_pointwise_fits(v))
            fwd_pointwise_direct(v, tx.f32(), tw.f32(), e, ty.f32(), stream.scratch_);
        else
            fwd_pointwise(v, tx.f32(), tw.f32(), e, ty.f32());
        break;
    case Path::kIm2col:
        if (depthwise_fwd_fits(v)) depthwise_fwd(v, tx.f32(), tw.f32(), e, ty.f32(), stream.scratch_);
        else if (winograd_fwd_fits(v)) winograd_fwd(v, tx.f32(), tw.f32(), e, ty.f32(), stream.scratch_);
        else if (direct_fwd_fits(v)) direct_fwd(v, tx.f32(), tw.f32(), e, ty.f32(), stream.scratch_);
        else fwd_im2col(v, tx.f32(), tw.f32(), e, ty.f32(), stream.scratch_);
        break;
    }
}

void op_conv2d_bwd_data(const xylem_op_desc& desc, xylem_stream_s& stream) {
    OpArgs a(desc, 2, 2, 1);
    const auto attrs = a.attrs<xylem_conv2d_attrs>();
    const Tensor tdy = a.in(0, "dY"), tw = a.in(1, "W"), tdx = a.out(0, "dX");
    const Conv v = conv_shape(a, attrs, tdx, "dX", tw, "W", tdy, "dY");
    if (overlap(tdx, tdy) || overlap(tdx, tw)) a.fail("dX overlaps dY or W");
    if (v.n == 0) return;
    switch (choose_path(v)) {
    case Path::kLinear: bwd_data_linear(v, tdy.f32(), tw.f32(), tdx.f32()); break;
    case Path::kPointwise: bwd_data_pointwise(v, tdy.f32(), tw.f32(), tdx.f32()); break;
    case Path::kIm2col:
        if (winograd_bwd_data_fits(v)) winograd_bwd_data(v, tdy.f32(), tw.f32(), tdx.f32(), stream.scratch_);
        else if (direct_bwd_data_fits(v)) direct_bwd_data(v, tdy.f32(), tw.f32(), tdx.f32(), stream.scratch_);
        else bwd_data_im2col(v, tdy.f32(), tw.f32(), tdx.f32(), stream.scratch_);
        break;
    }
}

// With the optional db (ABI 1.9) the bias gradient too: summed inside the kernel that reads dY
// where that kernel can (the filter gradient by positions), else by bias_grad's pass.
void op_conv2d_bwd_filter(const xylem_op_desc& desc, xylem_stream_s& stream) {
    OpArgs a(desc, 2, 2, desc.n_outputs == 2 ? 2 : 1);
    const auto attrs = a.attrs<xylem_conv2d_attrs>();
    const Tensor tx = a.in(0, "X"), tdy = a.in(1, "dY"), tdw = a.out(0, "dW");
    const Tensor tdb = desc.n_outputs == 2 ? a.out(1, "db") : Tensor{};
    const Conv v = conv_shape(a, attrs, tx, "X", tdw, "dW", tdy, "dY");
    if (overlap(tdw, tx) || overlap(tdw, tdy)) a.fail("dW overlaps X or dY");
    float* db = desc.n_outputs == 2 ? tdb.f32() : nullptr;
    if (db) plugin_kit::conv2d_db_check(a, v, tdb, tx, tdy, tdw, [](const Tensor& p, const Tensor& q) { return overlap(p, q); });
    if (v.n == 0) {
        if (db) scale_filters(db, v.k, attrs.beta);
        return scale_filters(tdw.f32(), tdw.numel, attrs.beta);
    }
    float* db_pass = db;  // still to compute by its own pass
    switch (choose_path(v)) {
    case Path::kLinear: bwd_filter_linear(v, tx.f32(), tdy.f32(), attrs.beta, tdw.f32()); break;
    case Path::kPointwise: bwd_filter_pointwise(v, tx.f32(), tdy.f32(), attrs.beta, tdw.f32(), stream.scratch_); break;
    case Path::kIm2col:
        if (winograd_bwd_filter_fits(v)) {
            winograd_bwd_filter(v, tx.f32(), tdy.f32(), attrs.beta, tdw.f32(), stream.scratch_);
        } else if (direct_bwd_filter_fits(v)) {
            direct_bwd_filter(v, tx.f32(), tdy.f32(), attrs.beta, tdw.f32(), db, stream.scratch_);
            db_pass = nullptr;
        } else {
            bwd_filter_im2col(v, tx.f32(), tdy.f32(), attrs.beta, tdw.f32(), stream.scratch_);
        }
        break;
    }
    if (db_pass) bias_grad_nc(tdy.f32(), v.n, v.k, v.oh * v.ow, attrs.beta, db_pass, stream.scratch_);
}

}  // namespace xylem::native
