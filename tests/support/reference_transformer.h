// Naive float64 reference for the ABI 1.7 transformer ops (layer_norm_fwd/bwd, attention_fwd/bwd,
// gemm_batched, permute, masked_softmax), written from their contracts in ops.h alone, as
// reference.h is for the older ops: attention materialises P [B, H, Tq, L] and applies every rule
// (bottom-right causal, kv_length, the mask's broadcast, dropout on P's flat index) literally.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <stdexcept>
#include <vector>

#include "support/reference.h"
#include "xylem/ops.h"

namespace xylem::ref {

// ---- layer norm ------------------------------------------------------------------------------
struct LayerNormFwd {
    Vec y, mean, rstd;
};

// X [rows, d]; beta empty: none.
inline LayerNormFwd layer_norm_fwd(const Vec& x, int64_t rows, int64_t d, const Vec& gamma, const Vec& beta,
                                   double eps) {
    LayerNormFwd r{Vec(x.size()), Vec(static_cast<size_t>(rows)), Vec(static_cast<size_t>(rows))};
    for (int64_t i = 0; i < rows; ++i) {
        const double* xr = x.data() + i * d;
        double mean = 0.0, var = 0.0;
        for (int64_t j = 0; j < d; ++j) mean += xr[j];
        mean /= static_cast<double>(d);
        for (int64_t j = 0; j < d; ++j) var += (xr[j] - mean) * (xr[j] - mean);
        var /= static_cast<double>(d);  // biased, as torch.nn.LayerNorm
        const double rstd = 1.0 / std::sqrt(var + eps);
        r.mean[static_cast<size_t>(i)] = mean;
        r.rstd[static_cast<size_t>(i)] = rstd;
        for (int64_t j = 0; j < d; ++j)
            r.y[static_cast<size_t>(i * d + j)] =
                    (xr[j] - mean) * rstd * gamma[static_cast<size_t>(j)] + (beta.empty() ? 0.0 : beta[static_cast<size_t>(j)]);
    }
    return r;
}

struct LayerNormBwd {
    Vec dx, dgamma, dbeta;
};

// mean and rstd as the forward pass saved them; dgamma = acc*old_dgamma + sum (old not read when
// acc == 0), dbeta likewise.
inline LayerNormBwd layer_norm_bwd(const Vec& dy, const Vec& x, int64_t rows, int64_t d, const Vec& gamma,
                                   const Vec& mean, const Vec& rstd, double acc, const Vec& old_dgamma,
                                   const Vec& old_dbeta) {
    LayerNormBwd r{Vec(x.size()), Vec(static_cast<size_t>(d), 0.0), Vec(static_cast<size_t>(d), 0.0)};
    for (int64_t i = 0; i < rows; ++i) {
        const double m = mean[static_cast<size_t>(i)], s = rstd[static_cast<size_t>(i)];
        double mg = 0.0, mgx = 0.0;
        for (int64_t j = 0; j < d; ++j) {
            const size_t e = static_cast<size_t>(i * d + j);
            const double g = dy[e] * gamma[static_cast<size_t>(j)], xhat = (x[e] - m) * s;
            mg += g;
            mgx += g * xhat;
            r.dgamma[static_cast<size_t>(j)] += dy[e] * xhat;
            r.dbeta[static_cast<size_t>(j)] += dy[e];
        }
        mg /= static_cast<double>(d);
        mgx /= static_cast<double>(d);
        for (int64_t j = 0; j < d; ++j) {
            const size_t e = static_cast<size_t>(i * d + j);
            const double g = dy[e] * gamma[static_cast<size_t>(j)], xhat = (x[e] - m) * s;
            r.dx[e] = s * (g - mg - xhat * mgx);
        }
    }
    if (acc != 0.0)
        for (int64_t j = 0; j < d; ++j) {
            r.dgamma[static_cast<size_t>(j)] += acc * old_dgamma[static_cast<size_t>(j)];
            if (!old_dbeta.empty()) r.dbeta[static_cast<size_t>(j)] += acc * old_dbeta[static_cast<size_t>(j)];
        }
    return r;
}

// ---- attention -------------------------------------------------------------------------------
// Q [b, h, tq, dk], K [b, h, tk, dk], V [b, h, tk, dv]; l = kv_length or tk.
struct AttentionDims {
    int64_t b, h, tq, tk, dk, dv;
};

struct AttentionOptions {
    double scale = 1.0;
    bool causal = false;
    float dropout_p = 0.0f;
    uint64_t seed = 0;
    int64_t kv_length = 0;  // 0: every key
    Dims mask_dims;         // empty: no mask; [tq, l] or [b|1, h|1, tq|1, l]
};

inline int64_t keys_used(const AttentionDims& d, const AttentionOptions& o) {
    return o.kv_length ? o.kv_length : d.tk;
}

// mask(b, h, i, j) with the broadcast of a 2-D or 4-D mask.
inline double mask_value(const Vec& mask, const Dims& md, int64_t b, int64_t h, int64_t i, int64_t j) {
    if (md.empty()) return 0.0;
    if (md.size() == 2) return mask[static_cast<size_t>(i * md[1] + j)];
    if (md.size() != 4) throw std::invalid_argument("reference: mask of rank " + std::to_string(md.size()));
    const int64_t bb = md[0] == 1 ? 0 : b, hh = md[1] == 1 ? 0 : h, ii = md[2] == 1 ? 0 : i;
    return mask[static_cast<size_t>(((bb * md[1] + hh) * md[2] + ii) * md[3] + j)];
}

// Key j is seen by query i: j < l and, causal, j <= i + l - tq (bottom-right aligned).
inline bool key_visible(int64_t i, int64_t j, int64_t tq, int64_t l, bool causal) {
    return j < l && (!causal || j <= i + l - tq);
}

// Dropout's multiplier on P[b, h, i, j]: keep/(1-p) on the stream of P's flat index.
inline double dropout_multiplier(const AttentionDims& d, const AttentionOptions& o, int64_t b, int64_t h, int64_t i,
                                 int64_t j) {
    if (o.dropout_p <= 0.0f) return 1.0;
    const int64_t l = keys_used(d, o);
    const uint64_t index = static_cast<uint64_t>(((b * d.h + h) * d.tq + i) * l + j);
    return xylem_dropout_keep(o.seed, index, o.dropout_p) ? 1.0 / (1.0 - static_cast<double>(o.dropout_p)) : 0.0;
}

// P [b, h, tq, l] (before dropout) and LSE [b, h, tq]: softmax over the visible keys of
// scale*(q.k) + mask; a row with none visible or only -inf scores: P = 0, LSE = -inf.
struct AttentionProbs {
    Vec p, lse;
};
inline AttentionProbs attention_probs(const Vec& q, const Vec& k, const Vec& mask, const AttentionDims& d,
                                      const AttentionOptions& o) {
    const int64_t l = keys_used(d, o);
    const double inf = std::numeric_limits<double>::infinity();
    AttentionProbs r{Vec(static_cast<size_t>(d.b * d.h * d.tq * l), 0.0), Vec(static_cast<size_t>(d.b * d.h * d.tq))};
    Vec s(static_cast<size_t>(l));
    for (int64_t b = 0; b < d.b; ++b)
        for (int64_t h = 0; h < d.h; ++h)
            for (int64_t i = 0; i < d.tq; ++i) {
                const size_t row = static_cast<size_t>((b * d.h + h) * d.tq + i);
                double mx = -inf;
                for (int64_t j = 0; j < l; ++j) {
                    if (!key_visible(i, j, d.tq, l, o.causal)) {
                        s[static_cast<size_t>(j)] = -inf;
                        continue;
                    }
                    double dot = 0.0;
                    for (int64_t c = 0; c < d.dk; ++c)
                        dot += q[static_cast<size_t>(row * d.dk + c)] *
                               k[static_cast<size_t>(((b * d.h + h) * d.tk + j) * d.dk + c)];
                    s[static_cast<size_t>(j)] = o.scale * dot + mask_value(mask, o.mask_dims, b, h, i, j);
                    mx = std::max(mx, s[static_cast<size_t>(j)]);
                }
                if (mx == -inf) {
                    r.lse[row] = -inf;
                    continue;
                }
                double sum = 0.0;
                for (int64_t j = 0; j < l; ++j) sum += std::exp(s[static_cast<size_t>(j)] - mx);
                for (int64_t j = 0; j < l; ++j)
                    r.p[row * static_cast<size_t>(l) + static_cast<size_t>(j)] = std::exp(s[static_cast<size_t>(j)] - mx) / sum;
                r.lse[row] = mx + std::log(sum);
            }
    return r;
}

struct AttentionFwd {
    Vec o, lse;
};
inline AttentionFwd attention_fwd(const Vec& q, const Vec& k, const Vec& v, const Vec& mask, const AttentionDims& d,
                                  const AttentionOptions& o) {
    const int64_t l = keys_used(d, o);
    const AttentionProbs pr = attention_probs(q, k, mask, d, o);
    AttentionFwd r{Vec(static_cast<size_t>(d.b * d.h * d.tq * d.dv), 0.0), pr.lse};
    for (int64_t b = 0; b < d.b; ++b)
        for (int64_t h = 0; h < d.h; ++h)
            for (int64_t i = 0; i < d.tq; ++i) {
                const size_t row = static_cast<size_t>((b * d.h + h) * d.tq + i);
                for (int64_t j = 0; j < l; ++j) {
                    const double pij = pr.p[row * static_cast<size_t>(l) + static_cast<size_t>(j)] *
                                       dropout_multiplier(d, o, b, h, i, j);
                    if (pij == 0.0) continue;
                    for (int64_t c = 0; c < d.dv; ++c)
                        r.o[row * static_cast<size_t>(d.dv) + static_cast<size_t>(c)] +=
                                pij * v[static_cast<size_t>(((b * d.h + h) * d.tk + j) * d.dv + c)];
                }
            }
    return r;
}

struct AttentionBwd {
    Vec dq, dk, dv;
};
// o: the forward output the op is given (D_i = dO_i . O_i). dK and dV rows j >= l are 0.
inline AttentionBwd attention_bwd(const Vec& dout, const Vec& q, const Vec& k, const Vec& v, const Vec& o,
                                  const Vec& mask, const AttentionDims& d, const AttentionOptions& opt) {
    const int64_t l = keys_used(d, opt);
    const AttentionProbs pr = attention_probs(q, k, mask, d, opt);
    AttentionBwd r{Vec(q.size(), 0.0), Vec(k.size(), 0.0), Vec(v.size(), 0.0)};
    for (int64_t b = 0; b < d.b; ++b)
        for (int64_t h = 0; h < d.h; ++h) {
            const int64_t bh = b * d.h + h;
            for (int64_t i = 0; i < d.tq; ++i) {
                const size_t row = static_cast<size_t>(bh * d.tq + i);
                double di = 0.0;
                for (int64_t c = 0; c < d.dv; ++c)
                    di += dout[row * static_cast<size_t>(d.dv) + static_cast<size_t>(c)] *
                          o[row * static_cast<size_t>(d.dv) + static_cast<size_t>(c)];
                for (int64_t j = 0; j < l; ++j) {
                    const double p = pr.p[row * static_cast<size_t>(l) + static_cast<size_t>(j)];
                    if (p == 0.0) continue;
                    const double m = dropout_multiplier(d, opt, b, h, i, j);
                    const size_t krow = static_cast<size_t>(bh * d.tk + j);
                    double dpd = 0.0;  // (dO V^T)_ij
                    for (int64_t c = 0; c < d.dv; ++c) {
                        const double g = dout[row * static_cast<size_t>(d.dv) + static_cast<size_t>(c)];
                        dpd += g * v[krow * static_cast<size_t>(d.dv) + static_cast<size_t>(c)];
                        r.dv[krow * static_cast<size_t>(d.dv) + static_cast<size_t>(c)] += p * m * g;
                    }
                    const double ds = p * (m * dpd - di);
                    for (int64_t c = 0; c < d.dk; ++c) {
                        r.dq[row * static_cast<size_t>(d.dk) + static_cast<size_t>(c)] +=
                                opt.scale * ds * k[krow * static_cast<size_t>(d.dk) + static_cast<size_t>(c)];
                        r.dk[krow * static_cast<size_t>(d.dk) + static_cast<size_t>(c)] +=
                                opt.scale * ds * q[row * static_cast<size_t>(d.dk) + static_cast<size_t>(c)];
                    }
                }
            }
        }
    return r;
}

// ---- gemm_batched, permute, masked_softmax ---------------------------------------------------
// C [batch, m, n] = alpha*op(A)*op(B) + beta*C per batch index; a_batched false: A is one matrix
// for every batch (likewise B). A stored [ar, ac] per matrix, B [br, bc].
inline Vec gemm_batched(int64_t batch, bool ta, bool tb, double alpha, const Vec& a, bool a_batched, int64_t ar,
                        int64_t ac, const Vec& b, bool b_batched, int64_t br, int64_t bc, double beta, const Vec& c) {
    const int64_t m = ta ? ac : ar, n = tb ? br : bc;
    Vec out;
    for (int64_t i = 0; i < batch; ++i) {
        const int64_t ao = a_batched ? i * ar * ac : 0, bo = b_batched ? i * br * bc : 0;
        const Vec ai(a.begin() + ao, a.begin() + ao + ar * ac), bi(b.begin() + bo, b.begin() + bo + br * bc);
        const Vec ci = beta == 0.0 ? Vec(static_cast<size_t>(m * n), 0.0)
                                   : Vec(c.begin() + i * m * n, c.begin() + (i + 1) * m * n);
        const Vec r = gemm(ta, tb, alpha, ai, ar, ac, bi, br, bc, beta, ci);
        out.insert(out.end(), r.begin(), r.end());
    }
    return out;
}

// numpy.transpose(x, perm) of x with dims `dims`.
inline Vec permute(const Vec& x, const Dims& dims, const std::vector<int>& perm) {
    const size_t n = dims.size();
    Dims out_dims(n), x_strides(n);
    int64_t stride = 1;
    for (size_t k = n; k-- > 0;) x_strides[k] = stride, stride *= dims[k];
    for (size_t k = 0; k < n; ++k) out_dims[k] = dims[static_cast<size_t>(perm[k])];
    Vec y(x.size());
    for (int64_t e = 0; e < static_cast<int64_t>(x.size()); ++e) {
        int64_t rest = e, from = 0;
        for (size_t k = n; k-- > 0;) {  // e's index along Y's axis k walks X's axis perm[k]
            from += (rest % out_dims[k]) * x_strides[static_cast<size_t>(perm[k])];
            rest /= out_dims[k];
        }
        y[static_cast<size_t>(e)] = x[static_cast<size_t>(from)];
    }
    return y;
}

// X [..., tq, l] seen as [batch, tq, l] (batch = b*h for 4-D X, `heads` its dim 1, else heads = 1);
// Y and LSE (rows) of masked_softmax.
struct MaskedSoftmax {
    Vec y, lse;
};
inline MaskedSoftmax masked_softmax(const Vec& x, int64_t batch, int64_t heads, int64_t tq, int64_t l, const Vec& mask,
                                    const Dims& mask_dims, double scale, bool causal) {
    const double inf = std::numeric_limits<double>::infinity();
    MaskedSoftmax r{Vec(x.size(), 0.0), Vec(static_cast<size_t>(batch * tq))};
    for (int64_t bh = 0; bh < batch; ++bh)
        for (int64_t i = 0; i < tq; ++i) {
            const size_t row = static_cast<size_t>(bh * tq + i);
            Vec s(static_cast<size_t>(l), -inf);
            double mx = -inf;
            for (int64_t j = 0; j < l; ++j) {
                if (!key_visible(i, j, tq, l, causal)) continue;
                s[static_cast<size_t>(j)] = scale * x[row * static_cast<size_t>(l) + static_cast<size_t>(j)] +
                                            mask_value(mask, mask_dims, bh / heads, bh % heads, i, j);
                mx = std::max(mx, s[static_cast<size_t>(j)]);
            }
            if (mx == -inf) {
                r.lse[row] = -inf;
                continue;
            }
            double sum = 0.0;
            for (int64_t j = 0; j < l; ++j) sum += std::exp(s[static_cast<size_t>(j)] - mx);
            for (int64_t j = 0; j < l; ++j)
                r.y[row * static_cast<size_t>(l) + static_cast<size_t>(j)] = std::exp(s[static_cast<size_t>(j)] - mx) / sum;
            r.lse[row] = mx + std::log(sum);
        }
    return r;
}

}  // namespace xylem::ref
