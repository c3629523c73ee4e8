// BATCHNORM_FWD / BATCHNORM_BWD over axis 1 of [N,C] or [N,C,H,W,...], PyTorch semantics; the
// per-channel statistics accumulate in double.
#include <algorithm>
#include <cmath>

#include "native.h"

namespace xylem::native {

namespace {

using Bn = plugin_kit::BatchnormShape;  // inner = product of the axes after the channel

// Sum of f(i) for i < n in 8 double lanes: vectorizes without -ffast-math, like lane_sum.
template <class F>
inline double dsum(int64_t n, F f) {
    double lane[8] = {};
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int l = 0; l < 8; ++l) lane[l] += f(i + l);
    double total = 0.0;
    for (; i < n; ++i) total += f(i);
    for (int l = 0; l < 8; ++l) total += lane[l];
    return total;
}

// acc[ch] = sum of f(ch, i) over the element indices i of channel ch, read in memory order.
template <class F>
void channel_sums(const Bn& b, double* acc, F f) {
    std::fill_n(acc, b.c, 0.0);
    if (b.inner == 1) {  // [N,C]: whole rows into the accumulators, vectorized across channels
        for (int64_t n = 0; n < b.n; ++n)
            for (int64_t ch = 0; ch < b.c; ++ch) acc[ch] += f(ch, n * b.c + ch);
        return;
    }
    for (int64_t n = 0; n < b.n; ++n)
        for (int64_t ch = 0; ch < b.c; ++ch) {
            const int64_t base = (n * b.c + ch) * b.inner;
            acc[ch] += dsum(b.inner, [&](int64_t i) { return f(ch, base + i); });
        }
}

// y[i] = (x[i] - shift[ch]) * scale[ch] + offset[ch] (y may equal x).
void normalize(const Bn& b, const float* x, float* y, const float* shift, const float* scale, const float* offset) {
    for (int64_t n = 0; n < b.n; ++n) {
        if (b.inner == 1) {
            const float* xr = x + n * b.c;
            float* yr = y + n * b.c;
            for (int64_t ch = 0; ch < b.c; ++ch) yr[ch] = (xr[ch] - shift[ch]) * scale[ch] + offset[ch];
            continue;
        }
        for (int64_t ch = 0; ch < b.c; ++ch) {
            const int64_t base = (n * b.c + ch) * b.inner;
            const float s = shift[ch], k = scale[ch], o = offset[ch];
            for (int64_t i = 0; i < b.inner; ++i) y[base + i] = (x[base + i] - s) * k + o;
        }
    }
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
    channel_sums(b, mean, [x](int64_t, int64_t i) { return static_cast<double>(x[i]); });
    for (int64_t ch = 0; ch < b.c; ++ch) mean[ch] /= static_cast<double>(count);
    // Two passes: the sum of squared deviations does not cancel like E[x^2] - E[x]^2.
    channel_sums(b, var, [x, mean](int64_t ch, int64_t i) {
        const double d = x[i] - mean[ch];
        return d * d;
    });
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
    channel_sums(b, sum_dy, [dy](int64_t, int64_t i) { return static_cast<double>(dy[i]); });
    channel_sums(b, sum_dyxc, [dy, x, mean](int64_t ch, int64_t i) {
        return static_cast<double>(dy[i]) * (static_cast<double>(x[i]) - mean[ch]);
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
    for (int64_t n = 0; n < b.n; ++n) {
        if (b.inner == 1) {
            const int64_t base = n * b.c;
            for (int64_t ch = 0; ch < b.c; ++ch)
                dx[base + ch] = k[ch] * dy[base + ch] + kx[ch] * (x[base + ch] - mean[ch]) + k0[ch];
            continue;
        }
        for (int64_t ch = 0; ch < b.c; ++ch) {
            const int64_t base = (n * b.c + ch) * b.inner;
            const float kc = k[ch], kxc = kx[ch], k0c = k0[ch], mc = mean[ch];
            for (int64_t i = 0; i < b.inner; ++i) dx[base + i] = kc * dy[base + i] + kxc * (x[base + i] - mc) + k0c;
        }
    }
}

}  // namespace xylem::native
