// Gradient clipping: CLAMP (by value), SUM_SQUARES (the squared global norm, accumulated across
// parameters into a device scalar) and CLIP_BY_NORM (scales by a factor read from that scalar).
#include <cmath>

#include "native.h"

namespace xylem::native {

namespace {

// NaN stays NaN (both comparisons are false), as torch.clamp.
XYLEM_KERNEL(void, clamp, (float* __restrict x, int64_t n, float lo, float hi), (x, n, lo, hi)) {
    for (int64_t i = 0; i < n; ++i) x[i] = x[i] < lo ? lo : x[i] > hi ? hi : x[i];
}

XYLEM_KERNEL(void, scale, (float* __restrict x, int64_t n, float k), (x, n, k)) {
    for (int64_t i = 0; i < n; ++i) x[i] *= k;
}

}  // namespace

void op_clamp(const xylem_op_desc& desc, xylem_stream_s&) {
    OpArgs a(desc, 0, 0, 1);
    const auto attrs = a.attrs<xylem_clamp_attrs>();
    if (!(attrs.lo <= attrs.hi)) a.fail("lower bound %g exceeds upper bound %g", attrs.lo, attrs.hi);
    const Tensor tx = a.out(0, "x");
    clamp(tx.f32(), tx.numel, attrs.lo, attrs.hi);
}

// Summed in float lanes flushed to double (lane_sum): a fixed order, so the same bits every run.
// Compiled per level (isa.h) for the vector width; lane_sum's order, so the same bits at each.
XYLEM_KERNEL(double, sum_of_squares, (const float* x, int64_t n), (x, n)) {
    return lane_sum(n, [x](int64_t i) { return x[i] * x[i]; });
}

void op_sum_squares(const xylem_op_desc& desc, xylem_stream_s&) {
    OpArgs a(desc, 1, 1, 1);
    const float beta = a.attrs<xylem_sum_squares_attrs>().beta;
    const Tensor tx = a.in(0, "x"), tacc = a.out(0, "acc");
    a.check_scalar(tacc, "acc");
    const float* x = tx.f32();
    const double total = sum_of_squares(x, tx.numel);
    float* acc = tacc.f32();
    acc[0] = beta == 0.0f ? static_cast<float>(total) : static_cast<float>(beta * acc[0] + total);
}

// torch.nn.utils.clip_grad_norm_: coef = max_norm / (norm + eps), clamped to at most 1 (a NaN
// norm gives a NaN coefficient). A coefficient of exactly 1 leaves x as it is, so it is skipped.
void op_clip_by_norm(const xylem_op_desc& desc, xylem_stream_s&) {
    OpArgs a(desc, 1, 1, 1);
    const auto attrs = a.attrs<xylem_clip_by_norm_attrs>();
    const Tensor ts = a.in(0, "sumsq"), tx = a.out(0, "x");
    a.check_scalar(ts, "sumsq");
    const float norm = std::sqrt(ts.f32()[0]);
    float coef = attrs.max_norm / (norm + attrs.eps);
    coef = coef > 1.0f ? 1.0f : coef;
    if (coef != 1.0f) scale(tx.f32(), tx.numel, coef);
}

}  // namespace xylem::native
