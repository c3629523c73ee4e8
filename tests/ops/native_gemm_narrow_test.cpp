// The native plugin computes GEMMs with a narrow C (32 to 64 columns, B not transposed, k >= 100,
// m >= 32: the LSTM's per-step products at batch 50) with its own AVX-512 kernel
// (plugins/native/ops/gemm_narrow.cpp) where it runs at the avx512 level, OpenBLAS elsewhere; and
// the wider ones (more than 64 columns, m >= 16, 16 <= k <= 2048, B transposed or not: a linear
// layer's forward, both of its backward GEMMs, convolutions' GEMMs) with the same kernel in
// panels of 64 columns at the avx512 level.
// Either way: within float rounding of a float64 product for every column count up to the
// masked last vector, both transposes of A (and of B), alpha and beta (beta = 0 never reads C,
// so NaN there is overwritten). The own kernel also gives the same bits when C is computed in
// row blocks (each element's arithmetic depends on its row and column only), which is how the
// plugin spreads it over threads; OpenBLAS promises no such thing (its GEMMs are cut in blocks
// fixed by the shape instead: native_determinism_test.cpp), so that part needs AVX-512.
#include <cmath>
#include <limits>
#include <string>

#include "gemm_row_blocks.h"

namespace xylem::test {
namespace {

// Whether the plugin runs its AVX-512 kernels: its probe says "own kernels avx512" (the CPU has
// AVX-512 and XYLEM_NATIVE_ISA does not cap it).
bool native_runs_avx512() {
    for (const PluginRecord& p : test_registry().plugins())
        if (p.name == "native" && p.available)
            return std::string(p.probe.devices[0].detail).find("own kernels avx512") != std::string::npos;
    return false;
}

struct Case {
    bool ta;
    int64_t m, n, k;
    float alpha, beta;
    bool tb = false;
};

// A is [m, k] (ta: stored [k, m]), B [k, n] (tb: stored [n, k]).
float a_at(const Case& c, const std::vector<float>& a, int64_t i, int64_t p) {
    return a[static_cast<size_t>(c.ta ? p * c.m + i : i * c.k + p)];
}
float b_at(const Case& c, const std::vector<float>& b, int64_t p, int64_t j) {
    return b[static_cast<size_t>(c.tb ? j * c.k + p : p * c.n + j)];
}

void check_cases(std::initializer_list<Case> cases, const char* kernel) {
    auto backend = backend_named("native");
    if (!backend) GTEST_SKIP() << "no native plugin";
    Device& dev = *backend->device(0);
    const bool own_kernel = native_runs_avx512();
    if (!own_kernel)
        std::printf("[ SKIPPED  ] row-block bits: the plugin's own %s kernel needs the avx512 level (this run: "
                    "OpenBLAS); the float64 checks still run\n",
                    kernel);
    std::mt19937 rng(11);
    const float nan = std::numeric_limits<float>::quiet_NaN();
    for (const Case& c : cases) {
        SCOPED_TRACE(std::string(c.ta ? "A^T " : "") + (c.tb ? "B^T " : "") + std::to_string(c.m) + "x" +
                     std::to_string(c.n) + "x" + std::to_string(c.k) + " alpha " + std::to_string(c.alpha) +
                     " beta " + std::to_string(c.beta));
        const std::vector<float> av = random_values(rng, c.m * c.k), bv = random_values(rng, c.k * c.n);
        std::vector<float> cv = random_values(rng, c.m * c.n);
        if (c.beta == 0.0f) cv.assign(cv.size(), nan);  // must not be read
        const Tensor a = upload(dev, c.ta ? Shape{c.k, c.m} : Shape{c.m, c.k}, av);
        const Tensor b = upload(dev, c.tb ? Shape{c.n, c.k} : Shape{c.k, c.n}, bv);
        Tensor whole = upload(dev, {c.m, c.n}, cv);
        ops::gemm(dev, c.ta, c.tb, c.alpha, a, b, c.beta, whole);
        const std::vector<float> got = whole.to_vector();

        double worst = 0.0;
        for (int64_t i = 0; i < c.m; ++i)
            for (int64_t j = 0; j < c.n; ++j) {
                double sum = 0.0, scale = 0.0;
                for (int64_t p = 0; p < c.k; ++p) {
                    const double t = static_cast<double>(a_at(c, av, i, p)) * b_at(c, bv, p, j);
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
        // (A short last block would leave the kernel: the helper's last block is 32 rows ending at m.)
        if (own_kernel) {
            const std::vector<float> blocks =
                gemm_by_row_blocks(dev, c.ta, c.tb, c.m, c.n, c.k, c.alpha, av, b, c.beta, cv, 32);
            EXPECT_EQ(bits_differ(got, blocks), 0u)
                << "of " << got.size() << " elements differ between the whole and 32-row blocks";
        }
    }
}

TEST(NativeGemmNarrow, MatchesFloat64AndRowBlocksGiveTheSameBits) {
    check_cases({Case{false, 512, 50, 128, 1.0f, 1.0f}, Case{true, 128, 50, 512, 1.0f, 1.0f},
                 Case{false, 37, 33, 100, 1.0f, 0.0f}, Case{true, 61, 64, 131, -0.5f, 0.5f},
                 Case{false, 96, 47, 256, 2.0f, 0.0f}, Case{true, 300, 49, 200, 1.0f, 0.0f},
                 Case{false, 45, 32, 117, 1.0f, 1.0f}, Case{true, 33, 47, 100, 1.0f, 1.0f},
                 Case{false, 64, 64, 640, 1.0f, 0.0f}},
                "narrow");
}

// Panels of 64 columns with a partial last one (whole vectors and a tail), B^T's panels packed in
// 8x8 blocks with k and the panel's width no multiple of 8, row counts that leave every tile
// height (6, 4, 2, 1 rows at 64 columns; 8 at 48, 12 at 32, 24 at 16), the GPT's shapes.
TEST(NativeGemmNarrow, WideProductsMatchFloat64AndRowBlocksGiveTheSameBits) {
    check_cases({Case{false, 96, 512, 128, 1.0f, 0.0f, true}, Case{true, 128, 512, 96, 1.0f, 1.0f},
                 Case{false, 103, 114, 128, 1.0f, 0.0f, true}, Case{false, 71, 130, 37, -0.5f, 0.5f},
                 Case{true, 47, 201, 19, 2.0f, 0.0f, true}, Case{false, 59, 65, 300, 1.0f, 1.0f, true},
                 Case{true, 40, 80, 64, 1.0f, 0.0f}, Case{false, 16, 176, 2048, 1.0f, 0.0f},
                 Case{false, 23, 97, 33, 1.0f, 1.0f, true}},
                "wide");
}

}  // namespace
}  // namespace xylem::test
