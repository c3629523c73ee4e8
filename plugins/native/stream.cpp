// Streams: ops and copies run on the calling thread as they are enqueued, so a stream is synchronous.
#include <new>

#include "native.h"

namespace xylem::native {

xylem_status stream_create(xylem_framework_t, uint32_t device, xylem_stream_t* out) {
    if (!out) return set_error(XYLEM_E_INVALID, "native: stream_create: out is NULL");
    *out = nullptr;
    if (device != 0) return set_error(XYLEM_E_INVALID, "native: stream_create: no device %u (the CPU is device 0)", device);
    *out = new (std::nothrow) xylem_stream_s{device};
    return *out ? XYLEM_OK : set_error(XYLEM_E_NO_MEMORY, "native: stream_create: out of host memory");
}

void stream_destroy(xylem_framework_t, xylem_stream_t stream) { delete stream; }

// Everything enqueued has already finished by the time the enqueue call returned.
xylem_status stream_sync(xylem_framework_t, xylem_stream_t) { return XYLEM_OK; }

}  // namespace xylem::native
