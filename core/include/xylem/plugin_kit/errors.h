// Plugin kit: the thread-local last_error() message, OpError, and op_run's error boundary.
// Header-only C++17; nothing here throws across the ABI (OpError stops at guarded_op_run).
#pragma once

#include <cstdarg>
#include <cstddef>
#include <cstdio>
#include <exception>
#include <new>

#include "xylem/ops.h"
#include "xylem/plugin_api.h"

namespace xylem::plugin_kit {

// Thrown inside a plugin after the message is recorded; guarded_op_run (or the plugin's own
// boundary) turns it into the status. It never crosses the ABI.
struct OpError {
    xylem_status status;
};

// The calling thread's message, one buffer per plugin: Plugin is a type of the plugin's own
// with `name` ("native") and `error_capacity` (bytes) members.
template <class Plugin>
inline char* error_buffer() {
    thread_local char msg[Plugin::error_capacity] = "no error";
    return msg;
}

template <class Plugin>
inline const char* last_error() {
    return error_buffer<Plugin>();
}

template <class Plugin>
inline xylem_status vset_error(xylem_status status, const char* fmt, va_list args) {
    std::vsnprintf(error_buffer<Plugin>(), Plugin::error_capacity, fmt, args);
    return status;
}

// Records a message (the caller writes the whole line, backend prefix included) and returns status.
template <class Plugin>
__attribute__((format(printf, 2, 3))) inline xylem_status set_error(xylem_status status, const char* fmt, ...) {
    va_list args;
    va_start(args, fmt);
    vset_error<Plugin>(status, fmt, args);
    va_end(args);
    return status;
}

// Defines the plugin's own set_error(status, fmt, ...) and last_error() over the buffer above, in
// the enclosing namespace; use it once, in one .cpp file, after declaring both in a header:
//   xylem_status set_error(xylem_status, const char* fmt, ...) __attribute__((format(printf, 2, 3)));
//   const char* last_error();
#define XYLEM_PLUGIN_KIT_DEFINE_ERRORS(Plugin)                                      \
    xylem_status set_error(xylem_status status, const char* fmt, ...) {             \
        va_list args;                                                               \
        va_start(args, fmt);                                                        \
        ::xylem::plugin_kit::vset_error<Plugin>(status, fmt, args);                 \
        va_end(args);                                                               \
        return status;                                                              \
    }                                                                               \
    const char* last_error() { return ::xylem::plugin_kit::last_error<Plugin>(); }

// Records "<plugin>: <op>: <message>", the form the core and the tests expect from an op.
template <class Plugin>
inline xylem_status vset_op_error(xylem_status status, uint32_t op, const char* fmt, va_list args) {
    char msg[400];
    std::vsnprintf(msg, sizeof msg, fmt, args);
    return set_error<Plugin>(status, "%s: %s: %s", Plugin::name, xylem_op_name(op), msg);
}

template <class Plugin>
__attribute__((format(printf, 3, 4))) inline xylem_status set_op_error(xylem_status status, uint32_t op,
                                                                      const char* fmt, ...) {
    va_list args;
    va_start(args, fmt);
    vset_op_error<Plugin>(status, op, fmt, args);
    va_end(args);
    return status;
}

// op_run's checks and boundary: desc and stream non-NULL, an op the table implements, then
// run(ops[op]) with every exception turned into a status (bad_alloc into XYLEM_E_NO_MEMORY with
// Plugin::no_memory as the text, anything else into XYLEM_E_DEVICE).
template <class Plugin, class Fn, size_t N, class Run>
inline xylem_status guarded_op_run(const xylem_op_desc* desc, const void* stream, const Fn (&ops)[N],
                                   Run&& run) noexcept {
    if (!desc) return set_error<Plugin>(XYLEM_E_INVALID, "%s: op_run: desc is NULL", Plugin::name);
    if (!stream) return set_error<Plugin>(XYLEM_E_INVALID, "%s: op_run: stream is NULL", Plugin::name);
    const uint32_t op = desc->op;
    if (op >= N || !ops[op])
        return set_error<Plugin>(XYLEM_E_UNSUPPORTED, "%s: op %u is not supported (this plugin knows ops 0..%d)",
                                 Plugin::name, op, static_cast<int>(N) - 1);
    try {
        run(ops[op]);
        return XYLEM_OK;
    } catch (const OpError& e) {
        return e.status;
    } catch (const std::bad_alloc&) {
        return set_op_error<Plugin>(XYLEM_E_NO_MEMORY, op, "%s", Plugin::no_memory);
    } catch (const std::exception& e) {
        return set_op_error<Plugin>(XYLEM_E_DEVICE, op, "%s", e.what());
    } catch (...) {
        return set_op_error<Plugin>(XYLEM_E_DEVICE, op, "unknown exception");
    }
}

}  // namespace xylem::plugin_kit
