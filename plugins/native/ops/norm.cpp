// BATCHNORM_FWD / BATCHNORM_BWD over axis 1 of [N,C] or [N,C,H,W,...], PyTorch semantics; the
// per-channel statistics accumulate in double.
#include <algorithm>
#include <cmath>

#include "isa.h"
#include "native.h"

namespace xylem::native {

namespace {

using Bn = plugin_kit::BatchnormShape;  // inner = product of the axes after the channel

// The per-row loops, compiled for each instruction-set level (isa.h). A row is one channel of one
// sample: `inner` contiguous values. Sums run in 8 double lanes, then the tail, then the lanes in
// order: they vectorize without -ffast-math, and their order never depends on the threads.
#define XYLEM_LANE_SUM_(term)                                         \
    double lane[8] = {};                                              \
    int64_t i = 0;                                                    \
    for (; i + 8 <= n; i += 8)                                        \
        for (int l = 0; l < 8; ++l) {                                 \
            const int64_t j = i + l;                                  \
            lane[l] += (term);                                        \
        }                                                             \
    double total = 0.0;                                               \
    for (int64_t j = i; j < n; ++j) total += (term);                  \
    for (int l = 0; l < 8; ++l) total += lane[l];                     \
    return total;

XYLEM_KERNEL(double, row_sum, (const float* __restrict x, int64_t n), (x, n)) {
    XYLEM_LANE_SUM_(static_cast<double>(x[j]))
}
XYLEM_KERNEL(double, row_squared_deviation, (const float* __restrict x, int64_t n, double mean), (x, n, mean)) {
    XYLEM_LANE_SUM_((x[j] - mean) * (x[j] - mean))
}
XYLEM_KERNEL(double, row_dot_deviation, (const float* __restrict dy, const float* __restrict x, int64_t n, double mean),
             (dy, x, n, mean)) {
    XYLEM_LANE_SUM_(static_cast<double>(dy[j]) * (static_cast<double>(x[j]) - mean))
}
#undef XYLEM_LANE_SUM_

// y = (x - s) * k + o (y may equal x).
XYLEM_KERNEL(void, row_affine, (const float* x, float* y, int64_t n, float s, float k, float o), (x, y, n, s, k, o)) {
    for (int64_t i = 0; i < n; ++i) y[i] = (x[i] - s) * k + o;
}
// dx = k * dy + kx * (x - m) + k0.
XYLEM_KERNEL(void, row_input_gradient,
             (const float* __restrict dy, const float* __restrict x, float* __restrict dx, int64_t n, float k, float kx,
              float m, float k0),
             (dy, x, dx, n, k, kx, m, k0)) {
    for (int64_t i = 0; i < n; ++i) dx[i] = k * dy[i] + kx * (x[i] - m) + k0;
}

// Workers for a pass over every element: the channels (statistics) or rows (the elementwise
// passes) are shared out; each channel's sum is one worker's, in one order, so the bits never
// depend on the thread count.
int workers_for(const Bn& b, int64_t units) {
    return split_workers(static_cast<double>(b.n * b.c * b.inner), kMinSplitElements, units);
}

// acc[ch] = the sum over the samples n, in order, of row(ch, first element of row (n, ch)); for
// [N,C] (inner = 1), of elem(ch, i) over the channel's elements, whole rows at a time.
template <class Elem, class Row>
void channel_sums(const Bn& b, double* acc, Elem elem, Row row) {
    if (b.inner == 1) {
        std::fill_n(acc, b.c, 0.0);
        for (int64_t n = 0; n < b.n; ++n)
            for (int64_t ch = 0; ch < b.c; ++ch) acc[ch] += elem(ch, n * b.c + ch);
        return;
    }
    split_work(b.c, workers_for(b, b.c), [&](int64_t lo, int64_t hi, int) {
        for (int64_t ch = lo; ch < hi; ++ch) {
            double a = 0.0;
            for (int64_t n = 0; n < b.n; ++n) a += row(ch, (n * b.c + ch) * b.inner);
            acc[ch] = a;
        }
    });
}

// y[i] = (x[i] - shift[ch]) * scale[ch] + offset[ch] (y may equal x).
void normalize(const Bn& b, const float* x, float* y, const float* shift, const float* scale, const float* offset) {
    if (b.inner == 1) {
        for (int64_t n = 0; n < b.n; ++n) {
            const float* xr = x + n * b.c;
            float* yr = y + n * b.c;
            for (int64_t ch = 0; ch < b.c; ++ch) yr[ch] = (xr[ch] - shift[ch]) * scale[ch] + offset[ch];
        }
        return;
    }
    const int64_t rows = b.n * b.c;
    split_work(rows, workers_for(b, rows), [&](int64_t lo, int64_t hi, int) {
        for (int64_t r = lo; r < hi; ++r) {
            const int64_t ch = r % b.c;
            row_affine(x + r * b.inner, y + r * b.inner, b.inner, shift[ch], scale[ch], offset[ch]);
        }
    });
}

bool partial_overlap(const Tensor& a, const Tensor& b) { return overlap(a, b) && a.data != b.data; }

}  // namespace

void op_batchnorm_fwd(const xylem_op_desc& desc, xylem_stream_s& stream) {
    OpArgs a(desc, 3, 3, 5);
    const auto o = plugin_kit::batchnorm_fwd_operands(a);
    const auto& attrs = o.attrs;
    const Tensor &tx = o.x, &tgamma = o.gamma, &tbeta = o.beta, &ty = o.y;
    const Tensor &trm = o.running_mean, &trv = o.running_var, &tsm = o.saved_mean, &tsi = o.saved_invstd;
    const Bn& b = o.shape;
    if (partial_overlap(ty, tx)) a.fail("Y partly overlaps X (in place is fine)");
    const float *x = tx.f32(), *gamma = tgamma.f32(), *beta = tbeta.f32();
    float *rm = trm.f32(), *rv = trv.f32();
    float* shift = stream.scratch_.alloc<float>(b.c);
    float* scale = stream.scratch_.alloc<float>(b.c);

    if (!attrs.training) {
        for (int64_t ch = 0; ch < b.c; ++ch) {
            shift[ch] = rm[ch];
            scale[ch] = static_cast<float>(gamma[ch] / std::sqrt(static_cast<double>(rv[ch]) + attrs.eps));
        }
        normalize(b, x, ty.f32(), shift, scale, beta);
        return;
    }
    const int64_t count = b.count();  // >= 2: checked by the kit
    double* mean = stream.scratch_.alloc<double>(b.c);
    double* var = stream.scratch_.alloc<double>(b.c);
    channel_sums(
        b, mean, [x](int64_t, int64_t i) { return static_cast<double>(x[i]); },
        [x, &b](int64_t, int64_t at) { return row_sum(x + at, b.inner); });
    for (int64_t ch = 0; ch < b.c; ++ch) mean[ch] /= static_cast<double>(count);
    // Two passes: the sum of squared deviations does not cancel like E[x^2] - E[x]^2.
    channel_sums(
        b, var,
        [x, mean](int64_t ch, int64_t i) {
            const double d = x[i] - mean[ch];
            return d * d;
        },
        [x, mean, &b](int64_t ch, int64_t at) { return row_squared_deviation(x + at, b.inner, mean[ch]); });
    const double m = attrs.momentum, unbias = static_cast<double>(count) / static_cast<double>(count - 1);
    float *saved_mean = tsm.f32(), *saved_invstd = tsi.f32();
    for (int64_t ch = 0; ch < b.c; ++ch) {
        const double v = var[ch] / static_cast<double>(count);  // biased: used to normalise
        const double invstd = 1.0 / std::sqrt(v + attrs.eps);
        saved_mean[ch] = shift[ch] = static_cast<float>(mean[ch]);
        saved_invstd[ch] = static_cast<float>(invstd);
        scale[ch] = static_cast<float>(gamma[ch] * invstd);
        rm[ch] = static_cast<float>((1.0 - m) * rm[ch] + m * mean[ch]);
        rv[ch] = static_cast<float>((1.0 - m) * rv[ch] + m * v * unbias);
    }
    normalize(b, x, ty.f32(), shift, scale, beta);
}

// dbeta = sum dY; dgamma = sum dY*xhat; dX = gamma*invstd/n * (n*dY - dbeta - xhat*dgamma).
void op_batchnorm_bwd(const xylem_op_desc& desc, xylem_stream_s& stream) {
    OpArgs a(desc, 5, 5, 3);
    const auto o = plugin_kit::batchnorm_bwd_operands(a);
    const Tensor &tdy = o.dy, &tx = o.x, &tgamma = o.gamma, &tsm = o.saved_mean, &tsi = o.saved_invstd;
    const Tensor &tdx = o.dx, &tdgamma = o.dgamma, &tdbeta = o.dbeta;
    const Bn& b = o.shape;
    if (partial_overlap(tdx, tdy) || overlap(tdx, tx)) a.fail("dX overlaps X or partly overlaps dY");
    const int64_t count = b.count();
    if (count == 0) {
        std::fill_n(tdgamma.f32(), b.c, 0.0f);
        std::fill_n(tdbeta.f32(), b.c, 0.0f);
        return;
    }
    const float *dy = tdy.f32(), *x = tx.f32(), *gamma = tgamma.f32(), *mean = tsm.f32(), *invstd = tsi.f32();
    double* sum_dy = stream.scratch_.alloc<double>(b.c);
    double* sum_dyxc = stream.scratch_.alloc<double>(b.c);  // sum dY*(x - mean)
    channel_sums(
        b, sum_dy, [dy](int64_t, int64_t i) { return static_cast<double>(dy[i]); },
        [dy, &b](int64_t, int64_t at) { return row_sum(dy + at, b.inner); });
    channel_sums(
        b, sum_dyxc,
        [dy, x, mean](int64_t ch, int64_t i) { return static_cast<double>(dy[i]) * (static_cast<double>(x[i]) - mean[ch]); },
        [dy, x, mean, &b](int64_t ch, int64_t at) {
            return row_dot_deviation(dy + at, x + at, b.inner, static_cast<double>(mean[ch]));
        });
    // dX = k*dY + kx*(x - mean) + k0 per channel.
    float* k = stream.scratch_.alloc<float>(b.c);
    float* kx = stream.scratch_.alloc<float>(b.c);
    float* k0 = stream.scratch_.alloc<float>(b.c);
    float *dgamma = tdgamma.f32(), *dbeta = tdbeta.f32();
    for (int64_t ch = 0; ch < b.c; ++ch) {
        const double is = invstd[ch], dg = sum_dyxc[ch] * is, db = sum_dy[ch];
        const double g = gamma[ch] * is, per = 1.0 / static_cast<double>(count);
        dgamma[ch] = static_cast<float>(dg);
        dbeta[ch] = static_cast<float>(db);
        k[ch] = static_cast<float>(g);
        kx[ch] = static_cast<float>(-g * is * dg * per);
        k0[ch] = static_cast<float>(-g * db * per);
    }
    float* dx = tdx.f32();
    if (b.inner == 1) {
        for (int64_t n = 0; n < b.n; ++n) {
            const int64_t base = n * b.c;
            for (int64_t ch = 0; ch < b.c; ++ch)
                dx[base + ch] = k[ch] * dy[base + ch] + kx[ch] * (x[base + ch] - mean[ch]) + k0[ch];
        }
        return;
    }
    const int64_t rows = b.n * b.c;
    split_work(rows, workers_for(b, rows), [&](int64_t lo, int64_t hi, int) {
        for (int64_t r = lo; r < hi; ++r) {
            const int64_t ch = r % b.c, at = r * b.inner;
            row_input_gradient(dy + at, x + at, dx + at, b.inner, k[ch], kx[ch], mean[ch], k0[ch]);
        }
    });
}

}  // namespace xylem::native
