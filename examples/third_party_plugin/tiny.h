// The "tiny" backend: plain C++ on the CPU, no BLAS, synchronous streams, host memory.
// It implements the ops an MLP needs to train (see ops.cpp); the rest are reported unsupported.
#pragma once

#include <cstdint>

#include "xylem/plugin_api.h"

// The handles the ABI keeps opaque are defined by the plugin.
struct xylem_framework_s {
    int unused = 0;  // no driver state: the one instance only proves framework_get's contract
};
struct xylem_stream_s {
    uint32_t device = 0;
};
struct xylem_buffer_s {
    uint64_t bytes = 0;
    float* data = nullptr;  // every dtype in the ABI is 4 bytes wide
};

namespace tiny {

// Records the calling thread's error message (read back by last_error) and returns status.
xylem_status fail(xylem_status status, const char* fmt, ...) __attribute__((format(printf, 2, 3)));

xylem_status buffer_alloc(xylem_framework_t, uint32_t device, uint64_t bytes, xylem_buffer_t* out);
void buffer_free(xylem_framework_t, xylem_buffer_t);
void* buffer_host_ptr(xylem_framework_t, xylem_buffer_t);
xylem_status stream_create(xylem_framework_t, uint32_t device, xylem_stream_t* out);
void stream_destroy(xylem_framework_t, xylem_stream_t);
xylem_status stream_sync(xylem_framework_t, xylem_stream_t);
xylem_status copy_h2d(xylem_framework_t, xylem_stream_t, xylem_buffer_t dst, uint64_t dst_offset, const void* src,
                      uint64_t bytes);
xylem_status copy_d2h(xylem_framework_t, xylem_stream_t, void* dst, xylem_buffer_t src, uint64_t src_offset,
                      uint64_t bytes);

int32_t op_supported(xylem_framework_t, uint32_t op);
xylem_status op_run(xylem_framework_t, xylem_stream_t, const xylem_op_desc* desc);

}  // namespace tiny
