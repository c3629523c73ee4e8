// Entry point of the native CPU plugin: its xylem_plugin table and the thread-local error message.
#include "native.h"

namespace xylem::native {
XYLEM_PLUGIN_KIT_DEFINE_ERRORS(Plugin)
}  // namespace xylem::native

namespace xylem::native {
int32_t op_accepts(xylem_framework_t, const xylem_op_desc* desc);  // ops/dispatch.cpp
// The table's members after device_kinds: the ABI 1.7 op_accepts.
void set_later_members(xylem_plugin& t) { t.op_accepts = op_accepts; }
}  // namespace xylem::native

// No capture: ops run as they are enqueued, so there is no launch overhead to save.
XYLEM_PLUGIN_KIT_ENTRY_WITH(xylem::native::set_later_members, xylem::native, "native", "0.1.0",
                            XYLEM_PLUGIN_HOST_MEMORY, xylem::native::buffer_host_ptr, xylem::native::device_kinds,
                            XYLEM_PLUGIN_KIT_NO_CAPTURE)
