// XYLEM_NUM_THREADS is the number of CPUs the native backend uses (docs/architecture.md, "Native
// backend threading"): with two or fewer, OpenBLAS runs one thread and the plugin's own pool
// splits GEMMs over the CPUs; with more, OpenBLAS runs one thread per CPU. `xylem backends`
// reports both counts. (XYLEM_NUM_THREADS=2 once meant two OpenBLAS threads spinning next to the
// plugin's pool: char-rnn's step took 50 ms instead of 29.)
#include <gtest/gtest.h>

#include <string>

#include "cli_run.h"

using xylem::test::run_cli;

namespace {

// The native backend's line of `xylem backends` with XYLEM_NUM_THREADS=n.
std::string native_detail(const std::string& n) {
    const auto r = run_cli("backends", "XYLEM_NUM_THREADS=" + n);
    EXPECT_EQ(r.code, 0) << r.err;
    const size_t at = r.out.find("BLAS threads");
    return at == std::string::npos ? "" : r.out.substr(at, r.out.find('\n', at) - at);
}

}  // namespace

TEST(NativeThreads, TwoCpusOrFewerRunOneOpenBlasThreadAndThePluginsPool) {
    for (const std::string n : {"1", "2"}) {
        SCOPED_TRACE("XYLEM_NUM_THREADS=" + n);
        const std::string d = native_detail(n);
        if (d.empty()) GTEST_SKIP() << "no native backend line in `xylem backends`";
        EXPECT_NE(d.find("BLAS threads 1 (XYLEM_NUM_THREADS=" + n + ")"), std::string::npos) << d;
        EXPECT_NE(d.find("worker pool " + n + " threads"), std::string::npos) << d;
    }
}

TEST(NativeThreads, MoreCpusRunOneOpenBlasThreadEach) {
    const std::string d = native_detail("3");
    if (d.empty()) GTEST_SKIP() << "no native backend line in `xylem backends`";
    EXPECT_NE(d.find("BLAS threads 3 (XYLEM_NUM_THREADS=3)"), std::string::npos) << d;
    EXPECT_NE(d.find("worker pool 3 threads"), std::string::npos) << d;
}
