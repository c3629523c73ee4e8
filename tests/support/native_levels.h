// What the native backend's determinism and instruction-set tests share: the levels this CPU can
// run (plugins/native/isa.h's names, the values XYLEM_NATIVE_ISA takes) and a bit-for-bit
// comparison of float results.
#pragma once

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

namespace xylem::test {

struct CpuLevels {
    std::vector<std::string> have;     // lowest first: "baseline", then "avx2", "avx512" as the CPU has them
    std::vector<std::string> missing;  // the levels it lacks
    bool has(const std::string& level) const { return std::find(have.begin(), have.end(), level) != have.end(); }
};

inline CpuLevels cpu_levels() {
    __builtin_cpu_init();
    CpuLevels l;
    l.have.push_back("baseline");
    (__builtin_cpu_supports("avx2") ? l.have : l.missing).push_back("avx2");
    (__builtin_cpu_supports("avx512f") ? l.have : l.missing).push_back("avx512");
    return l;
}

// Elements whose bits differ (every element, when the sizes do).
inline size_t bits_differ(const std::vector<float>& x, const std::vector<float>& y) {
    size_t differ = x.size() == y.size() ? 0 : std::max(x.size(), y.size());
    for (size_t i = 0; i < std::min(x.size(), y.size()); ++i) differ += std::memcmp(&x[i], &y[i], sizeof(float)) != 0;
    return differ;
}

}  // namespace xylem::test
