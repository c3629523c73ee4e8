// The tiny plugin's entry point: its table, probe, framework instance and error message.
#include <cstdarg>
#include <cstdio>
#include <cstring>

#include "tiny.h"

namespace tiny {
namespace {

thread_local char g_error[512] = "no error";  // per thread: two threads never see each other's errors

const char* last_error() { return g_error; }

void probe(xylem_probe_info* out) {
    std::memset(out, 0, sizeof *out);  // the caller's struct may be uninitialised
    out->available = 1;
    out->device_count = 1;
    std::snprintf(out->detail, sizeof out->detail, "plain C++ loops, no BLAS, single-threaded");
    std::snprintf(out->devices[0].name, sizeof out->devices[0].name, "host CPU");
    out->devices[0].compute_units = 1;
}

// What its one device is (ABI 1.3, optional): the host's processor. `backend = "auto"` ranks a CPU
// behind a plugin other than native below native, so tiny runs when it is named.
void device_kinds(uint32_t* kinds, uint32_t count) {
    if (kinds && count > 0) kinds[0] = XYLEM_DEVICE_CPU;
}

// One framework per process, created on first use (a function-local static is thread-safe).
xylem_status framework_get(xylem_framework_t* out) {
    if (!out) return fail(XYLEM_E_INVALID, "framework_get: out is NULL");
    static xylem_framework_s framework;
    *out = &framework;
    return XYLEM_OK;
}

}  // namespace

xylem_status fail(xylem_status status, const char* fmt, ...) {
    va_list args;
    va_start(args, fmt);
    std::vsnprintf(g_error, sizeof g_error, fmt, args);
    va_end(args);
    return status;
}

}  // namespace tiny

XYLEM_PLUGIN_EXPORT const xylem_plugin* xylem_plugin_entry(void) {
    static const xylem_plugin table = {
        XYLEM_ABI_MAJOR,
        XYLEM_ABI_MINOR,
        sizeof(xylem_plugin),
        XYLEM_PLUGIN_HOST_MEMORY,  // buffers are host memory: the core reads them without copies
        "tiny",
        "0.1.0",
        tiny::probe,
        tiny::framework_get,
        tiny::last_error,
        tiny::buffer_alloc,
        tiny::buffer_free,
        tiny::buffer_host_ptr,
        tiny::stream_create,
        tiny::stream_destroy,
        tiny::stream_sync,
        tiny::copy_h2d,
        tiny::copy_d2h,
        tiny::op_supported,
        tiny::op_run,
        nullptr,  // capture_begin (optional, ABI 1.2): tiny runs ops eagerly
        nullptr,  // capture_end
        nullptr,  // graph_launch
        nullptr,  // graph_destroy
        tiny::device_kinds,  // ABI 1.3 (optional): NULL would make its device "unknown kind", ranked last
        nullptr,  // comm_unique_id (optional, ABI 1.6): data-parallel runs reduce tiny's host buffers with MPI
        nullptr,  // comm_init
        nullptr,  // comm_allreduce_sum
        nullptr,  // comm_destroy
        nullptr,  // op_accepts (optional, ABI 1.7): NULL takes every descriptor of a supported op
    };
    return &table;
}
