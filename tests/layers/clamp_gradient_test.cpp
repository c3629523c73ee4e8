// The clamp layer (layers/clamp.cpp): forward values against min(max(x, lo), hi), and the numerical
// gradient check (the gradient passes strictly inside (lo, hi), as torch's hardtanh's), over every
// available backend.
#include <algorithm>
#include <cmath>

#include "support/backends.h"
#include "support/gradcheck.h"
#include "xylem/error.h"
#include "xylem/layers/clamp.h"

namespace xylem::test {
namespace {

class ClampGradient : public BackendTest {
protected:
    Rng rng_;
};
XYLEM_INSTANTIATE_OVER_BACKENDS(ClampGradient);

TEST_P(ClampGradient, ForwardClampsAndTheGradientPassesInsideOnly) {
    XYLEM_REQUIRE_OP(XYLEM_OP_FUSED_ELEMENTWISE);
    for (auto [lo, hi] : {std::pair{0.0f, 6.0f}, std::pair{-1.0f, 0.5f}}) {
        SCOPED_TRACE("lo " + std::to_string(lo) + " hi " + std::to_string(hi));
        Clamp layer(lo, hi);
        layer.bind(dev(), {4, 5}, rng_.engine());
        // Values on both sides of each bound, none within 0.05 of one (the +-0.01 steps stay on a side).
        std::vector<float> xv = rng_.uniform(60, lo - 2.0f, hi + 2.0f);
        for (float& v : xv)
            for (float bound : {lo, hi})
                if (std::fabs(v - bound) < 0.05f) v = bound + (v < bound ? -0.05f : 0.05f);
        Tensor x = upload(dev(), {3, 4, 5}, xv);
        std::vector<double> want;
        for (float v : xv) want.push_back(std::min(std::max(v, lo), hi));
        EXPECT_TRUE(near(layer.forward(dev(), x, true).to_vector(), want, 0.0));
        check_layer_gradients(dev(), layer, x, rng_);
    }
}

TEST(ClampLayer, LoAboveHiIsAnError) {
    EXPECT_THROW(Clamp(1.0f, 0.0f), Error);
}

}  // namespace
}  // namespace xylem::test
