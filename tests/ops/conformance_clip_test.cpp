// Conformance, gradient clipping: clamp (by value), sum_squares (the squared global norm,
// accumulated into a device scalar) and clip_by_norm (scaled by a factor read on the device).
#include <cmath>
#include <cstring>
#include <limits>

#include "ops/conformance.h"
#include "support/backends.h"
#include "support/reference.h"
#include "xylem/error.h"
#include "xylem/op_calls.h"

namespace xylem::test {
namespace {

class ClipConformance : public BackendTest {};
XYLEM_INSTANTIATE_OVER_BACKENDS(ClipConformance);

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

TEST_P(ClipConformance, Clamp) {
    XYLEM_REQUIRE_OP(XYLEM_OP_CLAMP);
    Rng rng;
    const std::pair<float, float> bounds[] = {{-0.5f, 0.5f}, {0.0f, 1.0f}, {-1e30f, 1e30f}, {0.25f, 0.25f}};
    for (const auto& [lo, hi] : bounds)
        for (const Shape& s : elementwise_shapes()) {
            SCOPED_TRACE("bounds [" + std::to_string(lo) + ", " + std::to_string(hi) + "] shape " + to_string(s));
            const auto x = rng.uniform(numel(s), -2.0f, 2.0f);
            Tensor t = upload(dev(), s, x);
            ops::clamp(dev(), t, lo, hi);
            EXPECT_TRUE(near(t.to_vector(), ref::clamp(to_double(x), lo, hi), tol::kCopy));
        }
}

// torch.clamp keeps NaN (a NaN gradient must not be hidden by clipping); infinities are clamped.
TEST_P(ClipConformance, ClampKeepsNaNAndClampsInfinities) {
    XYLEM_REQUIRE_OP(XYLEM_OP_CLAMP);
    const float inf = std::numeric_limits<float>::infinity();
    Tensor t = upload(dev(), {5}, {kNaN, inf, -inf, 0.5f, -3.0f});
    ops::clamp(dev(), t, -1.0f, 1.0f);
    const auto got = t.to_vector();
    EXPECT_TRUE(std::isnan(got[0]));
    EXPECT_EQ(got[1], 1.0f);
    EXPECT_EQ(got[2], -1.0f);
    EXPECT_EQ(got[3], 0.5f);
    EXPECT_EQ(got[4], -1.0f);
}

// Shapes past one work-group / block and past the two-pass reductions' group caps.
std::vector<Shape> sum_shapes() {
    std::vector<Shape> s = elementwise_shapes();
    s.push_back({300, 1000});
    s.push_back({0});
    return s;
}

TEST_P(ClipConformance, SumSquares) {
    XYLEM_REQUIRE_OP(XYLEM_OP_SUM_SQUARES);
    Rng rng;
    for (const Shape& s : sum_shapes()) {
        SCOPED_TRACE("shape " + to_string(s));
        const auto x = rng.uniform(numel(s));
        const Tensor tx = upload(dev(), s, x);
        Tensor acc = upload(dev(), {1}, {kNaN});  // beta = 0 must not read it
        ops::sum_squares(dev(), tx, acc, 0.0f);
        EXPECT_TRUE(near(acc.to_vector(), {ref::sum_squares(to_double(x))}, tol::sum_squares(numel(s))));
        // The same input gives the same bits (no atomics whose order varies).
        Tensor again = upload(dev(), {1}, {0.0f});
        ops::sum_squares(dev(), tx, again, 0.0f);
        const float a = acc.to_vector()[0], b = again.to_vector()[0];
        EXPECT_EQ(std::memcmp(&a, &b, sizeof a), 0) << a << " then " << b;
    }
}

// The global norm: one scalar accumulated over several tensors (beta = 1 after the first), and beta
// scaling an older value.
TEST_P(ClipConformance, SumSquaresAccumulatesAcrossTensors) {
    XYLEM_REQUIRE_OP(XYLEM_OP_SUM_SQUARES);
    Rng rng;
    const Shape shapes[] = {{33, 17}, {17}, {2, 3, 5, 7}, {4099}};
    Tensor acc = upload(dev(), {1}, {kNaN});
    double want = 0.0;
    bool first = true;
    for (const Shape& s : shapes) {
        const auto x = rng.uniform(numel(s), -3.0f, 3.0f);
        ops::sum_squares(dev(), upload(dev(), s, x), acc, first ? 0.0f : 1.0f);
        want = (first ? 0.0 : want) + ref::sum_squares(to_double(x));
        first = false;
    }
    EXPECT_TRUE(near(acc.to_vector(), {want}, tol::sum_squares(4099 + 33 * 17 + 17 + 210)));
    const auto x = rng.uniform(129);
    ops::sum_squares(dev(), upload(dev(), {129}, x), acc, 0.5f);
    EXPECT_TRUE(near(acc.to_vector(), {0.5 * want + ref::sum_squares(to_double(x))}, tol::sum_squares(5000)));
}

TEST_P(ClipConformance, ClipByNorm) {
    XYLEM_REQUIRE_OP(XYLEM_OP_CLIP_BY_NORM);
    Rng rng;
    // Norms far above, near and below max_norm (the last leaves x unchanged).
    const double sumsqs[] = {400.0, 1.0001, 0.25, 0.0};
    for (double sumsq : sumsqs)
        for (const Shape& s : elementwise_shapes()) {
            SCOPED_TRACE("sumsq " + std::to_string(sumsq) + " shape " + to_string(s));
            const auto x = rng.uniform(numel(s));
            Tensor t = upload(dev(), s, x);
            ops::clip_by_norm(dev(), upload(dev(), {1}, {static_cast<float>(sumsq)}), t, 1.0f, 1e-6f);
            EXPECT_TRUE(near(t.to_vector(), ref::clip_by_norm(to_double(x), sumsq, 1.0, 1e-6), tol::kClip));
        }
}

// A non-finite norm is not hidden: NaN gives NaN (torch's clamp(max=1) of a NaN factor).
TEST_P(ClipConformance, ClipByNormPropagatesANaNNorm) {
    XYLEM_REQUIRE_OP(XYLEM_OP_CLIP_BY_NORM);
    Tensor t = upload(dev(), {3}, {1.0f, -2.0f, 0.5f});
    ops::clip_by_norm(dev(), upload(dev(), {1}, {kNaN}), t, 1.0f);
    for (float v : t.to_vector()) EXPECT_TRUE(std::isnan(v)) << v;
}

// The global-norm recipe end to end, on the device: sum_squares over every tensor, then
// clip_by_norm of each by the shared scalar (torch.nn.utils.clip_grad_norm_).
TEST_P(ClipConformance, ClipGradNormRecipe) {
    XYLEM_REQUIRE_OP(XYLEM_OP_SUM_SQUARES);
    XYLEM_REQUIRE_OP(XYLEM_OP_CLIP_BY_NORM);
    Rng rng;
    const Shape shapes[] = {{64, 33}, {64}, {10, 64}, {10}};
    std::vector<std::vector<float>> xs;
    std::vector<Tensor> ts;
    double total = 0.0;
    for (const Shape& s : shapes) {
        xs.push_back(rng.uniform(numel(s)));
        ts.push_back(upload(dev(), s, xs.back()));
        total += ref::sum_squares(to_double(xs.back()));
    }
    Tensor sumsq({1}, DType::F32, dev());
    for (size_t i = 0; i < ts.size(); ++i) ops::sum_squares(dev(), ts[i], sumsq, i == 0 ? 0.0f : 1.0f);
    for (Tensor& t : ts) ops::clip_by_norm(dev(), sumsq, t, 2.0f);
    ASSERT_GT(std::sqrt(total), 2.0) << "test bug: the norm must exceed max_norm";
    double clipped = 0.0;
    for (size_t i = 0; i < ts.size(); ++i) {
        const ref::Vec want = ref::clip_by_norm(to_double(xs[i]), total, 2.0, 1e-6);
        EXPECT_TRUE(near(ts[i].to_vector(), want, tol::sum_squares(2800))) << "tensor " << i;
        clipped += ref::sum_squares(want);
    }
    EXPECT_NEAR(std::sqrt(clipped), 2.0, 1e-5);
}

TEST_P(ClipConformance, BadArgumentsAreErrors) {
    XYLEM_REQUIRE_OP(XYLEM_OP_CLAMP);
    Tensor t = upload(dev(), {2}, {1.0f, 2.0f});
    EXPECT_THROW(ops::clamp(dev(), t, 1.0f, -1.0f), Error);
    Tensor two = upload(dev(), {2}, {0.0f, 0.0f});
    EXPECT_THROW(ops::sum_squares(dev(), t, two, 0.0f), Error);  // the sum is one element
    EXPECT_THROW(ops::clip_by_norm(dev(), two, t, 1.0f), Error);
    EXPECT_THROW(ops::clip_by_norm(dev(), upload(dev(), {1}, {1.0f}), t, 0.0f), Error);
}

}  // namespace
}  // namespace xylem::test
