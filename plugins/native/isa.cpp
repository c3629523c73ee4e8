// The level the native plugin's kernels run at: the CPU's, capped by XYLEM_NATIVE_ISA (isa.h).
#include "isa.h"
#include "simd.h"  // cpu_has_fma

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "xylem/env.h"

namespace xylem::native {

namespace {

constexpr Isa kLevels[] = {Isa::avx512, Isa::avx2, Isa::baseline};

struct Level {
    Isa isa;
    const char* error;  // null, or why XYLEM_NATIVE_ISA was refused
};

Level decide() {
    const Isa cpu = cpu_isa();
    const env::Value<std::string> v = env::native_isa();  // the one rule for XYLEM_* variables
    if (!v.set) return {cpu, nullptr};
    for (Isa l : kLevels)
        if (v.error.empty() && v.value == isa_name(l)) return {std::min(cpu, l), nullptr};
    static char message[240];
    std::snprintf(message, sizeof message, "%.160s: a cap on the native kernels' instruction set (this CPU runs %s at most)",
                  v.error.c_str(), isa_name(cpu));
    return {cpu, message};
}

const Level& level() {
    static const Level l = decide();  // read once: every kernel of the process runs at one level
    return l;
}

}  // namespace

Isa cpu_isa() {
#if defined(__x86_64__) && defined(__GNUC__)
    // libgcc's checks include the OS's (XGETBV): a CPU with AVX-512 under an OS that does not
    // save its registers reports no avx512f.
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f")) return Isa::avx512;
    if (__builtin_cpu_supports("avx2")) return Isa::avx2;
#endif
    return Isa::baseline;
}

bool cpu_has_fma() {
#if defined(__x86_64__) && defined(__GNUC__)
    __builtin_cpu_init();
    return __builtin_cpu_supports("fma");
#else
    return false;
#endif
}

Isa isa() { return level().isa; }
const char* isa_error() { return level().error; }

const char* isa_name(Isa l) {
    switch (l) {
    case Isa::avx512: return "avx512";
    case Isa::avx2: return "avx2";
    case Isa::baseline: break;
    }
    return "baseline";
}

}  // namespace xylem::native
