// Entry point of the CUDA plugin: its xylem_plugin table and the thread-local error message.
#include "cuda_plugin.h"

namespace xylem::cuda {

XYLEM_PLUGIN_KIT_DEFINE_ERRORS(Plugin)
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
        c::device_kinds,
    };
    return &table;
}
