// Entry point of the native CPU plugin: its xylem_plugin table and the thread-local error message.
#include "native.h"

namespace xylem::native {
XYLEM_PLUGIN_KIT_DEFINE_ERRORS(Plugin)
}  // namespace xylem::native

XYLEM_PLUGIN_EXPORT const xylem_plugin* xylem_plugin_entry(void) {
    namespace n = xylem::native;
    static const xylem_plugin table = {
        XYLEM_ABI_MAJOR,
        XYLEM_ABI_MINOR,
        sizeof(xylem_plugin),
        XYLEM_PLUGIN_HOST_MEMORY,
        "native",
        "0.1.0",
        n::probe,
        n::framework_get,
        n::last_error,
        n::buffer_alloc,
        n::buffer_free,
        n::buffer_host_ptr,
        n::stream_create,
        n::stream_destroy,
        n::stream_sync,
        n::copy_h2d,
        n::copy_d2h,
        n::op_supported,
        n::op_run,
        // No capture: ops run as they are enqueued, so there is no launch overhead to save.
        nullptr,
        nullptr,
        nullptr,
        nullptr,
        n::device_kinds,
    };
    return &table;
}
