// Naive float64 reference for the convolutional ops of xylem/ops.h (ABI 1.1): conv2d forward
// and both backward passes, 2-D max/average pooling, and batch normalisation.
#pragma once

#include <cmath>
#include <cstdint>
#include <vector>

#include "support/reference.h"

namespace xylem::ref {

// Output size per axis: (in + 2*pad - dilation*(kernel-1) - 1) / stride + 1.
inline int64_t conv_out(int64_t in, int64_t kernel, int64_t stride, int64_t pad, int64_t dilation) {
    return (in + 2 * pad - dilation * (kernel - 1) - 1) / stride + 1;
}

// Geometry of one convolution: x [N,C,H,W], w [K,C/groups,R,S], y [N,K,OH,OW].
struct ConvGeom {
    int64_t n, c, h, w, k, r, s, oh, ow, groups;
    xylem_conv2d_attrs a;
    ConvGeom(const Dims& x, const Dims& wd, const xylem_conv2d_attrs& attrs)
        : n(x[0]), c(x[1]), h(x[2]), w(x[3]), k(wd[0]), r(wd[2]), s(wd[3]), groups(attrs.groups), a(attrs) {
        oh = conv_out(h, r, a.stride_h, a.pad_h, a.dilation_h);
        ow = conv_out(w, s, a.stride_w, a.pad_w, a.dilation_w);
    }
    // Calls f(x index, w index, y index) for every product term of the convolution.
    template <class F>
    void each_term(F f) const {
        const int64_t cg = c / groups, kg = k / groups;
        for (int64_t b = 0; b < n; ++b)
            for (int64_t ko = 0; ko < k; ++ko)
                for (int64_t i = 0; i < oh; ++i)
                    for (int64_t j = 0; j < ow; ++j)
                        for (int64_t ci = 0; ci < cg; ++ci)
                            for (int64_t u = 0; u < r; ++u)
                                for (int64_t v = 0; v < s; ++v) {
                                    const int64_t ih = i * a.stride_h - a.pad_h + u * a.dilation_h;
                                    const int64_t iw = j * a.stride_w - a.pad_w + v * a.dilation_w;
                                    if (ih < 0 || ih >= h || iw < 0 || iw >= w) continue;
                                    const int64_t cin = (ko / kg) * cg + ci;
                                    f(((b * c + cin) * h + ih) * w + iw, ((ko * cg + ci) * r + u) * s + v,
                                      ((b * k + ko) * oh + i) * ow + j);
                                }
    }
};

// CONV2D_FWD: y = act(conv(x, w) + b + r); an empty b means no bias, an empty r no residual (ABI 1.10).
inline Vec conv2d_fwd(const Vec& x, const Dims& xd, const Vec& w, const Dims& wd, const Vec& b,
                      const xylem_conv2d_attrs& a, const Vec& r = {}) {
    const ConvGeom g(xd, wd, a);
    Vec y(static_cast<size_t>(g.n * g.k * g.oh * g.ow), 0.0);
    g.each_term([&](int64_t xi, int64_t wi, int64_t yi) { y[yi] += x[xi] * w[wi]; });
    const int64_t plane = g.oh * g.ow;
    for (size_t i = 0; i < y.size(); ++i)
        y[i] = act(a.activation, y[i] + (b.empty() ? 0.0 : b[(static_cast<int64_t>(i) / plane) % g.k]) +
                                     (r.empty() ? 0.0 : r[i]));
    return y;
}

// CONV2D_BWD_DATA: dx = the gradient of sum(dy * conv(x, w)) with respect to x.
inline Vec conv2d_bwd_data(const Vec& dy, const Dims& xd, const Vec& w, const Dims& wd, const xylem_conv2d_attrs& a) {
    const ConvGeom g(xd, wd, a);
    Vec dx(static_cast<size_t>(count(xd)), 0.0);
    g.each_term([&](int64_t xi, int64_t wi, int64_t yi) { dx[xi] += dy[yi] * w[wi]; });
    return dx;
}

// CONV2D_BWD_FILTER: dw = beta*dw + the filter gradient (beta = 0 never reads dw).
inline Vec conv2d_bwd_filter(const Vec& x, const Dims& xd, const Vec& dy, const Dims& wd, double beta, const Vec& dw,
                             const xylem_conv2d_attrs& a) {
    const ConvGeom g(xd, wd, a);
    Vec out(static_cast<size_t>(count(wd)), 0.0);
    g.each_term([&](int64_t xi, int64_t wi, int64_t yi) { out[wi] += x[xi] * dy[yi]; });
    if (beta != 0.0)
        for (size_t i = 0; i < out.size(); ++i) out[i] += beta * dw[i];
    return out;
}

// POOL2D: calls f(y index, in-bounds x indices of the window in scan order, divisor).
template <class F>
void each_window(const Dims& xd, const xylem_pool2d_attrs& a, F f) {
    const int64_t oh = (xd[2] + 2 * a.pad_h - a.kernel_h) / a.stride_h + 1;
    const int64_t ow = (xd[3] + 2 * a.pad_w - a.kernel_w) / a.stride_w + 1;
    std::vector<int64_t> idx;
    for (int64_t p = 0; p < xd[0] * xd[1]; ++p)
        for (int64_t i = 0; i < oh; ++i)
            for (int64_t j = 0; j < ow; ++j) {
                idx.clear();
                for (int64_t u = 0; u < a.kernel_h; ++u)
                    for (int64_t v = 0; v < a.kernel_w; ++v) {
                        const int64_t ih = i * a.stride_h - a.pad_h + u, iw = j * a.stride_w - a.pad_w + v;
                        if (ih >= 0 && ih < xd[2] && iw >= 0 && iw < xd[3])
                            idx.push_back((p * xd[2] + ih) * xd[3] + iw);
                    }
                const double div = a.count_include_pad ? static_cast<double>(a.kernel_h) * a.kernel_w
                                                       : static_cast<double>(idx.size());
                f((p * oh + i) * ow + j, idx, div);
            }
}

// The first maximum of a window: padding never wins.
inline int64_t window_argmax(const Vec& x, const std::vector<int64_t>& idx) {
    int64_t best = idx[0];
    for (int64_t i : idx)
        if (x[i] > x[best]) best = i;
    return best;
}

inline Vec pool2d_fwd(const Vec& x, const Dims& xd, const xylem_pool2d_attrs& a) {
    Vec y;
    each_window(xd, a, [&](int64_t yi, const std::vector<int64_t>& idx, double div) {
        if (static_cast<int64_t>(y.size()) <= yi) y.resize(static_cast<size_t>(yi + 1));
        if (a.mode == XYLEM_POOL_MAX) {
            y[yi] = x[window_argmax(x, idx)];
        } else {
            double s = 0.0;
            for (int64_t i : idx) s += x[i];
            y[yi] = s / div;
        }
    });
    return y;
}

// POOL2D_BWD: max routes each window's gradient to its first maximum; average spreads dy/divisor.
inline Vec pool2d_bwd(const Vec& dy, const Vec& x, const Dims& xd, const xylem_pool2d_attrs& a) {
    Vec dx(static_cast<size_t>(count(xd)), 0.0);
    each_window(xd, a, [&](int64_t yi, const std::vector<int64_t>& idx, double div) {
        if (a.mode == XYLEM_POOL_MAX) {
            dx[window_argmax(x, idx)] += dy[yi];
        } else {
            for (int64_t i : idx) dx[i] += dy[yi] / div;
        }
    });
    return dx;
}

// BATCHNORM over axis 1 of x [N, C, ...].
struct BatchNormFwd {
    Vec y, running_mean, running_var, saved_mean, saved_invstd;
};

inline BatchNormFwd batchnorm_fwd(const Vec& x, const Dims& xd, const Vec& gamma, const Vec& beta, const Vec& rmean,
                                  const Vec& rvar, const xylem_batchnorm_attrs& a) {
    const int64_t n = xd[0], c = xd[1], inner = count(xd) / (n * c), m = n * inner;
    BatchNormFwd out{Vec(x.size()), rmean, rvar, Vec(static_cast<size_t>(c)), Vec(static_cast<size_t>(c))};
    auto at = [&](int64_t b, int64_t ch, int64_t i) { return static_cast<size_t>((b * c + ch) * inner + i); };
    for (int64_t ch = 0; ch < c; ++ch) {
        double mean = rmean[ch], invstd = 1.0 / std::sqrt(rvar[ch] + a.eps);
        if (a.training) {
            double s = 0.0, ss = 0.0;
            for (int64_t b = 0; b < n; ++b)
                for (int64_t i = 0; i < inner; ++i) s += x[at(b, ch, i)];
            mean = s / m;
            for (int64_t b = 0; b < n; ++b)
                for (int64_t i = 0; i < inner; ++i) ss += (x[at(b, ch, i)] - mean) * (x[at(b, ch, i)] - mean);
            invstd = 1.0 / std::sqrt(ss / m + a.eps);
            const double mom = a.momentum;
            out.running_mean[ch] = (1.0 - mom) * rmean[ch] + mom * mean;
            out.running_var[ch] = (1.0 - mom) * rvar[ch] + mom * ss / (m - 1);  // unbiased
            out.saved_mean[ch] = mean;
            out.saved_invstd[ch] = invstd;
        }
        for (int64_t b = 0; b < n; ++b)
            for (int64_t i = 0; i < inner; ++i) {
                const double v = gamma[ch] * (x[at(b, ch, i)] - mean) * invstd + beta[ch];
                out.y[at(b, ch, i)] = a.activation == XYLEM_ACT_RELU && !(v > 0.0) ? 0.0 : v;  // ABI 1.11
            }
    }
    return out;
}

// Training-mode gradient from the saved statistics: dbeta = sum dy, dgamma = sum dy*xhat,
// dx = gamma*invstd/M * (M*dy - dbeta - xhat*dgamma). (With the ReLU of ABI 1.11, pass dy masked
// by the forward's output: relu_gradient below.)
struct BatchNormBwd {
    Vec dx, dgamma, dbeta;
};

// dy where y > 0, else 0: the gradient a ReLU with output y passes back.
inline Vec relu_gradient(const Vec& dy, const Vec& y) {
    Vec g(dy.size());
    for (size_t i = 0; i < dy.size(); ++i) g[i] = y[i] > 0.0 ? dy[i] : 0.0;
    return g;
}

inline BatchNormBwd batchnorm_bwd(const Vec& dy, const Vec& x, const Dims& xd, const Vec& gamma, const Vec& mean,
                                  const Vec& invstd) {
    const int64_t n = xd[0], c = xd[1], inner = count(xd) / (n * c);
    const double m = static_cast<double>(n * inner);
    BatchNormBwd out{Vec(x.size()), Vec(static_cast<size_t>(c)), Vec(static_cast<size_t>(c))};
    auto at = [&](int64_t b, int64_t ch, int64_t i) { return static_cast<size_t>((b * c + ch) * inner + i); };
    for (int64_t ch = 0; ch < c; ++ch) {
        double db = 0.0, dg = 0.0;
        for (int64_t b = 0; b < n; ++b)
            for (int64_t i = 0; i < inner; ++i) {
                db += dy[at(b, ch, i)];
                dg += dy[at(b, ch, i)] * (x[at(b, ch, i)] - mean[ch]) * invstd[ch];
            }
        out.dbeta[ch] = db;
        out.dgamma[ch] = dg;
        for (int64_t b = 0; b < n; ++b)
            for (int64_t i = 0; i < inner; ++i) {
                const double xhat = (x[at(b, ch, i)] - mean[ch]) * invstd[ch];
                out.dx[at(b, ch, i)] = gamma[ch] * invstd[ch] / m * (m * dy[at(b, ch, i)] - db - xhat * dg);
            }
    }
    return out;
}

}  // namespace xylem::ref
