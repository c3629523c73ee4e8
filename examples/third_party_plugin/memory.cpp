// Buffers (host memory), streams (synchronous: every call finishes before it returns) and copies.
#include <cstdlib>
#include <cstring>
#include <new>

#include "tiny.h"

namespace tiny {

xylem_status buffer_alloc(xylem_framework_t, uint32_t device, uint64_t bytes, xylem_buffer_t* out) {
    if (!out) return fail(XYLEM_E_INVALID, "buffer_alloc: out is NULL");
    *out = nullptr;
    if (device != 0) return fail(XYLEM_E_INVALID, "buffer_alloc: no device %u (tiny has one)", device);
    auto* b = new (std::nothrow) xylem_buffer_s;
    // 64-byte alignment for vectorized loops; at least one element so a 0-byte buffer has an address.
    const uint64_t rounded = (bytes + 63) / 64 * 64;
    if (b) b->data = static_cast<float*>(std::aligned_alloc(64, rounded ? rounded : 64));
    if (!b || !b->data) {
        delete b;
        return fail(XYLEM_E_NO_MEMORY, "buffer_alloc: out of memory for %llu bytes",
                    static_cast<unsigned long long>(bytes));
    }
    b->bytes = bytes;
    *out = b;
    return XYLEM_OK;
}

void buffer_free(xylem_framework_t, xylem_buffer_t b) {
    if (!b) return;
    std::free(b->data);
    delete b;
}

void* buffer_host_ptr(xylem_framework_t, xylem_buffer_t b) { return b ? b->data : nullptr; }

xylem_status stream_create(xylem_framework_t, uint32_t device, xylem_stream_t* out) {
    if (!out) return fail(XYLEM_E_INVALID, "stream_create: out is NULL");
    if (device != 0) return fail(XYLEM_E_INVALID, "stream_create: no device %u (tiny has one)", device);
    *out = new (std::nothrow) xylem_stream_s{device};
    return *out ? XYLEM_OK : fail(XYLEM_E_NO_MEMORY, "stream_create: out of memory");
}

void stream_destroy(xylem_framework_t, xylem_stream_t s) { delete s; }

xylem_status stream_sync(xylem_framework_t, xylem_stream_t) { return XYLEM_OK; }

static bool in_range(xylem_buffer_t b, uint64_t offset, uint64_t bytes) {
    return b && offset <= b->bytes && bytes <= b->bytes - offset;
}

xylem_status copy_h2d(xylem_framework_t, xylem_stream_t, xylem_buffer_t dst, uint64_t dst_offset, const void* src,
                      uint64_t bytes) {
    if (!in_range(dst, dst_offset, bytes) || (!src && bytes)) return fail(XYLEM_E_INVALID, "copy_h2d: bad range");
    if (bytes) std::memcpy(reinterpret_cast<char*>(dst->data) + dst_offset, src, bytes);
    return XYLEM_OK;
}

xylem_status copy_d2h(xylem_framework_t, xylem_stream_t, void* dst, xylem_buffer_t src, uint64_t src_offset,
                      uint64_t bytes) {
    if (!in_range(src, src_offset, bytes) || (!dst && bytes)) return fail(XYLEM_E_INVALID, "copy_d2h: bad range");
    if (bytes) std::memcpy(dst, reinterpret_cast<const char*>(src->data) + src_offset, bytes);
    return XYLEM_OK;
}

}  // namespace tiny
