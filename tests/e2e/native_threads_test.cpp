// XYLEM_NUM_THREADS is the number of CPUs the native backend uses and XYLEM_NATIVE_ISA the highest
// instruction-set level its kernels run at (docs/architecture.md, "Native backend threading" and
// "Determinism"). OpenBLAS always runs one thread: the plugin's own pool spreads GEMMs, convs,
// reductions and fused programs over the CPUs, in slices fixed by the shape, so no result depends
// on the thread count. `xylem backends` reports both settings and the OpenBLAS core they pinned.
#include <gtest/gtest.h>

#include <string>

#include "cli_run.h"
#include "support/native_levels.h"

using xylem::test::run_cli;

namespace {

// The native backend's lines of `xylem backends` with these settings (NAME=VALUE words).
std::string native_lines(const std::string& env) {
    const auto r = run_cli("backends", env);
    EXPECT_EQ(r.code, 0) << r.err;
    const size_t at = r.out.find("\nnative ");
    if (at == std::string::npos) return "";
    const size_t end = r.out.find("\nopencl ", at + 1);
    return r.out.substr(at + 1, end == std::string::npos ? std::string::npos : end - at - 1);
}


}  // namespace

TEST(NativeThreads, OneOpenBlasThreadAndOnePoolWorkerPerCpu) {
    for (const std::string n : {"1", "2", "3", "7"}) {
        SCOPED_TRACE("XYLEM_NUM_THREADS=" + n);
        const std::string d = native_lines("XYLEM_NUM_THREADS=" + n);
        if (d.empty()) GTEST_SKIP() << "no native backend line in `xylem backends`";
        EXPECT_NE(d.find("BLAS threads 1;"), std::string::npos) << d;
        EXPECT_NE(d.find("worker pool " + n + " threads (XYLEM_NUM_THREADS=" + n + ","), std::string::npos) << d;
    }
}

// (Some machines set OPENBLAS_CORETYPE for all processes; these runs unset it, then set it.)
TEST(NativeIsa, CapPinsTheKernelsAndOpenBlasCore) {
    const std::string base = native_lines("-u OPENBLAS_CORETYPE XYLEM_NATIVE_ISA=baseline");
    if (base.empty()) GTEST_SKIP() << "no native backend line in `xylem backends`";
    EXPECT_NE(base.find("own kernels baseline"), std::string::npos) << base;
    EXPECT_NE(base.find("core Prescott (pinned to Prescott by XYLEM_NATIVE_ISA=baseline)"), std::string::npos) << base;
    const xylem::test::CpuLevels levels = xylem::test::cpu_levels();
    if (!levels.has("avx2")) {
        std::printf("[ SKIPPED  ] the avx2 cap: this CPU lacks AVX2\n");
        return;
    }
    const std::string avx2 = native_lines("-u OPENBLAS_CORETYPE XYLEM_NATIVE_ISA=avx2");
    EXPECT_NE(avx2.find("own kernels avx2"), std::string::npos) << avx2;
    // An AVX2 CPU runs its own OpenBLAS core (Haswell, Zen, ...); a bigger one is pinned to Haswell.
    if (levels.has("avx512")) {
        EXPECT_NE(avx2.find("core Haswell (pinned to Haswell by XYLEM_NATIVE_ISA=avx2)"), std::string::npos) << avx2;
    }
    // A core the user forced at or below the cap is kept.
    const std::string forced = native_lines("-u OPENBLAS_CORETYPE XYLEM_NATIVE_ISA=avx2 OPENBLAS_CORETYPE=Sandybridge");
    EXPECT_NE(forced.find("core Sandybridge (forced by OPENBLAS_CORETYPE=Sandybridge)"), std::string::npos) << forced;
}

TEST(NativeIsa, BadValueIsRefusedNamingTheVariableAndTheLevels) {
    const auto r = run_cli("backends", "XYLEM_NATIVE_ISA=avx3");
    EXPECT_EQ(r.code, 0) << r.err;  // the other backends still list
    EXPECT_NE(r.out.find("XYLEM_NATIVE_ISA='avx3': must be one of avx512, avx2, baseline (or unset): a cap on the native "
                         "kernels' instruction set"),
              std::string::npos)
        << r.out;
    const auto train = run_cli("train --config " + std::string(XYLEM_SOURCE_DIR) +
                                   "/examples/fashion_mlp.toml --backend native --max-steps 1 --out /tmp/xylem_isa_bad",
                               "XYLEM_NATIVE_ISA=avx3");
    EXPECT_NE(train.code, 0);
    EXPECT_NE(train.err.find("XYLEM_NATIVE_ISA='avx3': must be one of"), std::string::npos) << train.err;
    EXPECT_EQ(train.err.find("terminate"), std::string::npos) << train.err;
}

// XYLEM_NUM_THREADS is read like a config key (xylem/env.h): a value that is not a whole number in
// [1, 1024], or an empty one, stops `xylem train` before any plugin is probed, naming the variable
// and the range (it was ignored: 100000 ran 1,024 threads), and `xylem backends` lists the native
// backend as unavailable with the same sentence (the plugin reads it by the same rule).
TEST(NativeThreads, BadValuesAreRefusedNamingTheVariableAndTheRange) {
    const std::string cfg = std::string(XYLEM_SOURCE_DIR) + "/examples/fashion_mlp.toml";
    for (const std::string bad : {"abc", "-1", "1.5", "", "0", "100000"}) {
        SCOPED_TRACE("XYLEM_NUM_THREADS='" + bad + "'");
        const std::string why = "XYLEM_NUM_THREADS='" + bad + "': must be a whole number of CPUs in [1, 1024] (or unset)";
        for (const std::string backend : {" --backend native", ""}) {
            const auto train = run_cli("train --config " + cfg + backend + " --max-steps 1 --out /tmp/xylem_threads_bad",
                                       "XYLEM_NUM_THREADS='" + bad + "'");
            EXPECT_EQ(train.code, 1);
            EXPECT_EQ(train.err, "xylem: error: " + why + "\n");
            EXPECT_EQ(train.out, "");
        }
        const auto r = run_cli("backends", "XYLEM_NUM_THREADS='" + bad + "'");
        EXPECT_NE(r.out.find("reason: " + why + "\n"), std::string::npos) << r.out;
    }
}
