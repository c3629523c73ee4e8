// SOFTMAX_FWD / SOFTMAX_BWD over the last axis, softmax or log_softmax; max-shifted for stability.
#include <cmath>

#include "native.h"

namespace xylem::native {

namespace {

float row_max(const float* x, int64_t c) {
    float m = x[0];
    for (int64_t j = 1; j < c; ++j) m = x[j] > m ? x[j] : m;
    return m;
}

}  // namespace

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
        double sum = 0.0;
        if (log) {
            for (int64_t j = 0; j < c; ++j) sum += std::exp(x[j] - m);
            // (x - m) - log(sum), never x - (m + log(sum)): m + log(sum) would round at the size of m
            // (an error of 4e-3 for logits near 1e5), while x - m is exact for the values that matter.
            const float lse = static_cast<float>(std::log(sum));
            for (int64_t j = 0; j < c; ++j) y[j] = (x[j] - m) - lse;
        } else {
            for (int64_t j = 0; j < c; ++j) {
                const float e = std::exp(x[j] - m);
                y[j] = e;
                sum += e;
            }
            const float inv = static_cast<float>(1.0 / sum);
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
            for (int64_t j = 0; j < c; ++j) dx[j] = dy[j] - std::exp(y[j]) * s;
        } else {
            const float dot = static_cast<float>(lane_sum(c, [dy, y](int64_t j) { return dy[j] * y[j]; }));
            for (int64_t j = 0; j < c; ++j) dx[j] = y[j] * (dy[j] - dot);
        }
    }
}

}  // namespace xylem::native
