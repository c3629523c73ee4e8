// Host buffers (64-byte aligned) and the host<->"device" copies, which are plain memcpy here.
#include <cstdlib>
#include <cstring>
#include <new>

#include "native.h"

namespace xylem::native {

namespace {
constexpr uint64_t kAlign = alignof(xylem_buffer_s);  // 64: a cache line, enough for AVX-512

bool in_range(xylem_buffer_t buffer, uint64_t offset, uint64_t bytes) {
    return offset <= buffer->bytes_ && bytes <= buffer->bytes_ - offset;
}
}  // namespace

xylem_status buffer_alloc(xylem_framework_t, uint32_t device, uint64_t bytes, xylem_buffer_t* out) {
    if (!out) return set_error(XYLEM_E_INVALID, "native: buffer_alloc: out is NULL");
    *out = nullptr;
    if (device != 0) return set_error(XYLEM_E_INVALID, "native: buffer_alloc: no device %u (the CPU is device 0)", device);
    // Zero-size buffers still get a header; the rounding cannot overflow below this bound.
    if (bytes > (UINT64_MAX >> 1)) return set_error(XYLEM_E_NO_MEMORY, "native: buffer_alloc: %llu bytes is too large",
                                                    static_cast<unsigned long long>(bytes));
    const uint64_t total = sizeof(xylem_buffer_s) + (bytes + kAlign - 1) / kAlign * kAlign;
    void* block = std::aligned_alloc(kAlign, total);
    if (!block) return set_error(XYLEM_E_NO_MEMORY, "native: buffer_alloc: out of host memory allocating %llu bytes",
                                 static_cast<unsigned long long>(bytes));
    *out = new (block) xylem_buffer_s{bytes};
    return XYLEM_OK;
}

void buffer_free(xylem_framework_t, xylem_buffer_t buffer) {
    if (buffer) std::free(buffer);  // xylem_buffer_s is trivially destructible
}

void* buffer_host_ptr(xylem_framework_t, xylem_buffer_t buffer) { return buffer ? buffer->data() : nullptr; }

xylem_status copy_h2d(xylem_framework_t, xylem_stream_t, xylem_buffer_t dst, uint64_t dst_offset_bytes,
                      const void* src, uint64_t bytes) {
    if (!dst || (!src && bytes)) return set_error(XYLEM_E_INVALID, "native: copy_h2d: NULL buffer or source");
    if (!in_range(dst, dst_offset_bytes, bytes))
        return set_error(XYLEM_E_INVALID, "native: copy_h2d: %llu bytes at offset %llu exceed the %llu-byte buffer",
                         static_cast<unsigned long long>(bytes), static_cast<unsigned long long>(dst_offset_bytes),
                         static_cast<unsigned long long>(dst->bytes_));
    if (bytes) std::memcpy(static_cast<char*>(dst->data()) + dst_offset_bytes, src, bytes);
    return XYLEM_OK;
}

xylem_status copy_d2h(xylem_framework_t, xylem_stream_t, void* dst, xylem_buffer_t src, uint64_t src_offset_bytes,
                      uint64_t bytes) {
    if (!src || (!dst && bytes)) return set_error(XYLEM_E_INVALID, "native: copy_d2h: NULL buffer or destination");
    if (!in_range(src, src_offset_bytes, bytes))
        return set_error(XYLEM_E_INVALID, "native: copy_d2h: %llu bytes at offset %llu exceed the %llu-byte buffer",
                         static_cast<unsigned long long>(bytes), static_cast<unsigned long long>(src_offset_bytes),
                         static_cast<unsigned long long>(src->bytes_));
    if (bytes) std::memcpy(dst, static_cast<const char*>(src->data()) + src_offset_bytes, bytes);
    return XYLEM_OK;
}

}  // namespace xylem::native
