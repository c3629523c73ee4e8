// SOFTMAX_FWD / SOFTMAX_BWD over the last axis, softmax or log_softmax; max-shifted for stability.
#include <cmath>

#include "native.h"
#include "vecmath.h"

namespace xylem::native {

// sum of exp(x[j] - m) over a row, each exp also stored in e[j] when e is given (e may be x: each
// e[j] is written after x[j] is read). vecmath's exp over chunks, so the loop vectorises (libm's
// expf is one call per element: most of xent's time at char-rnn's 114 classes). Rows of softmax
// and xent (loss.cpp) both go through here.
XYLEM_KERNEL(double, sum_exp, (const float* x, int64_t c, float m, float* e), (x, c, m, e)) {
    constexpr int64_t kChunk = 256;
    float buf[kChunk];
    double s = 0.0;
    for (int64_t j = 0; j < c; j += kChunk) {
        const int64_t n = std::min(kChunk, c - j);
        float* d = e ? e + j : buf;
        const float* xj = x + j;
        for (int64_t k = 0; k < n; ++k) d[k] = vecmath::exp(xj[k] - m);
        s += lane_sum(n, [d](int64_t k) { return d[k]; });
    }
    return s;
}

// 16 running maxima, then the max of those: one compare chain is 4 cycles an element, 16 of them
// vectorise. Every lane starts at x[0] and takes x[j] only when x[j] > its max, as one chain would,
// so the result is the same (NaNs after x[0] are skipped; a NaN x[0] stays).
XYLEM_KERNEL(float, row_max, (const float* x, int64_t c), (x, c)) {
    constexpr int64_t kLanes = 16;
    float lane[kLanes];
    for (int64_t l = 0; l < kLanes; ++l) lane[l] = x[0];
    int64_t j = 1;
    for (; c - j >= kLanes; j += kLanes)
        for (int64_t l = 0; l < kLanes; ++l) lane[l] = x[j + l] > lane[l] ? x[j + l] : lane[l];
    float m = x[0];
    for (int64_t l = 0; l < kLanes; ++l) m = lane[l] > m ? lane[l] : m;
    for (; j < c; ++j) m = x[j] > m ? x[j] : m;
    return m;
}

void op_softmax_fwd(const xylem_op_desc& desc, xylem_stream_s&) {
    OpArgs a(desc, 1, 1, 1);
    const bool log = a.attrs<xylem_softmax_attrs>().log != 0;
    const Tensor tx = a.in(0, "x"), ty = a.out(0, "y");
    a.same_numel(tx, "x", ty, "y");
    const int64_t rows = tx.rows(), c = tx.cols();
    if (c == 0) return;
    for (int64_t r = 0; r < rows; ++r) {
        const float* x = tx.f32() + r * c;
        float* y = ty.f32() + r * c;  // may alias x: each y[j] is written after x[j] is read
        const float m = row_max(x, c);
        if (log) {
            // (x - m) - log(sum), never x - (m + log(sum)): m + log(sum) would round at the size of m
            // (an error of 4e-3 for logits near 1e5), while x - m is exact for the values that matter.
            const float lse = static_cast<float>(std::log(sum_exp(x, c, m, nullptr)));
            for (int64_t j = 0; j < c; ++j) y[j] = (x[j] - m) - lse;
        } else {
            const float inv = static_cast<float>(1.0 / sum_exp(x, c, m, y));
            for (int64_t j = 0; j < c; ++j) y[j] *= inv;
        }
    }
}

// softmax: dx = y*(dy - sum(dy*y)); log_softmax: dx = dy - exp(y)*sum(dy).
void op_softmax_bwd(const xylem_op_desc& desc, xylem_stream_s&) {
    OpArgs a(desc, 2, 2, 1);
    const bool log = a.attrs<xylem_softmax_attrs>().log != 0;
    const Tensor tdy = a.in(0, "dy"), ty = a.in(1, "y"), tdx = a.out(0, "dx");
    a.same_numel(tdy, "dy", ty, "y");
    a.same_numel(tdy, "dy", tdx, "dx");
    const int64_t rows = ty.rows(), c = ty.cols();
    if (c == 0) return;
    for (int64_t r = 0; r < rows; ++r) {
        const float *dy = tdy.f32() + r * c, *y = ty.f32() + r * c;
        float* dx = tdx.f32() + r * c;
        if (log) {
            const float s = static_cast<float>(lane_sum(c, [dy](int64_t j) { return dy[j]; }));
            for (int64_t j = 0; j < c; ++j) dx[j] = dy[j] - vecmath::exp(y[j]) * s;
        } else {
            const float dot = static_cast<float>(lane_sum(c, [dy, y](int64_t j) { return dy[j] * y[j]; }));
            for (int64_t j = 0; j < c; ++j) dx[j] = y[j] * (dy[j] - dot);
        }
    }
}

}  // namespace xylem::native
