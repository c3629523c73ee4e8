// Shape rules, descriptors and the composed fallback for the ABI 1.7 transformer ops: layer norm,
// attention, batched GEMM, permute and the masked softmax. The rules are the plugin kit's
// (plugin_kit/shapes_transformer.h), so the core and every plugin accept the same descriptors.
#include <array>
#include <mutex>
#include <set>
#include <string>
#include <utility>

#include "op_call_util.h"
#include "xylem/backend.h"
#include "xylem/op_calls.h"
#include "xylem/plugin_kit/shapes_transformer.h"
#include "xylem/profiler.h"

namespace xylem::ops {
namespace {

using detail::Rule;
using detail::View;

// Reads of the optional operands: the mask is the last input when present.
std::vector<xylem_tensor_arg> with_optional(std::vector<xylem_tensor_arg> args, const Tensor* t, Device& dev) {
    if (t) args.push_back(t->read(dev));
    return args;
}

void run_args(Device& dev, uint32_t op, const std::vector<xylem_tensor_arg>& in,
              const std::vector<xylem_tensor_arg>& out, const void* attrs, uint32_t attrs_size) {
    const xylem_op_desc d{op, static_cast<uint32_t>(in.size()), static_cast<uint32_t>(out.size()), attrs_size,
                          in.data(), out.data(), attrs};
    dev.run(d);
}

bool accepted(Device& dev, uint32_t op, const std::vector<xylem_tensor_arg>& in,
              const std::vector<xylem_tensor_arg>& out, const xylem_attention_attrs& at) {
    const xylem_op_desc d{op, static_cast<uint32_t>(in.size()), static_cast<uint32_t>(out.size()),
                          static_cast<uint32_t>(sizeof at), in.data(), out.data(), &at};
    return dev.backend().accepts(d);
}

plugin_kit::AttentionShape attention_rule(uint32_t op, const xylem_attention_attrs& at, const Tensor& q,
                                          const Tensor& k, const Tensor& v, const Tensor* mask) {
    const View vm(op, mask ? mask->shape() : Shape{});
    return plugin_kit::attention_shape(Rule{op}, at, View(op, q.shape()), View(op, k.shape()), View(op, v.shape()),
                                       mask ? &vm : nullptr);
}

void same(uint32_t op, const Tensor& t, const char* tn, const Tensor& like, const char* ln) {
    plugin_kit::same_shape(Rule{op}, View(op, t.shape()), tn, View(op, like.shape()), ln);
}

// Said once per device and op: every composed call after the first costs a lookup, not the
// message's strings and the profiler's lock.
void note_composed(Device& dev, uint32_t op) {
    static std::mutex mutex;
    static std::set<std::pair<const Device*, uint32_t>> noted;
    {
        std::lock_guard lock(mutex);
        if (!noted.emplace(&dev, op).second) return;
    }
    profiler::note(dev.name() + ": " + op_name(op) + " is composed from gemm_batched, masked_softmax" +
                   " and dropout_fwd (the backend lacks or declines the fused op for these shapes)");
}

// The first L keys of K (or V) as a dense [B, H, L, D] tensor: K itself when L is all of it, else a
// copy of each (batch, head)'s first L rows (a key/value cache holds more rows than are filled).
Tensor first_keys(Device& dev, const Tensor& t, int64_t l) {
    const int64_t b = t.dim(0), h = t.dim(1), tk = t.dim(2), d = t.dim(3);
    if (l == tk) return t;
    Tensor out({b, h, l, d}, DType::F32, dev);
    const Tensor src = t.reshaped({b * h * tk, d});
    Tensor dst = out.reshaped({b * h * l, d});
    for (int64_t bh = 0; bh < b * h; ++bh) {
        Tensor to = dst.rows(bh * l, l);
        copy(dev, src.rows(bh * tk, l), to);
    }
    return out;
}

// Scores S = Q K^T and P = masked softmax (LSE into *lse when given), for the composed forms.
Tensor composed_probabilities(Device& dev, const Tensor& q, const Tensor& kc, const Tensor* mask, Tensor* lse,
                              const xylem_attention_attrs& at) {
    const int64_t b = q.dim(0), h = q.dim(1), tq = q.dim(2), l = kc.dim(2);
    Tensor s({b, h, tq, l}, DType::F32, dev), p({b, h, tq, l}, DType::F32, dev);
    gemm_batched(dev, false, true, 1.0f, q, kc, 0.0f, s);
    masked_softmax(dev, s, mask, p, lse, at.scale, at.causal != 0);
    return p;
}

}  // namespace

void layer_norm_fwd(Device& dev, const Tensor& x, const Tensor& gamma, const Tensor* beta, Tensor& y, Tensor& mean,
                    Tensor& rstd, float eps) {
    const uint32_t op = XYLEM_OP_LAYER_NORM_FWD;
    const xylem_layer_norm_attrs at{eps, 0.0f};
    const View vb(op, beta ? beta->shape() : Shape{});
    plugin_kit::layer_norm_shape(Rule{op}, at, View(op, x.shape()), View(op, gamma.shape()), beta ? &vb : nullptr,
                                 View(op, mean.shape()), View(op, rstd.shape()));
    same(op, y, "Y", x, "X");
    std::vector<xylem_tensor_arg> in{x.read(dev), gamma.read(dev)};
    if (beta) in.push_back(beta->read(dev));
    run_args(dev, op, in, {y.write(dev), mean.write(dev), rstd.write(dev)}, &at, sizeof at);
}

void layer_norm_bwd(Device& dev, const Tensor& dy, const Tensor& x, const Tensor& gamma, const Tensor& mean,
                    const Tensor& rstd, Tensor& dx, Tensor& dgamma, Tensor* dbeta, float eps, float accumulate) {
    const uint32_t op = XYLEM_OP_LAYER_NORM_BWD;
    const xylem_layer_norm_attrs at{eps, accumulate};
    const View vb(op, dbeta ? dbeta->shape() : Shape{});
    plugin_kit::layer_norm_shape(Rule{op}, at, View(op, x.shape()), View(op, dgamma.shape()),
                                 dbeta ? &vb : nullptr, View(op, mean.shape()), View(op, rstd.shape()));
    if (gamma.numel() != dgamma.numel())
        detail::shape_error(op, "gamma " + to_string(gamma.shape()) + " and dgamma " + to_string(dgamma.shape()) +
                                    " must hold the same count");
    same(op, dy, "dY", x, "X");
    same(op, dx, "dX", x, "X");
    std::vector<xylem_tensor_arg> in{dy.read(dev), x.read(dev), gamma.read(dev), mean.read(dev), rstd.read(dev)};
    const bool acc = accumulate != 0.0f;
    std::vector<xylem_tensor_arg> out{dx.write(dev), acc ? dgamma.read_write(dev) : dgamma.write(dev)};
    if (dbeta) out.push_back(acc ? dbeta->read_write(dev) : dbeta->write(dev));
    run_args(dev, op, in, out, &at, sizeof at);
}

void attention_fwd(Device& dev, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor* mask, Tensor& o,
                   Tensor& lse, const xylem_attention_attrs& at) {
    const uint32_t op = XYLEM_OP_ATTENTION_FWD;
    const plugin_kit::AttentionShape s = attention_rule(op, at, q, k, v, mask);
    plugin_kit::attention_outputs(Rule{op}, s, View(op, o.shape()), "O", View(op, lse.shape()));
    if (dev.backend().supports(op)) {
        const auto in = with_optional({q.read(dev), k.read(dev), v.read(dev)}, mask, dev);
        const std::vector<xylem_tensor_arg> out{o.write(dev), lse.write(dev)};
        if (accepted(dev, op, in, out, at)) return run_args(dev, op, in, out, &at, sizeof at);
    }
    note_composed(dev, op);
    attention_fwd_composed(dev, q, k, v, mask, o, lse, at);
}

void attention_bwd(Device& dev, const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v,
                   const Tensor& o, const Tensor& lse, const Tensor* mask, Tensor& dq, Tensor& dk, Tensor& dv,
                   const xylem_attention_attrs& at) {
    const uint32_t op = XYLEM_OP_ATTENTION_BWD;
    const plugin_kit::AttentionShape s = attention_rule(op, at, q, k, v, mask);
    plugin_kit::attention_outputs(Rule{op}, s, View(op, o.shape()), "O", View(op, lse.shape()));
    same(op, dout, "dO", o, "O");
    same(op, dq, "dQ", q, "Q");
    same(op, dk, "dK", k, "K");
    same(op, dv, "dV", v, "V");
    if (dev.backend().supports(op)) {
        const auto in = with_optional(
                {dout.read(dev), q.read(dev), k.read(dev), v.read(dev), o.read(dev), lse.read(dev)}, mask, dev);
        const std::vector<xylem_tensor_arg> out{dq.write(dev), dk.write(dev), dv.write(dev)};
        if (accepted(dev, op, in, out, at)) return run_args(dev, op, in, out, &at, sizeof at);
    }
    note_composed(dev, op);
    attention_bwd_composed(dev, dout, q, k, v, o, lse, mask, dq, dk, dv, at);
}

void attention_fwd_composed(Device& dev, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor* mask,
                            Tensor& o, Tensor& lse, const xylem_attention_attrs& at) {
    const uint32_t op = XYLEM_OP_ATTENTION_FWD;
    const plugin_kit::AttentionShape s = attention_rule(op, at, q, k, v, mask);
    plugin_kit::attention_outputs(Rule{op}, s, View(op, o.shape()), "O", View(op, lse.shape()));
    const Tensor kc = first_keys(dev, k, s.l), vc = first_keys(dev, v, s.l);
    Tensor p = composed_probabilities(dev, q, kc, mask, &lse, at);
    if (at.dropout_p > 0.0f) {
        Tensor dropped(p.shape(), DType::F32, dev), keep(p.shape(), DType::F32, dev);
        dropout_fwd(dev, p, dropped, keep, at.dropout_p, at.seed);  // the flat index of P is the contract's
        p = dropped;
    }
    gemm_batched(dev, false, false, 1.0f, p, vc, 0.0f, o);
}

void attention_bwd_composed(Device& dev, const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v,
                            const Tensor& o, const Tensor& lse, const Tensor* mask, Tensor& dq, Tensor& dk,
                            Tensor& dv, const xylem_attention_attrs& at) {
    const uint32_t op = XYLEM_OP_ATTENTION_BWD;
    const plugin_kit::AttentionShape s = attention_rule(op, at, q, k, v, mask);
    plugin_kit::attention_outputs(Rule{op}, s, View(op, o.shape()), "O", View(op, lse.shape()));
    const Tensor kc = first_keys(dev, k, s.l), vc = first_keys(dev, v, s.l);
    Tensor p = composed_probabilities(dev, q, kc, mask, nullptr, at);  // recomputed: LSE is not needed
    Tensor pd = p, keep;
    if (at.dropout_p > 0.0f) {
        pd = Tensor(p.shape(), DType::F32, dev);
        keep = Tensor(p.shape(), DType::F32, dev);
        dropout_fwd(dev, p, pd, keep, at.dropout_p, at.seed);
    }
    const bool partial = s.l != s.tk;
    Tensor dvc = partial ? Tensor({s.b, s.h, s.l, s.dv}, DType::F32, dev) : dv;
    Tensor dkc = partial ? Tensor({s.b, s.h, s.l, s.dk}, DType::F32, dev) : dk;
    gemm_batched(dev, true, false, 1.0f, pd, dout, 0.0f, dvc);  // dV = (P*M)^T dO
    Tensor dpd(p.shape(), DType::F32, dev), ds(p.shape(), DType::F32, dev);
    gemm_batched(dev, false, true, 1.0f, dout, vc, 0.0f, dpd);  // d(P*M) = dO V^T
    Tensor dp = dpd;
    if (at.dropout_p > 0.0f) {
        dp = Tensor(p.shape(), DType::F32, dev);
        mul(dev, dpd, keep, dp);
    }
    softmax_bwd(dev, false, dp, p, ds);  // dS = P*(dP - rowsum(dP*P))
    gemm_batched(dev, false, false, at.scale, ds, kc, 0.0f, dq);
    gemm_batched(dev, true, false, at.scale, ds, q, 0.0f, dkc);
    if (!partial) return;
    fill(dev, dk, 0.0f);  // the contract: rows j >= L of dK and dV are 0
    fill(dev, dv, 0.0f);
    Tensor dk_rows = dk.reshaped({s.b * s.h * s.tk, s.dk}), dv_rows = dv.reshaped({s.b * s.h * s.tk, s.dv});
    const Tensor dkc_rows = dkc.reshaped({s.b * s.h * s.l, s.dk}), dvc_rows = dvc.reshaped({s.b * s.h * s.l, s.dv});
    for (int64_t bh = 0; bh < s.b * s.h; ++bh) {
        Tensor to_k = dk_rows.rows(bh * s.tk, s.l), to_v = dv_rows.rows(bh * s.tk, s.l);
        copy(dev, dkc_rows.rows(bh * s.l, s.l), to_k);
        copy(dev, dvc_rows.rows(bh * s.l, s.l), to_v);
    }
}

void gemm_batched(Device& dev, bool ta, bool tb, float alpha, const Tensor& a, const Tensor& b, float beta,
                  Tensor& c) {
    const uint32_t op = XYLEM_OP_GEMM_BATCHED;
    const xylem_gemm_attrs at{ta, tb, alpha, beta};
    plugin_kit::gemm_batched_shape(Rule{op}, at, View(op, a.shape()), View(op, b.shape()), View(op, c.shape()));
    run_args(dev, op, {a.read(dev), b.read(dev)}, {beta == 0.0f ? c.write(dev) : c.read_write(dev)}, &at, sizeof at);
}

Shape permuted_shape(const Shape& x, const std::vector<int>& perm) {
    const uint32_t op = XYLEM_OP_PERMUTE;
    if (perm.size() != x.size())
        detail::shape_error(op, "perm has " + std::to_string(perm.size()) + " entries for X " + to_string(x));
    Shape y(x.size());
    for (size_t i = 0; i < perm.size(); ++i) {
        if (perm[i] < 0 || static_cast<size_t>(perm[i]) >= x.size())
            detail::shape_error(op, "perm entry " + std::to_string(perm[i]) + " is not an axis of X " + to_string(x));
        y[i] = x[static_cast<size_t>(perm[i])];
    }
    return y;
}

void permute(Device& dev, const Tensor& x, Tensor& y, const std::vector<int>& perm) {
    const uint32_t op = XYLEM_OP_PERMUTE;
    if (perm.size() != x.shape().size() || perm.size() > XYLEM_MAX_DIMS)
        detail::shape_error(op, "perm has " + std::to_string(perm.size()) + " entries for X " + to_string(x.shape()));
    xylem_permute_attrs at{};
    for (size_t i = 0; i < perm.size(); ++i) at.perm[i] = perm[i];
    plugin_kit::permute_shape(Rule{op}, at, View(op, x.shape()), View(op, y.shape()));
    run_args(dev, op, {x.read(dev)}, {y.write(dev)}, &at, sizeof at);
}

void masked_softmax(Device& dev, const Tensor& x, const Tensor* mask, Tensor& y, Tensor* lse, float scale,
                    bool causal) {
    const uint32_t op = XYLEM_OP_MASKED_SOFTMAX;
    const xylem_attention_attrs at{scale, causal ? 1 : 0, 0.0f, 0, 0};
    const View vm(op, mask ? mask->shape() : Shape{}), vl(op, lse ? lse->shape() : Shape{});
    plugin_kit::masked_softmax_shape(Rule{op}, at, View(op, x.shape()), mask ? &vm : nullptr, View(op, y.shape()),
                                     lse ? &vl : nullptr);
    const auto in = with_optional({x.read(dev)}, mask, dev);
    std::vector<xylem_tensor_arg> out{y.write(dev)};
    if (lse) out.push_back(lse->write(dev));
    run_args(dev, op, in, out, &at, sizeof at);
}

}  // namespace xylem::ops
