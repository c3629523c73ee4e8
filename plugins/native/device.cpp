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

// The default GEMM thread count. With two CPUs or fewer, one: measured on a 2-vCPU VM, the second
// OpenBLAS thread bought little (the vCPUs behave like SMT siblings) while its busy-waiting slowed
// everything else, making runs bimodal (LeNet inference 6.1-9.9k img/s with two threads, 8.1-9.1k
// with one; see docs/benchmarks.md). With more CPUs, one per CPU.
int default_threads(int hw) { return hw <= 2 ? 1 : hw; }

// XYLEM_NUM_THREADS when it is a positive integer, else the default.
int configured_threads(int hw) {
    const char* s = std::getenv("XYLEM_NUM_THREADS");
    if (!s || !*s) return default_threads(hw);
    char* end = nullptr;
    const long n = std::strtol(s, &end, 10);
    if (*end != '\0' || n < 1) return default_threads(hw);
    return n > 1024 ? 1024 : static_cast<int>(n);
}

}  // namespace

// The plugin's own parallel kernels (fused_elementwise) use the CPUs this process may run on, or
// XYLEM_NUM_THREADS when it is set (the user's choice of threads for the plugin).
int kernel_threads() {
    static const int n = [] {
        const int hw = hardware_threads();
        const char* s = std::getenv("XYLEM_NUM_THREADS");
        return std::min(s && *s ? configured_threads(hw) : hw, kMaxKernelThreads);
    }();
    return n;
}

namespace {

xylem_framework_s make_framework() {
    const int hw = hardware_threads();
    const int n = configured_threads(hw);
    // GEMM is threaded by OpenBLAS's pool. Our kernels stay on the calling thread (they are
    // memory-bound and small at MLP sizes) except fused_elementwise, which spreads big iteration
    // spaces over kernel_threads() workers that sleep, never spin, between ops (workers.cpp).
    openblas_set_num_threads(n);
    return xylem_framework_s{n, hw};
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
    static const int cpus = [] {
        const char* env = std::getenv("XYLEM_NUM_THREADS");
        if (env && *env) return 1;
        cpu_set_t set;
        if (sched_getaffinity(0, sizeof set, &set) != 0) return 1;
        return std::clamp(CPU_COUNT(&set), 1, kMaxSplit);
    }();
    return openblas_get_num_threads() > 1 ? 1 : cpus;
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
                  openblas_get_config(), corename, forced, configured_threads(hw),
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
