// Loading OpenBLAS with the core type XYLEM_NATIVE_ISA allows (blas.h).
#include "blas.h"

#include <dlfcn.h>
#include <strings.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "isa.h"

#ifndef XYLEM_OPENBLAS_SONAME
#error "XYLEM_OPENBLAS_SONAME: the OpenBLAS library to load (plugins/native/CMakeLists.txt defines it)"
#endif

namespace xylem::native {

namespace {

// The highest level an OpenBLAS core type's kernels use (OpenBLAS's names, any case). AVX-only
// cores (Sandybridge, the Bulldozer family) count as avx2 here: above baseline, within an AVX2
// cap. A name not listed counts as avx512, so a cap pins it rather than trust it.
Isa core_level(const char* core) {
    static const char* const avx512[] = {"skylakex", "cooperlake", "sapphirerapids"};
    static const char* const avx2[] = {"haswell", "zen", "sandybridge", "bulldozer", "piledriver", "steamroller",
                                       "excavator"};
    static const char* const baseline[] = {"prescott", "core2", "penryn", "dunnington", "nehalem", "atom", "nano",
                                           "opteron", "opteron_sse3", "barcelona", "bobcat", "katmai", "coppermine",
                                           "northwood", "banias", "athlon"};
    for (const char* n : avx512)
        if (strcasecmp(core, n) == 0) return Isa::avx512;
    for (const char* n : avx2)
        if (strcasecmp(core, n) == 0) return Isa::avx2;
    for (const char* n : baseline)
        if (strcasecmp(core, n) == 0) return Isa::baseline;
    return Isa::avx512;
}

// The core type that stands for a level under a cap: OpenBLAS's AVX2 kernels (Zen's are the
// same family) and its lowest x86-64 ones.
const char* core_for(Isa level) { return level == Isa::avx2 ? "Haswell" : "Prescott"; }

template <class F>
bool symbol(void* lib, const char* name, F& out, Blas& b) {
    out = reinterpret_cast<F>(dlsym(lib, name));
    if (!out) std::snprintf(b.error, sizeof b.error, "%s has no %s: not OpenBLAS", XYLEM_OPENBLAS_SONAME, name);
    return out != nullptr;
}

Blas load() {
    Blas b;
    // Under a cap, a core type above it (auto-detected or set by the user) is replaced by the
    // cap's; one at or below it is kept (OPENBLAS_CORETYPE may be set for a reason: some OpenBLAS
    // builds misdetect some CPUs). Set before the library's constructor reads it.
    const char* user = std::getenv("OPENBLAS_CORETYPE");
    const std::string core_was = user ? user : "";
    const Isa level = isa();
    const bool capped = level < cpu_isa();
    const bool pin = capped && !(user && *user && core_level(user) <= level);
    if (pin) {
        setenv("OPENBLAS_CORETYPE", core_for(level), 1);
        std::snprintf(b.pinned, sizeof b.pinned, "pinned to %s by XYLEM_NATIVE_ISA=%s", core_for(level),
                      isa_name(level));
    }
    // One thread from the start: the plugin runs OpenBLAS on one thread anyway (set_threads below),
    // but a library started with more creates its helper threads at load, and they spin on
    // sched_yield for a while before sleeping. Those spins took a CPU from the first ~100 ms of
    // work (`xylem run` of ResNet-18 at batch 1: 28 ms a pass instead of 15, the pool's helper
    // sharing a CPU). Both variables are read by the library's constructor, then put back as they
    // were: the process's other libraries and its children see the user's environment.
    const char* threads_env = std::getenv("OPENBLAS_NUM_THREADS");
    const std::string threads_was = threads_env ? threads_env : "";
    setenv("OPENBLAS_NUM_THREADS", "1", 1);
    void* lib = dlopen(XYLEM_OPENBLAS_SONAME, RTLD_NOW | RTLD_LOCAL);
    if (threads_env) setenv("OPENBLAS_NUM_THREADS", threads_was.c_str(), 1);
    else unsetenv("OPENBLAS_NUM_THREADS");
    if (pin && user) setenv("OPENBLAS_CORETYPE", core_was.c_str(), 1);
    else if (pin) unsetenv("OPENBLAS_CORETYPE");
    if (!lib) {
        const char* why = dlerror();
        std::snprintf(b.error, sizeof b.error, "cannot load OpenBLAS (%s): %s", XYLEM_OPENBLAS_SONAME,
                      why ? why : "unknown error");
        return b;
    }
    decltype(&::openblas_set_num_threads) set_threads = nullptr;
    decltype(b.sgemm) sgemm = nullptr;
    if (!symbol(lib, "cblas_sgemm", sgemm, b) || !symbol(lib, "cblas_sgemv", b.sgemv, b) ||
        !symbol(lib, "openblas_get_corename", b.corename, b) ||
        !symbol(lib, "openblas_get_config", b.config, b) ||
        !symbol(lib, "openblas_get_num_threads", b.num_threads, b) ||
        !symbol(lib, "openblas_set_num_threads", set_threads, b))
        return b;
    set_threads(1);
    // Loaded earlier by someone else (the process linked it, or another library did): its core
    // was chosen then, and a cap cannot change it. Say so rather than run above the cap.
    const char* core = b.corename();
    if (capped && core_level(core ? core : "") > level) {
        std::snprintf(b.error, sizeof b.error,
                      "OpenBLAS runs core %s, above XYLEM_NATIVE_ISA=%s: it was loaded before the native plugin "
                      "(set OPENBLAS_CORETYPE=%s before starting the process)",
                      core ? core : "?", isa_name(level), core_for(level));
        return b;
    }
    b.sgemm = sgemm;
    return b;
}

}  // namespace

const Blas& blas() {
    static const Blas b = load();
    return b;
}

}  // namespace xylem::native
