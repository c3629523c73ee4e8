// Conformance, optimizer family: sgd_update (plain, momentum, dampening, Nesterov, weight decay)
// and adam_update, each over several steps with fresh gradients.
#include <cmath>

#include "ops/conformance.h"
#include "support/backends.h"
#include "support/reference.h"
#include "xylem/op_calls.h"

namespace xylem::test {
namespace {

class OptimizerConformance : public BackendTest {};
XYLEM_INSTANTIATE_OVER_BACKENDS(OptimizerConformance);

const Shape kShapes[] = {{1}, {7}, {129}, {3, 33}, {2, 4099}};

std::string describe(const xylem_sgd_attrs& a) {
    return "lr " + std::to_string(a.lr) + " momentum " + std::to_string(a.momentum) + " dampening " +
           std::to_string(a.dampening) + " weight_decay " + std::to_string(a.weight_decay) + " nesterov " +
           std::to_string(a.nesterov);
}

TEST_P(OptimizerConformance, SgdUpdate) {
    XYLEM_REQUIRE_OP(XYLEM_OP_SGD_UPDATE);
    Rng rng;
    const xylem_sgd_attrs cases[] = {
        {0.1f, 0.0f, 0.0f, 0.0f, 0},     // plain
        {0.1f, 0.0f, 0.0f, 0.01f, 0},    // weight decay
        {0.05f, 0.9f, 0.0f, 0.0f, 0},    // momentum
        {0.05f, 0.9f, 0.1f, 0.0f, 0},    // momentum with dampening
        {0.05f, 0.9f, 0.0f, 0.0f, 1},    // Nesterov
        {0.05f, 0.9f, 0.0f, 0.001f, 1},  // Nesterov with weight decay
        {0.01f, 0.5f, 0.3f, 0.05f, 0},   // everything at once
    };
    for (const xylem_sgd_attrs& a : cases)
        for (const Shape& s : kShapes) {
            SCOPED_TRACE(describe(a) + " shape " + to_string(s));
            auto p = rng.uniform(numel(s)), v = rng.uniform(numel(s), -0.5f, 0.5f);
            ref::Vec want_p = to_double(p), want_v = to_double(v);
            Tensor tp = upload(dev(), s, p), tv = upload(dev(), s, v);
            for (int step = 1; step <= 3; ++step) {
                SCOPED_TRACE("step " + std::to_string(step));
                const auto g = rng.uniform(numel(s));
                ops::sgd_update(dev(), tp, tv, upload(dev(), s, g), a);
                ref::sgd_update(want_p, want_v, to_double(g), a);
                EXPECT_TRUE(near(tp.to_vector(), want_p, tol::kSgd)) << "parameter";
                // With momentum 0 the velocity is unused, so its contents are unspecified.
                if (a.momentum != 0.0f) {
                    EXPECT_TRUE(near(tv.to_vector(), want_v, tol::kSgd)) << "velocity";
                }
            }
        }
}

TEST_P(OptimizerConformance, AdamUpdate) {
    XYLEM_REQUIRE_OP(XYLEM_OP_ADAM_UPDATE);
    Rng rng;
    struct Case {
        float lr, b1, b2, eps, wd;
        bool fresh;  // m and v start at zero (the solver's first step) or hold earlier moments
    };
    const Case cases[] = {
        {1e-3f, 0.9f, 0.999f, 1e-8f, 0.0f, true},
        {1e-2f, 0.5f, 0.75f, 1e-3f, 0.01f, true},
        {0.1f, 0.0f, 0.9f, 1e-8f, 0.0f, false},
        {1e-3f, 0.9f, 0.999f, 1e-8f, 0.1f, false},
    };
    for (const Case& c : cases)
        for (const Shape& s : kShapes) {
            SCOPED_TRACE("lr " + std::to_string(c.lr) + " betas " + std::to_string(c.b1) + "," + std::to_string(c.b2) +
                         " eps " + std::to_string(c.eps) + " wd " + std::to_string(c.wd) + " fresh " +
                         std::to_string(c.fresh) + " shape " + to_string(s));
            const auto p = rng.uniform(numel(s));
            const auto m = c.fresh ? std::vector<float>(p.size(), 0.0f) : rng.uniform(numel(s), -0.1f, 0.1f);
            const auto v = c.fresh ? std::vector<float>(p.size(), 0.0f) : rng.uniform(numel(s), 0.0f, 0.05f);
            ref::Vec want_p = to_double(p), want_m = to_double(m), want_v = to_double(v);
            Tensor tp = upload(dev(), s, p), tm = upload(dev(), s, m), tv = upload(dev(), s, v);
            for (int t = 1; t <= 3; ++t) {
                SCOPED_TRACE("step " + std::to_string(t));
                const xylem_adam_attrs a{c.lr,
                                         c.b1,
                                         c.b2,
                                         c.eps,
                                         c.wd,
                                         static_cast<float>(1.0 - std::pow(c.b1, t)),
                                         static_cast<float>(1.0 - std::pow(c.b2, t))};
                const auto g = rng.uniform(numel(s));
                ops::adam_update(dev(), tp, tm, tv, upload(dev(), s, g), a);
                ref::adam_update(want_p, want_m, want_v, to_double(g), a);
                EXPECT_TRUE(near(tp.to_vector(), want_p, tol::kAdam)) << "parameter";
                EXPECT_TRUE(near(tm.to_vector(), want_m, tol::kAdam)) << "first moment";
                EXPECT_TRUE(near(tv.to_vector(), want_v, tol::kAdam)) << "second moment";
            }
        }
}

}  // namespace
}  // namespace xylem::test
