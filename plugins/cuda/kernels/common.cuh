// Helpers shared by the .cu files: activations, warp and block reductions (grid sizing: kernels.h).
#pragma once

#include <cstdint>

#include "kernels.h"

namespace xylem::cuda::kernels {

#define XYLEM_GRID_STRIDE(i, n) \
    for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < (n); i += static_cast<int64_t>(gridDim.x) * blockDim.x)

// GELU's two forms and their derivatives: plugin_kit/fused.h's gelu_value, gelu_derivative,
// gelu_tanh_value and gelu_tanh_derivative in float (the kit's templates are host code). One change
// in the tanh form's derivative: 1 - t*t is taken as sech^2(u) = 4e/(1+e)^2 with e = exp(-2|u|),
// the same value without the cancellation near |t| = 1, where a couple of ulps in tanhf would
// cost more than act_bwd's 1e-6 once multiplied by x*(1 + 0.134145x^2). The fused prelude
// (fused/codegen.cpp) spells the same formulas.
__device__ inline float gelu_value(float x) { return 0.5f * x * (1.0f + erff(x * 0.70710678118654752440f)); }
__device__ inline float gelu_derivative(float x) {  // Phi(x) + x*phi(x)
    return 0.5f * (1.0f + erff(x * 0.70710678118654752440f)) + x * expf(-0.5f * x * x) * 0.39894228040143267794f;
}
__device__ inline float gelu_tanh_value(float x) {
    const float u = 0.79788456080286535588f * (x + 0.044715f * x * x * x);
    return 0.5f * x * (1.0f + tanhf(u));
}
__device__ inline float gelu_tanh_derivative(float x) {
    const float u = 0.79788456080286535588f * (x + 0.044715f * x * x * x);
    const float t = tanhf(u), e = expf(-2.0f * fabsf(u));
    const float sech2 = 4.0f * e / ((1.0f + e) * (1.0f + e));
    return 0.5f * (1.0f + t) + 0.5f * x * sech2 * 0.79788456080286535588f * (1.0f + 0.134145f * x * x);
}

// Same formulas as the native plugin (sigmoid's exp(-x) = inf gives 0, no NaN). The GELUs reach
// here from act_fwd only: linear_fwd and conv2d_fwd refuse them (check_activation).
__device__ inline float apply_act(int act, float v) {
    switch (act) {
    case 1: return v > 0.0f ? v : 0.0f;
    case 2: return 1.0f / (1.0f + expf(-v));
    case 3: return tanhf(v);
    case 4: return gelu_value(v);
    case 5: return gelu_tanh_value(v);
    case 6: return fminf(v > 0.0f ? v : 0.0f, 6.0f);  // ReLU6 (ABI 1.8)
    default: return v;
    }
}

template <class T>
__device__ inline T warp_sum(T v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffffu, v, o);
    return v;
}

__device__ inline float warp_max(float v) {
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

// Sum over the block (blockDim.x a multiple of 32, at most 1024); the result is valid in thread 0.
template <class T>
__device__ inline T block_sum(T v) {
    __shared__ T partial[32];
    v = warp_sum(v);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    __syncthreads();  // partial may still be read by a previous call
    if (lane == 0) partial[warp] = v;
    __syncthreads();
    v = threadIdx.x < (blockDim.x >> 5) ? partial[threadIdx.x] : T(0);
    if (warp == 0) v = warp_sum(v);
    return v;
}

}  // namespace xylem::cuda::kernels
