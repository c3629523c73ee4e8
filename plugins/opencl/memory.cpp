// Device buffers (cl_mem) and the host<->device copies, enqueued without blocking: the core keeps
// host memory untouched until it syncs the stream (see plugin_api.h).
#include <new>

#include "opencl.h"

namespace xylem::opencl {

namespace {
bool in_range(xylem_buffer_t buffer, uint64_t offset, uint64_t bytes) {
    return offset <= buffer->bytes_ && bytes <= buffer->bytes_ - offset;
}

xylem_status copy_error(const char* what, uint64_t bytes, uint64_t offset, xylem_buffer_t b) {
    return set_error(XYLEM_E_INVALID, "opencl: %s: %llu bytes at offset %llu exceed the %llu-byte buffer", what,
                     static_cast<unsigned long long>(bytes), static_cast<unsigned long long>(offset),
                     static_cast<unsigned long long>(b->bytes_));
}
}  // namespace

xylem_status buffer_alloc(xylem_framework_t fw, uint32_t device, uint64_t bytes, xylem_buffer_t* out) {
    if (!out || !fw) return set_error(XYLEM_E_INVALID, "opencl: buffer_alloc: NULL framework or out");
    *out = nullptr;
    if (device >= fw->devices_.size())
        return set_error(XYLEM_E_INVALID, "opencl: buffer_alloc: no device %u (%zu device(s))", device,
                         fw->devices_.size());
    cl_int err = CL_SUCCESS;
    // OpenCL rejects zero-size buffers; an empty tensor still gets a (4-byte) handle.
    cl_mem mem = clCreateBuffer(fw->devices_[device]->context, CL_MEM_READ_WRITE, bytes ? bytes : 4, nullptr, &err);
    if (err != CL_SUCCESS)
        return set_error(err == CL_INVALID_BUFFER_SIZE || err == CL_MEM_OBJECT_ALLOCATION_FAILURE ||
                                 err == CL_OUT_OF_RESOURCES || err == CL_OUT_OF_HOST_MEMORY
                             ? XYLEM_E_NO_MEMORY
                             : XYLEM_E_DEVICE,
                         "opencl: buffer_alloc: %llu bytes on %s: %s (%d)", static_cast<unsigned long long>(bytes),
                         fw->devices_[device]->name.c_str(), cl_error_name(err), err);
    *out = new (std::nothrow) xylem_buffer_s{mem, bytes, device};
    if (!*out) {
        clReleaseMemObject(mem);
        return set_error(XYLEM_E_NO_MEMORY, "opencl: buffer_alloc: out of host memory");
    }
    return XYLEM_OK;
}

// The runtime frees the memory once commands still using it have finished.
void buffer_free(xylem_framework_t, xylem_buffer_t buffer) {
    if (!buffer) return;
    clReleaseMemObject(buffer->mem_);
    delete buffer;
}

xylem_status copy_h2d(xylem_framework_t, xylem_stream_t s, xylem_buffer_t dst, uint64_t dst_offset_bytes,
                      const void* src, uint64_t bytes) {
    if (!s || !dst || (!src && bytes)) return set_error(XYLEM_E_INVALID, "opencl: copy_h2d: NULL stream, buffer or source");
    if (!in_range(dst, dst_offset_bytes, bytes)) return copy_error("copy_h2d", bytes, dst_offset_bytes, dst);
    if (!bytes) return XYLEM_OK;
    const cl_int err = clEnqueueWriteBuffer(s->queue_, dst->mem_, CL_FALSE, dst_offset_bytes, bytes, src, 0, nullptr, nullptr);
    if (err != CL_SUCCESS) return set_error(XYLEM_E_DEVICE, "opencl: copy_h2d: %s (%d)", cl_error_name(err), err);
    return XYLEM_OK;
}

xylem_status copy_d2h(xylem_framework_t, xylem_stream_t s, void* dst, xylem_buffer_t src, uint64_t src_offset_bytes,
                      uint64_t bytes) {
    if (!s || !src || (!dst && bytes)) return set_error(XYLEM_E_INVALID, "opencl: copy_d2h: NULL stream, buffer or destination");
    if (!in_range(src, src_offset_bytes, bytes)) return copy_error("copy_d2h", bytes, src_offset_bytes, src);
    if (!bytes) return XYLEM_OK;
    const cl_int err = clEnqueueReadBuffer(s->queue_, src->mem_, CL_FALSE, src_offset_bytes, bytes, dst, 0, nullptr, nullptr);
    if (err != CL_SUCCESS) return set_error(XYLEM_E_DEVICE, "opencl: copy_d2h: %s (%d)", cl_error_name(err), err);
    return XYLEM_OK;
}

}  // namespace xylem::opencl
