// Conformance, GEMM family: gemm (every transpose, alpha/beta, beta = 0 over garbage), linear_fwd
// (every activation, with and without bias) and bias_grad (2-D and 4-D, beta 0 and 1).
#include <limits>
#include <tuple>

#include "ops/conformance.h"
#include "support/backends.h"
#include "support/reference.h"
#include "xylem/op_calls.h"

namespace xylem::test {
namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

class GemmConformance : public BackendTest {};
XYLEM_INSTANTIATE_OVER_BACKENDS(GemmConformance);

struct Mnk {
    int64_t m, n, k;
};
// Degenerate 1s, odd sizes on every side, one blocked size, and a batch of one with B big
// enough that native cuts its matrix-vector product between threads.
const Mnk kSizes[] = {{1, 1, 1},  {1, 7, 33},   {7, 1, 129},  {33, 129, 7},
                      {129, 33, 65}, {64, 64, 64}, {5, 3, 300}, {1, 1000, 600}};

TEST_P(GemmConformance, EveryTransposeAndScaling) {
    XYLEM_REQUIRE_OP(XYLEM_OP_GEMM);
    Rng rng;
    const std::pair<float, float> scalings[] = {{1.0f, 0.0f}, {0.5f, -1.5f}, {-2.0f, 1.0f}, {0.0f, 0.5f}};
    for (const Mnk& z : kSizes)
        for (bool ta : {false, true})
            for (bool tb : {false, true})
                for (auto [alpha, beta] : scalings) {
                    SCOPED_TRACE("M " + std::to_string(z.m) + " N " + std::to_string(z.n) + " K " +
                                 std::to_string(z.k) + " trans_a " + std::to_string(ta) + " trans_b " +
                                 std::to_string(tb) + " alpha " + std::to_string(alpha) + " beta " +
                                 std::to_string(beta));
                    const Shape sa = ta ? Shape{z.k, z.m} : Shape{z.m, z.k};
                    const Shape sb = tb ? Shape{z.n, z.k} : Shape{z.k, z.n};
                    const auto a = rng.uniform(z.m * z.k), b = rng.uniform(z.k * z.n), c = rng.uniform(z.m * z.n);
                    Tensor tA = upload(dev(), sa, a), tB = upload(dev(), sb, b), tC = upload(dev(), {z.m, z.n}, c);
                    ops::gemm(dev(), ta, tb, alpha, tA, tB, beta, tC);
                    const auto want = ref::gemm(ta, tb, alpha, to_double(a), sa[0], sa[1], to_double(b), sb[0], sb[1],
                                                beta, to_double(c));
                    EXPECT_TRUE(near(tC.to_vector(), want, tol::gemm(z.k)));
                }
}

// beta = 0 must not read C: garbage (NaN) written there on the device must not leak through.
TEST_P(GemmConformance, BetaZeroIgnoresGarbageInC) {
    XYLEM_REQUIRE_OP(XYLEM_OP_GEMM);
    XYLEM_REQUIRE_HELPER_OP(XYLEM_OP_FILL);
    Rng rng;
    for (const Mnk& z : kSizes)
        for (bool ta : {false, true}) {
            SCOPED_TRACE("M " + std::to_string(z.m) + " N " + std::to_string(z.n) + " K " + std::to_string(z.k) +
                         " trans_a " + std::to_string(ta));
            const Shape sa = ta ? Shape{z.k, z.m} : Shape{z.m, z.k};
            const auto a = rng.uniform(z.m * z.k), b = rng.uniform(z.k * z.n);
            Tensor tA = upload(dev(), sa, a), tB = upload(dev(), {z.k, z.n}, b), tC({z.m, z.n}, DType::F32, dev());
            ops::fill(dev(), tC, kNaN);
            ops::gemm(dev(), ta, false, 1.25f, tA, tB, 0.0f, tC);
            const auto want = ref::gemm(ta, false, 1.25, to_double(a), sa[0], sa[1], to_double(b), z.k, z.n, 0.0, {});
            EXPECT_TRUE(near(tC.to_vector(), want, tol::gemm(z.k)));
        }
}

// K = 0: op(A)*op(B) is all zeros, so C = beta*C (and exactly 0 for beta = 0, over garbage).
TEST_P(GemmConformance, EmptyInnerDimensionScalesC) {
    XYLEM_REQUIRE_OP(XYLEM_OP_GEMM);
    XYLEM_REQUIRE_HELPER_OP(XYLEM_OP_FILL);
    Rng rng;
    const auto c = rng.uniform(7 * 5);
    for (float beta : {0.0f, 1.0f, -0.5f}) {
        SCOPED_TRACE("beta " + std::to_string(beta));
        Tensor tA({7, 0}, DType::F32, dev()), tB({0, 5}, DType::F32, dev()), tC({7, 5}, DType::F32, dev());
        if (beta == 0.0f)
            ops::fill(dev(), tC, kNaN);
        else
            tC = upload(dev(), {7, 5}, c);
        ops::gemm(dev(), false, false, 1.0f, tA, tB, beta, tC);
        EXPECT_TRUE(
            near(tC.to_vector(), ref::gemm(false, false, 1.0, {}, 7, 0, {}, 0, 5, beta, to_double(c)), tol::gemm(1)));
    }
}

TEST_P(GemmConformance, LinearForwardEveryActivation) {
    XYLEM_REQUIRE_OP(XYLEM_OP_LINEAR_FWD);
    Rng rng;
    const std::tuple<int64_t, int64_t, int64_t> sizes[] = {
        {1, 1, 1}, {1, 33, 7}, {7, 129, 1}, {33, 7, 129}, {64, 100, 10}};
    for (xylem_activation act : {XYLEM_ACT_NONE, XYLEM_ACT_RELU, XYLEM_ACT_SIGMOID, XYLEM_ACT_TANH, XYLEM_ACT_RELU6})
        for (bool with_bias : {true, false})
            for (auto [n, in, out] : sizes) {
                if (act == XYLEM_ACT_RELU6 && backend().api().abi_minor < 8) continue;  // ABI 1.8
                SCOPED_TRACE("activation " + std::to_string(act) + " bias " + std::to_string(with_bias) + " N " +
                             std::to_string(n) + " in " + std::to_string(in) + " out " + std::to_string(out));
                const auto x = rng.uniform(n * in), w = rng.uniform(out * in), b = rng.uniform(out);
                Tensor tx = upload(dev(), {n, in}, x), tw = upload(dev(), {out, in}, w), tb = upload(dev(), {out}, b);
                Tensor ty({n, out}, DType::F32, dev());
                ops::linear_fwd(dev(), tx, tw, with_bias ? &tb : nullptr, ty, act);
                const auto want =
                    ref::linear_fwd(to_double(x), n, in, to_double(w), out, with_bias ? to_double(b) : ref::Vec{}, act);
                EXPECT_TRUE(near(ty.to_vector(), want, tol::gemm(in + 1)));
            }
}

TEST_P(GemmConformance, BiasGradTwoAndFourDims) {
    XYLEM_REQUIRE_OP(XYLEM_OP_BIAS_GRAD);
    XYLEM_REQUIRE_HELPER_OP(XYLEM_OP_FILL);
    Rng rng;
    const Shape shapes[] = {{1, 7},       {7, 1},        {33, 129},    {129, 1},      {3, 600},
                            {2, 3, 5, 7}, {1, 33, 4, 4}, {3, 1, 7, 1}, {2, 2, 70, 70},
                            {64, 50, 8, 8},  // LeNet's conv2: channels split between threads
                            {3, 5, 67, 67}};  // planes past one 4096-float block, with a tail
    for (const Shape& s : shapes)
        for (float beta : {0.0f, 1.0f, 0.5f}) {
            SCOPED_TRACE("dy " + to_string(s) + " beta " + std::to_string(beta));
            const int64_t c = s[1];
            const auto dy = rng.uniform(numel(s));
            const auto old = rng.uniform(c);
            Tensor tdy = upload(dev(), s, dy), db({c}, DType::F32, dev());
            if (beta == 0.0f)
                ops::fill(dev(), db, kNaN);  // beta = 0 must not read db
            else
                db = upload(dev(), {c}, old);
            ops::bias_grad(dev(), tdy, db, beta);
            const auto want = ref::bias_grad(to_double(dy), s, beta, to_double(old));
            EXPECT_TRUE(near(db.to_vector(), want, tol::reduction(numel(s) / c)));
        }
}

}  // namespace
}  // namespace xylem::test
