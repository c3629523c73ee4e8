// The native plugin computes GEMMs with a narrow C (32 to 64 columns, B not transposed, k >= 100,
// m >= 32: the LSTM's per-step products at batch 50) with its own AVX-512 kernel
// (plugins/native/ops/gemm_narrow.cpp) where the CPU has it, OpenBLAS elsewhere. Either way:
// within float rounding of a float64 product for every column count up to the masked last
// vector, both transposes of A, alpha and beta (beta = 0 never reads C, so NaN there is
// overwritten); and the same bits when C is computed in row blocks, which is how the plugin
// spreads a GEMM over threads.
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "support/backends.h"
#include "xylem/op_calls.h"

namespace xylem::test {
namespace {

struct Case {
    bool ta;
    int64_t m, n, k;
    float alpha, beta;
};

std::vector<float> random_values(std::mt19937& rng, int64_t n) {
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    std::vector<float> v(static_cast<size_t>(n));
    for (float& x : v) x = u(rng);
    return v;
}

// A is [m, k] (ta: stored [k, m]), B [k, n].
float a_at(const Case& c, const std::vector<float>& a, int64_t i, int64_t p) {
    return a[static_cast<size_t>(c.ta ? p * c.m + i : i * c.k + p)];
}

TEST(NativeGemmNarrow, MatchesFloat64AndRowBlocksGiveTheSameBits) {
    auto backend = backend_named("native");
    if (!backend) GTEST_SKIP() << "no native plugin";
    Device& dev = *backend->device(0);
    std::mt19937 rng(11);
    const float nan = std::numeric_limits<float>::quiet_NaN();
    for (const Case& c : {Case{false, 512, 50, 128, 1.0f, 1.0f}, Case{true, 128, 50, 512, 1.0f, 1.0f},
                          Case{false, 37, 33, 100, 1.0f, 0.0f}, Case{true, 61, 64, 131, -0.5f, 0.5f},
                          Case{false, 96, 47, 256, 2.0f, 0.0f}, Case{true, 300, 49, 200, 1.0f, 0.0f},
                          Case{false, 45, 32, 117, 1.0f, 1.0f}, Case{true, 33, 47, 100, 1.0f, 1.0f},
                          Case{false, 64, 64, 640, 1.0f, 0.0f}}) {
        SCOPED_TRACE(std::string(c.ta ? "A^T " : "") + std::to_string(c.m) + "x" + std::to_string(c.n) + "x" +
                     std::to_string(c.k) + " alpha " + std::to_string(c.alpha) + " beta " + std::to_string(c.beta));
        const std::vector<float> av = random_values(rng, c.m * c.k), bv = random_values(rng, c.k * c.n);
        std::vector<float> cv = random_values(rng, c.m * c.n);
        if (c.beta == 0.0f) cv.assign(cv.size(), nan);  // must not be read
        const Tensor a = upload(dev, c.ta ? Shape{c.k, c.m} : Shape{c.m, c.k}, av);
        const Tensor b = upload(dev, {c.k, c.n}, bv);
        Tensor whole = upload(dev, {c.m, c.n}, cv);
        ops::gemm(dev, c.ta, false, c.alpha, a, b, c.beta, whole);
        const std::vector<float> got = whole.to_vector();

        double worst = 0.0;
        for (int64_t i = 0; i < c.m; ++i)
            for (int64_t j = 0; j < c.n; ++j) {
                double sum = 0.0, scale = 0.0;
                for (int64_t p = 0; p < c.k; ++p) {
                    const double t = static_cast<double>(a_at(c, av, i, p)) * bv[static_cast<size_t>(p * c.n + j)];
                    sum += t;
                    scale += std::fabs(t);
                }
                const double old = c.beta == 0.0f ? 0.0 : cv[static_cast<size_t>(i * c.n + j)];
                const double want = c.alpha * sum + c.beta * old;
                const double err = std::fabs(got[static_cast<size_t>(i * c.n + j)] - want) /
                                   (std::fabs(c.alpha) * scale + std::fabs(c.beta * old) + 1e-30);
                ASSERT_TRUE(std::isfinite(got[static_cast<size_t>(i * c.n + j)])) << "C[" << i << "][" << j << "]";
                worst = std::max(worst, err);
            }
        EXPECT_LT(worst, 1e-6) << "largest error relative to the sum of |terms|";

        // Row blocks of 32 (still narrow GEMMs, each too small to be spread over threads): the
        // whole product, cut over however many threads this machine has, must give their bits.
        std::vector<float> pieces(cv.size());
        for (int64_t start = 0; start < c.m; start += 32) {
            const int64_t i = std::min(start, c.m - 32);  // a short last block would leave the kernel: 32 ending at m
            std::vector<float> ai(static_cast<size_t>(32 * c.k));
            for (int64_t r = 0; r < 32; ++r)
                for (int64_t p = 0; p < c.k; ++p) ai[static_cast<size_t>(r * c.k + p)] = a_at(c, av, i + r, p);
            // the block's A in A's own layout (ta: stored [k, 32])
            std::vector<float> block_a(ai.size());
            for (int64_t r = 0; r < 32; ++r)
                for (int64_t p = 0; p < c.k; ++p)
                    block_a[static_cast<size_t>(c.ta ? p * 32 + r : r * c.k + p)] = ai[static_cast<size_t>(r * c.k + p)];
            const Tensor at = upload(dev, c.ta ? Shape{c.k, 32} : Shape{32, c.k}, block_a);
            Tensor ci = upload(dev, {32, c.n}, std::vector<float>(cv.begin() + i * c.n, cv.begin() + (i + 32) * c.n));
            ops::gemm(dev, c.ta, false, c.alpha, at, b, c.beta, ci);
            const std::vector<float> part = ci.to_vector();
            std::copy(part.begin(), part.end(), pieces.begin() + i * c.n);
        }
        size_t differ = 0;
        for (size_t i = 0; i < got.size(); ++i) differ += std::memcmp(&got[i], &pieces[i], sizeof(float)) != 0;
        EXPECT_EQ(differ, 0u) << "of " << got.size() << " elements differ between the whole and 32-row blocks";
    }
}

}  // namespace
}  // namespace xylem::test
