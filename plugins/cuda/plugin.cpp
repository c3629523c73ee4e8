// Entry point of the CUDA plugin: its xylem_plugin table and the thread-local error message.
#include "cuda_plugin.h"

namespace xylem::cuda {

XYLEM_PLUGIN_KIT_DEFINE_ERRORS(Plugin)
}  // namespace xylem::cuda

// Device memory: no host pointers. Whole-step capture through CUDA graphs (capture.cpp). With NCCL
// at build time, the ABI 1.6 collectives (collective.cpp) for data-parallel runs.
#ifdef XYLEM_CUDA_NCCL
XYLEM_PLUGIN_KIT_ENTRY_WITH(xylem::cuda::set_collectives, xylem::cuda, "cuda", "0.1.0", 0, nullptr,
                            xylem::cuda::device_kinds, xylem::cuda::capture_begin, xylem::cuda::capture_end,
                            xylem::cuda::graph_launch, xylem::cuda::graph_destroy)
#else
XYLEM_PLUGIN_KIT_ENTRY(xylem::cuda, "cuda", "0.1.0", 0, nullptr, xylem::cuda::device_kinds, xylem::cuda::capture_begin, xylem::cuda::capture_end,
                       xylem::cuda::graph_launch, xylem::cuda::graph_destroy)
#endif
