// Winograd F(4x4, 3x3) (ops/conv_winograd_f4.cpp): 36 multiply-adds per 4x4 outputs and channel
// pair where F(2x2, 3x3) spends 64 and the direct kernels 144. ops/conv_winograd.cpp chooses
// between the two per shape.
#pragma once

#include "ops/conv_direct.h"

namespace xylem::native {

// A pass of `cin` planes h x w per image, padded by (ph, pw), into `kout` planes oh x ow.
struct Winograd4Plan {
    int64_t n, cin, h, w, kout, ph, pw, oh, ow;
    int64_t th, tw, we, tq, tiles;  // th x tw tiles of 4x4 outputs; we = tw + 1: a phase plane's
                                    // row; tq: tiles per row kept (tw, or we with the extra
                                    // column); tiles = th*tq per image
    int64_t phase;              // floats per phase plane
    int64_t chunk, cols, qpad, ld;  // images per chunk; chunk*tiles; cols rounded up to a vector
                                    // multiple; row length of V and M (with room for the spill)
};

Winograd4Plan winograd4_plan(int64_t n, int64_t cin, int64_t h, int64_t w, int64_t kout, int64_t ph, int64_t pw);
// Whether the pass takes the plan: offsets within int32, enough channels, tiles and chunks, and
// few computed outputs dropped.
bool winograd4_takes(const Winograd4Plan& p);
// y = act(conv(x, filters) + b) (b may be null) with filters [kout][cin][3][3].
void winograd4_pass(const Winograd4Plan& p, const float* x, const float* filters, const ConvEpilogue& e, float* y,
                    Arena& scratch);

}  // namespace xylem::native
