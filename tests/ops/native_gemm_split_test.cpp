// The native plugin cuts big GEMMs into row or column blocks of C, one single-threaded sgemm per
// worker (plugins/native/ops/gemm.cpp). K is never cut, so the result must not depend on the cut:
// the same product computed 16 rows at a time (GEMMs too small to be cut) gives the same bits,
// for C taller than wide (cut by rows) and wider than tall (cut by columns), with and without
// transposes and beta.
#include "gemm_row_blocks.h"

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
    // 2*m*n*k >= 1e8 floating-point operations: cut when the machine has two CPUs or more.
    for (const Case& c : {Case{false, false, 512, 304, 400, 0.0f}, Case{false, true, 400, 2500, 64, 1.0f},
                          Case{true, false, 160, 2000, 256, 0.5f}, Case{true, true, 600, 300, 300, 0.0f}}) {
        SCOPED_TRACE(std::to_string(c.m) + "x" + std::to_string(c.n) + "x" + std::to_string(c.k));
        ASSERT_GE(2.0 * c.m * c.n * c.k, 1e8);
        // A is [m, k] (ta: stored [k, m]); B is [k, n] (tb: stored [n, k]).
        const std::vector<float> av = random_values(rng, c.m * c.k), bv = random_values(rng, c.k * c.n),
                                 cv = random_values(rng, c.m * c.n);
        const Tensor a = upload(dev, c.ta ? Shape{c.k, c.m} : Shape{c.m, c.k}, av);
        const Tensor b = upload(dev, c.tb ? Shape{c.n, c.k} : Shape{c.k, c.n}, bv);
        Tensor whole = upload(dev, {c.m, c.n}, cv);
        ops::gemm(dev, c.ta, c.tb, 1.0f, a, b, c.beta, whole);
        // 16 rows of C at a time: GEMMs too small to be cut.
        const std::vector<float> w = whole.to_vector();
        EXPECT_EQ(bits_differ(w, gemm_by_row_blocks(dev, c.ta, c.tb, c.m, c.n, c.k, 1.0f, av, b, c.beta, cv, 16)), 0u)
            << "of " << w.size() << " elements";
    }
}

}  // namespace
}  // namespace xylem::test
