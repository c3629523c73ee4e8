// Device buffers and host<->device copies. Inside a capture, copies go through pinned staging
// buffers and host nodes, so a replay reads/writes the caller's host memory at replay time.
#include <cstdlib>
#include <cstring>
#include <new>

#include "cuda_plugin.h"

namespace xylem::cuda {

namespace {

using ull = unsigned long long;

bool in_range(xylem_buffer_t buffer, uint64_t offset, uint64_t bytes) {
    return offset <= buffer->bytes_ && bytes <= buffer->bytes_ - offset;
}

// A host-to-host memcpy run by the graph (a host node): the payload lives as long as the graph.
struct HostCopy {
    void* dst;
    const void* src;
    size_t bytes;
    static void CUDART_CB run(void* self) {
        auto* c = static_cast<HostCopy*>(self);
        std::memcpy(c->dst, c->src, c->bytes);
    }
};

// Pinned staging owned by the capture (freed when the graph is destroyed).
void* pinned(CaptureState& cap, size_t bytes) {
    void* p = nullptr;
    if (cudaMallocHost(&p, bytes ? bytes : 1) != cudaSuccess) {
        cudaGetLastError();
        return nullptr;
    }
    cap.host.emplace_back(p, [](void* q) { cudaFreeHost(q); });
    return p;
}

HostCopy* host_copy(CaptureState& cap, void* dst, const void* src, size_t bytes) {
    auto copy = std::make_shared<HostCopy>(HostCopy{dst, src, bytes});
    cap.host.push_back(copy);
    return copy.get();
}

xylem_status copy_error(const char* what, cudaError_t e) {
    cudaGetLastError();
    return set_error(XYLEM_E_DEVICE, "cuda: %s: %s", what, cudaGetErrorString(e));
}

xylem_status check_copy(xylem_framework_t fw, xylem_stream_t stream, xylem_buffer_t buf, const void* host,
                        uint64_t offset, uint64_t bytes, const char* what) {
    if (const xylem_status s = check_framework(fw, what)) return s;
    if (!stream) return set_error(XYLEM_E_INVALID, "cuda: %s: stream is NULL", what);
    if (!buf || (!host && bytes)) return set_error(XYLEM_E_INVALID, "cuda: %s: NULL buffer or host pointer", what);
    if (buf->device_ != stream->device_)
        return set_error(XYLEM_E_INVALID, "cuda: %s: the buffer is on device %u but the stream on device %u", what,
                         buf->device_, stream->device_);
    if (!in_range(buf, offset, bytes))
        return set_error(XYLEM_E_INVALID, "cuda: %s: %llu bytes at offset %llu exceed the %llu-byte buffer", what,
                         ull(bytes), ull(offset), ull(buf->bytes_));
    return XYLEM_OK;
}

}  // namespace

xylem_status buffer_alloc(xylem_framework_t fw, uint32_t device, uint64_t bytes, xylem_buffer_t* out) {
    if (!out) return set_error(XYLEM_E_INVALID, "cuda: buffer_alloc: out is NULL");
    *out = nullptr;
    if (const xylem_status s = check_framework(fw, "buffer_alloc")) return s;
    if (device >= static_cast<uint32_t>(fw->device_count_))
        return set_error(XYLEM_E_INVALID, "cuda: buffer_alloc: no device %u (%d CUDA device(s))", device,
                         fw->device_count_);
    cudaSetDevice(static_cast<int>(device));
    void* p = nullptr;
    if (bytes) {
        const cudaError_t e = cudaMalloc(&p, bytes);
        if (e != cudaSuccess) {
            cudaGetLastError();
            return set_error(XYLEM_E_NO_MEMORY, "cuda: buffer_alloc: %llu bytes on device %u: %s", ull(bytes), device,
                             cudaGetErrorString(e));
        }
    }
    *out = new (std::nothrow) xylem_buffer_s{p, bytes, device};
    if (!*out) {
        cudaFree(p);
        return set_error(XYLEM_E_NO_MEMORY, "cuda: buffer_alloc: out of host memory");
    }
    return XYLEM_OK;
}

// cudaFree waits for the device; the core frees buffers when tensors die, not per op.
void buffer_free(xylem_framework_t, xylem_buffer_t buffer) {
    if (!buffer) return;
    if (buffer->ptr_) {
        cudaSetDevice(static_cast<int>(buffer->device_));
        cudaFree(buffer->ptr_);
    }
    delete buffer;
}

xylem_status copy_h2d(xylem_framework_t fw, xylem_stream_t stream, xylem_buffer_t dst, uint64_t dst_offset_bytes,
                      const void* src, uint64_t bytes) {
    if (const xylem_status s = check_copy(fw, stream, dst, src, dst_offset_bytes, bytes, "copy_h2d")) return s;
    if (!bytes) return XYLEM_OK;
    char* to = static_cast<char*>(dst->data()) + dst_offset_bytes;
    if (!stream->capture_) {
        // Pageable source: returns once the driver has staged it, so the caller may reuse it at once.
        const cudaError_t e = cudaMemcpyAsync(to, src, bytes, cudaMemcpyHostToDevice, stream->stream_);
        return e == cudaSuccess ? XYLEM_OK : copy_error("copy_h2d", e);
    }
    // Captured: a host node copies the caller's memory into pinned staging at replay time, then the
    // DMA reads the staging (a captured pageable copy would be rejected or read stale data).
    void* staging = pinned(*stream->capture_, bytes);
    if (!staging) return set_error(XYLEM_E_NO_MEMORY, "cuda: copy_h2d: no pinned staging for %llu bytes", ull(bytes));
    HostCopy* fill = host_copy(*stream->capture_, staging, src, bytes);
    cudaError_t e = cudaLaunchHostFunc(stream->stream_, HostCopy::run, fill);
    if (e == cudaSuccess) e = cudaMemcpyAsync(to, staging, bytes, cudaMemcpyHostToDevice, stream->stream_);
    return e == cudaSuccess ? XYLEM_OK : copy_error("copy_h2d (captured)", e);
}

xylem_status copy_d2h(xylem_framework_t fw, xylem_stream_t stream, void* dst, xylem_buffer_t src,
                      uint64_t src_offset_bytes, uint64_t bytes) {
    if (const xylem_status s = check_copy(fw, stream, src, dst, src_offset_bytes, bytes, "copy_d2h")) return s;
    if (!bytes) return XYLEM_OK;
    const char* from = static_cast<const char*>(src->data()) + src_offset_bytes;
    if (!stream->capture_) {
        const cudaError_t e = cudaMemcpyAsync(dst, from, bytes, cudaMemcpyDeviceToHost, stream->stream_);
        return e == cudaSuccess ? XYLEM_OK : copy_error("copy_d2h", e);
    }
    void* staging = pinned(*stream->capture_, bytes);
    if (!staging) return set_error(XYLEM_E_NO_MEMORY, "cuda: copy_d2h: no pinned staging for %llu bytes", ull(bytes));
    HostCopy* drain = host_copy(*stream->capture_, dst, staging, bytes);
    cudaError_t e = cudaMemcpyAsync(staging, from, bytes, cudaMemcpyDeviceToHost, stream->stream_);
    if (e == cudaSuccess) e = cudaLaunchHostFunc(stream->stream_, HostCopy::run, drain);
    return e == cudaSuccess ? XYLEM_OK : copy_error("copy_d2h (captured)", e);
}

}  // namespace xylem::cuda
