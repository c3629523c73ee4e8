// What the CUDA test files share: where the built plugin is, whether this process sees a GPU (as
// the CUDA runtime says), and the plugin's table through a second, direct dlopen (the registry
// holds the first).
#pragma once

#include <cuda_runtime_api.h>
#include <dlfcn.h>

#include <stdexcept>
#include <string>

#include "xylem/plugin_api.h"

namespace xylem::cuda_test {

inline const std::string kPluginFile = std::string(XYLEM_TEST_PLUGIN_DIR) + "/libxylem_cuda.so";

// What the CUDA runtime says in this process: the plugin must report the same.
struct RuntimeView {
    cudaError_t error;
    int devices;
};
inline RuntimeView runtime_view() {
    int n = 0;
    const cudaError_t e = cudaGetDeviceCount(&n);
    cudaGetLastError();
    return {e, e == cudaSuccess ? n : 0};
}
inline bool have_gpu() { return runtime_view().devices > 0; }

inline const xylem_plugin& table() {
    static const xylem_plugin* t = [] {
        void* lib = dlopen(kPluginFile.c_str(), RTLD_NOW | RTLD_LOCAL);  // pinned for the process
        if (!lib) throw std::runtime_error(std::string("dlopen: ") + dlerror());
        auto entry = reinterpret_cast<xylem_plugin_entry_fn>(dlsym(lib, XYLEM_PLUGIN_ENTRY_NAME));
        if (!entry) throw std::runtime_error("no entry point in " + kPluginFile);
        return entry();
    }();
    return *t;
}

}  // namespace xylem::cuda_test
