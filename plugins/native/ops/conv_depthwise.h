// Depthwise convolutions (ops/conv_depthwise.cpp): one input channel per group (MobileNet's
// 3x3s), forward, channel by channel in cache. ops/conv.cpp calls them before the direct kernels.
#pragma once

#include "ops/conv_direct.h"

namespace xylem::native {

// Whether the depthwise kernel takes this shape: groups of one input channel (any number of
// filters per group), offsets within int32.
bool depthwise_fwd_fits(const ConvShape& v);
// Y = act(conv(X, W) + b) (b may be null).
void depthwise_fwd(const ConvShape& v, const float* x, const float* w, const ConvEpilogue& e, float* y,
                   Arena& scratch);

}  // namespace xylem::native
