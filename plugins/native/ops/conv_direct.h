// Direct convolutions (ops/conv_direct.cpp): register-tiled kernels over shifted windows of a
// padded, phase-split copy of each image, no im2col. ops/conv.cpp calls them for the shapes
// that would otherwise take its im2col path.
#pragma once

#include "native.h"

namespace xylem::native {

using ConvShape = plugin_kit::Conv2dShape;

// Work per slice or worker (FLOPs) below which a convolution is not split further, on every
// path (im2col, direct, depthwise, Winograd): a thread start is ~20-50 us, 2 MFLOP ~40 us of one
// core's GEMM here.
constexpr double kConvMinSplitFlops = 2e6;
// Scratch for a filter gradient's per-slice float64 sums (the arena keeps its high-water mark).
constexpr double kConvMaxPartialBytes = 64.0 * 1024 * 1024;

// The packed layout of one image (see the top of ops/conv_direct.cpp) and the taps' offsets into it.
struct DirectLayout {
    int64_t sh = 1, sw = 1;              // phases per axis: the stride
    int64_t hq = 0, wq = 0, plane = 0;   // one phase plane
    int64_t chan = 0;                    // floats per channel: the kept phases' planes
    int64_t image = 0;                   // floats per packed image (a multiple of 16; zero past the channels)
    int64_t q = 0, qpad = 0;             // positions computed per image (oh*wq), rounded up to 16
    int64_t taps = 0;                    // cg*R*S
    int32_t* phase_of = nullptr;         // [sh*sw]: the phase's index among those kept, or -1
    int32_t* off = nullptr;              // [taps]: offsets from a group's first channel
    bool unrolled = false;               // column taps unrolled (forward only; see conv_direct.cpp)
};
// Whether v's layout keeps its offsets within int32; the layout (its arrays in scratch); one image
// x [C, H, W] packed into xq (l.image floats). For the depthwise kernels (ops/conv_depthwise.cpp),
// which pack one channel at a time.
bool direct_layout_fits(const ConvShape& v);
DirectLayout direct_layout(const ConvShape& v, Arena& scratch);
void direct_pack_image(const ConvShape& v, const DirectLayout& l, const float* x, float* xq);
// The unrolled layout (one plane per column tap, positions exactly the outputs: see
// conv_direct.cpp): whether v takes it (stride-1 rows, offsets within int32), and the layout.
// direct_pack_image packs into it.
bool direct_unrolled_fits(const ConvShape& v);
DirectLayout direct_unrolled_layout(const ConvShape& v, Arena& scratch);

// Whether the direct kernels take this shape (sizes within their int32 offsets, and for the
// data gradient stride 1 with padding at most the dilated kernel's reach).
bool direct_fwd_fits(const ConvShape& v);
bool direct_bwd_data_fits(const ConvShape& v);
bool direct_bwd_filter_fits(const ConvShape& v);

// Y = act(conv(X, W) + b) (b may be null).
void direct_fwd(const ConvShape& v, const float* x, const float* w, const ConvEpilogue& e, float* y,
                Arena& scratch);
// dX = the adjoint of the forward conv applied to dY (every element written).
void direct_bwd_data(const ConvShape& v, const float* dy, const float* w, float* dx, Arena& scratch);
// y[k*ldy + q] = sum over t < taps of wt[t*kg + k] * xq[off[t] + q], for k < kg and q < qpad (a
// multiple of 16): the forward kernels' register-tiled multiply, on one thread (the Winograd
// products use it).
void direct_multiply(const float* xq, const int32_t* off, int64_t taps, const float* wt, int64_t kg, int64_t qpad,
                     float* y, int64_t ldy);
// The same with the weights in a conv's own layout: filter k's weight of tap t at w[k*taps + t]
// (ops/conv.cpp's pointwise pass, taps = input channels).
void direct_multiply_rows(const float* xq, const int32_t* off, int64_t taps, const float* w, int64_t kg, int64_t qpad,
                          float* y, int64_t ldy);
// Whether direct_multiply runs with FMA at this level (avx512, avx2 on a CPU with FMA): where it
// does, it beats OpenBLAS on a conv's small GEMMs.
bool direct_multiply_fma();
// acc[t*ldk + k] += sum over q < positions of x[off[t] + q] * dyt[q*ldk + k] for k < ldk (a
// multiple of direct_filter_lanes()): the filter gradient's register tiles, their float sums
// added into acc once, on one thread (the Winograd filter gradient uses it).
int64_t direct_filter_lanes();
void direct_filter_multiply(const float* x, const int32_t* off, int64_t taps, const float* dyt, int64_t ldk,
                            int64_t positions, double* acc);
// dst[q*ldk + k] = src[k*cols + q] for k < rows, 0 for rows <= k < ldk.
void direct_transpose(const float* src, int64_t rows, int64_t cols, int64_t ldk, float* dst);
// dW = beta*dW + the filter gradient (beta = 0 does not read dW), and with db (else null) db =
// beta*db + the bias gradient. direct_bwd_filter hands the shapes dot_bwd_filter_fits takes to
// dot_bwd_filter (ops/conv_filter_dot.cpp: positions in the vectors, for filters of few taps),
// which sums dY's rows for db while they are in cache; the direct kernel reads dY once more for it.
bool dot_bwd_filter_fits(const ConvShape& v);
void dot_bwd_filter(const ConvShape& v, const float* x, const float* dy, float beta, float* dw, float* db,
                    Arena& scratch);
void direct_bwd_filter(const ConvShape& v, const float* x, const float* dy, float beta, float* dw, float* db,
                       Arena& scratch);

}  // namespace xylem::native
