// Probe (CPU model, memory, OpenBLAS configuration) and the plugin's single framework instance.
#include <cblas.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "native.h"

namespace xylem::native {

namespace {

// Threads this process may run on (what nproc reports: honours cpusets and taskset).
int hardware_threads() {
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0) return CPU_COUNT(&set);
    const long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? static_cast<int>(n) : 1;
}

// The CPUs the plugin uses: XYLEM_NUM_THREADS when it is a positive integer (at most 1024), else
// the CPUs this process may run on. Read once: every count below derives from it.
int plugin_cpus() {
    static const int n = [] {
        const int hw = hardware_threads();
        const char* s = std::getenv("XYLEM_NUM_THREADS");
        if (!s || !*s) return hw;
        char* end = nullptr;
        const long v = std::strtol(s, &end, 10);
        if (*end != '\0' || v < 1) return hw;
        return v > 1024 ? 1024 : static_cast<int>(v);
    }();
    return n;
}

// OpenBLAS's threads for that many CPUs. With two or fewer, one, and the plugin cuts GEMMs over
// its own pool instead (split_cpus): measured on a 2-vCPU VM, the second OpenBLAS thread bought
// little while its busy-waiting slowed everything else, making runs bimodal (LeNet inference
// 6.1-9.9k img/s with two threads, 8.1-9.1k with one; see docs/benchmarks.md), and next to the
// plugin's pool it spun against the pool's workers (char-rnn 60% slower with
// XYLEM_NUM_THREADS=2, when that still meant two OpenBLAS threads). With more, one per CPU.
int blas_threads(int cpus) { return cpus <= 2 ? 1 : cpus; }

}  // namespace

// The plugin's own parallel kernels (fused_elementwise) use the CPUs the plugin uses.
int kernel_threads() {
    return std::min(plugin_cpus(), kMaxKernelThreads);
}

namespace {

xylem_framework_s make_framework() {
    const int n = blas_threads(plugin_cpus());
    // Big machines: GEMMs are threaded by OpenBLAS's pool. Small ones (one OpenBLAS thread): the
    // plugin cuts them over its own pool (split_cpus). Either way the plugin's memory-bound ops
    // and fused_elementwise spread big iteration spaces over its pool (workers.cpp).
    openblas_set_num_threads(n);
    return xylem_framework_s{n, hardware_threads()};
}

void cpu_model(char* out, size_t size) {
    std::snprintf(out, size, "CPU");
    FILE* f = std::fopen("/proc/cpuinfo", "r");
    if (!f) return;
    char line[512];
    while (std::fgets(line, sizeof line, f)) {
        if (std::strncmp(line, "model name", 10) != 0) continue;
        const char* colon = std::strchr(line, ':');
        if (!colon) continue;
        const char* v = colon + 1;
        while (*v == ' ' || *v == '\t') ++v;
        std::snprintf(out, size, "CPU: %.*s", static_cast<int>(std::strcspn(v, "\n")), v);
        break;
    }
    std::fclose(f);
}

const char* isa_level() {
#if defined(__x86_64__)
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f")) return "x86-64 AVX-512";
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return "x86-64 AVX2+FMA";
    if (__builtin_cpu_supports("avx")) return "x86-64 AVX";
    return "x86-64 SSE2";
#else
    return "non-x86-64 CPU";
#endif
}

}  // namespace

int split_cpus() {
    return openblas_get_num_threads() > 1 ? 1 : std::clamp(plugin_cpus(), 1, kMaxSplit);
}

void probe(xylem_probe_info* out) {
    if (!out) return;
    std::memset(out, 0, sizeof *out);
    const int hw = hardware_threads();
    const char* xylem_threads = std::getenv("XYLEM_NUM_THREADS");
    const char* coretype = std::getenv("OPENBLAS_CORETYPE");
    char forced[96];
    if (coretype && *coretype)
        std::snprintf(forced, sizeof forced, "forced by OPENBLAS_CORETYPE=%.48s", coretype);
    else
        std::snprintf(forced, sizeof forced, "auto-detected, OPENBLAS_CORETYPE unset");
    const char* corename = openblas_get_corename();
    std::snprintf(out->detail, sizeof out->detail,
                  "%s; core %s (%s); BLAS threads %d (XYLEM_NUM_THREADS=%.16s), %d hardware threads; "
                  "own kernels' worker pool %d threads (fused_elementwise, big convolutions and reductions)",
                  openblas_get_config(), corename, forced, blas_threads(plugin_cpus()),
                  xylem_threads ? xylem_threads : "unset", hw, kernel_threads());

    out->available = 1;
    out->device_count = 1;
    xylem_device_info& dev = out->devices[0];
    cpu_model(dev.name, sizeof dev.name);
    std::snprintf(dev.detail, sizeof dev.detail, "%s, %d hardware threads, OpenBLAS core %s", isa_level(), hw, corename);
    const long pages = sysconf(_SC_PHYS_PAGES), page_size = sysconf(_SC_PAGESIZE);
    dev.memory_bytes = pages > 0 && page_size > 0 ? static_cast<uint64_t>(pages) * static_cast<uint64_t>(page_size) : 0;
    dev.compute_units = static_cast<uint32_t>(hw);
}

// The one device is the host's processor.
void device_kinds(uint32_t* kinds, uint32_t count) {
    if (kinds && count > 0) kinds[0] = XYLEM_DEVICE_CPU;
}

xylem_status framework_get(xylem_framework_t* out) {
    if (!out) return set_error(XYLEM_E_INVALID, "native: framework_get: out is NULL");
    static xylem_framework_s framework = make_framework();  // the one instance, made on first call
    *out = &framework;
    return XYLEM_OK;
}

}  // namespace xylem::native
