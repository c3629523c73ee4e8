// Entry point of the CUDA plugin: its xylem_plugin table and the thread-local error message.
#include <cstdarg>
#include <cstdio>

#include "cuda_plugin.h"

namespace xylem::cuda {

namespace {
thread_local char g_last_error[512] = "no error";
}

xylem_status set_error(xylem_status status, const char* fmt, ...) {
    va_list args;
    va_start(args, fmt);
    std::vsnprintf(g_last_error, sizeof g_last_error, fmt, args);
    va_end(args);
    return status;
}

const char* last_error() { return g_last_error; }

}  // namespace xylem::cuda

XYLEM_PLUGIN_EXPORT const xylem_plugin* xylem_plugin_entry(void) {
    namespace c = xylem::cuda;
    static const xylem_plugin table = {
        XYLEM_ABI_MAJOR,
        XYLEM_ABI_MINOR,
        sizeof(xylem_plugin),
        0,  // device memory: no host pointers
        "cuda",
        "0.1.0",
        c::probe,
        c::framework_get,
        c::last_error,
        c::buffer_alloc,
        c::buffer_free,
        nullptr,
        c::stream_create,
        c::stream_destroy,
        c::stream_sync,
        c::copy_h2d,
        c::copy_d2h,
        c::op_supported,
        c::op_run,
        c::capture_begin,
        c::capture_end,
        c::graph_launch,
        c::graph_destroy,
    };
    return &table;
}
