// Naive float64 reference for every op in xylem/ops.h: plain loops over std::vector<double>,
// written from the op comments alone so that a plugin bug cannot be copied into it.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <vector>

#include "xylem/ops.h"

namespace xylem::ref {

using Vec = std::vector<double>;
using Dims = std::vector<int64_t>;

inline int64_t count(const Dims& d) {
    int64_t n = 1;
    for (int64_t v : d) n *= v;
    return n;
}

// FILL: every element = value.
inline Vec fill(int64_t n, double value) {
    return Vec(static_cast<size_t>(n), value);
}

// AXPBY: alpha*a + beta*b (the in-place form passes the old output as b).
inline Vec axpby(double alpha, const Vec& a, double beta, const Vec& b) {
    Vec out(a.size());
    for (size_t i = 0; i < a.size(); ++i) out[i] = alpha * a[i] + beta * b[i];
    return out;
}

// ADD: out[r, c] = alpha*a[r, c] + beta*b[j] over a seen as [rows, cols], with j = r*cols + c
// (b of a's shape), c (a row vector) or r (a column vector).
enum class Bcast { elementwise, row, column };
inline Vec add(double alpha, const Vec& a, double beta, const Vec& b, int64_t cols, Bcast mode) {
    Vec out(a.size());
    for (size_t i = 0; i < a.size(); ++i) {
        const size_t r = i / static_cast<size_t>(cols), c = i % static_cast<size_t>(cols);
        const size_t j = mode == Bcast::elementwise ? i : mode == Bcast::row ? c : r;
        out[i] = alpha * a[i] + beta * b[j];
    }
    return out;
}

// AXPBY in place with beta = 0: the old output is not read (BLAS convention; it may hold NaN).
inline Vec scale(double alpha, const Vec& a) {
    Vec out(a.size());
    for (size_t i = 0; i < a.size(); ++i) out[i] = alpha * a[i];
    return out;
}

inline Vec mul(const Vec& a, const Vec& b) {
    Vec out(a.size());
    for (size_t i = 0; i < a.size(); ++i) out[i] = a[i] * b[i];
    return out;
}

// GEMM: C = alpha*op(A)*op(B) + beta*C with A stored [ar, ac] and B stored [br, bc], row-major.
// beta = 0 never reads C (it may hold garbage).
inline Vec gemm(bool ta, bool tb, double alpha, const Vec& a, int64_t ar, int64_t ac, const Vec& b, int64_t br,
                int64_t bc, double beta, const Vec& c) {
    const int64_t m = ta ? ac : ar, k = ta ? ar : ac, n = tb ? br : bc;
    Vec out(static_cast<size_t>(m * n));
    for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < n; ++j) {
            double s = 0.0;
            for (int64_t p = 0; p < k; ++p) {
                const double av = ta ? a[p * ac + i] : a[i * ac + p];
                const double bv = tb ? b[j * bc + p] : b[p * bc + j];
                s += av * bv;
            }
            const size_t o = static_cast<size_t>(i * n + j);
            out[o] = alpha * s + (beta == 0.0 ? 0.0 : beta * c[o]);
        }
    return out;
}

// The GELUs (ops.h's XYLEM_ACT_GELU and XYLEM_ACT_GELU_TANH) and their derivatives, from their
// definitions: x*Phi(x) and the tanh approximation (GPT-2).
inline double gelu(double x) {
    return 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0)));
}
inline double gelu_grad(double x) {  // Phi(x) + x*phi(x)
    const double pi = 3.14159265358979323846;
    return 0.5 * (1.0 + std::erf(x / std::sqrt(2.0))) + x * std::exp(-0.5 * x * x) / std::sqrt(2.0 * pi);
}
inline double gelu_tanh(double x) {
    const double pi = 3.14159265358979323846;
    return 0.5 * x * (1.0 + std::tanh(std::sqrt(2.0 / pi) * (x + 0.044715 * x * x * x)));
}
inline double gelu_tanh_grad(double x) {
    const double pi = 3.14159265358979323846, c = std::sqrt(2.0 / pi);
    const double t = std::tanh(c * (x + 0.044715 * x * x * x));
    return 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * c * (1.0 + 3.0 * 0.044715 * x * x);
}

inline double act(int activation, double x) {
    switch (activation) {
        case XYLEM_ACT_GELU:
            return gelu(x);
        case XYLEM_ACT_GELU_TANH:
            return gelu_tanh(x);
        case XYLEM_ACT_RELU:
            return x > 0.0 ? x : 0.0;
        case XYLEM_ACT_SIGMOID:
            return 1.0 / (1.0 + std::exp(-x));
        case XYLEM_ACT_TANH:
            return std::tanh(x);
        case XYLEM_ACT_RELU6:
            return std::min(std::max(x, 0.0), 6.0);
        default:
            return x;
    }
}

// f'(x) expressed through y = f(x).
inline double act_grad_from_y(int activation, double y) {
    switch (activation) {
        case XYLEM_ACT_RELU:
            return y > 0.0 ? 1.0 : 0.0;
        case XYLEM_ACT_SIGMOID:
            return y * (1.0 - y);
        case XYLEM_ACT_TANH:
            return 1.0 - y * y;
        case XYLEM_ACT_RELU6:
            return y > 0.0 && y < 6.0 ? 1.0 : 0.0;
        default:
            return 1.0;
    }
}

inline Vec act_fwd(int activation, const Vec& x) {
    Vec y(x.size());
    for (size_t i = 0; i < x.size(); ++i) y[i] = act(activation, x[i]);
    return y;
}

// ACT_BWD: its second input is y = f(x), or x itself for the GELUs (their gradient needs it).
inline bool act_bwd_reads_x(int activation) {
    return activation == XYLEM_ACT_GELU || activation == XYLEM_ACT_GELU_TANH;
}
inline Vec act_bwd(int activation, const Vec& dy, const Vec& y_or_x) {
    Vec dx(dy.size());
    for (size_t i = 0; i < dy.size(); ++i) {
        const double v = y_or_x[i];
        const double g = activation == XYLEM_ACT_GELU        ? gelu_grad(v)
                         : activation == XYLEM_ACT_GELU_TANH ? gelu_tanh_grad(v)
                                                             : act_grad_from_y(activation, v);
        dx[i] = dy[i] * g;
    }
    return dx;
}

// LINEAR_FWD: Y[N,out] = act(X[N,in] * W[out,in]^T + b); an empty b means no bias.
inline Vec linear_fwd(const Vec& x, int64_t n, int64_t in, const Vec& w, int64_t out, const Vec& b, int activation) {
    Vec y(static_cast<size_t>(n * out));
    for (int64_t r = 0; r < n; ++r)
        for (int64_t o = 0; o < out; ++o) {
            double s = b.empty() ? 0.0 : b[static_cast<size_t>(o)];
            for (int64_t i = 0; i < in; ++i) s += x[r * in + i] * w[o * in + i];
            y[static_cast<size_t>(r * out + o)] = act(activation, s);
        }
    return y;
}

// BIAS_GRAD: db[C] = beta*db + sum of dy[N,C,...] over every axis but 1 (beta = 0 never reads db).
inline Vec bias_grad(const Vec& dy, const Dims& dims, double beta, const Vec& db) {
    const int64_t n = dims[0], c = dims[1], inner = count(dims) / std::max<int64_t>(1, n * c);
    Vec out(static_cast<size_t>(c));
    for (int64_t ch = 0; ch < c; ++ch) {
        double s = 0.0;
        for (int64_t r = 0; r < n; ++r)
            for (int64_t i = 0; i < inner; ++i) s += dy[(r * c + ch) * inner + i];
        out[static_cast<size_t>(ch)] = (beta == 0.0 ? 0.0 : beta * db[static_cast<size_t>(ch)]) + s;
    }
    return out;
}

// SOFTMAX_FWD over the last axis (cols) of rows rows; log = 1 gives log_softmax.
inline Vec softmax_fwd(const Vec& x, int64_t rows, int64_t cols, bool log) {
    Vec y(x.size());
    for (int64_t r = 0; r < rows; ++r) {
        const double* xr = x.data() + r * cols;
        double m = xr[0];
        for (int64_t j = 1; j < cols; ++j) m = std::max(m, xr[j]);
        double s = 0.0;
        for (int64_t j = 0; j < cols; ++j) s += std::exp(xr[j] - m);
        for (int64_t j = 0; j < cols; ++j)
            y[static_cast<size_t>(r * cols + j)] = log ? xr[j] - m - std::log(s) : std::exp(xr[j] - m) / s;
    }
    return y;
}

// SOFTMAX_BWD from (dy, y): softmax dx = y*(dy - sum(dy*y)); log_softmax dx = dy - exp(y)*sum(dy).
inline Vec softmax_bwd(const Vec& dy, const Vec& y, int64_t rows, int64_t cols, bool log) {
    Vec dx(dy.size());
    for (int64_t r = 0; r < rows; ++r) {
        const size_t o = static_cast<size_t>(r * cols);
        double s = 0.0;
        for (int64_t j = 0; j < cols; ++j) s += log ? dy[o + j] : dy[o + j] * y[o + j];
        for (int64_t j = 0; j < cols; ++j)
            dx[o + j] = log ? dy[o + j] - std::exp(y[o + j]) * s : y[o + j] * (dy[o + j] - s);
    }
    return dx;
}

// The loss ops' store: acc = 0 overwrites (old never read), otherwise acc*old + scale*sum.
inline double store_loss(double old, double scale, double acc, double sum) {
    return (acc == 0.0 ? 0.0 : acc * old) + scale * sum;
}

// XENT_FWD: sum over rows of -log softmax(logits_i)[label_i].
inline double xent_sum(const Vec& logits, int64_t n, int64_t c, const std::vector<int32_t>& labels) {
    const Vec lp = softmax_fwd(logits, n, c, true);
    double s = 0.0;
    for (int64_t i = 0; i < n; ++i) s -= lp[static_cast<size_t>(i * c + labels[static_cast<size_t>(i)])];
    return s;
}

// XENT_BWD: scale*(softmax(logits) - onehot(labels)).
inline Vec xent_bwd(const Vec& logits, int64_t n, int64_t c, const std::vector<int32_t>& labels, double scale) {
    Vec d = softmax_fwd(logits, n, c, false);
    for (int64_t i = 0; i < n; ++i) d[static_cast<size_t>(i * c + labels[static_cast<size_t>(i)])] -= 1.0;
    for (double& v : d) v *= scale;
    return d;
}

// NLL_FWD: sum over rows of -logp[i, label_i].
inline double nll_sum(const Vec& logp, int64_t n, int64_t c, const std::vector<int32_t>& labels) {
    double s = 0.0;
    for (int64_t i = 0; i < n; ++i) s -= logp[static_cast<size_t>(i * c + labels[static_cast<size_t>(i)])];
    return s;
}

// NLL_BWD: -scale*onehot(labels).
inline Vec nll_bwd(int64_t n, int64_t c, const std::vector<int32_t>& labels, double scale) {
    Vec d(static_cast<size_t>(n * c), 0.0);
    for (int64_t i = 0; i < n; ++i) d[static_cast<size_t>(i * c + labels[static_cast<size_t>(i)])] = -scale;
    return d;
}

// MSE_FWD: sum of (pred - target)^2 over every element.
inline double mse_sum(const Vec& pred, const Vec& target) {
    double s = 0.0;
    for (size_t i = 0; i < pred.size(); ++i) s += (pred[i] - target[i]) * (pred[i] - target[i]);
    return s;
}

// MSE_BWD: 2*scale*(pred - target).
inline Vec mse_bwd(const Vec& pred, const Vec& target, double scale) {
    Vec d(pred.size());
    for (size_t i = 0; i < pred.size(); ++i) d[i] = 2.0 * scale * (pred[i] - target[i]);
    return d;
}

// DROPOUT_FWD: mask = keep/(1-p) with keep from xylem_dropout_keep; y = x*mask.
struct DropoutResult {
    Vec y, mask;
};
inline DropoutResult dropout_fwd(const Vec& x, float p, uint64_t seed) {
    DropoutResult r{Vec(x.size()), Vec(x.size())};
    for (size_t i = 0; i < x.size(); ++i) {
        r.mask[i] = xylem_dropout_keep(seed, i, p) ? 1.0 / (1.0 - static_cast<double>(p)) : 0.0;
        r.y[i] = x[i] * r.mask[i];
    }
    return r;
}

// SGD_UPDATE (PyTorch semantics, velocity starting at zero): g = grad + wd*p;
// v = momentum*v + (1-dampening)*g; g = nesterov ? g + momentum*v : v; p -= lr*g.
// With momentum = 0 the velocity is neither read nor written and p -= lr*g.
inline void sgd_update(Vec& p, Vec& v, const Vec& grad, const xylem_sgd_attrs& a) {
    const double lr = a.lr, mom = a.momentum, damp = a.dampening, wd = a.weight_decay;
    for (size_t i = 0; i < p.size(); ++i) {
        double g = grad[i] + wd * p[i];
        if (mom != 0.0) {
            v[i] = mom * v[i] + (1.0 - damp) * g;
            g = a.nesterov ? g + mom * v[i] : v[i];
        }
        p[i] -= lr * g;
    }
}

// ADAM_UPDATE: g = grad + wd*p; m = b1*m + (1-b1)*g; v = b2*v + (1-b2)*g^2;
// p -= lr*(m/bc1)/(sqrt(v/bc2) + eps), bc1 and bc2 taken from the attrs.
inline void adam_update(Vec& p, Vec& m, Vec& v, const Vec& grad, const xylem_adam_attrs& a) {
    const double b1 = a.beta1, b2 = a.beta2;
    for (size_t i = 0; i < p.size(); ++i) {
        const double g = grad[i] + static_cast<double>(a.weight_decay) * p[i];
        m[i] = b1 * m[i] + (1.0 - b1) * g;
        v[i] = b2 * v[i] + (1.0 - b2) * g * g;
        p[i] -= static_cast<double>(a.lr) * (m[i] / a.bias_correction1) /
                (std::sqrt(v[i] / a.bias_correction2) + static_cast<double>(a.eps));
    }
}

// RMSPROP_UPDATE (torch.optim.RMSprop): g = grad + wd*p; sq = alpha*sq + (1-alpha)*g^2;
// centered: ga = ga + (1-alpha)*(g - ga), avg = sqrt(sq - ga^2) + eps, else avg = sqrt(sq) + eps;
// momentum > 0: buf = momentum*buf + g/avg, p -= lr*buf; else p -= lr*g/avg.
// buf is used only when momentum > 0, ga only when centered.
inline void rmsprop_update(Vec& p, Vec& sq, Vec& buf, Vec& ga, const Vec& grad, const xylem_rmsprop_attrs& a) {
    const double lr = a.lr, alpha = a.alpha, eps = a.eps, wd = a.weight_decay, mom = a.momentum;
    for (size_t i = 0; i < p.size(); ++i) {
        const double g = grad[i] + wd * p[i];
        sq[i] = alpha * sq[i] + (1.0 - alpha) * g * g;
        double avg;
        if (a.centered) {
            ga[i] = ga[i] + (1.0 - alpha) * (g - ga[i]);
            avg = std::sqrt(sq[i] - ga[i] * ga[i]) + eps;
        } else {
            avg = std::sqrt(sq[i]) + eps;
        }
        if (mom > 0.0) {
            buf[i] = mom * buf[i] + g / avg;
            p[i] -= lr * buf[i];
        } else {
            p[i] -= lr * g / avg;
        }
    }
}

// ADAMW_UPDATE (torch.optim.AdamW): p *= 1 - lr*wd; m = b1*m + (1-b1)*grad; v = b2*v + (1-b2)*grad^2;
// p -= lr*(m/bc1)/(sqrt(v/bc2) + eps).
inline void adamw_update(Vec& p, Vec& m, Vec& v, const Vec& grad, const xylem_adamw_attrs& a) {
    const double lr = a.lr, b1 = a.beta1, b2 = a.beta2;
    for (size_t i = 0; i < p.size(); ++i) {
        p[i] *= 1.0 - lr * static_cast<double>(a.weight_decay);
        m[i] = b1 * m[i] + (1.0 - b1) * grad[i];
        v[i] = b2 * v[i] + (1.0 - b2) * grad[i] * grad[i];
        p[i] -= lr * (m[i] / a.bias_correction1) / (std::sqrt(v[i] / a.bias_correction2) + static_cast<double>(a.eps));
    }
}

// CLAMP: min(max(x, lo), hi).
inline Vec clamp(const Vec& x, double lo, double hi) {
    Vec y(x.size());
    for (size_t i = 0; i < x.size(); ++i) y[i] = x[i] < lo ? lo : x[i] > hi ? hi : x[i];
    return y;
}

// SUM_SQUARES: sum of x^2.
inline double sum_squares(const Vec& x) {
    double s = 0.0;
    for (double v : x) s += v * v;
    return s;
}

// CLIP_BY_NORM (torch.nn.utils.clip_grad_norm_): x * min(1, max_norm / (sqrt(sumsq) + eps)).
inline Vec clip_by_norm(const Vec& x, double sumsq, double max_norm, double eps) {
    const double coef = std::min(1.0, max_norm / (std::sqrt(sumsq) + eps));
    Vec y(x.size());
    for (size_t i = 0; i < x.size(); ++i) y[i] = x[i] * coef;
    return y;
}

// ACCURACY: old + number of rows whose argmax (the first maximal index, as numpy and
// PyTorch break ties) equals the label.
inline double accuracy(const Vec& logits, int64_t n, int64_t c, const std::vector<int32_t>& labels, double old) {
    int64_t hits = 0;
    for (int64_t i = 0; i < n; ++i) {
        int64_t best = 0;
        for (int64_t j = 1; j < c; ++j)
            if (logits[static_cast<size_t>(i * c + j)] > logits[static_cast<size_t>(i * c + best)]) best = j;
        hits += best == labels[static_cast<size_t>(i)];
    }
    return old + static_cast<double>(hits);
}

// GATHER_ROWS: out row i = src row idx[i], for any element type (double for f32 data, int32
// for labels); a row is the product of src's trailing dims.
template <class T>
std::vector<T> gather_rows(const std::vector<T>& src, int64_t rows, const std::vector<int32_t>& idx) {
    const int64_t width = rows ? static_cast<int64_t>(src.size()) / rows : 0;
    std::vector<T> out;
    for (int32_t r : idx)
        for (int64_t j = 0; j < width; ++j) out.push_back(src[static_cast<size_t>(r * width + j)]);
    return out;
}

// REDUCE: x of `dims` seen as [outer, n, inner] around `axis` (-1: every element); each output is
// beta*old + the sum, mean or max over n. Max: a NaN wins, -inf over nothing; mean over nothing is
// NaN. old is not read when beta == 0.
inline Vec reduce(const Vec& x, const Dims& dims, int mode, int axis, double beta, const Vec& old) {
    int64_t outer = 1, n = count(dims), inner = 1;
    if (axis >= 0) {
        n = dims[static_cast<size_t>(axis)];
        for (int d = 0; d < axis; ++d) outer *= dims[static_cast<size_t>(d)];
        for (size_t d = static_cast<size_t>(axis) + 1; d < dims.size(); ++d) inner *= dims[d];
    }
    Vec out(static_cast<size_t>(outer * inner));
    for (int64_t o = 0; o < outer; ++o)
        for (int64_t j = 0; j < inner; ++j) {
            double acc = mode == XYLEM_REDUCE_MAX ? -std::numeric_limits<double>::infinity() : 0.0;
            bool nan = false;
            for (int64_t k = 0; k < n; ++k) {
                const double v = x[static_cast<size_t>((o * n + k) * inner + j)];
                if (mode != XYLEM_REDUCE_MAX) acc += v;
                else if (std::isnan(v)) nan = true;
                else acc = std::max(acc, v);
            }
            if (nan) acc = std::numeric_limits<double>::quiet_NaN();
            if (mode == XYLEM_REDUCE_MEAN)
                acc = n ? acc / static_cast<double>(n) : std::numeric_limits<double>::quiet_NaN();
            const size_t t = static_cast<size_t>(o * inner + j);
            out[t] = beta == 0.0 ? acc : beta * old[t] + acc;
        }
    return out;
}

// SCATTER_ADD_ROWS: row idx[i] of out gains row i of src; rows no index names keep their value.
inline Vec scatter_add_rows(const Vec& src, const std::vector<int32_t>& idx, Vec out) {
    const size_t width = idx.empty() ? 0 : src.size() / idx.size();
    for (size_t i = 0; i < idx.size(); ++i)
        for (size_t j = 0; j < width; ++j) out[static_cast<size_t>(idx[i]) * width + j] += src[i * width + j];
    return out;
}

}  // namespace xylem::ref
