// Step fusion (xylem/fusion.h): record a step's ops, plan chains of elementwise ops as fused programs,
// and run the plan while later steps issue the recorded ops.
//
// How a step runs once planned: Device::run hands every op to submit(). An op that is not part of a
// chain is launched at once. A chain member is checked against the recording (same op, same operands,
// same structure-deciding attributes) and held back; when the chain's last member arrives, the chain's
// program gets the params of the ops just issued and runs as one fused_elementwise launch. Anything
// that must see the device in order — a host read, a copy, a sync — launches held-back ops first
// (flush). An op that differs from the recording ends the plan for the rest of that step: held-back
// ops run as issued, the rest eagerly.
#include "xylem/fusion.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <set>

#include "fusion_internal.h"
#include "xylem/env.h"
#include "xylem/error.h"
#include "xylem/fused_builder.h"
#include "xylem/plugin_kit/fused.h"

namespace xylem::fusion {

bool enabled(bool config_value) {
    return env::value_or(env::fusion(), config_value);  // XYLEM_FUSION wins; a value that is no switch is an error
}

namespace {

int64_t numel_of(const xylem_tensor_arg& a) {
    int64_t n = 1;
    for (uint32_t d = 0; d < a.ndim && d < XYLEM_MAX_DIMS; ++d) n *= a.dims[d];
    return n;
}

int64_t cols_of(const xylem_tensor_arg& a) { return a.ndim ? a.dims[a.ndim - 1] : 1; }

// Elements [off, off + n) of one buffer.
struct Region {
    xylem_buffer_t buf = nullptr;
    uint64_t off = 0, n = 0;

    explicit Region(const xylem_tensor_arg& a) : buf(a.buffer), off(a.offset), n(static_cast<uint64_t>(numel_of(a))) {}
    bool same(const Region& o) const { return buf == o.buf && off == o.off && n == o.n; }
    bool overlaps(const Region& o) const { return buf == o.buf && off < o.off + o.n && o.off < off + n; }
    bool covers(const Region& o) const { return buf == o.buf && off <= o.off && o.off + o.n <= off + n; }
};

bool same_arg(const xylem_tensor_arg& a, const xylem_tensor_arg& b) {
    if (a.buffer != b.buffer || a.offset != b.offset || a.dtype != b.dtype || a.ndim != b.ndim) return false;
    for (uint32_t d = 0; d < a.ndim && d < XYLEM_MAX_DIMS; ++d)
        if (a.dims[d] != b.dims[d]) return false;
    return true;
}

template <class A>
A attrs_of(const xylem_op_desc& d) {
    A a{};
    if (d.attrs && d.attrs_size >= sizeof(A)) std::memcpy(&a, d.attrs, sizeof a);
    return a;
}

// The attribute facts a plan depends on (which operands are read, which formula applies): a step
// whose op differs in them does not match the recording. Values (rates, bounds) are bound per run.
uint64_t structure_of(const xylem_op_desc& d) {
    switch (d.op) {
    case XYLEM_OP_AXPBY: return attrs_of<xylem_axpby_attrs>(d).beta == 0.0f;
    case XYLEM_OP_ACT_FWD:
    case XYLEM_OP_ACT_BWD: return static_cast<uint64_t>(attrs_of<xylem_act_attrs>(d).activation);
    case XYLEM_OP_SGD_UPDATE: {
        const auto a = attrs_of<xylem_sgd_attrs>(d);
        return (a.momentum == 0.0f) | (uint64_t(a.nesterov != 0) << 1);
    }
    case XYLEM_OP_RMSPROP_UPDATE: {
        const auto a = attrs_of<xylem_rmsprop_attrs>(d);
        return (a.momentum > 0.0f) | (uint64_t(a.centered != 0) << 1);
    }
    case XYLEM_OP_GEMM: return attrs_of<xylem_gemm_attrs>(d).beta == 0.0f;
    case XYLEM_OP_BIAS_GRAD: return attrs_of<xylem_bias_grad_attrs>(d).beta == 0.0f;
    default: return 0;
    }
}

// One op as issued: operands and attribute bytes (copied: the caller's arrays die with the call).
struct OpCall {
    uint32_t op = 0;
    std::vector<xylem_tensor_arg> in, out;
    std::vector<unsigned char> attrs;
    uint64_t structure = 0;

    explicit OpCall(const xylem_op_desc& d)
        : op(d.op), in(d.inputs, d.inputs + d.n_inputs), out(d.outputs, d.outputs + d.n_outputs),
          attrs(static_cast<const unsigned char*>(d.attrs), static_cast<const unsigned char*>(d.attrs) + (d.attrs ? d.attrs_size : 0)),
          structure(structure_of(d)) {}

    xylem_op_desc desc() const {
        return {op, static_cast<uint32_t>(in.size()), static_cast<uint32_t>(out.size()), static_cast<uint32_t>(attrs.size()),
                in.data(), out.data(), attrs.empty() ? nullptr : attrs.data()};
    }
    bool matches(const xylem_op_desc& d) const {
        if (d.op != op || d.n_inputs != in.size() || d.n_outputs != out.size() || (d.attrs ? d.attrs_size : 0) != attrs.size())
            return false;
        for (size_t i = 0; i < in.size(); ++i)
            if (!same_arg(in[i], d.inputs[i])) return false;
        for (size_t i = 0; i < out.size(); ++i)
            if (!same_arg(out[i], d.outputs[i])) return false;
        return structure_of(d) == structure;
    }
};

// Whether output i of an op is read (accumulated into or updated in place). Exact for the ops the
// pass fuses; every other op's outputs count as read, which only ever keeps a value alive.
bool output_read(const OpCall& c, size_t i) {
    switch (c.op) {
    case XYLEM_OP_FILL:
    case XYLEM_OP_COPY:
    case XYLEM_OP_MUL:
    case XYLEM_OP_ADD:
    case XYLEM_OP_ACT_FWD:
    case XYLEM_OP_ACT_BWD: return false;
    case XYLEM_OP_AXPBY: return c.in.size() == 1 && c.structure == 0;  // out = alpha*a + beta*out, beta != 0
    case XYLEM_OP_GEMM:
    case XYLEM_OP_BIAS_GRAD: return c.structure == 0;  // beta == 0: the output is not read
    case XYLEM_OP_LINEAR_FWD:
    case XYLEM_OP_SOFTMAX_FWD:
    case XYLEM_OP_SOFTMAX_BWD:
    case XYLEM_OP_XENT_BWD:
    case XYLEM_OP_NLL_BWD:
    case XYLEM_OP_MSE_BWD:
    case XYLEM_OP_CONV2D_FWD:
    case XYLEM_OP_CONV2D_BWD_DATA:
    case XYLEM_OP_POOL2D_FWD:
    case XYLEM_OP_POOL2D_BWD:
    case XYLEM_OP_GATHER_ROWS: return false;
    case XYLEM_OP_DROPOUT_FWD: return false;  // y and mask written
    default: (void)i; return true;
    }
}

// ---- chain members as program text ----------------------------------------------------------

// What a member expansion needs: operands as values, params, and the arithmetic. Planning builds a
// program (Planner); a run only collects the params of the ops just issued (Binder), in the same
// order, since the expansion's control flow depends only on the op's structure.
class Emitter {
public:
    using V = FusedBuilder::Value;
    virtual ~Emitter() = default;
    virtual bool read(const xylem_tensor_arg& a, uint8_t mode, V& out) = 0;  // false: cannot be fused here
    virtual bool write(const xylem_tensor_arg& a, V v) = 0;
    virtual V param(float value) = 0;
    virtual V constant(float value) = 0;
    virtual V f(xylem_fused_opcode op, V a, V b = 0, V c = 0) = 0;
    // The member needs the iteration space to have `cols` columns (a broadcast along rows or columns).
    virtual bool need_cols(int64_t cols) = 0;
};

bool all_f32(const OpCall& c) {
    for (const auto& a : c.in)
        if (a.dtype != XYLEM_F32) return false;
    for (const auto& a : c.out)
        if (a.dtype != XYLEM_F32) return false;
    return true;
}

// Writes op `c` into the emitter; false when the op is not elementwise or cannot join the chain.
// `attrs`, given, replaces the recorded attribute bytes (the values of the step being run). The
// formulas follow ops.h and the native kernels' evaluation order.
bool expand(const OpCall& c, Emitter& e, const void* attrs = nullptr) {
    using V = FusedBuilder::Value;
    xylem_op_desc d = c.desc();
    if (attrs) d.attrs = attrs;
    if (c.out.empty() || !all_f32(c)) return false;
    auto rd = [&](size_t i, V& v) { return e.read(c.in[i], XYLEM_FUSED_FULL, v); };
    V a = 0, b = 0, x = 0;
    switch (c.op) {
    case XYLEM_OP_FILL: return c.out.size() == 1 && e.write(c.out[0], e.param(attrs_of<xylem_fill_attrs>(d).value));
    case XYLEM_OP_COPY: return c.in.size() == 1 && numel_of(c.in[0]) == numel_of(c.out[0]) && rd(0, a) && e.write(c.out[0], a);
    case XYLEM_OP_MUL: return c.in.size() == 2 && rd(0, a) && rd(1, b) && e.write(c.out[0], e.f(XYLEM_FUSED_MUL, a, b));
    case XYLEM_OP_AXPBY: {
        const auto at = attrs_of<xylem_axpby_attrs>(d);
        const V pa = e.param(at.alpha), pb = e.param(at.beta);
        if (!rd(0, a)) return false;
        if (c.in.size() == 2) {
            if (!rd(1, b)) return false;
            return e.write(c.out[0], e.f(XYLEM_FUSED_ADD, e.f(XYLEM_FUSED_MUL, pa, a), e.f(XYLEM_FUSED_MUL, pb, b)));
        }
        if (c.structure) return e.write(c.out[0], e.f(XYLEM_FUSED_MUL, pa, a));  // beta == 0: out not read
        if (!e.read(c.out[0], XYLEM_FUSED_FULL, b)) return false;
        return e.write(c.out[0], e.f(XYLEM_FUSED_ADD, e.f(XYLEM_FUSED_MUL, pa, a), e.f(XYLEM_FUSED_MUL, pb, b)));
    }
    case XYLEM_OP_ADD: {
        if (c.in.size() != 2) return false;
        const auto at = attrs_of<xylem_add_attrs>(d);
        const xylem_tensor_arg &ta = c.in[0], &tb = c.in[1];
        bool same_shape = ta.ndim == tb.ndim;
        for (uint32_t k = 0; same_shape && k < ta.ndim; ++k) same_shape = ta.dims[k] == tb.dims[k];
        uint8_t mode = XYLEM_FUSED_FULL;
        if (!same_shape) {  // ops.h's ADD: b a row [cols] or a column [..., 1]
            const int64_t cols = cols_of(ta);
            mode = tb.ndim == 1 && tb.dims[0] == cols ? XYLEM_FUSED_ROW : XYLEM_FUSED_COL;
            if (!e.need_cols(cols)) return false;
        }
        const V pa = e.param(at.alpha), pb = e.param(at.beta);
        if (!rd(0, a) || !e.read(tb, mode, b)) return false;
        return e.write(c.out[0], e.f(XYLEM_FUSED_ADD, e.f(XYLEM_FUSED_MUL, pa, a), e.f(XYLEM_FUSED_MUL, pb, b)));
    }
    case XYLEM_OP_ACT_FWD: {
        if (c.in.size() != 1 || !rd(0, a)) return false;
        switch (c.structure) {
        case XYLEM_ACT_NONE: return e.write(c.out[0], a);
        case XYLEM_ACT_RELU: return e.write(c.out[0], e.f(XYLEM_FUSED_RELU, a));
        case XYLEM_ACT_SIGMOID: return e.write(c.out[0], e.f(XYLEM_FUSED_SIGMOID, a));
        case XYLEM_ACT_TANH: return e.write(c.out[0], e.f(XYLEM_FUSED_TANH, a));
        case XYLEM_ACT_GELU: return e.write(c.out[0], e.f(XYLEM_FUSED_GELU, a));
        case XYLEM_ACT_GELU_TANH: return e.write(c.out[0], e.f(XYLEM_FUSED_GELU_TANH, a));
        case XYLEM_ACT_RELU6: return e.write(c.out[0], e.f(XYLEM_FUSED_MIN, e.f(XYLEM_FUSED_RELU, a), e.param(6.0f)));
        }
        return false;
    }
    case XYLEM_OP_ACT_BWD: {
        if (c.in.size() != 2 || !rd(0, a) || !rd(1, b)) return false;  // dy, y (x for the GELUs)
        switch (c.structure) {
        case XYLEM_ACT_NONE: return e.write(c.out[0], a);
        case XYLEM_ACT_RELU: return e.write(c.out[0], e.f(XYLEM_FUSED_RELU_GRAD, a, b));
        case XYLEM_ACT_SIGMOID: return e.write(c.out[0], e.f(XYLEM_FUSED_SIGMOID_GRAD, a, b));
        case XYLEM_ACT_TANH: return e.write(c.out[0], e.f(XYLEM_FUSED_TANH_GRAD, a, b));
        case XYLEM_ACT_GELU: return e.write(c.out[0], e.f(XYLEM_FUSED_GELU_GRAD, a, b));
        case XYLEM_ACT_GELU_TANH: return e.write(c.out[0], e.f(XYLEM_FUSED_GELU_TANH_GRAD, a, b));
        case XYLEM_ACT_RELU6:  // dy where 0 < y (and 6 - y > 0, i.e. y < 6), as act_bwd's select
            return e.write(c.out[0], e.f(XYLEM_FUSED_RELU_GRAD, e.f(XYLEM_FUSED_RELU_GRAD, a, b),
                                         e.f(XYLEM_FUSED_SUB, e.param(6.0f), b)));
        }
        return false;
    }
    case XYLEM_OP_CLAMP: {
        const auto at = attrs_of<xylem_clamp_attrs>(d);
        if (!c.in.empty() || c.out.size() != 1) return false;
        const V lo = e.param(at.lo), hi = e.param(at.hi);
        if (!e.read(c.out[0], XYLEM_FUSED_FULL, x)) return false;
        return e.write(c.out[0], e.f(XYLEM_FUSED_MIN, e.f(XYLEM_FUSED_MAX, x, lo), hi));
    }
    case XYLEM_OP_CLIP_BY_NORM: {
        const auto at = attrs_of<xylem_clip_by_norm_attrs>(d);
        if (c.in.size() != 1 || c.out.size() != 1 || numel_of(c.in[0]) != 1) return false;
        const V pmax = e.param(at.max_norm), peps = e.param(at.eps);
        V s = 0;
        if (!e.read(c.in[0], XYLEM_FUSED_SCALAR, s) || !e.read(c.out[0], XYLEM_FUSED_FULL, x)) return false;
        const V coef = e.f(XYLEM_FUSED_MIN, e.constant(1.0f),
                           e.f(XYLEM_FUSED_DIV, pmax, e.f(XYLEM_FUSED_ADD, e.f(XYLEM_FUSED_SQRT, s), peps)));
        return e.write(c.out[0], e.f(XYLEM_FUSED_MUL, x, coef));
    }
    case XYLEM_OP_SGD_UPDATE: {
        const auto at = attrs_of<xylem_sgd_attrs>(d);
        const bool plain = c.structure & 1, nesterov = c.structure & 2;
        if (c.in.size() != 1 || (!plain && c.out.size() != 2)) return false;  // plain: velocity untouched
        const V lr = e.param(at.lr), wd = e.param(at.weight_decay), mom = e.param(at.momentum),
                keep = e.f(XYLEM_FUSED_SUB, e.constant(1.0f), e.param(at.dampening));
        V g = 0, p = 0, v = 0;
        if (!rd(0, g) || !e.read(c.out[0], XYLEM_FUSED_FULL, p)) return false;
        const V gi = e.f(XYLEM_FUSED_ADD, g, e.f(XYLEM_FUSED_MUL, wd, p));
        if (plain) return e.write(c.out[0], e.f(XYLEM_FUSED_SUB, p, e.f(XYLEM_FUSED_MUL, lr, gi)));
        if (!e.read(c.out[1], XYLEM_FUSED_FULL, v)) return false;
        const V vi = e.f(XYLEM_FUSED_ADD, e.f(XYLEM_FUSED_MUL, mom, v), e.f(XYLEM_FUSED_MUL, keep, gi));
        const V step = nesterov ? e.f(XYLEM_FUSED_ADD, gi, e.f(XYLEM_FUSED_MUL, mom, vi)) : vi;
        return e.write(c.out[1], vi) && e.write(c.out[0], e.f(XYLEM_FUSED_SUB, p, e.f(XYLEM_FUSED_MUL, lr, step)));
    }
    case XYLEM_OP_ADAM_UPDATE:
    case XYLEM_OP_ADAMW_UPDATE: {
        // xylem_adam_attrs and xylem_adamw_attrs have the same fields
        const auto at = attrs_of<xylem_adam_attrs>(d);
        const bool decoupled = c.op == XYLEM_OP_ADAMW_UPDATE;
        if (c.in.size() != 1 || c.out.size() != 3) return false;
        const V lr = e.param(at.lr), b1 = e.param(at.beta1), b2 = e.param(at.beta2), eps = e.param(at.eps),
                wd = e.param(at.weight_decay), bc1 = e.param(at.bias_correction1), bc2 = e.param(at.bias_correction2);
        V g = 0, p = 0, m = 0, v = 0;
        if (!rd(0, g) || !e.read(c.out[0], XYLEM_FUSED_FULL, p) || !e.read(c.out[1], XYLEM_FUSED_FULL, m) ||
            !e.read(c.out[2], XYLEM_FUSED_FULL, v))
            return false;
        const V one = e.constant(1.0f);
        const V gi = decoupled ? g : e.f(XYLEM_FUSED_ADD, g, e.f(XYLEM_FUSED_MUL, wd, p));
        const V mi = e.f(XYLEM_FUSED_ADD, e.f(XYLEM_FUSED_MUL, b1, m), e.f(XYLEM_FUSED_MUL, e.f(XYLEM_FUSED_SUB, one, b1), gi));
        const V vi = e.f(XYLEM_FUSED_ADD, e.f(XYLEM_FUSED_MUL, b2, v),
                         e.f(XYLEM_FUSED_MUL, e.f(XYLEM_FUSED_MUL, e.f(XYLEM_FUSED_SUB, one, b2), gi), gi));
        const V den = e.f(XYLEM_FUSED_ADD, e.f(XYLEM_FUSED_MUL, e.f(XYLEM_FUSED_SQRT, vi), e.f(XYLEM_FUSED_RSQRT, bc2)), eps);
        const V upd = e.f(XYLEM_FUSED_DIV, e.f(XYLEM_FUSED_MUL, e.f(XYLEM_FUSED_DIV, lr, bc1), mi), den);
        const V base = decoupled ? e.f(XYLEM_FUSED_MUL, p, e.f(XYLEM_FUSED_SUB, one, e.f(XYLEM_FUSED_MUL, lr, wd))) : p;
        return e.write(c.out[1], mi) && e.write(c.out[2], vi) && e.write(c.out[0], e.f(XYLEM_FUSED_SUB, base, upd));
    }
    case XYLEM_OP_RMSPROP_UPDATE: {
        const auto at = attrs_of<xylem_rmsprop_attrs>(d);
        const bool has_buf = c.structure & 1, centered = c.structure & 2;
        if (c.in.size() != 1 || c.out.size() != 2u + has_buf + centered) return false;
        const V lr = e.param(at.lr), alpha = e.param(at.alpha), eps = e.param(at.eps), wd = e.param(at.weight_decay),
                mom = e.param(at.momentum);
        V g = 0, p = 0, sq = 0;
        if (!rd(0, g) || !e.read(c.out[0], XYLEM_FUSED_FULL, p) || !e.read(c.out[1], XYLEM_FUSED_FULL, sq)) return false;
        const V keep = e.f(XYLEM_FUSED_SUB, e.constant(1.0f), alpha);
        const V gi = e.f(XYLEM_FUSED_ADD, g, e.f(XYLEM_FUSED_MUL, wd, p));
        const V si = e.f(XYLEM_FUSED_ADD, e.f(XYLEM_FUSED_MUL, alpha, sq), e.f(XYLEM_FUSED_MUL, keep, e.f(XYLEM_FUSED_MUL, gi, gi)));
        if (!e.write(c.out[1], si)) return false;
        V avg;
        if (centered) {
            V ga = 0;
            const auto& tga = c.out[2 + has_buf];
            if (!e.read(tga, XYLEM_FUSED_FULL, ga)) return false;
            const V ai = e.f(XYLEM_FUSED_ADD, ga, e.f(XYLEM_FUSED_MUL, keep, e.f(XYLEM_FUSED_SUB, gi, ga)));
            if (!e.write(tga, ai)) return false;
            avg = e.f(XYLEM_FUSED_ADD, e.f(XYLEM_FUSED_SQRT, e.f(XYLEM_FUSED_SUB, si, e.f(XYLEM_FUSED_MUL, ai, ai))), eps);
        } else {
            avg = e.f(XYLEM_FUSED_ADD, e.f(XYLEM_FUSED_SQRT, si), eps);
        }
        if (has_buf) {
            V buf = 0;
            if (!e.read(c.out[2], XYLEM_FUSED_FULL, buf)) return false;
            const V bi = e.f(XYLEM_FUSED_ADD, e.f(XYLEM_FUSED_MUL, mom, buf), e.f(XYLEM_FUSED_DIV, gi, avg));
            return e.write(c.out[2], bi) && e.write(c.out[0], e.f(XYLEM_FUSED_SUB, p, e.f(XYLEM_FUSED_MUL, lr, bi)));
        }
        return e.write(c.out[0], e.f(XYLEM_FUSED_SUB, p, e.f(XYLEM_FUSED_MUL, lr, e.f(XYLEM_FUSED_DIV, gi, avg))));
    }
    default: return false;
    }
}

// Only collects params, in expansion order.
class Binder final : public Emitter {
public:
    explicit Binder(float* params) : params_(params) {}
    bool read(const xylem_tensor_arg&, uint8_t, V& out) override { return out = 0, true; }
    bool write(const xylem_tensor_arg&, V) override { return true; }
    V param(float value) override { return params_[n_++] = value, 0; }
    V constant(float) override { return 0; }
    V f(xylem_fused_opcode, V, V, V) override { return 0; }
    bool need_cols(int64_t) override { return true; }
    uint32_t count() const { return n_; }

private:
    float* params_;
    uint32_t n_ = 0;
};

// Builds one chain's program: operands become inputs (deduplicated) or forwarded values.
class Planner final : public Emitter {
public:
    struct Input {
        xylem_tensor_arg arg;
        uint8_t mode;
        V value;
    };
    struct Written {
        xylem_tensor_arg arg;
        V value;
        bool consumed = false;  // read by a later member of the chain
    };

    bool read(const xylem_tensor_arg& a, uint8_t mode, V& out) override {
        const Region r(a);
        for (auto it = written_.rbegin(); it != written_.rend(); ++it) {
            const Region w(it->arg);
            if (w.same(r) && mode == XYLEM_FUSED_FULL) return it->consumed = true, out = it->value, true;  // forwarded
            if (w.overlaps(r)) return false;  // partly written here: not one element per element
        }
        for (const Input& in : inputs_)
            if (Region(in.arg).same(r) && in.mode == mode) return out = in.value, true;
        if (inputs_.size() >= XYLEM_FUSED_MAX_INPUTS) return false;
        out = b_.input(static_cast<uint32_t>(inputs_.size()));
        inputs_.push_back({a, mode, out});
        return true;
    }
    bool write(const xylem_tensor_arg& a, V v) override {
        const Region r(a);
        // the program reads every input before it writes: an input may share memory with an output
        // only exactly (one element per element)
        for (const Input& in : inputs_)
            if (Region(in.arg).overlaps(r) && !(Region(in.arg).same(r) && in.mode == XYLEM_FUSED_FULL)) return false;
        for (Written& w : written_) {
            if (Region(w.arg).same(r)) return w.value = v, w.consumed = false, true;
            if (Region(w.arg).overlaps(r)) return false;
        }
        written_.push_back({a, v, false});
        return true;
    }
    V param(float value) override { return b_.param(value); }
    V constant(float value) override { return b_.constant(value); }
    V f(xylem_fused_opcode op, V a, V b, V c) override { return b_.apply(op, a, b, c); }
    bool need_cols(int64_t cols) override {
        if (cols_ && cols_ != cols) return false;
        cols_ = cols;
        return true;
    }

    FusedBuilder b_;
    std::vector<Input> inputs_;
    std::vector<Written> written_;
    int64_t cols_ = 0;
};

// A planned chain: ops [first, last] of the recording as one program.
struct Chain {
    size_t first = 0, last = 0;
    xylem_fused_attrs program{};
    std::vector<xylem_tensor_arg> inputs, outputs;
    std::vector<xylem_buffer_t> elided;  // buffers of the values it never stores
    ProgramInfo info;
};

xylem_tensor_arg as_dims(xylem_tensor_arg a, std::initializer_list<int64_t> dims) {
    a.ndim = static_cast<uint32_t>(dims.size());
    std::fill(a.dims, a.dims + XYLEM_MAX_DIMS, 0);
    std::copy(dims.begin(), dims.end(), a.dims);
    return a;
}

}  // namespace

struct StepState {
    Device* dev = nullptr;
    bool enabled = false, running = false;
    bool supported = false;  // the backend runs fused_elementwise
    int warmup_left = 1;     // eager steps before the recording (StepFusion's warmup_steps)
    // the recording and its plan
    bool recording = false, planned = false;
    std::vector<OpCall> recorded;
    std::set<xylem_buffer_t> host_read;  // buffers the host read while the pass was attached
    std::vector<Chain> chains;
    std::vector<int> chain_of;         // per recorded op: its chain, or -1
    std::set<xylem_buffer_t> elided;   // buffers holding a value the plan never stores
    // the step being run
    size_t pos = 0;
    bool diverged = false;
    // Members of the current chain, held back: their recorded position and this step's attribute
    // bytes (the operands are the recording's: the op matched it). Slots are reused step after step,
    // so holding an op allocates nothing once the first fused step has run.
    struct Held {
        size_t pos = 0;
        std::vector<unsigned char> attrs;
    };
    std::vector<Held> held;
    size_t n_held = 0;
    uint64_t step_ops = 0, step_launches = 0, launches_at_start = 0;
    uint32_t diverged_steps = 0, unfused_chains = 0;
    std::vector<ProgramInfo> programs;
    std::string note;
};

namespace {

// The value written at `r` by ops [first, last] is read later: by an op after the chain in the step,
// by the next step before it is overwritten (the chain itself included: `chain_inputs` are what it
// reads before writing, e.g. a gradient clamped in place, carried from the step before), or by the
// host.
bool live_after(const StepState& s, const Region& r, size_t first, size_t last,
                const std::vector<Planner::Input>& chain_inputs) {
    if (s.host_read.count(r.buf)) return true;
    const size_t n = s.recorded.size();
    for (size_t k = 1; k < n; ++k) {
        const size_t i = (last + k) % n;
        if (i >= first && i <= last)  // back at the chain: live if its next run reads it
            return std::any_of(chain_inputs.begin(), chain_inputs.end(),
                               [&](const Planner::Input& in) { return Region(in.arg).overlaps(r); });
        const OpCall& c = s.recorded[i];
        for (const auto& a : c.in)
            if (Region(a).overlaps(r)) return true;
        for (size_t o = 0; o < c.out.size(); ++o) {
            const Region w(c.out[o]);
            if (!w.overlaps(r)) continue;
            if (output_read(c, o)) return true;
            if (w.covers(r)) return false;  // overwritten whole before any read
        }
    }
    return false;
}

// Plans ops [first, last] as one chain; false when they cannot run as one program.
bool plan_chain(const StepState& s, size_t first, size_t last, Chain& chain) {
    chain.elided.clear();
    Planner p;
    std::string members;
    const int64_t n = numel_of(s.recorded[first].out.empty() ? xylem_tensor_arg{} : s.recorded[first].out[0]);
    if (n <= 0) return false;
    for (size_t i = first; i <= last; ++i) {
        const OpCall& c = s.recorded[i];
        if (c.out.empty() || numel_of(c.out[0]) != n || !expand(c, p)) return false;
        members += (members.empty() ? "" : ", ") + std::string(xylem_op_name(c.op));
    }
    const int64_t cols = p.cols_ ? p.cols_ : n, rows = n / cols;
    std::vector<uint8_t> modes;
    for (const auto& in : p.inputs_) {
        const int64_t want = in.mode == XYLEM_FUSED_FULL ? n : in.mode == XYLEM_FUSED_ROW ? cols : in.mode == XYLEM_FUSED_COL ? rows : 1;
        if (numel_of(in.arg) != want) return false;
        modes.push_back(in.mode);
        chain.inputs.push_back(in.mode == XYLEM_FUSED_FULL ? as_dims(in.arg, {rows, cols})
                               : in.mode == XYLEM_FUSED_ROW ? as_dims(in.arg, {cols})
                               : in.mode == XYLEM_FUSED_COL ? as_dims(in.arg, {rows})
                                                            : as_dims(in.arg, {1}));
    }
    uint32_t n_out = 0;
    for (const auto& w : p.written_) {
        // An intermediate (read by the chain, by nothing after it) is never stored. A value nothing in
        // the step reads is the step's result (the host may read it between steps): stored.
        if (w.consumed && !live_after(s, Region(w.arg), first, last, p.inputs_)) {
            chain.elided.push_back(w.arg.buffer);
            continue;
        }
        p.b_.output(n_out++, w.value);
        chain.outputs.push_back(as_dims(w.arg, {rows, cols}));
    }
    if (n_out == 0) {  // nothing read afterwards: keep the last value written (the chain's result)
        p.b_.output(n_out++, p.written_.back().value);
        chain.outputs.push_back(as_dims(p.written_.back().arg, {rows, cols}));
    }
    if (!p.b_.fits()) return false;
    chain.first = first;
    chain.last = last;
    chain.program = p.b_.finish(modes);
    chain.info.members = members;
    chain.info.text = p.b_.describe();
    chain.info.ops_replaced = static_cast<uint32_t>(last - first + 1);
    chain.info.elements = n;
    return true;
}

bool fusable(const OpCall& c) {
    struct Probe final : Emitter {
        bool read(const xylem_tensor_arg&, uint8_t, V& out) override { return out = 0, true; }
        bool write(const xylem_tensor_arg&, V) override { return true; }
        V param(float) override { return 0; }
        V constant(float) override { return 0; }
        V f(xylem_fused_opcode, V, V, V) override { return 0; }
        bool need_cols(int64_t) override { return true; }
    } probe;
    return expand(c, probe);
}

// Greedy: each run of consecutive fusable ops is cut into the longest chains that fit one program.
void plan(StepState& s) {
    s.chains.clear();
    s.elided.clear();
    s.chain_of.assign(s.recorded.size(), -1);
    s.programs.clear();
    const size_t n = s.recorded.size();
    size_t i = 0;
    while (i < n) {
        if (!fusable(s.recorded[i])) {
            ++i;
            continue;
        }
        Chain best;
        bool have = false;
        size_t j = i + 1;
        for (; j < n && fusable(s.recorded[j]); ++j) {
            Chain c;
            if (!plan_chain(s, i, j, c)) break;
            best = std::move(c);
            have = true;
        }
        if (have) {
            for (size_t k = best.first; k <= best.last; ++k) s.chain_of[k] = static_cast<int>(s.chains.size());
            s.elided.insert(best.elided.begin(), best.elided.end());
            s.programs.push_back(best.info);
            i = best.last + 1;
            s.chains.push_back(std::move(best));
        } else {
            ++i;  // a lone elementwise op runs as issued
        }
    }
    s.planned = true;
}

void hold(StepState& s, size_t pos, const xylem_op_desc& d) {
    if (s.n_held == s.held.size()) s.held.emplace_back();
    StepState::Held& h = s.held[s.n_held++];
    h.pos = pos;
    const auto* bytes = static_cast<const unsigned char*>(d.attrs);
    h.attrs.assign(bytes, bytes + (d.attrs ? d.attrs_size : 0));
}

// Runs the held-back members of a chain as issued (the plan no longer applies, or no fused op).
void launch_held(StepState& s) {
    const size_t n = s.n_held;
    s.n_held = 0;  // a launch may sync (profiling), which flushes: nothing is held by then
    for (size_t k = 0; k < n; ++k) {
        const StepState::Held& h = s.held[k];
        xylem_op_desc d = s.recorded[h.pos].desc();
        d.attrs = h.attrs.empty() ? nullptr : h.attrs.data();
        s.dev->launch(d);
    }
}

void launch_chain(StepState& s, const Chain& chain) {
    if (!s.supported) {
        ++s.unfused_chains;
        return launch_held(s);
    }
    xylem_fused_attrs program = chain.program;
    Binder binder(program.params);
    for (size_t k = 0; k < s.n_held; ++k) expand(s.recorded[s.held[k].pos], binder, s.held[k].attrs.data());
    const xylem_op_desc d{XYLEM_OP_FUSED_ELEMENTWISE, static_cast<uint32_t>(chain.inputs.size()),
                          static_cast<uint32_t>(chain.outputs.size()), static_cast<uint32_t>(sizeof program),
                          chain.inputs.data(), chain.outputs.data(), &program};
    s.n_held = 0;
    s.dev->launch(d);
}

void diverge(StepState& s) {
    if (!s.diverged) ++s.diverged_steps;
    s.diverged = true;
    launch_held(s);
}

}  // namespace

void submit(StepState& s, Device& dev, const xylem_op_desc& desc) {
    if (!s.running) return dev.launch(desc);
    ++s.step_ops;
    if (s.recording) {
        s.recorded.emplace_back(desc);
        return dev.launch(desc);
    }
    if (!s.planned || s.diverged) return dev.launch(desc);
    const size_t pos = s.pos++;
    if (pos >= s.recorded.size() || !s.recorded[pos].matches(desc)) {
        diverge(s);
        return dev.launch(desc);
    }
    const int chain = s.chain_of[pos];
    if (chain < 0) return dev.launch(desc);
    hold(s, pos, desc);
    if (pos == s.chains[static_cast<size_t>(chain)].last) launch_chain(s, s.chains[static_cast<size_t>(chain)]);
}

void flush(StepState& s) {
    if (s.n_held) diverge(s);  // a chain cut in the middle by a host wait: run it as issued
}

void note_host_read(StepState& s, xylem_buffer_t buffer) {
    flush(s);
    if (s.host_read.insert(buffer).second && s.planned && s.elided.count(buffer)) {
        // A buffer the plan may elide is read by the host after all: plan again from a new recording.
        s.planned = false;
        s.recorded.clear();
    }
}

StepFusion::StepFusion(Device& dev, bool on, int warmup_steps) : state_(std::make_unique<StepState>()) {
    state_->warmup_left = warmup_steps;
    if (dev.fusion_state()) throw Error(dev.name() + ": another step fusion is attached to this device");
    state_->dev = &dev;
    state_->enabled = on;
    state_->supported = dev.backend().supports(XYLEM_OP_FUSED_ELEMENTWISE);
    if (on) dev.set_fusion_state(state_.get());
}

StepFusion::~StepFusion() {
    if (state_->dev->fusion_state() == state_.get()) state_->dev->set_fusion_state(nullptr);
}

void StepFusion::run(const std::function<void()>& step) {
    StepState& s = *state_;
    Device& dev = *s.dev;
    const uint64_t before = dev.launches();
    s.step_ops = 0;
    if (!s.enabled) {
        step();
        s.step_launches = s.step_ops = dev.launches() - before;
        return;
    }
    if (s.running) throw Error(dev.name() + ": a fused step is already running on this device");
    const bool record = !s.planned && s.warmup_left-- <= 0;
    s.recording = record;
    if (record) s.recorded.clear();
    s.pos = 0;
    s.diverged = false;
    s.n_held = 0;
    s.running = true;
    try {
        step();
        flush(s);
    } catch (...) {
        s.running = s.recording = false;
        s.n_held = 0;
        throw;
    }
    s.running = false;
    if (s.planned && !s.diverged && s.pos != s.recorded.size()) ++s.diverged_steps;  // a shorter step
    if (record) {
        s.recording = false;
        plan(s);
    }
    s.step_launches = dev.launches() - before;
}

bool StepFusion::enabled() const { return state_->enabled; }
uint64_t StepFusion::last_step_launches() const { return state_->step_launches; }
uint64_t StepFusion::last_step_ops() const { return state_->step_ops; }
const std::vector<ProgramInfo>& StepFusion::programs() const { return state_->programs; }

std::string StepFusion::note() const {
    const StepState& s = *state_;
    std::string n;
    if (!s.enabled) return "fusion is off";
    if (!s.supported && !s.chains.empty())
        n = "backend '" + s.dev->backend().name() + "' has no fused_elementwise op: " + std::to_string(s.chains.size()) +
            " chain(s) ran op by op on it";
    if (s.diverged_steps) {
        if (!n.empty()) n += "; ";
        n += std::to_string(s.diverged_steps) + " step(s) issued other ops than the recorded step and ran (partly) unfused";
    }
    return n;
}

ForwardFusion::ForwardFusion(Device& dev) {
    // No warm-up: an inference forward has no first-step special cases, and the recorded first pass
    // lets `xylem run`'s second pass run fused. (Were the second to differ, it would run as issued.)
    if (!dev.fusion_state()) fusion_ = std::make_unique<StepFusion>(dev, enabled(true), 0);
}

ForwardFusion::~ForwardFusion() = default;

void ForwardFusion::run(const std::function<void()>& forward) {
    if (fusion_) fusion_->run(forward);
    else forward();
}

}  // namespace xylem::fusion
