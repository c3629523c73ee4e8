// An 8x8 float transpose in GCC's vector extensions, for any instruction-set level: the direct
// convolutions' transposed dY (ops/conv_direct.cpp) and the wide GEMM's packed B^T panels
// (ops/gemm_narrow.cpp).
#pragma once

#include <cstdint>

namespace xylem::native {

// out[e*ldo + k] = in[k*ldi + e] for an 8x8 block: unpack, shuffle, then swap 128-bit halves,
// 24 shuffles for 64 floats (GCC picks the instructions for each level; at baseline an 8-float
// vector is two SSE registers and the last step only renames them).
__attribute__((always_inline)) inline void transpose8(const float* in, int64_t ldi, float* out, int64_t ldo) {
    using V8 = float __attribute__((vector_size(32)));
    using V8u = float __attribute__((vector_size(32), aligned(4), may_alias));
    using I8 = int __attribute__((vector_size(32)));
    V8 r[8], t[8];
    for (int i = 0; i < 8; ++i) r[i] = *reinterpret_cast<const V8u*>(in + i * ldi);
    for (int i = 0; i < 8; i += 2) {
        t[i] = __builtin_shuffle(r[i], r[i + 1], I8{0, 8, 1, 9, 4, 12, 5, 13});
        t[i + 1] = __builtin_shuffle(r[i], r[i + 1], I8{2, 10, 3, 11, 6, 14, 7, 15});
    }
    for (int i = 0; i < 8; i += 4)
        for (int h = 0; h < 2; ++h) {
            r[i + h] = __builtin_shuffle(t[i + h], t[i + 2 + h], I8{0, 1, 8, 9, 4, 5, 12, 13});
            r[i + 2 + h] = __builtin_shuffle(t[i + h], t[i + 2 + h], I8{2, 3, 10, 11, 6, 7, 14, 15});
        }
    // r: 0 = rows 0-3 x cols {0,4}, 2 = {1,5}, 1 = {2,6}, 3 = {3,7}; 4-7 the same for rows 4-7.
    constexpr int kCol[4] = {0, 2, 1, 3};
    for (int c = 0; c < 4; ++c) {
        *reinterpret_cast<V8u*>(out + c * ldo) = __builtin_shuffle(r[kCol[c]], r[4 + kCol[c]], I8{0, 1, 2, 3, 8, 9, 10, 11});
        *reinterpret_cast<V8u*>(out + (c + 4) * ldo) =
            __builtin_shuffle(r[kCol[c]], r[4 + kCol[c]], I8{4, 5, 6, 7, 12, 13, 14, 15});
    }
}

}  // namespace xylem::native
