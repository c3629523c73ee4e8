// Entry point of the OpenCL plugin: its xylem_plugin table, the thread-local error message and
// the OpenCL error names used in messages.
#include "opencl.h"

namespace xylem::opencl {

XYLEM_PLUGIN_KIT_DEFINE_ERRORS(Plugin)

void throw_cl(cl_int err, const char* what) {
    const xylem_status status = err == CL_MEM_OBJECT_ALLOCATION_FAILURE || err == CL_OUT_OF_HOST_MEMORY ||
                                        err == CL_OUT_OF_RESOURCES
                                    ? XYLEM_E_NO_MEMORY
                                    : XYLEM_E_DEVICE;
    throw OpError{set_error(status, "opencl: %s: %s (%d)", what, cl_error_name(err), err)};
}

const char* cl_error_name(cl_int err) {
    switch (err) {
        case CL_SUCCESS: return "CL_SUCCESS";
        case CL_DEVICE_NOT_FOUND: return "CL_DEVICE_NOT_FOUND";
        case CL_DEVICE_NOT_AVAILABLE: return "CL_DEVICE_NOT_AVAILABLE";
        case CL_COMPILER_NOT_AVAILABLE: return "CL_COMPILER_NOT_AVAILABLE";
        case CL_MEM_OBJECT_ALLOCATION_FAILURE: return "CL_MEM_OBJECT_ALLOCATION_FAILURE";
        case CL_OUT_OF_RESOURCES: return "CL_OUT_OF_RESOURCES";
        case CL_OUT_OF_HOST_MEMORY: return "CL_OUT_OF_HOST_MEMORY";
        case CL_BUILD_PROGRAM_FAILURE: return "CL_BUILD_PROGRAM_FAILURE";
        case CL_INVALID_VALUE: return "CL_INVALID_VALUE";
        case CL_INVALID_PLATFORM: return "CL_INVALID_PLATFORM";
        case CL_INVALID_DEVICE: return "CL_INVALID_DEVICE";
        case CL_INVALID_CONTEXT: return "CL_INVALID_CONTEXT";
        case CL_INVALID_COMMAND_QUEUE: return "CL_INVALID_COMMAND_QUEUE";
        case CL_INVALID_MEM_OBJECT: return "CL_INVALID_MEM_OBJECT";
        case CL_INVALID_BINARY: return "CL_INVALID_BINARY";
        case CL_INVALID_BUILD_OPTIONS: return "CL_INVALID_BUILD_OPTIONS";
        case CL_INVALID_PROGRAM: return "CL_INVALID_PROGRAM";
        case CL_INVALID_PROGRAM_EXECUTABLE: return "CL_INVALID_PROGRAM_EXECUTABLE";
        case CL_INVALID_KERNEL_NAME: return "CL_INVALID_KERNEL_NAME";
        case CL_INVALID_KERNEL: return "CL_INVALID_KERNEL";
        case CL_INVALID_ARG_INDEX: return "CL_INVALID_ARG_INDEX";
        case CL_INVALID_ARG_VALUE: return "CL_INVALID_ARG_VALUE";
        case CL_INVALID_ARG_SIZE: return "CL_INVALID_ARG_SIZE";
        case CL_INVALID_KERNEL_ARGS: return "CL_INVALID_KERNEL_ARGS";
        case CL_INVALID_WORK_DIMENSION: return "CL_INVALID_WORK_DIMENSION";
        case CL_INVALID_WORK_GROUP_SIZE: return "CL_INVALID_WORK_GROUP_SIZE";
        case CL_INVALID_WORK_ITEM_SIZE: return "CL_INVALID_WORK_ITEM_SIZE";
        case CL_INVALID_BUFFER_SIZE: return "CL_INVALID_BUFFER_SIZE";
        case CL_INVALID_GLOBAL_WORK_SIZE: return "CL_INVALID_GLOBAL_WORK_SIZE";
        case CL_INVALID_OPERATION: return "CL_INVALID_OPERATION";
        case -1001: return "CL_PLATFORM_NOT_FOUND_KHR";  // the ICD loader: no vendor registered
        default: return "OpenCL error";
    }
}

int32_t op_accepts(xylem_framework_t, const xylem_op_desc* desc);  // ops/dispatch.cpp
// The table's members after device_kinds: the ABI 1.7 op_accepts.
void set_later_members(xylem_plugin& t) { t.op_accepts = op_accepts; }

}  // namespace xylem::opencl

// Discrete memory: the core copies through copy_h2d / copy_d2h, so no buffer_host_ptr. No
// whole-step capture: OpenCL 1.2 has no command graphs, cl_khr_command_buffer is provisional (PoCL
// has it, NVIDIA does not) and CLBlast cannot record into one.
XYLEM_PLUGIN_KIT_ENTRY_WITH(xylem::opencl::set_later_members, xylem::opencl, "opencl", "0.1.0", 0, nullptr,
                            xylem::opencl::device_kinds, XYLEM_PLUGIN_KIT_NO_CAPTURE)
