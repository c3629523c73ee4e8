// BATCHNORM_FWD / BATCHNORM_BWD over axis 1 of [N,C] or [N,C,H,W,...], PyTorch semantics; the
// per-channel statistics accumulate in double.
#include <algorithm>
#include <cmath>

#include "isa.h"
#include "lane_sum.h"
#include "native.h"
#include "vecmath.h"

namespace xylem::native {

namespace {

using Bn = plugin_kit::BatchnormShape;  // inner = product of the axes after the channel

// The per-row loops, compiled for each instruction-set level (isa.h). A row is one channel of one
// sample: `inner` contiguous values. Sums run in double lanes in an order fixed by the row
// (lane_sum.h): they vectorize without -ffast-math, and their order never depends on the threads.

XYLEM_KERNEL(double, row_sum, (const float* __restrict x, int64_t n), (x, n)) {
    XYLEM_LANE_SUM_(static_cast<double>(x[j]))
}
XYLEM_KERNEL(double, row_squared_deviation, (const float* __restrict x, int64_t n, double mean), (x, n, mean)) {
    XYLEM_LANE_SUM_((x[j] - mean) * (x[j] - mean))
}
// Backward's two sums over a row, sum g and sum g * (x - mean), in one pass: each in 8 double
// lanes, then the tail, then the lanes in order, with dY read once and the two chains of additions
// overlapping (1.78 -> 1.56 ms for ResNet-20's 28x28 maps at batch 128, from memory). g is dY, or
// with the ReLU (row_gradient_sums_relu; y: its output) dY where y > 0 and 0 elsewhere.
struct RowSums {
    double dy, dyxc;
};
// The 8 lanes as vectors (lane_sum.h's F8, D8: GCC's SLP left the two lane arrays scalar): lane l
// still sums the terms j = i + l in order, so the bits are those of the scalar lanes.
static inline __attribute__((always_inline)) RowSums finish_row_sums(D8 lane_dy, D8 lane_dyxc, RowSums tail) {
    for (int l = 0; l < 8; ++l) {
        tail.dy += lane_dy[l];
        tail.dyxc += lane_dyxc[l];
    }
    return tail;
}
XYLEM_KERNEL(RowSums, row_gradient_sums, (const float* __restrict dy, const float* __restrict x, int64_t n, double mean),
             (dy, x, n, mean)) {
    D8 lane_dy = {}, lane_dyxc = {};
    const D8 m = D8{} + mean;
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const D8 g = __builtin_convertvector(*reinterpret_cast<const F8*>(dy + i), D8);
        lane_dy += g;
        lane_dyxc += g * (__builtin_convertvector(*reinterpret_cast<const F8*>(x + i), D8) - m);
    }
    RowSums tail{0.0, 0.0};
    for (; i < n; ++i) {
        const double g = dy[i];
        tail.dy += g;
        tail.dyxc += g * (static_cast<double>(x[i]) - mean);
    }
    return finish_row_sums(lane_dy, lane_dyxc, tail);
}
XYLEM_KERNEL(RowSums, row_gradient_sums_relu,
             (const float* __restrict dy, const float* __restrict y, const float* __restrict x, int64_t n, double mean),
             (dy, y, x, n, mean)) {
    D8 lane_dy = {}, lane_dyxc = {};
    const D8 m = D8{} + mean;
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const F8 d = *reinterpret_cast<const F8*>(dy + i), yv = *reinterpret_cast<const F8*>(y + i);
        const D8 g = __builtin_convertvector(yv > 0.0f ? d : F8{}, D8);
        lane_dy += g;
        lane_dyxc += g * (__builtin_convertvector(*reinterpret_cast<const F8*>(x + i), D8) - m);
    }
    RowSums tail{0.0, 0.0};
    for (; i < n; ++i) {
        const double g = vecmath::relu_gradient(dy[i], y[i]);
        tail.dy += g;
        tail.dyxc += g * (static_cast<double>(x[i]) - mean);
    }
    return finish_row_sums(lane_dy, lane_dyxc, tail);
}

// y = (x - s) * k + o, or with `relu` its ReLU (vecmath::relu, as act_fwd) (y may equal x).
XYLEM_KERNEL(void, row_affine, (const float* x, float* y, int64_t n, float s, float k, float o, bool relu),
             (x, y, n, s, k, o, relu)) {
    if (relu) {
        for (int64_t i = 0; i < n; ++i) y[i] = vecmath::relu((x[i] - s) * k + o);
    } else {
        for (int64_t i = 0; i < n; ++i) y[i] = (x[i] - s) * k + o;
    }
}
// dx = k * g + kx * (x - m) + k0, g as the row sums take it (y null: dY itself).
XYLEM_KERNEL(void, row_input_gradient,
             (const float* __restrict dy, const float* __restrict y, const float* __restrict x, float* __restrict dx,
              int64_t n, float k, float kx, float m, float k0),
             (dy, y, x, dx, n, k, kx, m, k0)) {
    if (y) {
        for (int64_t i = 0; i < n; ++i) dx[i] = k * vecmath::relu_gradient(dy[i], y[i]) + kx * (x[i] - m) + k0;
    } else {
        for (int64_t i = 0; i < n; ++i) dx[i] = k * dy[i] + kx * (x[i] - m) + k0;
    }
}

// Workers for a pass over every element: the channels (training: each channel's statistics and
// passes) or rows (inference's normalisation) are shared out; each channel's sum is one
// worker's, in one order, so the bits never depend on the thread count.
int workers_for(const Bn& b, int64_t units) {
    return split_workers(static_cast<double>(b.n * b.c * b.inner), kMinSplitElements, units);
}

// Rows (one channel of one sample) from which training's forward pass works channel by channel:
// shorter rows, N of them C rows apart, defeat the prefetcher (ResNet's 7x7 maps at batch 128:
// 0.35 ms in three passes over the tensor, which fits L2, against 0.41 channel by channel).
constexpr int64_t kMinChannelRow = 128;

// y[i] = (x[i] - shift[ch]) * scale[ch] + offset[ch], its ReLU with `relu` (y may equal x).
void normalize(const Bn& b, const float* x, float* y, const float* shift, const float* scale, const float* offset,
               bool relu) {
    if (b.inner == 1) {
        for (int64_t n = 0; n < b.n; ++n) {
            const float* xr = x + n * b.c;
            float* yr = y + n * b.c;
            for (int64_t ch = 0; ch < b.c; ++ch) {
                const float v = (xr[ch] - shift[ch]) * scale[ch] + offset[ch];
                yr[ch] = relu ? vecmath::relu(v) : v;
            }
        }
        return;
    }
    const int64_t rows = b.n * b.c;
    split_work(rows, workers_for(b, rows), [&](int64_t lo, int64_t hi, int) {
        for (int64_t r = lo; r < hi; ++r) {
            const int64_t ch = r % b.c;
            row_affine(x + r * b.inner, y + r * b.inner, b.inner, shift[ch], scale[ch], offset[ch], relu);
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
    const bool relu = attrs.activation == XYLEM_ACT_RELU;
    const float *x = tx.f32(), *gamma = tgamma.f32(), *beta = tbeta.f32();
    float *rm = trm.f32(), *rv = trv.f32();
    float* shift = stream.scratch_.alloc<float>(b.c);
    float* scale = stream.scratch_.alloc<float>(b.c);

    if (!attrs.training) {
        for (int64_t ch = 0; ch < b.c; ++ch) {
            shift[ch] = rm[ch];
            scale[ch] = static_cast<float>(gamma[ch] / std::sqrt(static_cast<double>(rv[ch]) + attrs.eps));
        }
        normalize(b, x, ty.f32(), shift, scale, beta, relu);
        return;
    }
    const int64_t count = b.count();  // >= 2: checked by the kit
    const double m = attrs.momentum, unbias = static_cast<double>(count) / static_cast<double>(count - 1);
    float *saved_mean = tsm.f32(), *saved_invstd = tsi.f32(), *y = ty.f32();
    // mean and the sum of squared deviations (two passes: it does not cancel like E[x^2] -
    // E[x]^2) of channel ch, in double, then its scale, shift and statistics.
    auto finish = [&](int64_t ch, double sum, double sq) {
        const double mean = sum / static_cast<double>(count);
        const double v = sq / static_cast<double>(count);  // biased: used to normalise
        const double invstd = 1.0 / std::sqrt(v + attrs.eps);
        saved_mean[ch] = shift[ch] = static_cast<float>(mean);
        saved_invstd[ch] = static_cast<float>(invstd);
        scale[ch] = static_cast<float>(gamma[ch] * invstd);
        rm[ch] = static_cast<float>((1.0 - m) * rm[ch] + m * mean);
        rv[ch] = static_cast<float>((1.0 - m) * rv[ch] + m * v * unbias);
    };
    if (b.inner == 1) {
        double* sum = stream.scratch_.alloc<double>(b.c);
        double* sq = stream.scratch_.alloc<double>(b.c);
        std::fill_n(sum, b.c, 0.0);
        std::fill_n(sq, b.c, 0.0);
        for (int64_t n = 0; n < b.n; ++n)
            for (int64_t ch = 0; ch < b.c; ++ch) sum[ch] += x[n * b.c + ch];
        for (int64_t n = 0; n < b.n; ++n)
            for (int64_t ch = 0; ch < b.c; ++ch) {
                const double d = x[n * b.c + ch] - sum[ch] / static_cast<double>(count);
                sq[ch] += d * d;
            }
        for (int64_t ch = 0; ch < b.c; ++ch) finish(ch, sum[ch], sq[ch]);
        normalize(b, x, y, shift, scale, beta, relu);
        return;
    }
    if (b.inner < kMinChannelRow) {  // short rows: three passes in memory order
        double* sum = stream.scratch_.alloc<double>(b.c);
        double* sq = stream.scratch_.alloc<double>(b.c);
        split_work(b.c, workers_for(b, b.c), [&](int64_t lo, int64_t hi, int) {
            for (int64_t ch = lo; ch < hi; ++ch) {
                sum[ch] = 0.0;
                for (int64_t n = 0; n < b.n; ++n) sum[ch] += row_sum(x + (n * b.c + ch) * b.inner, b.inner);
            }
            for (int64_t ch = lo; ch < hi; ++ch) {
                const double mean = sum[ch] / static_cast<double>(count);
                sq[ch] = 0.0;
                for (int64_t n = 0; n < b.n; ++n)
                    sq[ch] += row_squared_deviation(x + (n * b.c + ch) * b.inner, b.inner, mean);
                finish(ch, sum[ch], sq[ch]);
            }
        });
        normalize(b, x, y, shift, scale, beta, relu);
        return;
    }
    // Channel by channel: its N rows are read from memory once, by the first pass; the second
    // pass and the normalisation find them in L2 (a channel of ResNet's 28x28 maps at batch 128
    // is 400 KB), where three passes over the whole tensor read it from memory three times.
    split_work(b.c, workers_for(b, b.c), [&](int64_t lo, int64_t hi, int) {
        for (int64_t ch = lo; ch < hi; ++ch) {
            double sum = 0.0, sq = 0.0;
            for (int64_t n = 0; n < b.n; ++n) sum += row_sum(x + (n * b.c + ch) * b.inner, b.inner);
            const double mean = sum / static_cast<double>(count);
            for (int64_t n = 0; n < b.n; ++n) sq += row_squared_deviation(x + (n * b.c + ch) * b.inner, b.inner, mean);
            finish(ch, sum, sq);
            for (int64_t n = 0; n < b.n; ++n) {
                const int64_t at = (n * b.c + ch) * b.inner;
                row_affine(x + at, y + at, b.inner, shift[ch], scale[ch], beta[ch], relu);
            }
        }
    });
}

// dbeta = sum dY; dgamma = sum dY*xhat; dX = gamma*invstd/n * (n*dY - dbeta - xhat*dgamma).
void op_batchnorm_bwd(const xylem_op_desc& desc, xylem_stream_s& stream) {
    // The gradient the batch norm sees at i: dY, or with the ReLU dY where its output is positive.
    auto relu_gradient = [](const float* dy, const float* y, int64_t i) {
        return y ? vecmath::relu_gradient(dy[i], y[i]) : dy[i];
    };
    OpArgs a(desc, 5, 6, 3);
    const auto o = plugin_kit::batchnorm_bwd_operands(a);
    const Tensor &tdy = o.dy, &tx = o.x, &tgamma = o.gamma, &tsm = o.saved_mean, &tsi = o.saved_invstd;
    const Tensor &tdx = o.dx, &tdgamma = o.dgamma, &tdbeta = o.dbeta;
    const Bn& b = o.shape;
    if (partial_overlap(tdx, tdy) || overlap(tdx, tx)) a.fail("dX overlaps X or partly overlaps dY");
    if (o.relu && partial_overlap(tdx, o.y)) a.fail("dX partly overlaps Y (in place is fine)");
    const float* y = o.relu ? o.y.f32() : nullptr;  // the ReLU's output: its positives pass dY
    const int64_t count = b.count();
    if (count == 0) {
        std::fill_n(tdgamma.f32(), b.c, 0.0f);
        std::fill_n(tdbeta.f32(), b.c, 0.0f);
        return;
    }
    const float *dy = tdy.f32(), *x = tx.f32(), *gamma = tgamma.f32(), *mean = tsm.f32(), *invstd = tsi.f32();
    float *dgamma = tdgamma.f32(), *dbeta = tdbeta.f32(), *dx = tdx.f32();
    // Per channel from its sums of dY and dY*(x - mean): dX = k*dY + kx*(x - mean) + k0.
    struct Coef {
        float k, kx, k0;
    };
    auto coef = [&](int64_t ch, double sum_dy, double sum_dyxc) {
        const double is = invstd[ch], dg = sum_dyxc * is, db = sum_dy;
        const double g = gamma[ch] * is, per = 1.0 / static_cast<double>(count);
        dgamma[ch] = static_cast<float>(dg);
        dbeta[ch] = static_cast<float>(db);
        return Coef{static_cast<float>(g), static_cast<float>(-g * is * dg * per), static_cast<float>(-g * db * per)};
    };
    if (b.inner == 1) {
        double* sum_dy = stream.scratch_.alloc<double>(b.c);
        double* sum_dyxc = stream.scratch_.alloc<double>(b.c);
        Coef* c = stream.scratch_.alloc<Coef>(b.c);
        std::fill_n(sum_dy, b.c, 0.0);
        std::fill_n(sum_dyxc, b.c, 0.0);
        for (int64_t n = 0; n < b.n; ++n)
            for (int64_t ch = 0; ch < b.c; ++ch) sum_dy[ch] += relu_gradient(dy, y, n * b.c + ch);
        for (int64_t n = 0; n < b.n; ++n)
            for (int64_t ch = 0; ch < b.c; ++ch)
                sum_dyxc[ch] += static_cast<double>(relu_gradient(dy, y, n * b.c + ch)) *
                                (static_cast<double>(x[n * b.c + ch]) - mean[ch]);
        for (int64_t ch = 0; ch < b.c; ++ch) c[ch] = coef(ch, sum_dy[ch], sum_dyxc[ch]);
        for (int64_t n = 0; n < b.n; ++n) {
            const int64_t base = n * b.c;
            for (int64_t ch = 0; ch < b.c; ++ch)
                dx[base + ch] =
                    c[ch].k * relu_gradient(dy, y, base + ch) + c[ch].kx * (x[base + ch] - mean[ch]) + c[ch].k0;
        }
        return;
    }
    // Channel by channel, as forward: both sums read a row while it is in L1, and the input
    // gradient finds the channel's dY and X in L2.
    split_work(b.c, workers_for(b, b.c), [&](int64_t lo, int64_t hi, int) {
        for (int64_t ch = lo; ch < hi; ++ch) {
            double sum_dy = 0.0, sum_dyxc = 0.0;
            for (int64_t n = 0; n < b.n; ++n) {
                const int64_t at = (n * b.c + ch) * b.inner;
                const double m = mean[ch];
                const RowSums s = y ? row_gradient_sums_relu(dy + at, y + at, x + at, b.inner, m)
                                    : row_gradient_sums(dy + at, x + at, b.inner, m);
                sum_dy += s.dy;
                sum_dyxc += s.dyxc;
            }
            const Coef c = coef(ch, sum_dy, sum_dyxc);
            for (int64_t n = 0; n < b.n; ++n) {
                const int64_t at = (n * b.c + ch) * b.inner;
                row_input_gradient(dy + at, y ? y + at : nullptr, x + at, dx + at, b.inner, c.k, c.kx, mean[ch], c.k0);
            }
        }
    });
}

}  // namespace xylem::native
