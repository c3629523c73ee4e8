// Streams: one CUDA stream each, with its cuBLAS/cuDNN handles, scratch arena and error flags.
// Nothing here waits for the device except stream_sync.
#include <new>

#include "cuda_plugin.h"

namespace xylem::cuda {

namespace {
constexpr size_t kAlign = 256;                         // cuDNN and vectorized kernels like 256-byte alignment
constexpr size_t kCublasWorkspace = 32u << 20;         // NVIDIA's recommendation for Hopper
constexpr size_t kMinScratch = 1u << 20;

void destroy_handles(xylem_stream_s* s) {
    if (s->cudnn_) cudnnDestroy(s->cudnn_);
    if (s->cublas_) cublasDestroy(s->cublas_);
    if (s->stream_) cudaStreamDestroy(s->stream_);
}

// Names of the ops whose bits are set, for the stream_sync message.
std::string flagged_ops(const unsigned* words) {
    std::string s;
    for (uint32_t op = 0; op < XYLEM_OP_COUNT_; ++op)
        if (words[op / 32] & xylem_stream_s::flag_bit(op)) s += (s.empty() ? "" : ", ") + std::string(op_name(op));
    return s;
}
}  // namespace

std::shared_ptr<DeviceBlock> DeviceBlock::make(size_t bytes) {
    void* p = nullptr;
    if (cudaMalloc(&p, bytes ? bytes : 1) != cudaSuccess) {
        cudaGetLastError();
        throw std::bad_alloc();
    }
    return std::shared_ptr<DeviceBlock>(new DeviceBlock(p, bytes));
}

DeviceBlock::~DeviceBlock() { cudaFree(ptr_); }

void* Arena::bytes(size_t n) {
    n = (n + kAlign - 1) / kAlign * kAlign;
    if (!block_ || n > block_->size() - used_) {
        // Grow geometrically; the old block stays alive for this op's earlier allocations.
        size_t size = block_ ? block_->size() * 2 : kMinScratch;
        while (size < used_ + n) size *= 2;
        if (block_) retired_.push_back(block_);
        block_ = DeviceBlock::make(size);
        used_ = 0;
    }
    void* p = static_cast<char*>(block_->ptr()) + used_;
    used_ += n;
    return p;
}

void Arena::collect(std::vector<std::shared_ptr<DeviceBlock>>& keep) const {
    if (block_) keep.push_back(block_);
    keep.insert(keep.end(), retired_.begin(), retired_.end());
}

xylem_status stream_create(xylem_framework_t fw, uint32_t device, xylem_stream_t* out) {
    if (!out) return set_error(XYLEM_E_INVALID, "cuda: stream_create: out is NULL");
    *out = nullptr;
    if (const xylem_status s = check_framework(fw, "stream_create")) return s;
    if (device >= static_cast<uint32_t>(fw->device_count_))
        return set_error(XYLEM_E_INVALID, "cuda: stream_create: no device %u (%d CUDA device(s))", device,
                         fw->device_count_);
    auto* s = new (std::nothrow) xylem_stream_s();
    if (!s) return set_error(XYLEM_E_NO_MEMORY, "cuda: stream_create: out of host memory");
    s->device_ = device;
    const char* step = "cudaSetDevice";
    const char* text = nullptr;
    try {
        cudaError_t e = cudaSetDevice(static_cast<int>(device));
        if (e == cudaSuccess) step = "cudaStreamCreateWithFlags", e = cudaStreamCreateWithFlags(&s->stream_, cudaStreamNonBlocking);
        if (e != cudaSuccess) text = cudaGetErrorString(e);
        cublasStatus_t b = CUBLAS_STATUS_SUCCESS;
        if (!text) step = "cublasCreate", b = cublasCreate(&s->cublas_);
        if (!text && b == CUBLAS_STATUS_SUCCESS) step = "cublasSetStream", b = cublasSetStream(s->cublas_, s->stream_);
        if (!text && b == CUBLAS_STATUS_SUCCESS) {
            s->cublas_workspace_ = DeviceBlock::make(kCublasWorkspace);
            step = "cublasSetWorkspace";
            b = cublasSetWorkspace(s->cublas_, s->cublas_workspace_->ptr(), kCublasWorkspace);
        }
        if (!text && b != CUBLAS_STATUS_SUCCESS) text = cublasGetStatusString(b);
        cudnnStatus_t d = CUDNN_STATUS_SUCCESS;
        if (!text) step = "cudnnCreate", d = cudnnCreate(&s->cudnn_);
        if (!text && d == CUDNN_STATUS_SUCCESS) step = "cudnnSetStream", d = cudnnSetStream(s->cudnn_, s->stream_);
        if (!text && d != CUDNN_STATUS_SUCCESS) text = cudnnGetErrorString(d);
        if (!text) {
            s->flags_ = DeviceBlock::make(xylem_stream_s::kFlagWords * sizeof(unsigned));
            step = "cudaMemsetAsync";
            e = cudaMemsetAsync(s->flags(), 0, xylem_stream_s::kFlagWords * sizeof(unsigned), s->stream_);
            if (e != cudaSuccess) text = cudaGetErrorString(e);
        }
    } catch (const std::bad_alloc&) {
        text = "out of device memory";
    }
    if (text) {
        cudaGetLastError();
        destroy_handles(s);
        delete s;
        return set_error(XYLEM_E_DEVICE, "cuda: stream_create on device %u: %s failed: %s", device, step, text);
    }
    *out = s;
    return XYLEM_OK;
}

// Waits for the stream's work before its handles and scratch go (graphs keep their own blocks).
void stream_destroy(xylem_framework_t, xylem_stream_t stream) {
    if (!stream) return;
    cudaSetDevice(static_cast<int>(stream->device_));
    if (stream->capture_) {  // abandoned capture: end it and drop the partial graph
        cudaGraph_t g = nullptr;
        if (cudaStreamEndCapture(stream->stream_, &g) == cudaSuccess && g) cudaGraphDestroy(g);
        cudaGetLastError();
    }
    cudaStreamSynchronize(stream->stream_);
    destroy_handles(stream);
    delete stream;
}

xylem_status stream_sync(xylem_framework_t fw, xylem_stream_t stream) {
    if (const xylem_status s = check_framework(fw, "stream_sync")) return s;
    if (!stream) return set_error(XYLEM_E_INVALID, "cuda: stream_sync: stream is NULL");
    if (stream->capture_)
        return set_error(XYLEM_E_INVALID, "cuda: stream_sync: the stream is capturing (call capture_end first)");
    cudaError_t e = cudaStreamSynchronize(stream->stream_);
    unsigned words[xylem_stream_s::kFlagWords] = {};
    if (e == cudaSuccess)
        e = cudaMemcpyAsync(words, stream->flags(), sizeof words, cudaMemcpyDeviceToHost, stream->stream_);
    if (e == cudaSuccess) e = cudaStreamSynchronize(stream->stream_);
    if (e != cudaSuccess) {
        cudaGetLastError();
        return set_error(XYLEM_E_DEVICE, "cuda: stream_sync: %s", cudaGetErrorString(e));
    }
    unsigned any = 0;
    for (unsigned w : words) any |= w;
    if (any) {
        cudaMemsetAsync(stream->flags(), 0, sizeof words, stream->stream_);
        return set_error(XYLEM_E_INVALID,
                         "cuda: stream_sync: %s met a label or index out of range on the device (the affected rows "
                         "hold NaN or zeros, or were skipped; the CPU backend names the row)",
                         flagged_ops(words).c_str());
    }
    return XYLEM_OK;
}

}  // namespace xylem::cuda
