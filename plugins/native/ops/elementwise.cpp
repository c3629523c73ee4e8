// Elementwise ops: FILL, COPY, AXPBY, MUL, ACT_FWD, ACT_BWD, DROPOUT_FWD, and the activation kernels.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "native.h"
#include "simd.h"
#include "vecmath.h"

namespace xylem::native {

namespace {

// vecmath's exp and tanh, as fused_elementwise computes them (ops/fused.cpp): the loops vectorise,
// and an activation gives the same bits fused or not.
inline float sigmoid(float x) { return vecmath::sigmoid(x); }  // 1 / (1 + e^-x): e^-x = inf gives 0, no NaN
inline float tanh(float x) { return vecmath::tanh(x); }
inline float relu(float x) { return vecmath::relu(x); }
inline float relu6(float x) {  // min(relu(x), 6): the fused program's MIN(RELU(x), 6)
    const float r = relu(x);
    return r < 6.0f ? r : 6.0f;
}

// y[r,:] = f(y[r,:] + b) row by row; a separate instantiation per activation keeps loops branch-free.
template <class F>
void bias_rows(const float* b, float* y, int64_t rows, int64_t cols, F f) {
    for (int64_t r = 0; r < rows; ++r) {
        float* yr = y + r * cols;
        for (int64_t j = 0; j < cols; ++j) yr[j] = f(yr[j] + b[j]);
    }
}

// y[r*ldy + j] = f(x[r*ldx + j] + b[r]): one bias per row, as for an NCHW channel plane.
template <class F>
void channel_rows(const float* b, const float* x, int64_t ldx, float* y, int64_t ldy, int64_t rows, int64_t cols,
                  F f) {
    for (int64_t r = 0; r < rows; ++r) {
        const float* xr = x + r * ldx;
        float* yr = y + r * ldy;
        const float br = b ? b[r] : 0.0f;
        for (int64_t j = 0; j < cols; ++j) yr[j] = f(xr[j] + br);
    }
}

// The same with a residual: f((x + b) + res).
template <class F>
void channel_rows_residual(const float* b, const float* x, int64_t ldx, const float* __restrict res, int64_t ldr,
                           float* y, int64_t ldy, int64_t rows, int64_t cols, F f) {
    for (int64_t r = 0; r < rows; ++r) {
        const float* xr = x + r * ldx;
        const float* rr = res + r * ldr;
        float* yr = y + r * ldy;
        const float br = b ? b[r] : 0.0f;
        for (int64_t j = 0; j < cols; ++j) yr[j] = f(xr[j] + br + rr[j]);
    }
}

}  // namespace

// A level template (simd.h) for the exact GELU, whose polynomials fuse their multiply-adds at
// the levels with FMA, as the fused opcodes do (ops/fused.cpp): the same bits fused or not.
XYLEM_KERNEL_LEVELS(void, activate, (int act, const float* x, float* y, int64_t n), (act, x, y, n)) {
    switch (act) {
    case XYLEM_ACT_NONE:
        if (x != y) std::memmove(y, x, static_cast<size_t>(n) * sizeof(float));
        break;
    case XYLEM_ACT_RELU:
        for (int64_t i = 0; i < n; ++i) y[i] = relu(x[i]);
        break;
    case XYLEM_ACT_SIGMOID:
        for (int64_t i = 0; i < n; ++i) y[i] = sigmoid(x[i]);
        break;
    case XYLEM_ACT_TANH:
        for (int64_t i = 0; i < n; ++i) y[i] = tanh(x[i]);
        break;
    case XYLEM_ACT_RELU6:
        for (int64_t i = 0; i < n; ++i) y[i] = relu6(x[i]);
        break;
    // The kit's formulas with vecmath's erf and tanh, as the fused opcodes compute them (ops/fused.cpp):
    // the same bits fused or not. act_fwd only (linear_fwd and conv2d_fwd refuse GELU).
    case XYLEM_ACT_GELU:
        for (int64_t i = 0; i < n; ++i) y[i] = vecmath::gelu<S::kFma>(x[i]);
        break;
    case XYLEM_ACT_GELU_TANH:
        for (int64_t i = 0; i < n; ++i) y[i] = vecmath::gelu_tanh(x[i]);
        break;
    }
}

XYLEM_KERNEL(void, bias_activate,
             (int act, const float* b, float* y, int64_t rows, int64_t cols),
             (act, b, y, rows, cols)) {
    if (!b) return activate(act, y, y, rows * cols);
    switch (act) {
    case XYLEM_ACT_NONE: bias_rows(b, y, rows, cols, [](float v) { return v; }); break;
    case XYLEM_ACT_RELU: bias_rows(b, y, rows, cols, [](float v) { return relu(v); }); break;
    case XYLEM_ACT_SIGMOID: bias_rows(b, y, rows, cols, [](float v) { return sigmoid(v); }); break;
    case XYLEM_ACT_TANH: bias_rows(b, y, rows, cols, [](float v) { return tanh(v); }); break;
    case XYLEM_ACT_RELU6: bias_rows(b, y, rows, cols, [](float v) { return relu6(v); }); break;
    }
}

XYLEM_KERNEL(void, channel_bias_activate,
             (int act, const float* b, const float* x, int64_t ldx, float* y, int64_t ldy, int64_t rows, int64_t cols,
              const float* res, int64_t ldr),
             (act, b, x, ldx, y, ldy, rows, cols, res, ldr)) {
    if (res) {
        switch (act) {
        case XYLEM_ACT_NONE: return channel_rows_residual(b, x, ldx, res, ldr, y, ldy, rows, cols, [](float v) { return v; });
        case XYLEM_ACT_RELU: return channel_rows_residual(b, x, ldx, res, ldr, y, ldy, rows, cols, [](float v) { return relu(v); });
        case XYLEM_ACT_SIGMOID:
            return channel_rows_residual(b, x, ldx, res, ldr, y, ldy, rows, cols, [](float v) { return sigmoid(v); });
        case XYLEM_ACT_TANH: return channel_rows_residual(b, x, ldx, res, ldr, y, ldy, rows, cols, [](float v) { return tanh(v); });
        case XYLEM_ACT_RELU6:
            return channel_rows_residual(b, x, ldx, res, ldr, y, ldy, rows, cols, [](float v) { return relu6(v); });
        }
        return;
    }
    switch (act) {
    case XYLEM_ACT_NONE: channel_rows(b, x, ldx, y, ldy, rows, cols, [](float v) { return v; }); break;
    case XYLEM_ACT_RELU: channel_rows(b, x, ldx, y, ldy, rows, cols, [](float v) { return relu(v); }); break;
    case XYLEM_ACT_SIGMOID: channel_rows(b, x, ldx, y, ldy, rows, cols, [](float v) { return sigmoid(v); }); break;
    case XYLEM_ACT_TANH: channel_rows(b, x, ldx, y, ldy, rows, cols, [](float v) { return tanh(v); }); break;
    case XYLEM_ACT_RELU6: channel_rows(b, x, ldx, y, ldy, rows, cols, [](float v) { return relu6(v); }); break;
    }
}

// dx = dy * act'(y), from the activation's output; for the GELUs y is the input x (their
// gradient needs it). dx may alias dy.
XYLEM_KERNEL_LEVELS(void, activate_grad, (int act, const float* dy, const float* y, float* dx, int64_t n),
                    (act, dy, y, dx, n)) {
    switch (act) {
    case XYLEM_ACT_NONE:
        if (dx != dy) std::memmove(dx, dy, static_cast<size_t>(n) * sizeof(float));
        break;
    case XYLEM_ACT_RELU:
        for (int64_t i = 0; i < n; ++i) dx[i] = vecmath::relu_gradient(dy[i], y[i]);
        break;
    case XYLEM_ACT_SIGMOID:
        for (int64_t i = 0; i < n; ++i) dx[i] = dy[i] * y[i] * (1.0f - y[i]);
        break;
    case XYLEM_ACT_TANH:
        for (int64_t i = 0; i < n; ++i) dx[i] = dy[i] * (1.0f - y[i] * y[i]);
        break;
    case XYLEM_ACT_RELU6:
        for (int64_t i = 0; i < n; ++i) {
            const float d = dy[i];
            dx[i] = y[i] > 0.0f && 6.0f - y[i] > 0.0f ? d : 0.0f;  // the fused RELU_GRADs' tests
        }
        break;
    case XYLEM_ACT_GELU:  // the fused GELU_GRAD opcode's a * gelu'(b)
        for (int64_t i = 0; i < n; ++i) dx[i] = dy[i] * vecmath::gelu_derivative<S::kFma>(y[i]);
        break;
    case XYLEM_ACT_GELU_TANH:
        for (int64_t i = 0; i < n; ++i) dx[i] = dy[i] * vecmath::gelu_tanh_derivative(y[i]);
        break;
    }
}

void op_fill(const xylem_op_desc& desc, xylem_stream_s&) {
    OpArgs a(desc, 0, 0, 1);
    const float value = a.attrs<xylem_fill_attrs>().value;
    if (desc.outputs[0].dtype == XYLEM_I32) {
        const Tensor out = a.out(0, "out", XYLEM_I32);
        if (!(value >= -2147483648.0f && value < 2147483648.0f)) a.fail("value %g does not fit an i32", value);
        std::fill_n(out.i32(), out.numel, static_cast<int32_t>(value));
        return;
    }
    const Tensor out = a.out(0, "out");
    std::fill_n(out.f32(), out.numel, value);
}

void op_copy(const xylem_op_desc& desc, xylem_stream_s&) {
    OpArgs a(desc, 1, 1, 1);
    const xylem_dtype dtype = desc.inputs[0].dtype == XYLEM_I32 ? XYLEM_I32 : XYLEM_F32;
    const Tensor in = a.in(0, "in", dtype), out = a.out(0, "out", dtype);
    a.same_numel(in, "in", out, "out");
    if (in.data == out.data) return;
    if (overlap(in, out)) return static_cast<void>(std::memmove(out.data, in.data, static_cast<size_t>(in.numel) * 4));
    const char* src = static_cast<const char*>(in.data);
    char* dst = static_cast<char*>(out.data);
    split_elements(in.numel, [&](int64_t lo, int64_t hi) {
        std::memcpy(dst + lo * 4, src + lo * 4, static_cast<size_t>(hi - lo) * 4);
    });
}

void op_axpby(const xylem_op_desc& desc, xylem_stream_s&) {
    OpArgs a(desc, 1, 2, 1);
    const auto attrs = a.attrs<xylem_axpby_attrs>();
    const Tensor ta = a.in(0, "a"), tout = a.out(0, "out");
    a.same_numel(ta, "a", tout, "out");
    const float alpha = attrs.alpha, beta = attrs.beta;
    const float* x = ta.f32();
    float* out = tout.f32();
    const float* y = nullptr;
    if (a.n_inputs() == 2) {
        const Tensor tb = a.in(1, "b");
        a.same_numel(ta, "a", tb, "b");
        y = tb.f32();
    }
    // A partial overlap runs in one piece, in order, as it always did.
    auto body = [&](int64_t lo, int64_t hi) {
        if (y) {
            for (int64_t i = lo; i < hi; ++i) out[i] = alpha * x[i] + beta * y[i];
        } else if (beta == 0.0f) {  // BLAS convention: beta = 0 does not read out (it may hold NaN)
            for (int64_t i = lo; i < hi; ++i) out[i] = alpha * x[i];
        } else {
            for (int64_t i = lo; i < hi; ++i) out[i] = alpha * x[i] + beta * out[i];
        }
    };
    const bool partial = (x != out && overlap(ta, tout)) || (y && y != out && overlap(a.in(1, "b"), tout));
    if (partial) return body(0, ta.numel);
    split_elements(ta.numel, body);
}

void op_mul(const xylem_op_desc& desc, xylem_stream_s&) {
    OpArgs a(desc, 2, 2, 1);
    const Tensor ta = a.in(0, "a"), tb = a.in(1, "b"), tout = a.out(0, "out");
    a.same_numel(ta, "a", tb, "b");
    a.same_numel(ta, "a", tout, "out");
    const float *x = ta.f32(), *y = tb.f32();
    float* out = tout.f32();
    auto body = [&](int64_t lo, int64_t hi) {
        for (int64_t i = lo; i < hi; ++i) out[i] = x[i] * y[i];
    };
    const bool partial = (x != out && overlap(ta, tout)) || (y != out && overlap(tb, tout));
    if (partial) return body(0, ta.numel);
    split_elements(ta.numel, body);
}

// Rows [lo, hi) of out = alpha*a + beta*b, b broadcast as `b` says (a kernel per level: as plain
// code, compiled for baseline x86-64, a [768, 128] residual add did four floats an instruction).
XYLEM_KERNEL(void, add_rows,
             (const float* x, const float* y, float* out, int64_t lo, int64_t hi, int64_t cols,
              plugin_kit::Broadcast b, float alpha, float beta),
             (x, y, out, lo, hi, cols, b, alpha, beta)) {
    for (int64_t r = lo; r < hi; ++r) {
        const float* xr = x + r * cols;
        float* o = out + r * cols;
        switch (b) {
        case plugin_kit::Broadcast::elementwise:
            for (int64_t c = 0; c < cols; ++c) o[c] = alpha * xr[c] + beta * y[r * cols + c];
            break;
        case plugin_kit::Broadcast::row:
            for (int64_t c = 0; c < cols; ++c) o[c] = alpha * xr[c] + beta * y[c];
            break;
        case plugin_kit::Broadcast::column:
            for (int64_t c = 0; c < cols; ++c) o[c] = alpha * xr[c] + beta * y[r];
            break;
        }
    }
}

// out = alpha*a + beta*b with b broadcast over rows (a row vector) or columns (a column vector).
void op_add(const xylem_op_desc& desc, xylem_stream_s&) {
    OpArgs a(desc, 2, 2, 1);
    const auto at = a.attrs<xylem_add_attrs>();
    const Tensor ta = a.in(0, "a"), tb = a.in(1, "b"), tout = a.out(0, "out");
    const plugin_kit::AddShape sh = plugin_kit::add_shape(a, ta, tb, tout);
    if (sh.b != plugin_kit::Broadcast::elementwise && overlap(tout, tb)) a.fail("out overlaps the broadcast b");
    const float *x = ta.f32(), *y = tb.f32();
    float* out = tout.f32();
    split_work(sh.rows, split_workers(sh.rows * sh.cols, kMinSplitElements, sh.rows),  // rows split when big
               [&](int64_t lo, int64_t hi, int) { add_rows(x, y, out, lo, hi, sh.cols, sh.b, at.alpha, at.beta); });
}

// Elements per extra worker for an activation pass: the transcendental ones cost 1-4 ns per
// element on one thread (GELU's backward the most), so a worker pays for itself from 16k elements,
// where a pass that only streams needs kMinSplitElements (the character GPT's [768, 512] GELUs,
// 393k elements, ran on one thread below that: 0.5 ms forward, 0.8 ms backward per call).
static int64_t activation_split(int act) {
    const bool cheap = act == XYLEM_ACT_NONE || act == XYLEM_ACT_RELU || act == XYLEM_ACT_RELU6;
    return cheap ? kMinSplitElements : int64_t{1} << 14;
}

void op_act_fwd(const xylem_op_desc& desc, xylem_stream_s&) {
    OpArgs a(desc, 1, 1, 1);
    const int act = a.check_act_op_activation(a.attrs<xylem_act_attrs>().activation);
    const Tensor x = a.in(0, "x"), y = a.out(0, "y");
    a.same_numel(x, "x", y, "y");
    const float* xp = x.f32();
    float* yp = y.f32();
    split_elements(x.numel, [&](int64_t lo, int64_t hi) { activate(act, xp + lo, yp + lo, hi - lo); },
                   activation_split(act));
}

// The second input is y = act(x), or x itself for the GELUs.
void op_act_bwd(const xylem_op_desc& desc, xylem_stream_s&) {
    OpArgs a(desc, 2, 2, 1);
    const int act = a.check_act_op_activation(a.attrs<xylem_act_attrs>().activation);
    const bool gelu = act == XYLEM_ACT_GELU || act == XYLEM_ACT_GELU_TANH;
    const Tensor tdy = a.in(0, "dy"), ty = a.in(1, gelu ? "x" : "y"), tdx = a.out(0, "dx");
    a.same_numel(tdy, "dy", ty, "y");
    a.same_numel(tdy, "dy", tdx, "dx");
    const float *dy = tdy.f32(), *y = ty.f32();
    float* dx = tdx.f32();
    split_elements(tdy.numel, [&](int64_t lo, int64_t hi) { activate_grad(act, dy + lo, y + lo, dx + lo, hi - lo); },
                   activation_split(act));
}

void op_dropout_fwd(const xylem_op_desc& desc, xylem_stream_s&) {
    OpArgs a(desc, 1, 1, 2);
    const auto attrs = a.attrs<xylem_dropout_attrs>();
    const Tensor tx = a.in(0, "x"), ty = a.out(0, "y"), tmask = a.out(1, "mask");
    a.same_numel(tx, "x", ty, "y");
    a.same_numel(tx, "x", tmask, "mask");
    const float p = attrs.p;
    if (!(p >= 0.0f && p < 1.0f)) a.fail("p = %g must be in [0, 1)", p);
    const float* x = tx.f32();
    float *y = ty.f32(), *mask = tmask.f32();
    const int64_t n = tx.numel;
    if (p == 0.0f) {
        std::fill_n(mask, n, 1.0f);
        if (y != x) std::memmove(y, x, static_cast<size_t>(n) * sizeof(float));
        return;
    }
    const float scale = 1.0f / (1.0f - p);
    for (int64_t i = 0; i < n; ++i) {
        const float m = xylem_dropout_keep(attrs.seed, static_cast<uint64_t>(i), p) ? scale : 0.0f;
        mask[i] = m;
        y[i] = x[i] * m;
    }
}

}  // namespace xylem::native
