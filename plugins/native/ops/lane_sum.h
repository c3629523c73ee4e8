// Deterministic double sums for the per-row kernels (batch norm, layer norm, attention's rows):
// lanes summed in an order fixed by the row's length alone, never by the threads, and written so
// that GCC vectorises them without -ffast-math.
#pragma once

#include <cstdint>

namespace xylem::native {

// Eight floats and eight doubles as GCC vectors (a row's lanes where GCC's SLP leaves two lane
// arrays scalar). F8 loads from any float address.
using F8 = float __attribute__((vector_size(32), aligned(4), may_alias));
using D8 = double __attribute__((vector_size(64)));

// lane[0] + ... + lane[N-1] pairwise, N a power of two: lane[l] += lane[l + N/2] for the first
// half, then the same on that half, down to one: log2(N) dependent adds instead of N (lane is
// overwritten). A fixed order, the same at every level.
template <int N>
inline double pairwise_sum(double* lane) {
    for (int w = N / 2; w >= 1; w /= 2)
        for (int l = 0; l < w; ++l) lane[l] += lane[l + w];
    return lane[0];
}
inline double pairwise_sum(D8 v) {
    double lane[8];
    for (int l = 0; l < 8; ++l) lane[l] = v[l];
    return pairwise_sum<8>(lane);
}

}  // namespace xylem::native

// The body of a sum over n values: 32 double lanes (four vectors of 8 at AVX-512: four chains of
// dependent adds, where one chain of 8 lanes left a 128-wide layer-norm row waiting on 16 adds in
// a row), folded to 8 after the blocks of 32, then blocks of 8, then the tail, then the 8 lanes
// pairwise. `term` is an expression of the index j; the macro declares lane, i and total and
// returns total.
#define XYLEM_LANE_SUM_(term)                                                                       \
    double lane[32] = {};                                                                           \
    int64_t i = 0;                                                                                  \
    for (; i + 32 <= n; i += 32)                                                                    \
        for (int l = 0; l < 32; ++l) {                                                              \
            const int64_t j = i + l;                                                                \
            lane[l] += (term);                                                                      \
        }                                                                                           \
    for (int l = 0; l < 8; ++l) lane[l] = (lane[l] + lane[l + 16]) + (lane[l + 8] + lane[l + 24]); \
    for (; i + 8 <= n; i += 8)                                                                      \
        for (int l = 0; l < 8; ++l) {                                                               \
            const int64_t j = i + l;                                                                \
            lane[l] += (term);                                                                      \
        }                                                                                           \
    double total = 0.0;                                                                             \
    for (int64_t j = i; j < n; ++j) total += (term);                                                \
    total += ::xylem::native::pairwise_sum<8>(lane);                                                \
    return total;
