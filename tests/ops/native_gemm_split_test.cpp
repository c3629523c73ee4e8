// The native plugin cuts big GEMMs into row or column blocks of C, one single-threaded sgemm per
// worker (plugins/native/ops/gemm.cpp). K is never cut, so the result must not depend on the cut:
// the same product computed 16 rows at a time (GEMMs too small to be cut) gives the same bits,
// for C taller than wide (cut by rows) and wider than tall (cut by columns), with and without
// transposes and beta.
#include <cstring>
#include <random>
#include <vector>

#include "support/backends.h"
#include "xylem/op_calls.h"

namespace xylem::test {
namespace {

struct Case {
    bool ta, tb;
    int64_t m, n, k;
    float beta;
};

TEST(NativeGemmSplit, BigGemmsGiveTheBitsOfUncutOnes) {
    auto backend = backend_named("native");
    if (!backend) GTEST_SKIP() << "no native plugin";
    Device& dev = *backend->device(0);
    std::mt19937 rng(7);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    auto random = [&](int64_t n) {
        std::vector<float> v(static_cast<size_t>(n));
        for (float& x : v) x = u(rng);
        return v;
    };
    // 2*m*n*k >= 1e8 floating-point operations: cut when the machine has two CPUs or more.
    for (const Case& c : {Case{false, false, 512, 304, 400, 0.0f}, Case{false, true, 400, 2500, 64, 1.0f},
                          Case{true, false, 160, 2000, 256, 0.5f}, Case{true, true, 600, 300, 300, 0.0f}}) {
        SCOPED_TRACE(std::to_string(c.m) + "x" + std::to_string(c.n) + "x" + std::to_string(c.k));
        ASSERT_GE(2.0 * c.m * c.n * c.k, 1e8);
        // A is [m, k] (ta: stored [k, m]); B is [k, n] (tb: stored [n, k]).
        const std::vector<float> av = random(c.m * c.k), bv = random(c.k * c.n), cv = random(c.m * c.n);
        const Tensor a = upload(dev, c.ta ? Shape{c.k, c.m} : Shape{c.m, c.k}, av);
        const Tensor b = upload(dev, c.tb ? Shape{c.n, c.k} : Shape{c.k, c.n}, bv);
        Tensor whole = upload(dev, {c.m, c.n}, cv);
        ops::gemm(dev, c.ta, c.tb, 1.0f, a, b, c.beta, whole);
        // 16 rows of C at a time: A's rows (ta: A^T's columns, so a copy) times all of B.
        std::vector<float> pieces(cv.size());
        for (int64_t i = 0; i < c.m; i += 16) {
            const int64_t rows = std::min<int64_t>(16, c.m - i);
            std::vector<float> ai(static_cast<size_t>(rows * c.k));
            for (int64_t r = 0; r < rows; ++r)
                for (int64_t j = 0; j < c.k; ++j)
                    ai[static_cast<size_t>(r * c.k + j)] = c.ta ? av[static_cast<size_t>(j * c.m + i + r)]
                                                                : av[static_cast<size_t>((i + r) * c.k + j)];
            const Tensor at = upload(dev, {rows, c.k}, ai);
            Tensor ci = upload(dev, {rows, c.n}, std::vector<float>(cv.begin() + i * c.n, cv.begin() + (i + rows) * c.n));
            ops::gemm(dev, false, c.tb, 1.0f, at, b, c.beta, ci);
            const std::vector<float> got = ci.to_vector();
            std::copy(got.begin(), got.end(), pieces.begin() + i * c.n);
        }
        const std::vector<float> w = whole.to_vector();
        ASSERT_EQ(w.size(), pieces.size());
        size_t differ = 0;
        for (size_t i = 0; i < w.size(); ++i) differ += std::memcmp(&w[i], &pieces[i], sizeof(float)) != 0;
        EXPECT_EQ(differ, 0u) << "of " << w.size() << " elements";
    }
}

}  // namespace
}  // namespace xylem::test
