// Determinism of the native backend (docs/architecture.md, "Determinism"): on one machine and one
// instruction-set level, every op gives the same bits for any XYLEM_NUM_THREADS (1, 2, 3 and more
// than the CPUs); across levels (XYLEM_NATIVE_ISA) results agree within float tolerance, not
// bits. Each run is a process of its own (xylem-test-op-battery, tests/ops/battery), since the
// plugin reads both variables once per process. Every level this CPU has is tested; a level it
// lacks is named and skipped.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "support/native_levels.h"

namespace {

namespace fs = std::filesystem;
using xylem::test::bits_differ;

struct Record {
    std::string name;
    std::vector<float> values;
};

std::vector<Record> read_records(const fs::path& file) {
    std::vector<Record> out;
    std::ifstream in(file, std::ios::binary);
    uint64_t len = 0;
    while (in.read(reinterpret_cast<char*>(&len), sizeof len)) {
        Record r;
        r.name.resize(len);
        uint64_t n = 0;
        in.read(r.name.data(), static_cast<std::streamsize>(len));
        in.read(reinterpret_cast<char*>(&n), sizeof n);
        r.values.resize(n);
        in.read(reinterpret_cast<char*>(r.values.data()), static_cast<std::streamsize>(n * sizeof(float)));
        out.push_back(std::move(r));
    }
    return out;
}

// The battery's results with these environment settings (NAME=VALUE words).
std::vector<Record> battery(const std::string& env) {
    const fs::path out = fs::temp_directory_path() / ("xylem_battery_" + std::to_string(::getpid()) + ".bin");
    const fs::path err = out.string() + ".err";
    const std::string cmd = "env " + env + " " + XYLEM_TEST_OP_BATTERY + " " + out.string() + " 2>" + err.string();
    const int status = std::system(cmd.c_str());
    std::ostringstream msg;
    msg << std::ifstream(err).rdbuf();
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << env << ": " << msg.str();
    std::vector<Record> r = read_records(out);
    fs::remove(out);
    fs::remove(err);
    return r;
}


// max |a - b| / max(1, max |b|).
double difference(const std::vector<float>& a, const std::vector<float>& b) {
    if (a.size() != b.size()) return INFINITY;
    double diff = 0, scale = 1;
    for (size_t i = 0; i < a.size(); ++i) {
        diff = std::max(diff, std::fabs(double(a[i]) - b[i]));
        scale = std::max(scale, std::fabs(double(b[i])));
    }
    return diff / scale;
}

// 1, 2, 3 and more threads than this machine has CPUs, and 8: the most workers one op takes
// (kMaxSplit), each with its own scratch, which a cold arena hands out as separate blocks.
std::vector<int> thread_counts() {
    const int more = static_cast<int>(std::max(4u, std::thread::hardware_concurrency())) + 1;
    std::vector<int> counts{1, 2, 3, more};
    if (more != 8) counts.push_back(8);
    return counts;
}

}  // namespace

TEST(NativeDeterminism, EveryThreadCountGivesTheSameBitsOnEachLevel) {
    const xylem::test::CpuLevels levels = xylem::test::cpu_levels();
    for (const std::string& level : levels.have) {
        SCOPED_TRACE("XYLEM_NATIVE_ISA=" + level);
        const std::vector<Record> one = battery("XYLEM_NATIVE_ISA=" + level + " XYLEM_NUM_THREADS=1");
        ASSERT_GT(one.size(), 30u) << "the battery wrote too few results";
        for (int t : thread_counts()) {
            if (t == 1) continue;
            const std::vector<Record> got =
                battery("XYLEM_NATIVE_ISA=" + level + " XYLEM_NUM_THREADS=" + std::to_string(t));
            ASSERT_EQ(got.size(), one.size());
            for (size_t i = 0; i < one.size(); ++i)
                EXPECT_EQ(bits_differ(got[i].values, one[i].values), 0u)
                    << one[i].name << ": elements whose bits differ between 1 and " << t << " threads, of "
                    << one[i].values.size();
        }
    }
    for (const std::string& level : levels.missing)
        std::printf("[ SKIPPED  ] level %s: this CPU lacks its instructions (%s)\n", level.c_str(),
                    level == "avx2" ? "avx2" : "avx512f");
}

// Levels differ in OpenBLAS's kernels and in the AVX-512 narrow GEMM (FMA, other summation
// orders), so their results agree within float rounding of the op, not in bits.
TEST(NativeDeterminism, LevelsAgreeWithinFloatTolerance) {
    const std::vector<std::string> levels = xylem::test::cpu_levels().have;
    if (levels.size() < 2) GTEST_SKIP() << "this CPU runs the baseline level only";
    const std::vector<Record> base = battery("XYLEM_NATIVE_ISA=baseline XYLEM_NUM_THREADS=2");
    for (size_t l = 1; l < levels.size(); ++l) {
        const std::vector<Record> got = battery("XYLEM_NATIVE_ISA=" + levels[l] + " XYLEM_NUM_THREADS=2");
        ASSERT_EQ(got.size(), base.size());
        size_t identical = 0;
        for (size_t i = 0; i < base.size(); ++i) {
            EXPECT_LT(difference(got[i].values, base[i].values), 2e-5)
                << base[i].name << ": " << levels[l] << " vs baseline";
            identical += bits_differ(got[i].values, base[i].values) == 0;
        }
        // Not every op can differ: the elementwise ones compile to the same arithmetic on every
        // level (no FMA; -ffp-contract=off), so most of the battery is bit-identical.
        EXPECT_GE(identical, base.size() / 3) << levels[l] << " vs baseline: too few identical results";
    }
}
