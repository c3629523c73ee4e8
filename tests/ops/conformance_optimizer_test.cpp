// Conformance, optimizer family: sgd_update (plain, momentum, dampening, Nesterov, weight decay),
// adam_update, adamw_update and rmsprop_update (plain, momentum, centered, weight decay), each over
// several steps with fresh gradients.
#include <cmath>

#include "ops/conformance.h"
#include "support/backends.h"
#include "support/reference.h"
#include "xylem/error.h"
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

TEST_P(OptimizerConformance, AdamwUpdate) {
    XYLEM_REQUIRE_OP(XYLEM_OP_ADAMW_UPDATE);
    Rng rng;
    struct Case {
        float lr, b1, b2, eps, wd;
        bool fresh;
    };
    const Case cases[] = {
        {1e-3f, 0.9f, 0.999f, 1e-8f, 0.01f, true},  // torch.optim.AdamW's defaults
        {1e-2f, 0.5f, 0.75f, 1e-3f, 0.0f, true},    // no decay: Adam
        {0.1f, 0.0f, 0.9f, 1e-8f, 0.5f, false},     // large lr*wd: the decay term dominates
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
                const xylem_adamw_attrs a{c.lr, c.b1, c.b2, c.eps, c.wd,
                                          static_cast<float>(1.0 - std::pow(c.b1, t)),
                                          static_cast<float>(1.0 - std::pow(c.b2, t))};
                const auto g = rng.uniform(numel(s));
                ops::adamw_update(dev(), tp, tm, tv, upload(dev(), s, g), a);
                ref::adamw_update(want_p, want_m, want_v, to_double(g), a);
                EXPECT_TRUE(near(tp.to_vector(), want_p, tol::kAdam)) << "parameter";
                EXPECT_TRUE(near(tm.to_vector(), want_m, tol::kAdam)) << "first moment";
                EXPECT_TRUE(near(tv.to_vector(), want_v, tol::kAdam)) << "second moment";
            }
        }
}

std::string describe(const xylem_rmsprop_attrs& a) {
    return "lr " + std::to_string(a.lr) + " alpha " + std::to_string(a.alpha) + " eps " + std::to_string(a.eps) +
           " weight_decay " + std::to_string(a.weight_decay) + " momentum " + std::to_string(a.momentum) +
           " centered " + std::to_string(a.centered);
}

TEST_P(OptimizerConformance, RmspropUpdate) {
    XYLEM_REQUIRE_OP(XYLEM_OP_RMSPROP_UPDATE);
    Rng rng;
    struct Case {
        xylem_rmsprop_attrs a;
        bool fresh;  // state starts at zero (the solver's first step) or holds earlier averages
    };
    const Case cases[] = {
        {{0.01f, 0.99f, 1e-8f, 0.0f, 0.0f, 0}, true},    // torch.optim.RMSprop's defaults
        {{0.01f, 0.99f, 1e-8f, 0.0f, 0.0f, 0}, false},
        {{0.01f, 0.9f, 1e-3f, 0.05f, 0.0f, 0}, false},   // weight decay
        {{0.005f, 0.99f, 1e-8f, 0.0f, 0.9f, 0}, true},   // momentum
        {{0.01f, 0.9f, 1e-8f, 0.0f, 0.0f, 1}, true},     // centered
        {{0.005f, 0.8f, 1e-6f, 0.01f, 0.5f, 1}, false},  // everything at once
    };
    for (const Case& c : cases)
        for (const Shape& s : kShapes) {
            SCOPED_TRACE(describe(c.a) + " fresh " + std::to_string(c.fresh) + " shape " + to_string(s));
            const int64_t n = numel(s);
            const auto zeros = std::vector<float>(static_cast<size_t>(n), 0.0f);
            const auto p = rng.uniform(n);
            // Earlier averages keep sq well above ga^2, as a real history does (no cancellation).
            const auto sq = c.fresh ? zeros : rng.uniform(n, 0.5f, 1.0f);
            const auto buf = c.fresh ? zeros : rng.uniform(n, -0.5f, 0.5f);
            const auto ga = c.fresh ? zeros : rng.uniform(n, -0.3f, 0.3f);
            ref::Vec want_p = to_double(p), want_sq = to_double(sq), want_buf = to_double(buf), want_ga = to_double(ga);
            Tensor tp = upload(dev(), s, p), tsq = upload(dev(), s, sq), tbuf = upload(dev(), s, buf),
                   tga = upload(dev(), s, ga);
            for (int step = 1; step <= 3; ++step) {
                SCOPED_TRACE("step " + std::to_string(step));
                const auto g = rng.uniform(n);
                ops::rmsprop_update(dev(), tp, tsq, c.a.momentum > 0 ? &tbuf : nullptr, c.a.centered ? &tga : nullptr,
                                    upload(dev(), s, g), c.a);
                ref::rmsprop_update(want_p, want_sq, want_buf, want_ga, to_double(g), c.a);
                EXPECT_TRUE(near(tp.to_vector(), want_p, tol::kRmsprop)) << "parameter";
                EXPECT_TRUE(near(tsq.to_vector(), want_sq, tol::kRmsprop)) << "square_avg";
                if (c.a.momentum > 0) {
                    EXPECT_TRUE(near(tbuf.to_vector(), want_buf, tol::kRmsprop)) << "momentum_buffer";
                }
                if (c.a.centered) {
                    EXPECT_TRUE(near(tga.to_vector(), want_ga, tol::kRmsprop)) << "grad_avg";
                }
            }
        }
}

// The descriptor carries exactly the buffers the attributes use; a missing one is an error naming it.
TEST_P(OptimizerConformance, RmspropNeedsTheBuffersItsAttributesUse) {
    XYLEM_REQUIRE_OP(XYLEM_OP_RMSPROP_UPDATE);
    Tensor p = upload(dev(), {3}, {1, 2, 3}), sq = upload(dev(), {3}, {0, 0, 0}), g = upload(dev(), {3}, {1, 1, 1});
    const xylem_rmsprop_attrs momentum{0.01f, 0.99f, 1e-8f, 0.0f, 0.9f, 0}, centered{0.01f, 0.99f, 1e-8f, 0.0f, 0.0f, 1};
    EXPECT_THROW(ops::rmsprop_update(dev(), p, sq, nullptr, nullptr, g, momentum), Error);
    EXPECT_THROW(ops::rmsprop_update(dev(), p, sq, nullptr, nullptr, g, centered), Error);
}

}  // namespace
}  // namespace xylem::test
