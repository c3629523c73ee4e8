// The body of a deterministic sum over n values for the per-row kernels (batch norm, layer norm):
// 8 double lanes, then the tail, then the lanes in order. It vectorises without -ffast-math, and
// its order is fixed by n alone, never by the threads. `term` is an expression of the index j; the
// macro declares lane, i and total and returns total.
#pragma once

#define XYLEM_LANE_SUM_(term)                        \
    double lane[8] = {};                             \
    int64_t i = 0;                                   \
    for (; i + 8 <= n; i += 8)                       \
        for (int l = 0; l < 8; ++l) {                \
            const int64_t j = i + l;                 \
            lane[l] += (term);                       \
        }                                            \
    double total = 0.0;                              \
    for (int64_t j = i; j < n; ++j) total += (term); \
    for (int l = 0; l < 8; ++l) total += lane[l];    \
    return total;
