// The XYLEM_* environment variables are read like config keys (xylem/env.h): a value out of its
// range, of the wrong kind or empty is an error naming the variable and what it may hold.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "xylem/env.h"
#include "xylem/error.h"

using namespace xylem;

namespace {

// Sets NAME=value for one read (nullptr: unset), then puts back what was there (ctest sets
// XYLEM_NATIVE_ISA for the instruction-set runs of this suite).
template <class F> auto with(const char* name, const char* value, F read) {
    const char* was = std::getenv(name);
    const std::string saved = was ? was : "";
    if (value) ::setenv(name, value, 1);
    else ::unsetenv(name);
    auto v = read();
    if (was) ::setenv(name, saved.c_str(), 1);
    else ::unsetenv(name);
    return v;
}

}  // namespace

TEST(Env, ThreadsAreAWholeNumberInRange) {
    EXPECT_FALSE(with("XYLEM_NUM_THREADS", nullptr, env::num_threads).set);
    const auto four = with("XYLEM_NUM_THREADS", "4", env::num_threads);
    EXPECT_TRUE(four.set);
    EXPECT_EQ(four.error, "");
    EXPECT_EQ(four.value, 4);
    EXPECT_EQ(with("XYLEM_NUM_THREADS", "1024", env::num_threads).value, 1024);
    for (const char* bad : {"abc", "-1", "0", "1.5", "", " 2", "+2", "2x", "100000", "99999999999999999999"}) {
        SCOPED_TRACE(bad);
        const auto v = with("XYLEM_NUM_THREADS", bad, env::num_threads);
        EXPECT_TRUE(v.set);
        EXPECT_EQ(v.error, "XYLEM_NUM_THREADS='" + std::string(bad) + "': must be a whole number of CPUs in [1, 1024] (or unset)");
        try {
            env::value_or(v, int64_t{0});
            ADD_FAILURE() << "no error";
        } catch (const Error& e) {
            EXPECT_EQ(std::string(e.what()), v.error);
        }
    }
}

TEST(Env, SwitchesChoicesAndSeconds) {
    for (const char* off : {"0", "false", "off", "no"}) EXPECT_FALSE(env::value_or(with("XYLEM_FUSION", off, env::fusion), true)) << off;
    for (const char* on : {"1", "true", "on", "yes"}) EXPECT_TRUE(env::value_or(with("XYLEM_FUSION", on, env::fusion), false)) << on;
    EXPECT_EQ(with("XYLEM_FUSION", "abc", env::fusion).error,
              "XYLEM_FUSION='abc': must be one of 1, true, on, yes, 0, false, off, no (or unset)");
    EXPECT_EQ(with("XYLEM_FUSION", "", env::fusion).error,
              "XYLEM_FUSION='': must be one of 1, true, on, yes, 0, false, off, no (or unset)");
    EXPECT_EQ(with("XYLEM_DIST_REDUCE", "device", env::dist_reduce).error,
              "XYLEM_DIST_REDUCE='device': must be one of auto, host (or unset)");
    EXPECT_EQ(with("XYLEM_NATIVE_ISA", "avx3", env::native_isa).error,
              "XYLEM_NATIVE_ISA='avx3': must be one of avx512, avx2, baseline (or unset)");
    EXPECT_EQ(with("XYLEM_BUCKET_KB", "0", env::bucket_kb).error,
              "XYLEM_BUCKET_KB='0': must be a whole number of KiB in [1, 1073741824] (or unset)");
    EXPECT_DOUBLE_EQ(with("XYLEM_DIST_TIMEOUT", "2.5", env::dist_timeout).value, 2.5);
    for (const char* bad : {"0", "-3", "nan", "inf", "1e10", "", "5s"})
        EXPECT_EQ(with("XYLEM_DIST_TIMEOUT", bad, env::dist_timeout).error,
                  "XYLEM_DIST_TIMEOUT='" + std::string(bad) + "': must be a number of seconds in (0, 1000000000] (or unset)")
            << bad;
    // Free text: empty is unset.
    EXPECT_FALSE(with("XYLEM_BACKEND", "", [] { return env::text("XYLEM_BACKEND"); }).set);
    EXPECT_EQ(with("XYLEM_BACKEND", "opencl", [] { return env::text("XYLEM_BACKEND"); }).value, "opencl");
}
