// Entry point of the CUDA plugin: its xylem_plugin table and the thread-local error message.
#include "cuda_plugin.h"

namespace xylem::cuda {

XYLEM_PLUGIN_KIT_DEFINE_ERRORS(Plugin)

// The table's members after device_kinds: the ABI 1.6 collectives with NCCL (collective.cpp) and
// the ABI 1.7 op_accepts (ops/dispatch.cpp: attention head sizes the kernels have no variant for
// are declined, and the core composes them).
void set_later_members(xylem_plugin& t) {
#ifdef XYLEM_CUDA_NCCL
    set_collectives(t);
#endif
    t.op_accepts = op_accepts;
}

}  // namespace xylem::cuda

// Device memory: no host pointers. Whole-step capture through CUDA graphs (capture.cpp). With NCCL
// at build time, the ABI 1.6 collectives (collective.cpp) for data-parallel runs.
XYLEM_PLUGIN_KIT_ENTRY_WITH(xylem::cuda::set_later_members, xylem::cuda, "cuda", "0.1.0", 0, nullptr,
                            xylem::cuda::device_kinds, xylem::cuda::capture_begin, xylem::cuda::capture_end,
                            xylem::cuda::graph_launch, xylem::cuda::graph_destroy)
