// Winograd F(2x2, 3x3) convolutions (ops/conv_winograd.cpp): the forward pass and the data
// gradient of stride-1 undilated 3x3 convolutions, which ops/conv.cpp takes where they fit.
#pragma once

#include "ops/conv_direct.h"

namespace xylem::native {

// Whether the Winograd kernels take this shape: 3x3, stride 1, no dilation, one group, padding
// at most 2, and a map whose tiles waste little at this instruction-set level.
bool winograd_fwd_fits(const ConvShape& v);
bool winograd_bwd_data_fits(const ConvShape& v);
bool winograd_bwd_filter_fits(const ConvShape& v);

// Y = act(conv(X, W) + b) (b may be null).
void winograd_fwd(const ConvShape& v, const float* x, const float* w, const ConvEpilogue& e, float* y,
                  Arena& scratch);
// dX = the adjoint of the forward conv applied to dY (every element written).
void winograd_bwd_data(const ConvShape& v, const float* dy, const float* w, float* dx, Arena& scratch);
// dW = beta*dW + the filter gradient (beta = 0 does not read dW).
void winograd_bwd_filter(const ConvShape& v, const float* x, const float* dy, float beta, float* dw, Arena& scratch);

}  // namespace xylem::native
