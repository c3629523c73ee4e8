// The native plugin's convolution paths, each against the float64 reference with the
// conformance tolerances (ops/conformance.h): the direct kernels (plugins/native/ops/
// conv_direct.cpp: forward, data gradient by phases, filter gradient), where they hand a shape
// to the im2col path instead, and the shapes their tiles and splits cut unevenly. ctest runs this file at every instruction-set level (@isa=avx2, @isa=baseline): the
// direct kernels' tiles differ by level.
//
// What each case reaches (the reason it is here):
//   - ResNet-20's shapes with batches that are not a multiple of the filter gradient's chunk
//     (ceil(256 / positions) images) or of its image slices, and a single image;
//   - the forward pass by blocks of output rows (an image's positions past 64K floats);
//   - stride 2 (phase planes; the data gradient in four phases), 1x1 stride 2 (one phase kept;
//     three quarters of dX zero), stride 3 with a 2x2 kernel (two of three phases per axis;
//     five of nine data-gradient phases without a tap), dilation 2 with stride 2 (one phase),
//     mixed strides and dilations, padding beyond the kernel's reach (1x3 padded 1x1);
//   - groups, filters per group not a multiple of 16 (the filter gradient's vectors of filters:
//     4 + 2 + 1 at avx512 for 100 filters), tap counts that leave tile remainders;
//   - the pointwise forward pass's tiles: blocks of columns, blocks of filters (the narrow GEMM
//     kernel on 7x7 maps, OpenBLAS on planes too small to cut by columns), groups; its direct path
//     (few input channels or few filters), streamed outputs;
//   - the depthwise forward kernel (one input channel per group): strides, dilation, several
//     filters per channel, the activations it applies in registers and the others, blocks of
//     channels cut unevenly; its flat path for "same" stride-1 planes (tails, masks, its limits);
//   - the Winograd kernels (ops/conv_winograd.cpp, 3x3 stride 1 with 8 channels or more in and
//     out, on maps whose tiles waste little at the level, batches of 256 tiles or more): ResNet's
//     28x28 and 14x14 and its 7x7 (whose rows of tiles carry no extra column), odd outputs,
//     padding 0 and 2; F(4x4) (ops/conv_winograd_f4.cpp, 64 channels or more) on rows of 7, 6 and
//     4 tiles and one flat run, odd outputs, padding 1 and 2; the filter gradient by Winograd at avx2 (@isa=avx2); and the same 7x7
//     shape with one image, too few tiles for Winograd (the direct kernels); single images whose
//     forward pass is shared out by blocks of filters (groups, a block's tile remainders), or of
//     positions (a big map with few filters, its channels packed by the workers);
//   - the forward pass's unrolled layout (one plane per column tap, positions = outputs), taken
//     for stride-1 rows where it computes markedly fewer positions: LeNet's conv2 and the two
//     cases marked "unrolled";
//   - the filter gradient with positions in the vectors (ops/conv_filter_dot.cpp: filters of
//     at most 64 taps per group over whole vectors of positions): the stem, LeNet's conv1 and
//     the cases marked "by positions";
//   - the fallbacks to im2col: a data gradient whose phases would compute more than 1.5x
//     im2col's multiply-adds (LeNet's 5x5 with no padding: 3x), and a strided 1x1 conv whose
//     output plane fills less than 1/1.2 of its vectors (7x7: 49 positions in 64).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>

#include "ops/conformance.h"
#include "support/backends.h"
#include "support/reference_conv.h"
#include "xylem/op_calls.h"

namespace xylem::test {
namespace {

struct Case {
    const char* what;
    Shape x, w;
    xylem_conv2d_attrs a;  // stride_h, stride_w, pad_h, pad_w, dilation_h, dilation_w, groups, activation, beta
    bool bias;
};

const Case kCases[] = {
    // First, so that it meets a cold arena: 12 images are 12 Winograd chunks, 8 workers' scratch
    // under XYLEM_NUM_THREADS=8 (the @threads=8 variant).
    {"resnet 16->16 3x3, 12 images", {12, 16, 28, 28}, {16, 16, 3, 3}, {1, 1, 1, 1, 1, 1, 1, XYLEM_ACT_NONE, 0}, false},
    {"resnet 16->16 3x3, 3 images", {3, 16, 28, 28}, {16, 16, 3, 3}, {1, 1, 1, 1, 1, 1, 1, XYLEM_ACT_NONE, 0}, false},
    {"resnet stem, 1 image", {1, 1, 28, 28}, {16, 1, 3, 3}, {1, 1, 1, 1, 1, 1, 1, XYLEM_ACT_RELU, 0}, true},
    {"resnet 16->32 stride 2, 5 images", {5, 16, 28, 28}, {32, 16, 3, 3}, {2, 2, 1, 1, 1, 1, 1, XYLEM_ACT_NONE, 0},
     false},
    {"resnet 1x1 stride 2", {2, 16, 28, 28}, {32, 16, 1, 1}, {2, 2, 0, 0, 1, 1, 1, XYLEM_ACT_NONE, 0}, false},
    {"resnet 1x1 stride 2 to 7x7 (im2col)", {3, 32, 14, 14}, {64, 32, 1, 1}, {2, 2, 0, 0, 1, 1, 1, XYLEM_ACT_NONE, 0},
     false},
    // The same at batch 1: one im2col, its GEMMs cut over the pool; groups 2, bias and ReLU.
    {"1x1 stride 2 to 7x7 (im2col), 1 image, groups 2", {1, 64, 14, 14}, {96, 32, 1, 1},
     {2, 2, 0, 0, 1, 1, 2, XYLEM_ACT_RELU, 0}, true},
    {"resnet 64->64 7x7, 17 images", {17, 64, 7, 7}, {64, 64, 3, 3}, {1, 1, 1, 1, 1, 1, 1, XYLEM_ACT_NONE, 0}, false},
    {"resnet 64->64 7x7, 1 image (16 tiles: direct)", {1, 64, 7, 7}, {64, 64, 3, 3},
     {1, 1, 1, 1, 1, 1, 1, XYLEM_ACT_RELU, 0}, true},
    // One image with work for several CPUs: the forward pass shares out blocks of filters.
    {"128->128 7x7, 1 image (blocks of filters)", {1, 128, 7, 7}, {128, 128, 3, 3},
     {1, 1, 1, 1, 1, 1, 1, XYLEM_ACT_NONE, 0}, true},
    // ... in blocks of 24 filters where 48 would leave a worker idle in the last round (5 blocks of
    // 48 on two workers: 3 rounds; 9 of 24: 5 rounds of half the work).
    {"200 filters 7x7, 1 image (blocks of 24 filters)", {1, 64, 7, 7}, {200, 64, 3, 3},
     {1, 1, 1, 1, 1, 1, 1, XYLEM_ACT_RELU, 0}, true},
    // One image, one block of filters, a big map: its channels packed by the workers, blocks of
    // positions (6480 in 4), the finishing by blocks of 2 filters.
    {"stem-like 3->16 stride 2, 1 image (blocks of positions)", {1, 3, 160, 160}, {16, 3, 3, 3},
     {2, 2, 1, 1, 1, 1, 1, XYLEM_ACT_RELU6, 0}, true},
    {"groups 2 of 50 filters, 1 image (a block of 2)", {1, 96, 9, 9}, {100, 48, 3, 3},
     {1, 1, 1, 1, 1, 1, 2, XYLEM_ACT_RELU, 0}, true},
    // The forward pass's unrolled layout (its positions exactly the outputs): strided,
    // dilated and padded columns, and a single image by blocks of filters in two groups.
    {"unrolled columns: stride 1x2, dilation 1x2, padded", {2, 5, 10, 16}, {9, 5, 3, 3},
     {1, 2, 1, 1, 1, 2, 1, XYLEM_ACT_RELU, 0}, true},
    {"unrolled columns: 4x4 kernel, 1 image, groups 2", {1, 8, 9, 9}, {60, 4, 4, 4},
     {1, 1, 0, 0, 1, 1, 2, XYLEM_ACT_NONE, 0}, false},
    // The filter gradient with positions in the vectors (few taps, whole vectors of positions):
    // LeNet's conv1 in chunks of 2 images, strided columns with groups (tile remainders: 5
    // filters, 18 taps), a dilated 2x3 kernel.
    {"lenet conv1 shape, 3 images (filter gradient by positions)", {3, 1, 28, 28}, {20, 1, 5, 5},
     {1, 1, 0, 0, 1, 1, 1, XYLEM_ACT_NONE, 0}, true},
    {"stride 1x2, groups 2 (filter gradient by positions)", {5, 4, 8, 15}, {10, 2, 3, 3},
     {1, 2, 1, 1, 1, 1, 2, XYLEM_ACT_NONE, 0}, true},
    {"dilation 2x1, 2x3 kernel (filter gradient by positions)", {3, 3, 10, 10}, {7, 3, 2, 3},
     {1, 1, 0, 0, 2, 1, 1, XYLEM_ACT_NONE, 0}, false},
    {"lenet conv2 shape, 9 images", {9, 20, 12, 12}, {50, 20, 5, 5}, {1, 1, 0, 0, 1, 1, 1, XYLEM_ACT_TANH, 0}, true},
    {"5x5 pad 2 (direct data gradient)", {3, 6, 11, 9}, {10, 6, 5, 5}, {1, 1, 2, 2, 1, 1, 1, XYLEM_ACT_NONE, 0}, true},
    {"100 filters", {2, 3, 6, 6}, {100, 3, 3, 3}, {1, 1, 1, 1, 1, 1, 1, XYLEM_ACT_SIGMOID, 0}, true},
    {"groups 3, dilation 2", {2, 12, 9, 11}, {15, 4, 3, 3}, {1, 1, 2, 2, 2, 2, 3, XYLEM_ACT_NONE, 0}, true},
    {"stride 3, 2x2 kernel", {2, 4, 10, 11}, {6, 4, 2, 2}, {3, 3, 1, 1, 1, 1, 1, XYLEM_ACT_NONE, 0}, false},
    {"dilation 2 with stride 2", {2, 3, 13, 13}, {5, 3, 3, 3}, {2, 2, 2, 2, 2, 2, 1, XYLEM_ACT_RELU, 0}, true},
    {"stride 1x2, dilation 2x1, groups 2", {3, 4, 9, 10}, {6, 2, 3, 2}, {1, 2, 1, 0, 2, 1, 2, XYLEM_ACT_NONE, 0},
     false},
    {"1x3 kernel padded 1x1", {2, 5, 5, 7}, {7, 5, 1, 3}, {1, 1, 1, 1, 1, 1, 1, XYLEM_ACT_NONE, 0},
     true},
    {"depthwise 3x3", {2, 8, 10, 10}, {8, 1, 3, 3}, {1, 1, 1, 1, 1, 1, 8, XYLEM_ACT_NONE, 0}, false},
    // The depthwise forward kernel (ops/conv_depthwise.cpp): stride 2 (four phases), ReLU6 and ReLU
    // in registers, two filters per channel with dilation and an activation applied as a pass
    // (sigmoid), blocks of channels with a remainder (300 channels on 5x5: 222 + 78), 5x5 filters.
    {"depthwise stride 2, ReLU6, 3 images", {3, 24, 17, 16}, {24, 1, 3, 3}, {2, 2, 1, 1, 1, 1, 24, XYLEM_ACT_RELU6, 0},
     true},
    {"depthwise 2 filters per channel, dilation 2, sigmoid", {2, 6, 12, 13}, {12, 1, 3, 3},
     {1, 1, 2, 2, 2, 2, 6, XYLEM_ACT_SIGMOID, 0}, true},
    {"depthwise 300 channels on 5x5 (blocks)", {2, 300, 5, 5}, {300, 1, 3, 3}, {1, 1, 1, 1, 1, 1, 300, XYLEM_ACT_RELU, 0},
     true},
    {"depthwise 5x5 filters, 1 image", {1, 4, 40, 40}, {4, 1, 5, 5}, {1, 1, 2, 2, 1, 1, 4, XYLEM_ACT_RELU6, 0}, true},
    // The flat path for "same" stride-1 planes (ops/conv_depthwise.cpp; the cases above with
    // stride 1 take it too): a plane of exactly one avx512 vector with 3 filters per channel, 7x7
    // planes (the last vector overlapping) with no bias and tanh as a pass, 3x1 and 1x5 kernels
    // (dilation 3: column taps 6 apart in 20-wide rows), a 1x1 depthwise, rows of whole vectors
    // (64 and 66 wide: the last vector overlapping; 112x112, past 4096 positions), 12-wide rows
    // (by position at avx512, by rows at avx2 and baseline; past 4096 positions the phase layout),
    // and a 3x5 plane (under one vector: the phase layout).
    {"depthwise flat 4x4 planes, 3 filters per channel", {2, 4, 4, 4}, {12, 1, 3, 3},
     {1, 1, 1, 1, 1, 1, 4, XYLEM_ACT_RELU, 0}, true},
    {"depthwise flat 7x7, tanh, no bias", {3, 40, 7, 7}, {40, 1, 3, 3}, {1, 1, 1, 1, 1, 1, 40, XYLEM_ACT_TANH, 0}, false},
    {"depthwise flat 3x1 kernel, 9x5", {2, 7, 9, 5}, {7, 1, 3, 1}, {1, 1, 1, 0, 1, 1, 7, XYLEM_ACT_NONE, 0}, true},
    {"depthwise flat 1x5 kernel, dilation 3", {2, 3, 6, 20}, {3, 1, 1, 5}, {1, 1, 0, 6, 1, 3, 3, XYLEM_ACT_RELU6, 0},
     true},
    {"depthwise flat 1x1", {2, 5, 4, 6}, {5, 1, 1, 1}, {1, 1, 0, 0, 1, 1, 5, XYLEM_ACT_NONE, 0}, true},
    {"depthwise flat 64x64", {1, 3, 64, 64}, {3, 1, 3, 3}, {1, 1, 1, 1, 1, 1, 3, XYLEM_ACT_RELU6, 0}, true},
    {"depthwise flat 64x66", {1, 3, 64, 66}, {3, 1, 3, 3}, {1, 1, 1, 1, 1, 1, 3, XYLEM_ACT_RELU6, 0}, true},
    {"depthwise flat 112x112", {1, 2, 112, 112}, {2, 1, 3, 3}, {1, 1, 1, 1, 1, 1, 2, XYLEM_ACT_RELU6, 0}, true},
    {"depthwise flat 100x12", {2, 3, 100, 12}, {3, 1, 3, 3}, {1, 1, 1, 1, 1, 1, 3, XYLEM_ACT_RELU, 0}, true},
    {"depthwise 400x12 (phase layout)", {1, 2, 400, 12}, {2, 1, 3, 3}, {1, 1, 1, 1, 1, 1, 2, XYLEM_ACT_NONE, 0}, false},
    {"depthwise 3x5 plane (phase layout)", {2, 6, 3, 5}, {6, 1, 3, 3}, {1, 1, 1, 1, 1, 1, 6, XYLEM_ACT_RELU, 0}, true},
    // Its stride-2 form (four phase planes of the output's size): 14x14 -> 7x7, 32x32 -> 16x16 with
    // 2 filters per channel, 5x5 filters with padding 2, dilation 2; an odd 13x13 map stays on the
    // phase layout (its input is not twice the output).
    {"depthwise flat stride 2, 14x14 -> 7x7", {2, 8, 14, 14}, {8, 1, 3, 3}, {2, 2, 1, 1, 1, 1, 8, XYLEM_ACT_RELU6, 0},
     true},
    {"depthwise flat stride 2, 2 filters per channel", {1, 4, 32, 32}, {8, 1, 3, 3},
     {2, 2, 1, 1, 1, 1, 4, XYLEM_ACT_NONE, 0}, true},
    {"depthwise flat stride 2, 5x5 padding 2", {2, 3, 20, 20}, {3, 1, 5, 5}, {2, 2, 2, 2, 1, 1, 3, XYLEM_ACT_RELU, 0},
     false},
    {"depthwise flat stride 2, dilation 2", {2, 3, 16, 16}, {3, 1, 3, 3}, {2, 2, 2, 2, 2, 2, 3, XYLEM_ACT_TANH, 0}, true},
    {"depthwise stride 2 on 13x13 (phase layout)", {2, 5, 13, 13}, {5, 1, 3, 3}, {2, 2, 1, 1, 1, 1, 5, XYLEM_ACT_RELU, 0},
     true},
    // The direct forward pass by blocks of output rows (an image's computed positions past 64K
    // floats): 24 filters on 64x64 (blocks of 41 and 23 rows), a stride-2 stem-like conv whose
    // blocks start mid-vector (65-wide phase rows: 31, 31 and 3 rows).
    {"direct forward in row blocks, 64x64", {2, 3, 64, 64}, {24, 3, 3, 3}, {1, 1, 1, 1, 1, 1, 1, XYLEM_ACT_RELU6, 0},
     false},
    {"direct forward in row blocks, stride 2", {2, 3, 130, 127}, {32, 3, 3, 3}, {2, 2, 1, 1, 1, 1, 1, XYLEM_ACT_TANH, 0},
     true},
    {"direct forward in row blocks, groups 2", {2, 4, 64, 64}, {32, 2, 3, 3}, {1, 1, 1, 1, 1, 1, 2, XYLEM_ACT_NONE, 0},
     true},
    {"1x1 on a 4x4 plane, groups 2", {3, 6, 4, 4}, {10, 3, 1, 1}, {1, 1, 0, 0, 1, 1, 2, XYLEM_ACT_NONE, 0}, false},
    // The pointwise forward pass in tiles (ops/conv.cpp): column blocks (900 positions: 464 + 436),
    // blocks of filters through the narrow GEMM kernel on a 7x7 map (96 filters: 2 x 48), groups.
    {"1x1 in column tiles, ReLU6", {1, 40, 30, 30}, {64, 40, 1, 1}, {1, 1, 0, 0, 1, 1, 1, XYLEM_ACT_RELU6, 0}, true},
    {"1x1 on 7x7, 128 channels (narrow kernel)", {1, 128, 7, 7}, {96, 128, 1, 1},
     {1, 1, 0, 0, 1, 1, 1, XYLEM_ACT_RELU, 0}, true},
    {"1x1 on 8x8, groups 2, 2 images", {2, 8, 8, 8}, {6, 4, 1, 1}, {1, 1, 0, 0, 1, 1, 2, XYLEM_ACT_NONE, 0}, true},
    // A plane too small to cut by columns (14x14: 196 positions), one image: blocks of filters
    // through OpenBLAS (100 filters: 64 + 36; with groups 2, 50 a group: 32 + 18).
    {"1x1 on 14x14 in filter blocks, ReLU6", {1, 36, 14, 14}, {100, 36, 1, 1},
     {1, 1, 0, 0, 1, 1, 1, XYLEM_ACT_RELU6, 0}, true},
    {"1x1 on 14x14 in filter blocks, groups 2", {1, 72, 14, 14}, {100, 36, 1, 1},
     {1, 1, 0, 0, 1, 1, 2, XYLEM_ACT_NONE, 0}, true},
    // The pointwise forward pass by the direct kernels (planes of whole vectors, at most 32 input
    // channels; the 8x8 case above takes it too): filters in tiles with remainders (21: 8 + 8 + 4
    // + 1) and sigmoid as a pass; an output of 4 MB or more (stored past the caches from each
    // worker's block: 136 filters of 64x64 in blocks of 480 positions, the last one short), ReLU6.
    {"1x1 direct, 21 filters, sigmoid", {3, 24, 16, 16}, {21, 24, 1, 1}, {1, 1, 0, 0, 1, 1, 1, XYLEM_ACT_SIGMOID, 0},
     true},
    {"1x1 direct, streamed output", {2, 16, 64, 64}, {136, 16, 1, 1}, {1, 1, 0, 0, 1, 1, 1, XYLEM_ACT_RELU6, 0}, true},
    // Projections (at most 32 filters, any number of channels: MobileNetV2's 144 -> 24) take the
    // direct kernels too; one image's 48x48 plane in two equal blocks of positions (1152 each).
    {"1x1 direct projection, 150 channels", {1, 150, 48, 48}, {24, 150, 1, 1},
     {1, 1, 0, 0, 1, 1, 1, XYLEM_ACT_NONE, 0}, true},
    // Winograd F(2x2, 3x3) (ops/conv_winograd.cpp; each pass with 256 tiles or more, the data
    // gradient's too): chunks of 3 images cut by 7, odd outputs
    // (the last row and column of tiles half outside), padding 0 and 2 (the data gradient's 2
    // and 0), channels that are no multiple of a vector.
    {"winograd 32->32 14x14, 7 images", {7, 32, 14, 14}, {32, 32, 3, 3}, {1, 1, 1, 1, 1, 1, 1, XYLEM_ACT_NONE, 0},
     false},
    {"winograd odd 23x21 output, no padding", {2, 8, 25, 23}, {10, 8, 3, 3}, {1, 1, 0, 0, 1, 1, 1, XYLEM_ACT_RELU, 0},
     true},
    {"winograd padding 2", {3, 9, 20, 21}, {12, 9, 3, 3}, {1, 1, 2, 2, 1, 1, 1, XYLEM_ACT_NONE, 0}, false},
    {"winograd padding 2, even output (rows of tiles wrap)", {4, 8, 16, 18}, {9, 8, 3, 3},
     {1, 1, 2, 2, 1, 1, 1, XYLEM_ACT_NONE, 0}, true},
    // Winograd F(4x4, 3x3) (ops/conv_winograd_f4.cpp; 64 channels or more in and out): rows of 7
    // tiles (vectors of 8, 4 at baseline), chunks of 2 images; rows of 6 on an odd 23x21 output
    // with channels that are no multiple of a vector; rows of 4 (vectors of 4) in chunks of 3 and
    // 2; padding 2 on a 12x12 output, one flat run of 3x4 tiles at avx512 (its data gradient goes
    // to F(2x2) or the direct kernels: too many outputs dropped); an 8x8 map, one flat run of 2x3
    // tiles at every level, chunks of 6 and 5 images.
    {"winograd F(4x4) 64->64 28x28, 3 images", {3, 64, 28, 28}, {64, 64, 3, 3}, {1, 1, 1, 1, 1, 1, 1, XYLEM_ACT_RELU, 0},
     true},
    {"winograd F(4x4) 72->66 odd 23x21", {2, 72, 23, 21}, {66, 72, 3, 3}, {1, 1, 1, 1, 1, 1, 1, XYLEM_ACT_NONE, 0},
     false},
    {"winograd F(4x4) 64->64 14x14, 5 images", {5, 64, 14, 14}, {64, 64, 3, 3}, {1, 1, 1, 1, 1, 1, 1, XYLEM_ACT_NONE, 0},
     true},
    {"winograd F(4x4) padding 2, 12x12 output", {6, 64, 10, 10}, {64, 64, 3, 3}, {1, 1, 2, 2, 1, 1, 1, XYLEM_ACT_NONE, 0},
     true},
    {"winograd F(4x4) 8x8, 11 images (flat)", {11, 64, 8, 8}, {64, 64, 3, 3}, {1, 1, 1, 1, 1, 1, 1, XYLEM_ACT_NONE, 0},
     false},
};

std::string describe(const Case& c) { return std::string(c.what) + ": x " + to_string(c.x) + " w " + to_string(c.w); }

std::vector<float> uniform(std::mt19937& rng, int64_t n) {
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    std::vector<float> v(static_cast<size_t>(n));
    for (float& e : v) e = u(rng);
    return v;
}

class NativeConvPaths : public ::testing::Test {
protected:
    void SetUp() override {
        backend_ = backend_named("native");
        if (!backend_) GTEST_SKIP() << "no native plugin";
    }
    Device& dev() { return *backend_->device(0); }

    // conv2d_fwd of random values (y filled with NaN first: every element must be written) against
    // the float64 reference; ReLU6 gets inputs in [-4, 4], so that sums past 6 reach the clamp's
    // top even over 9 taps (in [-1, 1] a 3x3 depthwise output stays under 6 and a broken top went
    // unseen). True when within the GEMM tolerance of the taps each output sums.
    //
    // With a bias, the same again with a residual R (ABI 1.10: act(conv + b + R), the residual
    // added in the epilogue of whichever path the shape takes), against the reference and, for
    // the activations computed exactly (none, ReLU, ReLU6), bit for bit against the pass without
    // R followed by the add and the activation: what inference's residual fold promises.
    bool forward_matches(std::mt19937& rng, const Shape& xs, const Shape& ws, const xylem_conv2d_attrs& a, bool bias) {
        const Shape ys = ops::conv2d_output_shape(xs, ws, a);
        auto x = uniform(rng, numel(xs));
        const auto w = uniform(rng, numel(ws)), b = uniform(rng, ws[0]);
        if (a.activation == XYLEM_ACT_RELU6)
            for (float& e : x) e *= 4.0f;
        Tensor tx = upload(dev(), xs, x), tw = upload(dev(), ws, w), tb = upload(dev(), {ws[0]}, b);
        const std::vector<float> nans(static_cast<size_t>(numel(ys)), NAN);
        Tensor ty = upload(dev(), ys, nans);
        ops::conv2d_fwd(dev(), tx, tw, bias ? &tb : nullptr, ty, a);
        const auto want = ref::conv2d_fwd(to_double(x), xs, to_double(w), ws, bias ? to_double(b) : ref::Vec{}, a);
        const double tolerance = tol::gemm(ws[1] * ws[2] * ws[3] + 2);
        if (!near(ty.to_vector(), want, tolerance)) return false;
        if (!bias) return true;
        auto r = uniform(rng, numel(ys));
        Tensor tr = upload(dev(), ys, r), tyr = upload(dev(), ys, nans);
        ops::conv2d_fwd(dev(), tx, tw, &tb, tyr, a, &tr);
        const auto got = tyr.to_vector();
        if (!near(got, ref::conv2d_fwd(to_double(x), xs, to_double(w), ws, to_double(b), a, to_double(r)), tolerance)) {
            ADD_FAILURE() << "with a residual";
            return false;
        }
        const bool exact = a.activation == XYLEM_ACT_NONE || a.activation == XYLEM_ACT_RELU || a.activation == XYLEM_ACT_RELU6;
        if (!exact) return true;
        xylem_conv2d_attrs plain = a;
        plain.activation = XYLEM_ACT_NONE;
        Tensor t0 = upload(dev(), ys, nans);
        ops::conv2d_fwd(dev(), tx, tw, &tb, t0, plain);
        const auto y0 = t0.to_vector();
        for (size_t i = 0; i < y0.size(); ++i) {
            float v = y0[i] + r[i];
            if (a.activation != XYLEM_ACT_NONE) v = v > 0.0f ? v : 0.0f;
            if (a.activation == XYLEM_ACT_RELU6) v = v < 6.0f ? v : 6.0f;
            if (std::memcmp(&v, &got[i], sizeof v) != 0) {
                ADD_FAILURE() << "with a residual, element " << i << ": " << got[i] << ", the unfused passes give " << v;
                return false;
            }
        }
        return true;
    }

    std::shared_ptr<Backend> backend_;
};

TEST_F(NativeConvPaths, ForwardMatchesFloat64) {
    std::mt19937 rng(1);
    for (const Case& c : kCases) {
        SCOPED_TRACE(describe(c));
        EXPECT_TRUE(forward_matches(rng, c.x, c.w, c.a, c.bias));
    }
}

TEST_F(NativeConvPaths, DataGradientMatchesFloat64) {
    std::mt19937 rng(2);
    for (const Case& c : kCases) {
        SCOPED_TRACE(describe(c));
        const Shape ys = ops::conv2d_output_shape(c.x, c.w, c.a);
        const auto dy = uniform(rng, numel(ys)), w = uniform(rng, numel(c.w));
        Tensor tdy = upload(dev(), ys, dy), tw = upload(dev(), c.w, w);
        Tensor tdx = upload(dev(), c.x, std::vector<float>(static_cast<size_t>(numel(c.x)), NAN));
        ops::conv2d_bwd_data(dev(), tdy, tw, tdx, c.a);  // every element written
        const auto want = ref::conv2d_bwd_data(to_double(dy), c.x, to_double(w), c.w, c.a);
        EXPECT_TRUE(near(tdx.to_vector(), want, tol::gemm(c.w[0] * c.w[2] * c.w[3])));
    }
}

TEST_F(NativeConvPaths, FilterGradientMatchesFloat64) {
    std::mt19937 rng(3);
    for (const Case& base : kCases)
        for (float beta : {0.0f, 0.5f}) {
            Case c = base;
            c.a.beta = beta;
            SCOPED_TRACE(describe(c) + " beta " + std::to_string(beta));
            const Shape ys = ops::conv2d_output_shape(c.x, c.w, c.a);
            const auto x = uniform(rng, numel(c.x)), dy = uniform(rng, numel(ys)), old = uniform(rng, numel(c.w));
            Tensor tx = upload(dev(), c.x, x), tdy = upload(dev(), ys, dy);
            // beta = 0 must not read dW
            Tensor tdw = upload(dev(), c.w, beta == 0.0f ? std::vector<float>(old.size(), NAN) : old);
            ops::conv2d_bwd_filter(dev(), tx, tdy, tdw, c.a);
            const auto want = ref::conv2d_bwd_filter(to_double(x), c.x, to_double(dy), c.w, beta, to_double(old), c.a);
            EXPECT_TRUE(near(tdw.to_vector(), want, tol::gemm(ys[0] * ys[2] * ys[3])));
        }
}

// Depthwise convolutions of random shapes (kernels 1-5 wide, strides 1-2, dilations 1-2,
// padding that often makes the flat path's "same" or half-size planes and often does not, 1-2
// filters per channel, planes from 1x1 to 40x40, every activation the kernel applies itself and
// one it leaves to a pass, with and without bias) against the float64 reference: whichever of
// the depthwise paths each shape takes.
TEST_F(NativeConvPaths, RandomDepthwiseShapesMatchFloat64) {
    std::mt19937 rng(5);
    auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
    const int acts[] = {XYLEM_ACT_NONE, XYLEM_ACT_RELU, XYLEM_ACT_RELU6, XYLEM_ACT_TANH};
    for (int trial = 0; trial < 300; ++trial) {
        const int r = pick(1, 5), s = pick(1, 5), st = pick(1, 2), dh = pick(1, 2), dw = pick(1, 2);
        const int c = pick(1, 12), kg = pick(1, 2), n = pick(1, 3);
        // "same" padding where the reach is even, half of it or random otherwise.
        const int ph = pick(0, 1) ? dh * (r - 1) / 2 : pick(0, 2), pw = pick(0, 1) ? dw * (s - 1) / 2 : pick(0, 2);
        int h = st == 2 && pick(0, 1) ? 2 * pick(1, 20) : pick(1, 40), w = st == 2 && pick(0, 1) ? 2 * pick(1, 20) : pick(1, 40);
        h = std::max(h, dh * (r - 1) + 1 - 2 * ph), w = std::max(w, dw * (s - 1) + 1 - 2 * pw);
        const xylem_conv2d_attrs a{st, st, ph, pw, dh, dw, c, acts[pick(0, 3)], 0};
        const Shape xs{n, c, h, w}, ws{c * kg, 1, r, s};
        const bool bias = pick(0, 1);
        SCOPED_TRACE("trial " + std::to_string(trial) + ": x " + to_string(xs) + " w " + to_string(ws) + " stride " +
                     std::to_string(st) + " pad " + std::to_string(ph) + "x" + std::to_string(pw) + " dilation " +
                     std::to_string(dh) + "x" + std::to_string(dw) + " act " + std::to_string(a.activation));
        ASSERT_TRUE(forward_matches(rng, xs, ws, a, bias));
    }
}

// Convolutions of random shapes against the float64 reference, forward: groups, 1x1 kernels
// (the pointwise paths, direct ones among them), strides, dilations, padding, maps large enough
// for the direct forward pass's blocks of rows (filters x computed positions past 64K floats),
// every activation the kernels apply or leave to a pass: whichever path each shape takes.
TEST_F(NativeConvPaths, RandomConvShapesMatchFloat64) {
    std::mt19937 rng(6);
    auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
    const int acts[] = {XYLEM_ACT_NONE, XYLEM_ACT_RELU, XYLEM_ACT_RELU6, XYLEM_ACT_SIGMOID};
    for (int trial = 0; trial < 200; ++trial) {
        const int g = pick(1, 3), cg = pick(1, 6), kg = pick(1, 24), n = pick(1, 3);
        const int r = pick(0, 2) ? pick(1, 3) * 2 - 1 : pick(1, 4), s = pick(0, 2) ? r : pick(1, 4);
        const int st = pick(1, 2), dh = pick(0, 3) ? 1 : 2, dw = pick(0, 3) ? 1 : 2;
        const int ph = pick(0, 2), pw = pick(0, 2);
        int h = pick(1, 3) == 1 ? pick(40, 72) : pick(1, 24), w = pick(1, 3) == 1 ? pick(40, 72) : pick(1, 24);
        h = std::max(h, dh * (r - 1) + 1 - 2 * ph), w = std::max(w, dw * (s - 1) + 1 - 2 * pw);
        const xylem_conv2d_attrs a{st, st, ph, pw, dh, dw, g, acts[pick(0, 3)], 0};
        const Shape xs{n, g * cg, h, w}, ws{g * kg, cg, r, s};
        const bool bias = pick(0, 1);
        SCOPED_TRACE("trial " + std::to_string(trial) + ": x " + to_string(xs) + " w " + to_string(ws) + " groups " +
                     std::to_string(g) + " stride " + std::to_string(st) + " pad " + std::to_string(ph) + "x" +
                     std::to_string(pw) + " dilation " + std::to_string(dh) + "x" + std::to_string(dw) + " act " +
                     std::to_string(a.activation));
        ASSERT_TRUE(forward_matches(rng, xs, ws, a, bias));
    }
}

// The pointwise direct path streams an output of 4 MB or more past the caches, which needs Y at a
// cache line: into a view 8 floats into its storage (a row view, reshaped) it must store as usual.
TEST_F(NativeConvPaths, StreamedPointwiseOutputIntoAnUnalignedView) {
    std::mt19937 rng(4);
    const Shape xs{2, 16, 64, 64}, ws{136, 16, 1, 1};
    const xylem_conv2d_attrs a{1, 1, 0, 0, 1, 1, 1, XYLEM_ACT_RELU, 0};
    const Shape ys = ops::conv2d_output_shape(xs, ws, a);
    const auto x = uniform(rng, numel(xs)), w = uniform(rng, numel(ws)), b = uniform(rng, ws[0]);
    Tensor tx = upload(dev(), xs, x), tw = upload(dev(), ws, w), tb = upload(dev(), {ws[0]}, b);
    Tensor storage = upload(dev(), {numel(ys) + 8}, std::vector<float>(static_cast<size_t>(numel(ys) + 8), NAN));
    Tensor ty = storage.rows(8, numel(ys)).reshaped(ys);
    ops::conv2d_fwd(dev(), tx, tw, &tb, ty, a);
    const auto want = ref::conv2d_fwd(to_double(x), xs, to_double(w), ws, to_double(b), a);
    EXPECT_TRUE(near(ty.to_vector(), want, tol::gemm(ws[1] + 1)));
    const auto all = storage.to_vector();
    for (int e = 0; e < 8; ++e) EXPECT_TRUE(std::isnan(all[static_cast<size_t>(e)])) << "element " << e << " before the view";
}

}  // namespace
}  // namespace xylem::test
