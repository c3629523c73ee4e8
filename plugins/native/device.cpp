// Probe (CPU model, memory, OpenBLAS configuration) and the plugin's single framework instance.
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "blas.h"
#include "xylem/env.h"
#include "isa.h"
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

// XYLEM_NUM_THREADS by the one rule (xylem/env.h): read once, every count below derives from it.
const env::Value<int64_t>& threads_variable() {
    static const env::Value<int64_t> v = env::num_threads();
    return v;
}

// The CPUs the plugin uses: XYLEM_NUM_THREADS, else the CPUs this process may run on (a bad
// value makes the plugin unusable, naming it: unusable() below).
int plugin_cpus() {
    const env::Value<int64_t>& v = threads_variable();
    return v.set && v.error.empty() ? static_cast<int>(v.value) : hardware_threads();
}

}  // namespace

// The plugin's own parallel kernels (fused_elementwise) use the CPUs the plugin uses.
int kernel_threads() {
    return std::min(plugin_cpus(), kMaxKernelThreads);
}

namespace {

xylem_framework_s make_framework() {
    // OpenBLAS runs one thread (blas.cpp); GEMMs, big convolutions, reductions and fused programs
    // are spread over the plugin's own pool (workers.cpp), in slices fixed by the shape.
    return xylem_framework_s{hardware_threads()};
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

// The CPU's instruction sets as the probe reports them.
const char* cpu_features() {
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

// Why the plugin cannot run here, or null: a bad XYLEM_NATIVE_ISA, or OpenBLAS missing.
const char* unusable() {
    if (const char* e = isa_error()) return e;
    if (!threads_variable().error.empty()) return threads_variable().error.c_str();
    const Blas& b = blas();
    return b.sgemm ? nullptr : b.error;
}

}  // namespace

int split_cpus() {
    return std::clamp(plugin_cpus(), 1, kMaxSplit);
}

int machine_slices() {
    static const int n = [] {
        const long online = sysconf(_SC_NPROCESSORS_ONLN);
        int s = 1;
        while (s < online && s < kMaxSplit) s *= 2;
        return s;
    }();
    return n;
}

void probe(xylem_probe_info* out) {
    if (!out) return;
    std::memset(out, 0, sizeof *out);
    if (const char* why = unusable()) {
        std::snprintf(out->reason, sizeof out->reason, "%s", why);
        return;
    }
    const Blas& b = blas();
    const int hw = hardware_threads();
    const std::string xylem_threads = threads_variable().set ? std::to_string(threads_variable().value) : "unset";
    const char* coretype = std::getenv("OPENBLAS_CORETYPE");
    char how[112];
    if (b.pinned[0]) std::snprintf(how, sizeof how, "%s", b.pinned);
    else if (coretype && *coretype) std::snprintf(how, sizeof how, "forced by OPENBLAS_CORETYPE=%.48s", coretype);
    else std::snprintf(how, sizeof how, "auto-detected, OPENBLAS_CORETYPE unset");
    const char* corename = b.corename();
    const Isa level = isa();
    std::snprintf(out->detail, sizeof out->detail,
                  "%s; core %s (%s); own kernels %s%s; BLAS threads %d; worker pool %d threads "
                  "(XYLEM_NUM_THREADS=%.16s, %d hardware threads): GEMM blocks, convolutions, reductions, "
                  "fused programs",
                  b.config(), corename, how, isa_name(level),
                  level < cpu_isa() ? " (capped by XYLEM_NATIVE_ISA)" : "", b.num_threads(), kernel_threads(),
                  xylem_threads.c_str(), hw);

    out->available = 1;
    out->device_count = 1;
    xylem_device_info& dev = out->devices[0];
    cpu_model(dev.name, sizeof dev.name);
    std::snprintf(dev.detail, sizeof dev.detail, "%s, %d hardware threads, own kernels %s, OpenBLAS core %s",
                  cpu_features(), hw, isa_name(level), corename);
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
    if (const char* why = unusable()) return set_error(XYLEM_E_UNAVAILABLE, "native: %s", why);
    static xylem_framework_s framework = make_framework();  // the one instance, made on first call
    *out = &framework;
    return XYLEM_OK;
}

}  // namespace xylem::native
