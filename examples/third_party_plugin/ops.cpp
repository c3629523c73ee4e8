// The ops tiny implements, as plain loops: enough to train an MLP with softmax cross-entropy and
// SGD (fill, copy, axpby, mul, gemm, linear_fwd, bias_grad, activations, softmax, xent, sgd,
// accuracy). Everything else (convolutions, pooling, batch norm, Adam, ...) is unsupported, and
// the core reports "op <name> is not supported by backend 'tiny'" when a model needs one.
// The core has already checked shapes and dtypes (core/src/op_calls.cpp); the checks here guard
// only what a bad descriptor could turn into an out-of-bounds access.
#include <cmath>
#include <cstring>

#include "tiny.h"
#include "xylem/plugin_kit/fused.h"  // gelu_value and its kin: the GELU formulas every backend shares

namespace tiny {
namespace {

int64_t numel(const xylem_tensor_arg& t) {
    int64_t n = 1;
    for (uint32_t i = 0; i < t.ndim; ++i) n *= t.dims[i];
    return n;
}
float* f32(const xylem_tensor_arg& t) { return t.buffer->data + t.offset; }
const int32_t* i32(const xylem_tensor_arg& t) { return reinterpret_cast<const int32_t*>(t.buffer->data) + t.offset; }

template <class Attrs>
Attrs attrs_of(const xylem_op_desc& d) {
    Attrs a{};
    std::memcpy(&a, d.attrs, sizeof a);  // the caller checked attrs_size
    return a;
}

float act(int32_t kind, float x) {
    switch (kind) {
        case XYLEM_ACT_RELU: return x > 0.0f ? x : 0.0f;
        case XYLEM_ACT_SIGMOID: return 1.0f / (1.0f + std::exp(-x));
        case XYLEM_ACT_TANH: return std::tanh(x);
        case XYLEM_ACT_GELU: return xylem::plugin_kit::gelu_value(x);  // act_fwd only (ABI 1.7)
        case XYLEM_ACT_GELU_TANH: return xylem::plugin_kit::gelu_tanh_value(x);
        case XYLEM_ACT_RELU6: return std::fmin(x > 0.0f ? x : 0.0f, 6.0f);  // ABI 1.8
        default: return x;
    }
}

// f'(x) written through y = f(x), as the backward ops receive y; the GELUs' act_bwd receives x
// itself (their gradient needs it), so for them y is x.
float act_grad(int32_t kind, float y) {
    switch (kind) {
        case XYLEM_ACT_RELU: return y > 0.0f ? 1.0f : 0.0f;
        case XYLEM_ACT_SIGMOID: return y * (1.0f - y);
        case XYLEM_ACT_TANH: return 1.0f - y * y;
        case XYLEM_ACT_GELU: return xylem::plugin_kit::gelu_derivative(y);
        case XYLEM_ACT_GELU_TANH: return xylem::plugin_kit::gelu_tanh_derivative(y);
        case XYLEM_ACT_RELU6: return y > 0.0f && 6.0f - y > 0.0f ? 1.0f : 0.0f;
        default: return 1.0f;
    }
}

// C[m,n] = alpha * op(A)[m,k] op(B)[k,n] + beta * C; beta = 0 never reads C. The i-p-j order keeps
// the inner loop contiguous in B and C when B is not transposed, so the compiler vectorizes it.
void gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a, const float* b, float beta,
          float* c) {
    const int64_t lda = ta ? m : k, ldb = tb ? k : n;
    for (int64_t i = 0; i < m; ++i) {
        float* ci = c + i * n;
        for (int64_t j = 0; j < n; ++j) ci[j] = beta == 0.0f ? 0.0f : beta * ci[j];
        for (int64_t p = 0; p < k; ++p) {
            const float av = alpha * (ta ? a[p * lda + i] : a[i * lda + p]);
            if (tb)
                for (int64_t j = 0; j < n; ++j) ci[j] += av * b[j * ldb + p];
            else
                for (int64_t j = 0; j < n; ++j) ci[j] += av * b[p * ldb + j];
        }
    }
}

xylem_status run_gemm(const xylem_op_desc& d) {
    const auto at = attrs_of<xylem_gemm_attrs>(d);
    const xylem_tensor_arg &a = d.inputs[0], &b = d.inputs[1], &c = d.outputs[0];
    const int64_t m = c.dims[0], n = c.dims[1], k = at.trans_a ? a.dims[0] : a.dims[1];
    gemm(at.trans_a, at.trans_b, m, n, k, at.alpha, f32(a), f32(b), at.beta, f32(c));
    return XYLEM_OK;
}

// Y = act(X W^T + b).
xylem_status run_linear(const xylem_op_desc& d) {
    const auto at = attrs_of<xylem_linear_attrs>(d);
    const xylem_tensor_arg &x = d.inputs[0], &w = d.inputs[1], &y = d.outputs[0];
    const int64_t n = x.dims[0], in = x.dims[1], out = w.dims[0];
    gemm(false, true, n, out, in, 1.0f, f32(x), f32(w), 0.0f, f32(y));
    const float* bias = d.n_inputs > 2 ? f32(d.inputs[2]) : nullptr;
    float* py = f32(y);
    for (int64_t r = 0; r < n; ++r)
        for (int64_t o = 0; o < out; ++o) py[r * out + o] = act(at.activation, py[r * out + o] + (bias ? bias[o] : 0.0f));
    return XYLEM_OK;
}

// db[c] = beta*db[c] + sum of dy over every axis but 1.
xylem_status run_bias_grad(const xylem_op_desc& d) {
    const auto at = attrs_of<xylem_bias_grad_attrs>(d);
    const xylem_tensor_arg& dy = d.inputs[0];
    const int64_t channels = dy.dims[1], batch = dy.dims[0], inner = numel(dy) / (batch * channels);
    const float* g = f32(dy);
    float* db = f32(d.outputs[0]);
    for (int64_t c = 0; c < channels; ++c) {
        double s = 0.0;
        for (int64_t b = 0; b < batch; ++b)
            for (int64_t i = 0; i < inner; ++i) s += g[(b * channels + c) * inner + i];
        db[c] = static_cast<float>(at.beta == 0.0f ? s : at.beta * db[c] + s);
    }
    return XYLEM_OK;
}

// Softmax or log-softmax over the last axis, and its gradient through y.
xylem_status run_softmax(const xylem_op_desc& d, bool backward) {
    const bool log = attrs_of<xylem_softmax_attrs>(d).log != 0;
    const xylem_tensor_arg& first = d.inputs[0];
    const int64_t cols = first.dims[first.ndim - 1], rows = cols ? numel(first) / cols : 0;
    for (int64_t r = 0; r < rows; ++r) {
        float* out = f32(d.outputs[0]) + r * cols;
        if (!backward) {
            const float* x = f32(first) + r * cols;
            float mx = x[0];
            for (int64_t j = 1; j < cols; ++j) mx = std::fmax(mx, x[j]);
            double sum = 0.0;
            for (int64_t j = 0; j < cols; ++j) sum += std::exp(x[j] - mx);
            for (int64_t j = 0; j < cols; ++j)
                out[j] = log ? x[j] - mx - static_cast<float>(std::log(sum)) : static_cast<float>(std::exp(x[j] - mx) / sum);
            continue;
        }
        const float *dy = f32(d.inputs[0]) + r * cols, *y = f32(d.inputs[1]) + r * cols;
        double dot = 0.0;  // softmax: sum(dy*y); log-softmax: sum(dy)
        for (int64_t j = 0; j < cols; ++j) dot += log ? dy[j] : dy[j] * y[j];
        for (int64_t j = 0; j < cols; ++j)
            out[j] = log ? dy[j] - std::exp(y[j]) * static_cast<float>(dot) : y[j] * (dy[j] - static_cast<float>(dot));
    }
    return XYLEM_OK;
}

// Labels index the class axis: a bad one would read out of bounds, so it is an error here.
xylem_status check_labels(const xylem_tensor_arg& labels, int64_t rows, int64_t classes, const char* op) {
    for (int64_t i = 0; i < rows; ++i)
        if (i32(labels)[i] < 0 || i32(labels)[i] >= classes)
            return fail(XYLEM_E_INVALID, "%s: label %d of row %lld is outside [0, %lld)", op, i32(labels)[i],
                        static_cast<long long>(i), static_cast<long long>(classes));
    return XYLEM_OK;
}

// Cross-entropy of softmax(logits): forward into the loss scalar, backward into dlogits.
xylem_status run_xent(const xylem_op_desc& d, bool backward) {
    const auto at = attrs_of<xylem_loss_attrs>(d);
    const xylem_tensor_arg &x = d.inputs[0], &labels = d.inputs[1];
    const int64_t rows = x.dims[0], cols = x.dims[1];
    if (xylem_status st = check_labels(labels, rows, cols, backward ? "xent_bwd" : "xent_fwd")) return st;
    double total = 0.0;
    for (int64_t r = 0; r < rows; ++r) {
        const float* xr = f32(x) + r * cols;
        const int32_t label = i32(labels)[r];
        float mx = xr[0];
        for (int64_t j = 1; j < cols; ++j) mx = std::fmax(mx, xr[j]);
        double sum = 0.0;
        for (int64_t j = 0; j < cols; ++j) sum += std::exp(xr[j] - mx);
        if (!backward) {
            total += (static_cast<double>(mx) - xr[label]) + std::log(sum);  // the difference first
            continue;
        }
        float* dx = f32(d.outputs[0]) + r * cols;
        for (int64_t j = 0; j < cols; ++j)
            dx[j] = at.scale * (static_cast<float>(std::exp(xr[j] - mx) / sum) - (j == label ? 1.0f : 0.0f));
    }
    if (!backward) {
        float* loss = f32(d.outputs[0]);
        const double add = at.scale * total;  // acc = 0 must not read the old value (it may be NaN)
        loss[0] = static_cast<float>(at.acc == 0.0f ? add : at.acc * loss[0] + add);
    }
    return XYLEM_OK;
}

// PyTorch's SGD: g = grad + wd*p; v = momentum*v + (1-dampening)*g; p -= lr*(nesterov ? g + momentum*v : v).
xylem_status run_sgd(const xylem_op_desc& d) {
    const auto at = attrs_of<xylem_sgd_attrs>(d);
    const int64_t n = numel(d.outputs[0]);
    float *p = f32(d.outputs[0]), *v = d.n_outputs > 1 ? f32(d.outputs[1]) : nullptr;
    const float* grad = f32(d.inputs[0]);
    for (int64_t i = 0; i < n; ++i) {
        const float g = grad[i] + at.weight_decay * p[i];
        if (!v) {
            p[i] -= at.lr * g;
            continue;
        }
        v[i] = at.momentum * v[i] + (1.0f - at.dampening) * g;
        p[i] -= at.lr * (at.nesterov ? g + at.momentum * v[i] : v[i]);
    }
    return XYLEM_OK;
}

// correct += number of rows whose first maximum is at the label.
xylem_status run_accuracy(const xylem_op_desc& d) {
    const xylem_tensor_arg &x = d.inputs[0], &labels = d.inputs[1];
    const int64_t rows = x.dims[0], cols = x.dims[1];
    int64_t hits = 0;
    for (int64_t r = 0; r < rows; ++r) {
        const float* xr = f32(x) + r * cols;
        int64_t best = 0;
        for (int64_t j = 1; j < cols; ++j)
            if (xr[j] > xr[best]) best = j;
        hits += best == i32(labels)[r];
    }
    f32(d.outputs[0])[0] += static_cast<float>(hits);
    return XYLEM_OK;
}

xylem_status run_elementwise(const xylem_op_desc& d) {
    const int64_t n = numel(d.outputs[0]);
    float* out = f32(d.outputs[0]);
    switch (d.op) {
        case XYLEM_OP_FILL: {
            const float v = attrs_of<xylem_fill_attrs>(d).value;
            for (int64_t i = 0; i < n; ++i) out[i] = v;
            return XYLEM_OK;
        }
        case XYLEM_OP_COPY:
            std::memmove(out, f32(d.inputs[0]), static_cast<size_t>(n) * sizeof(float));
            return XYLEM_OK;
        case XYLEM_OP_AXPBY: {  // one input: out is b (in place); beta = 0 never reads it
            const auto at = attrs_of<xylem_axpby_attrs>(d);
            const float *a = f32(d.inputs[0]), *b = d.n_inputs > 1 ? f32(d.inputs[1]) : out;
            for (int64_t i = 0; i < n; ++i) out[i] = at.alpha * a[i] + (at.beta == 0.0f ? 0.0f : at.beta * b[i]);
            return XYLEM_OK;
        }
        case XYLEM_OP_MUL: {
            const float *a = f32(d.inputs[0]), *b = f32(d.inputs[1]);
            for (int64_t i = 0; i < n; ++i) out[i] = a[i] * b[i];
            return XYLEM_OK;
        }
        case XYLEM_OP_ACT_FWD: {
            const int32_t kind = attrs_of<xylem_act_attrs>(d).activation;
            const float* x = f32(d.inputs[0]);
            for (int64_t i = 0; i < n; ++i) out[i] = act(kind, x[i]);
            return XYLEM_OK;
        }
        case XYLEM_OP_ACT_BWD: {
            const int32_t kind = attrs_of<xylem_act_attrs>(d).activation;
            const float *dy = f32(d.inputs[0]), *y = f32(d.inputs[1]);
            for (int64_t i = 0; i < n; ++i) out[i] = dy[i] * act_grad(kind, y[i]);
            return XYLEM_OK;
        }
        default:
            return fail(XYLEM_E_UNSUPPORTED, "op %s is not an elementwise op", xylem_op_name(d.op));
    }
}

// Operand counts and attribute sizes per supported op; attrs_size 0 = no attributes.
struct Arity {
    uint32_t min_in, max_in, min_out, max_out, attrs_size;
};

bool arity_of(uint32_t op, Arity* a) {
    switch (op) {
        case XYLEM_OP_FILL: *a = {0, 0, 1, 1, sizeof(xylem_fill_attrs)}; return true;
        case XYLEM_OP_COPY: *a = {1, 1, 1, 1, 0}; return true;
        case XYLEM_OP_AXPBY: *a = {1, 2, 1, 1, sizeof(xylem_axpby_attrs)}; return true;
        case XYLEM_OP_MUL: *a = {2, 2, 1, 1, 0}; return true;
        case XYLEM_OP_GEMM: *a = {2, 2, 1, 1, sizeof(xylem_gemm_attrs)}; return true;
        case XYLEM_OP_LINEAR_FWD: *a = {2, 3, 1, 1, sizeof(xylem_linear_attrs)}; return true;
        case XYLEM_OP_BIAS_GRAD: *a = {1, 1, 1, 1, sizeof(xylem_bias_grad_attrs)}; return true;
        case XYLEM_OP_ACT_FWD: *a = {1, 1, 1, 1, sizeof(xylem_act_attrs)}; return true;
        case XYLEM_OP_ACT_BWD: *a = {2, 2, 1, 1, sizeof(xylem_act_attrs)}; return true;
        case XYLEM_OP_SOFTMAX_FWD: *a = {1, 1, 1, 1, sizeof(xylem_softmax_attrs)}; return true;
        case XYLEM_OP_SOFTMAX_BWD: *a = {2, 2, 1, 1, sizeof(xylem_softmax_attrs)}; return true;
        case XYLEM_OP_XENT_FWD: *a = {2, 2, 1, 1, sizeof(xylem_loss_attrs)}; return true;
        case XYLEM_OP_XENT_BWD: *a = {2, 2, 1, 1, sizeof(xylem_loss_attrs)}; return true;
        case XYLEM_OP_SGD_UPDATE: *a = {1, 1, 1, 2, sizeof(xylem_sgd_attrs)}; return true;
        case XYLEM_OP_ACCURACY: *a = {2, 2, 1, 1, 0}; return true;
        default: return false;
    }
}

}  // namespace

int32_t op_supported(xylem_framework_t, uint32_t op) {
    Arity a;
    return arity_of(op, &a) ? 1 : 0;
}

xylem_status op_run(xylem_framework_t, xylem_stream_t stream, const xylem_op_desc* d) {
    Arity a;
    if (!stream || !d) return fail(XYLEM_E_INVALID, "op_run: NULL stream or descriptor");
    if (!arity_of(d->op, &a)) return fail(XYLEM_E_UNSUPPORTED, "op %s is not implemented by tiny", xylem_op_name(d->op));
    const char* name = xylem_op_name(d->op);
    if (d->n_inputs < a.min_in || d->n_inputs > a.max_in || d->n_outputs < a.min_out || d->n_outputs > a.max_out)
        return fail(XYLEM_E_INVALID, "%s: %u inputs and %u outputs is not a valid operand count", name, d->n_inputs,
                    d->n_outputs);
    if (a.attrs_size && (!d->attrs || d->attrs_size < a.attrs_size))
        return fail(XYLEM_E_INVALID, "%s: attributes missing or too short (%u bytes)", name, d->attrs_size);
    for (uint32_t i = 0; i < d->n_inputs + d->n_outputs; ++i) {
        const xylem_tensor_arg& t = i < d->n_inputs ? d->inputs[i] : d->outputs[i - d->n_inputs];
        if (!t.buffer || t.ndim > XYLEM_MAX_DIMS) return fail(XYLEM_E_INVALID, "%s: operand %u has no buffer", name, i);
        if ((t.offset + static_cast<uint64_t>(numel(t))) * 4 > t.buffer->bytes)
            return fail(XYLEM_E_INVALID, "%s: operand %u lies outside its buffer", name, i);
    }
    switch (d->op) {
        case XYLEM_OP_GEMM: return run_gemm(*d);
        case XYLEM_OP_LINEAR_FWD: return run_linear(*d);
        case XYLEM_OP_BIAS_GRAD: return run_bias_grad(*d);
        case XYLEM_OP_SOFTMAX_FWD: return run_softmax(*d, false);
        case XYLEM_OP_SOFTMAX_BWD: return run_softmax(*d, true);
        case XYLEM_OP_XENT_FWD: return run_xent(*d, false);
        case XYLEM_OP_XENT_BWD: return run_xent(*d, true);
        case XYLEM_OP_SGD_UPDATE: return run_sgd(*d);
        case XYLEM_OP_ACCURACY: return run_accuracy(*d);
        default: return run_elementwise(*d);
    }
}

}  // namespace tiny
