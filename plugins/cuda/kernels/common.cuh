// Helpers shared by the .cu files: activations, warp and block reductions (grid sizing: kernels.h).
#pragma once

#include <cstdint>

#include "kernels.h"

namespace xylem::cuda::kernels {

#define XYLEM_GRID_STRIDE(i, n) \
    for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < (n); i += static_cast<int64_t>(gridDim.x) * blockDim.x)

// Same formulas as the native plugin (sigmoid's exp(-x) = inf gives 0, no NaN).
__device__ inline float apply_act(int act, float v) {
    switch (act) {
    case 1: return v > 0.0f ? v : 0.0f;
    case 2: return 1.0f / (1.0f + expf(-v));
    case 3: return tanhf(v);
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
