// Plugin kit: the ABI entry points' declarations and the exported xylem_plugin table, one macro
// each. Header-only.
//
//   namespace mine {
//   XYLEM_PLUGIN_KIT_DECLARE_ENTRY_POINTS()   // probe, framework_get, ..., op_supported, op_run
//   }
//   // in one .cpp, after defining them:
//   XYLEM_PLUGIN_KIT_ENTRY(mine, "mine", "0.1.0", XYLEM_PLUGIN_HOST_MEMORY, mine::buffer_host_ptr,
//                          mine::device_kinds, XYLEM_PLUGIN_KIT_NO_CAPTURE)
//
// DEVICE_KINDS is the ABI 1.3 device_kinds function, or nullptr (every device of unknown kind).
// The members after op_run (capture, ABI 1.2) follow as the last arguments: the plugin's four
// capture functions, or XYLEM_PLUGIN_KIT_NO_CAPTURE.
#pragma once

#include "xylem/plugin_api.h"

// The ABI 1.0 functions every plugin defines, with the table's signatures (buffer_host_ptr and the
// ABI 1.2 capture functions are optional and declared by the plugins that have them).
#define XYLEM_PLUGIN_KIT_DECLARE_ENTRY_POINTS()                                                                    \
    void probe(xylem_probe_info* out);                                                                             \
    xylem_status framework_get(xylem_framework_t* out);                                                            \
    const char* last_error();                                                                                      \
    xylem_status buffer_alloc(xylem_framework_t, uint32_t device, uint64_t bytes, xylem_buffer_t* out);            \
    void buffer_free(xylem_framework_t, xylem_buffer_t buffer);                                                    \
    xylem_status stream_create(xylem_framework_t, uint32_t device, xylem_stream_t* out);                           \
    void stream_destroy(xylem_framework_t, xylem_stream_t stream);                                                 \
    xylem_status stream_sync(xylem_framework_t, xylem_stream_t stream);                                            \
    xylem_status copy_h2d(xylem_framework_t, xylem_stream_t, xylem_buffer_t dst, uint64_t dst_offset_bytes,        \
                          const void* src, uint64_t bytes);                                                        \
    xylem_status copy_d2h(xylem_framework_t, xylem_stream_t, void* dst, xylem_buffer_t src,                        \
                          uint64_t src_offset_bytes, uint64_t bytes);                                              \
    int32_t op_supported(xylem_framework_t, uint32_t op);                                                          \
    xylem_status op_run(xylem_framework_t, xylem_stream_t, const xylem_op_desc* desc);                             \
    void device_kinds(uint32_t* kinds, uint32_t count); /* optional: define it to pass it to the entry */

#define XYLEM_PLUGIN_KIT_NO_CAPTURE nullptr, nullptr, nullptr, nullptr

// Defines the exported xylem_plugin_entry() over the functions of namespace NS. HOST_PTR is
// NS::buffer_host_ptr for host-memory plugins, else nullptr; DEVICE_KINDS the ABI 1.3 member or
// nullptr; the rest are the ABI 1.2 capture members. Members after device_kinds (the ABI 1.6
// collectives, the ABI 1.7 op_accepts) stay NULL.
#define XYLEM_PLUGIN_KIT_ENTRY(NS, NAME, VERSION, FLAGS, HOST_PTR, DEVICE_KINDS, ...)                            \
    XYLEM_PLUGIN_KIT_ENTRY_WITH(::xylem::plugin_kit::no_later_members, NS, NAME, VERSION, FLAGS, HOST_PTR,       \
                                DEVICE_KINDS, __VA_ARGS__)

// The same, then SET_LATER(table) sets the members after device_kinds that the plugin has (the
// ABI 1.6 collectives, the ABI 1.7 op_accepts, ...), by name:
//   void set_collectives(xylem_plugin& t) { t.comm_unique_id = comm_unique_id; ... }
//   XYLEM_PLUGIN_KIT_ENTRY_WITH(mine::set_collectives, mine, "mine", ...)
#define XYLEM_PLUGIN_KIT_ENTRY_WITH(SET_LATER, NS, NAME, VERSION, FLAGS, HOST_PTR, DEVICE_KINDS, ...)            \
    XYLEM_PLUGIN_EXPORT const xylem_plugin* xylem_plugin_entry(void) {                                             \
        static const xylem_plugin table = [] {                                                                     \
            xylem_plugin t = {XYLEM_ABI_MAJOR,   XYLEM_ABI_MINOR,   sizeof(xylem_plugin),                          \
                              FLAGS,             NAME,              VERSION,                                       \
                              NS::probe,         NS::framework_get, NS::last_error,                                \
                              NS::buffer_alloc,  NS::buffer_free,   HOST_PTR,                                      \
                              NS::stream_create, NS::stream_destroy, NS::stream_sync,                              \
                              NS::copy_h2d,      NS::copy_d2h,      NS::op_supported,                              \
                              NS::op_run,        __VA_ARGS__,       DEVICE_KINDS,                                  \
                              nullptr,           nullptr,           nullptr,            nullptr,                   \
                              nullptr};                                                                            \
            SET_LATER(t);                                                                                          \
            return t;                                                                                              \
        }();                                                                                                       \
        return &table;                                                                                             \
    }

namespace xylem::plugin_kit {
inline void no_later_members(xylem_plugin&) {}
}  // namespace xylem::plugin_kit
