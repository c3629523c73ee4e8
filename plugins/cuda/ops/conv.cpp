// CONV2D_FWD (fused bias + activation), CONV2D_BWD_DATA, CONV2D_BWD_FILTER on cuDNN 9's legacy
// API. Descriptors and algorithms are made once per shape and cached for the process; algorithms
// come from cuDNN's heuristics (no benchmarking runs), so choosing one never touches the device
// and is safe inside a capture. Workspaces come from the stream's scratch arena. A kernel that
// covers its input is a Linear layer (the kit's conv_gemm_case, MXNet #2011) and runs as cuBLAS
// GEMMs on the NCHW buffers, as on the other backends.
#include <array>
#include <climits>

#include "cuda_plugin.h"
#include "kernels/kernels.h"

namespace xylem::cuda {

namespace {

using ll = long long;
constexpr size_t kMaxWorkspace = 512u << 20;  // algorithms wanting more are passed over

struct Conv : plugin_kit::Conv2dShape {
    std::array<int64_t, 16> key() const { return {n, c, h, w, k, r, s, oh, ow, g, sh, sw, ph, pw, dh, dw}; }
};

// The kit's shape rules, then cuDNN's int limit.
Conv conv_shape(const OpArgs& a, const xylem_conv2d_attrs& at, const Tensor& x, const char* xn, const Tensor& f,
                const char* fn, const Tensor& y, const char* yn) {
    const Conv v{plugin_kit::conv2d_shape(a, at, x, xn, f, fn, y, yn)};
    if (v.n > INT_MAX || v.c * v.h * v.w > INT_MAX || v.k * v.oh * v.ow > INT_MAX || v.c * v.r * v.s > INT_MAX)
        a.fail("%s %s / %s %s exceed the cuDNN limit of %d", xn, DimStr(x).s, yn, DimStr(y).s, INT_MAX);
    return v;
}

// ---- the Linear case: X [N, C*H*W] and Y [N, K] as they lie in NCHW, one GEMM per group --------
bool is_linear(const Conv& v) { return plugin_kit::conv_gemm_case(v) == plugin_kit::ConvGemm::linear; }

// Row-major C = beta*C + op(A)*op(B) on cuBLAS (column-major): C^T = op(B)^T op(A)^T, operands
// swapped, as op_gemm does. Sizes were bounded by conv_shape.
void row_gemm(const OpArgs& a, cublasHandle_t h, bool ta, bool tb, int64_t m, int64_t n, int64_t k, const float* pa,
              int64_t lda, const float* pb, int64_t ldb, float beta, float* pc, int64_t ldc) {
    const float one = 1.0f;
    a.check_cublas(cublasSgemm(h, tb ? CUBLAS_OP_T : CUBLAS_OP_N, ta ? CUBLAS_OP_T : CUBLAS_OP_N, static_cast<int>(n),
                               static_cast<int>(m), static_cast<int>(k), &one, pb, static_cast<int>(ldb), pa,
                               static_cast<int>(lda), &beta, pc, static_cast<int>(ldc)),
                   "cublasSgemm");
}

// Y[:, group] = X[:, group] * W_g^T, ld C*H*W and K; then bias + activation over [N, K].
// With a residual (ABI 1.10) Y already holds R, and the products are added to it (beta = 1).
void fwd_linear(const OpArgs& a, xylem_stream_s& s, const Conv& v, const float* x, const float* w, const float* b,
                int act, bool residual, float* y) {
    const int64_t in = v.cg * v.hw();
    for (int64_t g = 0; g < v.g; ++g)
        row_gemm(a, s.cublas_, false, true, v.n, v.kg, in, x + g * in, v.c * v.hw(), w + g * v.kg * in, in,
                 residual ? 1.0f : 0.0f, y + g * v.kg, v.k);
    if (b || act != XYLEM_ACT_NONE) kernels::row_bias_act(act, b, y, v.n, v.k, s.stream_);
    a.check_launch();
}

// dX[:, group] = dY[:, group] * W_g.
void bwd_data_linear(const OpArgs& a, xylem_stream_s& s, const Conv& v, const float* dy, const float* w, float* dx) {
    const int64_t in = v.cg * v.hw();
    for (int64_t g = 0; g < v.g; ++g)
        row_gemm(a, s.cublas_, false, false, v.n, in, v.kg, dy + g * v.kg, v.k, w + g * v.kg * in, in, 0.0f, dx + g * in,
                 v.c * v.hw());
}

// dW_g = beta*dW_g + dY[:, group]^T * X[:, group].
void bwd_filter_linear(const OpArgs& a, xylem_stream_s& s, const Conv& v, const float* x, const float* dy, float beta,
                       float* dw) {
    const int64_t in = v.cg * v.hw();
    for (int64_t g = 0; g < v.g; ++g)
        row_gemm(a, s.cublas_, true, false, v.kg, in, v.n, dy + g * v.kg, v.k, x + g * in, v.c * v.hw(), beta,
                 dw + g * v.kg * in, in);
}

// Everything cuDNN needs for one shape; made once, then read-only (shared by all streams).
struct ConvPlan {
    cudnnTensorDescriptor_t x = nullptr, y = nullptr, bias = nullptr;
    cudnnFilterDescriptor_t w = nullptr;
    cudnnConvolutionDescriptor_t conv = nullptr;
    cudnnActivationDescriptor_t relu = nullptr;
    bool have_fwd = false, have_bwd_data = false, have_bwd_filter = false;
    cudnnConvolutionFwdAlgo_t fwd{};
    cudnnConvolutionBwdDataAlgo_t bwd_data{};
    cudnnConvolutionBwdFilterAlgo_t bwd_filter{};
    size_t fwd_ws = 0, bwd_data_ws = 0, bwd_filter_ws = 0;
};

// The best heuristic choice that runs in FMA math (no TF32, so results track the CPU) within the
// workspace limit; else the best one at all. perf[i].memory is the workspace for perf[i].mathType,
// but the shared descriptor always runs in CUDNN_FMA_MATH: so the workspace is asked again for the
// descriptor as it is (ws_of, cudnnGet*WorkspaceSize), which also rejects an algorithm that cannot
// run in FMA math, instead of trusting a size computed for another math type (too small a
// workspace is an execution failure or an out-of-bounds write).
template <class Perf, class WsOf>
const Perf* pick(const Perf* perf, int count, WsOf ws_of, size_t* ws) {
    for (int fma_only = 1; fma_only >= 0; --fma_only)
        for (int i = 0; i < count; ++i) {
            if (perf[i].status != CUDNN_STATUS_SUCCESS) continue;
            if (fma_only && perf[i].mathType != CUDNN_FMA_MATH) continue;
            size_t bytes = 0;
            if (ws_of(perf[i].algo, &bytes) != CUDNN_STATUS_SUCCESS || bytes > kMaxWorkspace) continue;
            *ws = bytes;
            return &perf[i];
        }
    return nullptr;
}

}  // namespace

class ConvCache {
public:
    enum class Pass { kFwd, kBwdData, kBwdFilter };

    // The plan for v with the algorithm of `pass` chosen; throws OpError on a cuDNN failure.
    const ConvPlan& plan(const OpArgs& a, const Conv& v, Pass pass, cudnnHandle_t handle) {
        std::lock_guard<std::mutex> lock(mutex_);
        auto& slot = plans_[v.key()];
        if (!slot) slot = make_plan(a, v);
        ConvPlan& p = *slot;
        choose(a, p, pass, handle);
        return p;
    }

private:
    static std::unique_ptr<ConvPlan> make_plan(const OpArgs& a, const Conv& v) {
        auto p = std::make_unique<ConvPlan>();
        const auto i = [](int64_t x) { return static_cast<int>(x); };
        a.check_cudnn(cudnnCreateTensorDescriptor(&p->x), "cudnnCreateTensorDescriptor");
        a.check_cudnn(cudnnCreateTensorDescriptor(&p->y), "cudnnCreateTensorDescriptor");
        a.check_cudnn(cudnnCreateTensorDescriptor(&p->bias), "cudnnCreateTensorDescriptor");
        a.check_cudnn(cudnnCreateFilterDescriptor(&p->w), "cudnnCreateFilterDescriptor");
        a.check_cudnn(cudnnCreateConvolutionDescriptor(&p->conv), "cudnnCreateConvolutionDescriptor");
        a.check_cudnn(cudnnCreateActivationDescriptor(&p->relu), "cudnnCreateActivationDescriptor");
        a.check_cudnn(cudnnSetTensor4dDescriptor(p->x, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, i(v.n), i(v.c), i(v.h), i(v.w)),
                      "cudnnSetTensor4dDescriptor(X)");
        a.check_cudnn(cudnnSetTensor4dDescriptor(p->y, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, i(v.n), i(v.k), i(v.oh), i(v.ow)),
                      "cudnnSetTensor4dDescriptor(Y)");
        a.check_cudnn(cudnnSetTensor4dDescriptor(p->bias, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, 1, i(v.k), 1, 1),
                      "cudnnSetTensor4dDescriptor(b)");
        a.check_cudnn(cudnnSetFilter4dDescriptor(p->w, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, i(v.k), i(v.c / v.g), i(v.r), i(v.s)),
                      "cudnnSetFilter4dDescriptor");
        // CROSS_CORRELATION is what deep-learning "convolution" means (no filter flip), as on the CPU.
        a.check_cudnn(cudnnSetConvolution2dDescriptor(p->conv, i(v.ph), i(v.pw), i(v.sh), i(v.sw), i(v.dh), i(v.dw),
                                                      CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT),
                      "cudnnSetConvolution2dDescriptor");
        a.check_cudnn(cudnnSetConvolutionGroupCount(p->conv, i(v.g)), "cudnnSetConvolutionGroupCount");
        a.check_cudnn(cudnnSetConvolutionMathType(p->conv, CUDNN_FMA_MATH), "cudnnSetConvolutionMathType");
        a.check_cudnn(cudnnSetActivationDescriptor(p->relu, CUDNN_ACTIVATION_RELU, CUDNN_NOT_PROPAGATE_NAN, 0.0),
                      "cudnnSetActivationDescriptor");
        return p;
    }

    static void choose(const OpArgs& a, ConvPlan& p, Pass pass, cudnnHandle_t h) {
        int got = 0;
        if (pass == Pass::kFwd && !p.have_fwd) {
            cudnnConvolutionFwdAlgoPerf_t perf[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
            a.check_cudnn(cudnnGetConvolutionForwardAlgorithm_v7(h, p.x, p.w, p.conv, p.y,
                                                                 CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &got, perf),
                          "cudnnGetConvolutionForwardAlgorithm_v7");
            size_t ws = 0;
            const auto* best = pick(perf, got, [&](cudnnConvolutionFwdAlgo_t algo, size_t* bytes) {
                return cudnnGetConvolutionForwardWorkspaceSize(h, p.x, p.w, p.conv, p.y, algo, bytes);
            }, &ws);
            if (!best) a.device_fail("cudnnGetConvolutionForwardAlgorithm_v7", "no algorithm fits");
            p.fwd = best->algo, p.fwd_ws = ws, p.have_fwd = true;
        } else if (pass == Pass::kBwdData && !p.have_bwd_data) {
            cudnnConvolutionBwdDataAlgoPerf_t perf[CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT];
            a.check_cudnn(cudnnGetConvolutionBackwardDataAlgorithm_v7(h, p.w, p.y, p.conv, p.x,
                                                                      CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, &got, perf),
                          "cudnnGetConvolutionBackwardDataAlgorithm_v7");
            size_t ws = 0;
            const auto* best = pick(perf, got, [&](cudnnConvolutionBwdDataAlgo_t algo, size_t* bytes) {
                return cudnnGetConvolutionBackwardDataWorkspaceSize(h, p.w, p.y, p.conv, p.x, algo, bytes);
            }, &ws);
            if (!best) a.device_fail("cudnnGetConvolutionBackwardDataAlgorithm_v7", "no algorithm fits");
            p.bwd_data = best->algo, p.bwd_data_ws = ws, p.have_bwd_data = true;
        } else if (pass == Pass::kBwdFilter && !p.have_bwd_filter) {
            cudnnConvolutionBwdFilterAlgoPerf_t perf[CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT];
            a.check_cudnn(cudnnGetConvolutionBackwardFilterAlgorithm_v7(
                              h, p.x, p.y, p.conv, p.w, CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, &got, perf),
                          "cudnnGetConvolutionBackwardFilterAlgorithm_v7");
            size_t ws = 0;
            const auto* best = pick(perf, got, [&](cudnnConvolutionBwdFilterAlgo_t algo, size_t* bytes) {
                return cudnnGetConvolutionBackwardFilterWorkspaceSize(h, p.x, p.y, p.conv, p.w, algo, bytes);
            }, &ws);
            if (!best) a.device_fail("cudnnGetConvolutionBackwardFilterAlgorithm_v7", "no algorithm fits");
            p.bwd_filter = best->algo, p.bwd_filter_ws = ws, p.have_bwd_filter = true;
        }
    }

    std::mutex mutex_;
    std::map<std::array<int64_t, 16>, std::unique_ptr<ConvPlan>> plans_;  // never evicted: pointers stay valid
};

ConvCache* make_conv_cache() { return new ConvCache(); }

// ReLU with a bias runs as one cuDNN call (conv + bias + ReLU, and the residual R of ABI 1.10 as
// its z operand); other activations (cuDNN's fused call supports only ReLU and identity) run the
// convolution, then one bias + activation pass, with R copied into Y first and the convolution
// added to it (beta = 1).
void op_conv2d_fwd(const xylem_op_desc& desc, xylem_stream_s& s, xylem_framework_s& fw) {
    OpArgs a(desc, 2, 4, 1);
    const auto attrs = a.attrs<xylem_conv2d_attrs>();
    const int act = a.check_activation(attrs.activation);
    const Tensor tx = a.in(0, "X"), tw = a.in(1, "W"), ty = a.out(0, "Y");
    const Conv v = conv_shape(a, attrs, tx, "X", tw, "W", ty, "Y");
    const float* b = nullptr;
    if (a.n_inputs() >= 3) {
        const Tensor tb = a.in(2, "b");
        if (tb.numel != v.k) a.fail("b holds %lld elements for K=%lld filters", ll(tb.numel), ll(v.k));
        if (overlap(ty, tb)) a.fail("Y overlaps b");
        b = tb.f32();
    }
    const float* r = nullptr;
    if (a.n_inputs() == 4) {
        const Tensor tr = a.in(3, "R");
        plugin_kit::conv2d_residual_check(a, tr, ty, [](const Tensor& p, const Tensor& q) { return overlap(p, q); });
        r = tr.f32();
    }
    if (overlap(ty, tx) || overlap(ty, tw)) a.fail("Y overlaps X or W");
    if (v.n == 0) return;
    const bool fused_call = b && act == XYLEM_ACT_RELU && !is_linear(v);
    if (r && !fused_call)  // Y = R, then Y += the convolution
        a.check_cuda(cudaMemcpyAsync(ty.f32(), r, static_cast<size_t>(ty.numel) * sizeof(float),
                                     cudaMemcpyDeviceToDevice, s.stream_),
                     "cudaMemcpyAsync");
    if (is_linear(v)) return fwd_linear(a, s, v, tx.f32(), tw.f32(), b, act, r != nullptr, ty.f32());
    const ConvPlan& p = fw.conv_cache_->plan(a, v, ConvCache::Pass::kFwd, s.cudnn_);
    void* ws = p.fwd_ws ? s.scratch_.alloc<char>(static_cast<int64_t>(p.fwd_ws)) : nullptr;
    const float one = 1.0f, zero = 0.0f;
    if (fused_call) {
        // Without R: z = Y with alpha2 = 0 (cuDNN's scaling rule: a zero factor means the operand is
        // not read). With R: z = R, alpha2 = 1, Y = relu(conv + R + b).
        a.check_cudnn(cudnnConvolutionBiasActivationForward(s.cudnn_, &one, p.x, tx.f32(), p.w, tw.f32(), p.conv, p.fwd,
                                                            ws, p.fwd_ws, r ? &one : &zero, p.y, r ? r : ty.f32(),
                                                            p.bias, b, p.relu, p.y, ty.f32()),
                      "cudnnConvolutionBiasActivationForward");
        return;
    }
    a.check_cudnn(cudnnConvolutionForward(s.cudnn_, &one, p.x, tx.f32(), p.w, tw.f32(), p.conv, p.fwd, ws, p.fwd_ws,
                                          r ? &one : &zero, p.y, ty.f32()),
                  "cudnnConvolutionForward");
    if (b || act != XYLEM_ACT_NONE) {
        kernels::channel_bias_act(act, b, ty.f32(), v.n, v.k, v.oh * v.ow, s.stream_);
        a.check_launch();
    }
}

void op_conv2d_bwd_data(const xylem_op_desc& desc, xylem_stream_s& s, xylem_framework_s& fw) {
    OpArgs a(desc, 2, 2, 1);
    const auto attrs = a.attrs<xylem_conv2d_attrs>();
    const Tensor tdy = a.in(0, "dY"), tw = a.in(1, "W"), tdx = a.out(0, "dX");
    const Conv v = conv_shape(a, attrs, tdx, "dX", tw, "W", tdy, "dY");
    if (overlap(tdx, tdy) || overlap(tdx, tw)) a.fail("dX overlaps dY or W");
    if (v.n == 0) return;
    if (is_linear(v)) return bwd_data_linear(a, s, v, tdy.f32(), tw.f32(), tdx.f32());
    const ConvPlan& p = fw.conv_cache_->plan(a, v, ConvCache::Pass::kBwdData, s.cudnn_);
    void* ws = p.bwd_data_ws ? s.scratch_.alloc<char>(static_cast<int64_t>(p.bwd_data_ws)) : nullptr;
    const float one = 1.0f, zero = 0.0f;
    a.check_cudnn(cudnnConvolutionBackwardData(s.cudnn_, &one, p.w, tw.f32(), p.y, tdy.f32(), p.conv, p.bwd_data, ws,
                                               p.bwd_data_ws, &zero, p.x, tdx.f32()),
                  "cudnnConvolutionBackwardData");
}

// dW = beta*dW + grad: cuDNN's own beta (beta = 0 does not read dW). With the optional db (ABI
// 1.9): the bias gradient by bias_grad's kernel, on the same stream.
void op_conv2d_bwd_filter(const xylem_op_desc& desc, xylem_stream_s& s, xylem_framework_s& fw) {
    OpArgs a(desc, 2, 2, desc.n_outputs == 2 ? 2 : 1);
    const auto attrs = a.attrs<xylem_conv2d_attrs>();
    const Tensor tx = a.in(0, "X"), tdy = a.in(1, "dY"), tdw = a.out(0, "dW");
    const Conv v = conv_shape(a, attrs, tx, "X", tdw, "dW", tdy, "dY");
    if (overlap(tdw, tx) || overlap(tdw, tdy)) a.fail("dW overlaps X or dY");
    if (desc.n_outputs == 2) {
        const Tensor tdb = a.out(1, "db");
        plugin_kit::conv2d_db_check(a, v, tdb, tx, tdy, tdw, [](const Tensor& p, const Tensor& q) { return overlap(p, q); });
        kernels::bias_grad(tdy.f32(), tdb.f32(), v.n, v.k, v.oh * v.ow, attrs.beta, s.stream_);
        a.check_launch();
    }
    if (v.n == 0) {
        kernels::scale(tdw.f32(), tdw.numel, attrs.beta, s.stream_);
        return a.check_launch();
    }
    if (is_linear(v)) return bwd_filter_linear(a, s, v, tx.f32(), tdy.f32(), attrs.beta, tdw.f32());
    const ConvPlan& p = fw.conv_cache_->plan(a, v, ConvCache::Pass::kBwdFilter, s.cudnn_);
    void* ws = p.bwd_filter_ws ? s.scratch_.alloc<char>(static_cast<int64_t>(p.bwd_filter_ws)) : nullptr;
    const float one = 1.0f;
    a.check_cudnn(cudnnConvolutionBackwardFilter(s.cudnn_, &one, p.x, tx.f32(), p.y, tdy.f32(), p.conv, p.bwd_filter,
                                                 ws, p.bwd_filter_ws, &attrs.beta, p.w, tdw.f32()),
                  "cudnnConvolutionBackwardFilter");
}

}  // namespace xylem::cuda
