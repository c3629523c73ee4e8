// The body of a deterministic sum over n values for the per-row kernels (batch norm, layer norm):
// 32 double lanes (four vectors of 8 at AVX-512: four chains of dependent adds, where one chain
// of 8 lanes left a 128-wide layer-norm row waiting on 16 adds in a row), folded to 8 after the
// blocks of 32, then blocks of 8, then the tail, then the 8 lanes pairwise. It vectorises without
// -ffast-math, and its order is fixed by n alone, never by the threads. `term` is an expression
// of the index j; the macro declares lane, i and total and returns total.
#pragma once

#define XYLEM_LANE_SUM_(term)                                                       \
    double lane[32] = {};                                                           \
    int64_t i = 0;                                                                  \
    for (; i + 32 <= n; i += 32)                                                    \
        for (int l = 0; l < 32; ++l) {                                              \
            const int64_t j = i + l;                                                \
            lane[l] += (term);                                                      \
        }                                                                           \
    for (int l = 0; l < 8; ++l) lane[l] = (lane[l] + lane[l + 16]) + (lane[l + 8] + lane[l + 24]);   \
    for (; i + 8 <= n; i += 8)                                                      \
        for (int l = 0; l < 8; ++l) {                                               \
            const int64_t j = i + l;                                                \
            lane[l] += (term);                                                      \
        }                                                                           \
    double total = 0.0;                                                             \
    for (int64_t j = i; j < n; ++j) total += (term);                                \
    for (int w = 4; w >= 1; w /= 2)                                                 \
        for (int l = 0; l < w; ++l) lane[l] += lane[l + w];                         \
    total += lane[0];                                                               \
    return total;
