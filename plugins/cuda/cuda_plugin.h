// Internal declarations shared by the CUDA plugin's host files: handles, errors, operand access, ops.
// Kernels live in kernels/*.cu behind the plain launch functions of kernels/kernels.h.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <cudnn.h>

#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "xylem/plugin_api.h"
#include "xylem/plugin_kit/entry.h"
#include "xylem/plugin_kit/op_args.h"
#include "xylem/plugin_kit/op_list.h"
#include "xylem/plugin_kit/pointer_tensor.h"
#include "xylem/plugin_kit/shapes.h"

namespace xylem::cuda {

// One cudaMalloc'd block. Shared ownership: a captured graph keeps every block its kernels
// touch (scratch, cuBLAS workspace, error flags) alive after the stream moved on or died.
class DeviceBlock {
public:
    static std::shared_ptr<DeviceBlock> make(size_t bytes);  // throws std::bad_alloc when cudaMalloc fails
    ~DeviceBlock();
    void* ptr() const { return ptr_; }
    size_t size() const { return size_; }

private:
    DeviceBlock(void* p, size_t n) : ptr_(p), size_(n) {}
    void* ptr_;
    size_t size_;
};

// Scratch memory of one stream (cuDNN workspaces, reduction partials, per-channel terms): a bump
// allocator over one device block. op_run resets it before each op; ops on one stream run in
// order, so reusing the block for the next op is safe without waiting. When an op needs more, the
// block is replaced by a larger one (the old block lives on while a graph or this op holds it).
class Arena {
public:
    template <class T>
    T* alloc(int64_t n) {
        return static_cast<T*>(bytes(static_cast<size_t>(n) * sizeof(T)));
    }
    void reset() { used_ = 0; retired_.clear(); }
    // The blocks a graph being captured must keep: the current one and any retired this op.
    void collect(std::vector<std::shared_ptr<DeviceBlock>>& keep) const;

private:
    void* bytes(size_t n);

    std::shared_ptr<DeviceBlock> block_;
    std::vector<std::shared_ptr<DeviceBlock>> retired_;  // earlier blocks of the current op
    size_t used_ = 0;
};

class ConvCache;  // ops/conv.cpp: cuDNN descriptors and algorithms per shape

// What one capture records besides the graph: memory that must outlive the stream's later use.
struct CaptureState {
    std::vector<std::shared_ptr<DeviceBlock>> keep;
    std::vector<std::shared_ptr<void>> host;  // pinned staging buffers and host-node payloads
};

}  // namespace xylem::cuda

// The ABI's opaque handles (declared by plugin_api.h in the global namespace).
struct xylem_framework_s {
    int device_count_ = 0;
    xylem::cuda::ConvCache* conv_cache_ = nullptr;  // shared by every stream, locked inside; never freed
};

struct xylem_buffer_s {
    void* ptr_;
    uint64_t bytes_;
    uint32_t device_;
    void* data() const { return ptr_; }
};

// One CUDA stream with the library handles bound to it. cuBLAS and cuDNN handles are not meant
// to be shared by threads driving different streams, so each stream owns a pair.
struct xylem_stream_s {
    uint32_t device_ = 0;
    cudaStream_t stream_ = nullptr;
    cublasHandle_t cublas_ = nullptr;
    cudnnHandle_t cudnn_ = nullptr;
    std::shared_ptr<xylem::cuda::DeviceBlock> cublas_workspace_;  // set explicitly: no cuBLAS allocation in capture
    // One bit per op, set by a kernel that met an out-of-range label or index; stream_sync reports
    // it. ops.h has more than 32 ops, so op's bit is flag_bit(op) of the word at flag_word(op).
    std::shared_ptr<xylem::cuda::DeviceBlock> flags_;
    xylem::cuda::Arena scratch_;
    std::unique_ptr<xylem::cuda::CaptureState> capture_;  // non-null between capture_begin and capture_end

    static constexpr uint32_t kFlagWords = (XYLEM_OP_COUNT_ + 31) / 32;
    unsigned* flags() const { return static_cast<unsigned*>(flags_->ptr()); }
    unsigned* flag_word(uint32_t op) const { return flags() + op / 32; }
    static unsigned flag_bit(uint32_t op) { return 1u << (op % 32); }
};

struct xylem_graph_s {
    cudaGraphExec_t exec_ = nullptr;
    uint32_t device_ = 0;
    xylem::cuda::CaptureState owned_;
};

namespace xylem::cuda {

// ---- errors --------------------------------------------------------------------------------
// Records a message for last_error() on the calling thread and returns status.
xylem_status set_error(xylem_status status, const char* fmt, ...) __attribute__((format(printf, 2, 3)));

// Thrown by op code after set_error(); op_run turns it into the status (it never crosses the ABI).
using plugin_kit::OpError;

const char* op_name(uint32_t op);

// The framework, or XYLEM_E_UNAVAILABLE with the reason framework_get failed (for entry points
// that the core may call with a NULL framework after a failed framework_get).
xylem_status check_framework(xylem_framework_t fw, const char* what);

// ---- operands ------------------------------------------------------------------------------
// A validated operand: dtype checked, element range inside its buffer (plugin_kit).
using Tensor = plugin_kit::PointerTensor;

// What the plugin kit (xylem/plugin_kit/op_args.h) needs to know about this plugin. Kernels index
// with int64, so operands are not limited to 2^31 elements; cuBLAS/cuDNN sizes are (check_int).
struct Plugin {
    static constexpr const char* name = "cuda";
    static constexpr size_t error_capacity = 512;
    static constexpr const char* no_memory = "out of memory (scratch or host)";
    static constexpr bool index32 = false;
    using Tensor = plugin_kit::PointerTensor;
    static uint64_t buffer_bytes(xylem_buffer_t b) { return b->bytes_; }
    static Tensor tensor(const xylem_tensor_arg& a, uint64_t numel) {
        return Tensor::at(a.buffer->data(), a, numel);
    }
};

using plugin_kit::DimStr;

// The kit's descriptor checks (labels and indices are checked by the kernels, which flag the
// stream; see stream_sync), plus library limits and CUDA/cuBLAS/cuDNN failures.
class OpArgs : public plugin_kit::OpArgs<Plugin> {
public:
    using plugin_kit::OpArgs<Plugin>::OpArgs;

    void check_int(int64_t v, const char* what) const {  // cuBLAS/cuDNN take int sizes
        if (v > INT32_MAX)
            fail("%s = %lld exceeds the cuBLAS/cuDNN limit of %d", what, static_cast<long long>(v), INT32_MAX);
    }
    // A CUDA, cuBLAS or cuDNN failure: XYLEM_E_DEVICE with the library's text.
    [[noreturn]] void device_fail(const char* call, const char* text) const;
    void check_cuda(cudaError_t e, const char* call) const {
        if (e != cudaSuccess) device_fail(call, cudaGetErrorString(e));
    }
    void check_cublas(cublasStatus_t s, const char* call) const {
        if (s != CUBLAS_STATUS_SUCCESS) device_fail(call, cublasGetStatusString(s));
    }
    void check_cudnn(cudnnStatus_t s, const char* call) const {
        if (s != CUDNN_STATUS_SUCCESS) device_fail(call, cudnnGetErrorString(s));
    }
    // After kernel launches: a launch error (bad configuration, no device) becomes an OpError.
    void check_launch() const { check_cuda(cudaGetLastError(), "kernel launch"); }
};

using plugin_kit::overlap;  // true when two operands share any byte

// ---- op host code (ops/<family>.cpp); each validates its descriptor and throws OpError ------
// The ops this plugin implements. No GPU runs in this project's CI, so an op joins the list only
// with a kernel that was run somewhere; an op missing here is reported unsupported, and a model that
// needs it is refused at build time on this backend. add (ABI 1.4) was missing until the first GPU
// run (issue 30, docs/gpu-results.md) found ResNet, char-rnn, the GPT and the ONNX models refused on
// cuda for it. Exceptions, until scripts/gpu-check.sh had run the kit on a GPU (issue 17): fused_elementwise (its code generator and NVRTC compile are
// tested here), reduce and scatter_add_rows (their kernels follow the OpenCL plugin's, which pass
// the kit on PoCL) were listed having only compiled; so were the ABI 1.7 ops (layer_norm_fwd/bwd,
// attention_fwd/bwd, gemm_batched, permute, masked_softmax) and the GELUs of act_fwd/act_bwd and
// of the fused opcodes (issue 27; docs/gpu-runbook.md lists them for the first GPU run, issue 30).
#define XYLEM_CUDA_OPS(X)                                                                                  \
    X(fill) X(copy) X(axpby) X(mul) X(gemm) X(linear_fwd) X(bias_grad) X(act_fwd) X(act_bwd) X(softmax_fwd) \
    X(softmax_bwd) X(xent_fwd) X(xent_bwd) X(nll_fwd) X(nll_bwd) X(mse_fwd) X(mse_bwd) X(dropout_fwd)       \
    X(sgd_update) X(adam_update) X(accuracy) X(conv2d_fwd) X(conv2d_bwd_data) X(conv2d_bwd_filter)          \
    X(pool2d_fwd) X(pool2d_bwd) X(batchnorm_fwd) X(batchnorm_bwd) X(gather_rows) X(rmsprop_update)          \
    X(adamw_update) X(clamp) X(sum_squares) X(clip_by_norm) X(add) X(fused_elementwise) X(reduce) X(scatter_add_rows) \
    X(layer_norm_fwd) X(layer_norm_bwd) X(attention_fwd) X(attention_bwd) X(gemm_batched) X(permute)        \
    X(masked_softmax)
using OpFn = void (*)(const xylem_op_desc&, xylem_stream_s&, xylem_framework_s&);
#define XYLEM_DECLARE_OP(name) void op_##name(const xylem_op_desc&, xylem_stream_s&, xylem_framework_s&);
XYLEM_CUDA_OPS(XYLEM_DECLARE_OP)
#undef XYLEM_DECLARE_OP

// ABI 1.7 op_accepts (ops/dispatch.cpp): declines the attention head sizes the kernels have no
// variant for (attention_accepts, ops/attention.cpp) and a batch norm activation other than none or
// ReLU; every other descriptor is accepted.
int32_t op_accepts(xylem_framework_t, const xylem_op_desc* desc);
bool attention_accepts(const xylem_op_desc& desc);

// Created by framework_get; destroyed never (the framework lives until process exit).
ConvCache* make_conv_cache();

// ---- ABI entry points (wired into the table in plugin.cpp) ----------------------------------
XYLEM_PLUGIN_KIT_DECLARE_ENTRY_POINTS()
xylem_status capture_begin(xylem_framework_t, xylem_stream_t stream);
xylem_status capture_end(xylem_framework_t, xylem_stream_t stream, xylem_graph_t* out);
xylem_status graph_launch(xylem_framework_t, xylem_stream_t stream, xylem_graph_t graph);
void graph_destroy(xylem_framework_t, xylem_graph_t graph);
#ifdef XYLEM_CUDA_NCCL
// ABI 1.6 collectives with NCCL (collective.cpp): sets the table's comm_* members.
void set_collectives(xylem_plugin& table);
#endif

}  // namespace xylem::cuda
