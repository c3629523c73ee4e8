// Solvers over every available backend: SGD and Adam steps against closed-form results computed
// in double, and SGD/Adam fitting y = 3x + 1 with a one-unit Linear layer and MseLoss.
#include "xylem/solvers/solver.h"

#include <cmath>
#include <memory>

#include "support/backends.h"
#include "support/gradcheck.h"
#include "xylem/error.h"
#include "xylem/layers/linear.h"
#include "xylem/layers/loss.h"
#include "xylem/op_calls.h"

namespace xylem::test {
namespace {

constexpr double kTol = 1e-6;  // normalized error of a few float32 steps

class SolverTest : public BackendTest {
protected:
    // A parameter holding p with gradient g, both on the device.
    Param param(const std::vector<float>& p, const std::vector<float>& g) {
        const Shape s{static_cast<int64_t>(p.size())};
        return Param{"p", upload(dev(), s, p), upload(dev(), s, g)};
    }
    Rng rng_;
};
XYLEM_INSTANTIATE_OVER_BACKENDS(SolverTest);

TEST_P(SolverTest, SgdPlainStep) {
    XYLEM_REQUIRE_OP(XYLEM_OP_SGD_UPDATE);
    XYLEM_REQUIRE_OP(XYLEM_OP_FILL);
    const auto p = rng_.uniform(33), g = rng_.uniform(33);
    Param a = param(p, g);
    Sgd sgd(SgdOptions{0.1f});
    sgd.step(dev(), {&a});
    std::vector<double> want(p.size());
    for (size_t i = 0; i < p.size(); ++i) want[i] = p[i] - 0.1 * g[i];
    EXPECT_TRUE(near(a.value.to_vector(), want, kTol));
}

TEST_P(SolverTest, SgdWeightDecay) {
    XYLEM_REQUIRE_OP(XYLEM_OP_SGD_UPDATE);
    XYLEM_REQUIRE_OP(XYLEM_OP_FILL);
    const auto p = rng_.uniform(7), g = rng_.uniform(7);
    Param a = param(p, g);
    Sgd sgd(SgdOptions{0.1f, 0.0f, 0.0f, 0.05f});
    sgd.step(dev(), {&a});
    std::vector<double> want(p.size());
    for (size_t i = 0; i < p.size(); ++i) want[i] = p[i] - 0.1 * (g[i] + 0.05 * p[i]);
    EXPECT_TRUE(near(a.value.to_vector(), want, kTol));
}

// Constant gradient g, PyTorch's velocity: v_1 = g (undamped), v_t = m*v_{t-1} + (1-d)*g, so
// v_t = m^(t-1) + (1-d) * sum_{k<t-1} m^k (per unit of g); plain momentum moves p by lr*v_t,
// Nesterov by lr*(g + m*v_t).
TEST_P(SolverTest, SgdMomentumAndNesterovClosedForm) {
    XYLEM_REQUIRE_OP(XYLEM_OP_SGD_UPDATE);
    XYLEM_REQUIRE_OP(XYLEM_OP_FILL);
    struct Case {
        float momentum, dampening;
        bool nesterov;
    };
    for (Case c : {Case{0.9f, 0.0f, false}, Case{0.5f, 0.25f, false}, Case{0.9f, 0.0f, true}}) {
        SCOPED_TRACE("momentum " + std::to_string(c.momentum) + " dampening " + std::to_string(c.dampening) +
                     " nesterov " + std::to_string(c.nesterov));
        const auto p = rng_.uniform(129), g = rng_.uniform(129);
        Param a = param(p, g);
        const double lr = 0.05, m = c.momentum, keep = 1.0 - c.dampening;
        Sgd sgd(SgdOptions{0.05f, c.momentum, c.dampening, 0.0f, c.nesterov});
        double moved = 0.0;  // total step per unit of g
        for (int t = 1; t <= 3; ++t) {
            sgd.step(dev(), {&a});
            const double v_t = std::pow(m, t - 1) + keep * (1.0 - std::pow(m, t - 1)) / (1.0 - m);
            moved += c.nesterov ? 1.0 + m * v_t : v_t;
            std::vector<double> want(p.size());
            for (size_t i = 0; i < p.size(); ++i) want[i] = p[i] - lr * moved * g[i];
            EXPECT_TRUE(near(a.value.to_vector(), want, kTol)) << "after step " << t;
        }
    }
}

TEST_P(SolverTest, SgdKeepsOneVelocityPerParameter) {
    XYLEM_REQUIRE_OP(XYLEM_OP_SGD_UPDATE);
    XYLEM_REQUIRE_OP(XYLEM_OP_FILL);
    Param a = param({1.0f}, {1.0f}), b = param({1.0f, 1.0f}, {-2.0f, 0.5f});
    Sgd sgd(SgdOptions{0.1f, 0.5f});
    for (int t = 0; t < 2; ++t) sgd.step(dev(), {&a, &b});
    // Two steps from v = 0: moved = 1 + 1.5 = 2.5 times lr*g for each parameter independently.
    EXPECT_TRUE(near(a.value.to_vector(), {1.0 - 0.25}, kTol));
    EXPECT_TRUE(near(b.value.to_vector(), {1.0 + 0.5, 1.0 - 0.125}, kTol));
}

// Adam in double: m, v from 0, bias corrections 1 - beta^t.
TEST_P(SolverTest, AdamMatchesTheFormulaOverSteps) {
    XYLEM_REQUIRE_OP(XYLEM_OP_ADAM_UPDATE);
    XYLEM_REQUIRE_OP(XYLEM_OP_FILL);
    for (float wd : {0.0f, 0.01f}) {
        SCOPED_TRACE("weight_decay " + std::to_string(wd));
        const AdamOptions o{0.01f, 0.9f, 0.999f, 1e-8f, wd};
        auto p = to_double(rng_.uniform(33));
        Param a = param(to_float(p), std::vector<float>(33, 0.0f));
        Adam adam(o);
        std::vector<double> m(33, 0.0), v(33, 0.0);
        for (int t = 1; t <= 4; ++t) {
            const auto g = rng_.uniform(33);
            set_values(a.grad, g);
            adam.step(dev(), {&a});
            const double bc1 = 1.0 - std::pow(0.9, t), bc2 = 1.0 - std::pow(0.999, t);
            for (size_t i = 0; i < p.size(); ++i) {
                const double gi = g[i] + static_cast<double>(wd) * p[i];
                m[i] = 0.9 * m[i] + 0.1 * gi;
                v[i] = 0.999 * v[i] + 0.001 * gi * gi;
                p[i] -= 0.01 * (m[i] / bc1) / (std::sqrt(v[i] / bc2) + 1e-8);
            }
            EXPECT_TRUE(near(a.value.to_vector(), p, kTol)) << "after step " << t;
        }
    }
}

// The first step moves each parameter by lr*g/(|g| + eps): about lr, whatever g's scale.
TEST_P(SolverTest, AdamFirstStepMovesByAboutLr) {
    XYLEM_REQUIRE_OP(XYLEM_OP_ADAM_UPDATE);
    XYLEM_REQUIRE_OP(XYLEM_OP_FILL);
    const std::vector<float> g = {1e-3f, -0.5f, 20.0f, -3e3f, 1e-4f};
    Param a = param(std::vector<float>(g.size(), 1.0f), g);
    Adam adam(AdamOptions{0.001f});
    adam.step(dev(), {&a});
    const auto p = a.value.to_vector();
    for (size_t i = 0; i < g.size(); ++i) EXPECT_NEAR(1.0 - p[i], std::copysign(0.001, g[i]), 1e-6) << "g = " << g[i];
}

// Fits y = 3x + 1 with one Linear unit and MSE; the minimum is exactly w = 3, b = 1.
void fit_line(Device& dev, Solver& solver, int steps, std::mt19937_64& rng) {
    const int64_t n = 64;
    std::vector<float> xs(n), ys(n);
    for (int64_t i = 0; i < n; ++i) {
        xs[i] = -1.0f + 2.0f * static_cast<float>(i) / (n - 1);
        ys[i] = 3.0f * xs[i] + 1.0f;
    }
    Tensor x = upload(dev, {n, 1}, xs), y = upload(dev, {n, 1}, ys);
    Linear lin(1);
    lin.bind(dev, {1}, rng);
    MseLoss loss;
    for (int s = 0; s < steps; ++s) {
        const Tensor& out = lin.forward(dev, x, true);
        lin.backward(dev, loss.backward(dev, out, y), false);
        solver.step(dev, lin.params());
    }
    Tensor sum = upload(dev, {1}, {0.0f});
    loss.forward(dev, lin.forward(dev, x, false), y, sum);
    EXPECT_LT(sum.to_vector()[0] / n, 1e-6) << "final mean squared error";
    EXPECT_NEAR(lin.params()[0]->value.to_vector()[0], 3.0, 1e-3) << "weight";
    EXPECT_NEAR(lin.params()[1]->value.to_vector()[0], 1.0, 1e-3) << "bias";
}

TEST_P(SolverTest, SgdFitsALine) {
    for (uint32_t op : {XYLEM_OP_FILL, XYLEM_OP_LINEAR_FWD, XYLEM_OP_GEMM, XYLEM_OP_BIAS_GRAD, XYLEM_OP_MSE_FWD,
                        XYLEM_OP_MSE_BWD, XYLEM_OP_SGD_UPDATE})
        XYLEM_REQUIRE_OP(op);
    Sgd plain(SgdOptions{0.3f});
    fit_line(dev(), plain, 300, rng_.engine());
    Sgd momentum(SgdOptions{0.05f, 0.9f});
    fit_line(dev(), momentum, 300, rng_.engine());
}

TEST_P(SolverTest, AdamFitsALine) {
    for (uint32_t op : {XYLEM_OP_FILL, XYLEM_OP_LINEAR_FWD, XYLEM_OP_GEMM, XYLEM_OP_BIAS_GRAD, XYLEM_OP_MSE_FWD,
                        XYLEM_OP_MSE_BWD, XYLEM_OP_ADAM_UPDATE})
        XYLEM_REQUIRE_OP(op);
    Adam adam(AdamOptions{0.05f});
    fit_line(dev(), adam, 1500, rng_.engine());
}

TEST(SolverOptions, InvalidSettingsAreErrors) {
    EXPECT_THROW(Sgd(SgdOptions{0.0f}), Error);
    EXPECT_THROW(Sgd(SgdOptions{0.1f, -0.5f}), Error);
    EXPECT_THROW(Sgd(SgdOptions{0.1f, 0.0f, 0.0f, 0.0f, true}), Error);  // Nesterov needs momentum
    EXPECT_THROW(Sgd(SgdOptions{0.1f, 0.9f, 0.1f, 0.0f, true}), Error);  // and no dampening
    EXPECT_THROW(Adam(AdamOptions{-1.0f}), Error);
    EXPECT_THROW(Adam(AdamOptions{0.1f, 1.0f}), Error);
    EXPECT_NO_THROW(Sgd(SgdOptions{0.1f, 0.9f, 0.0f, 0.0f, true}));
}


// The memory plan counts solver state before any exists: state_tensors_per_param() must say how
// many state_slots() creates, for every solver and option that changes it.
TEST_P(SolverTest, StateTensorsPerParamCountsTheStateSlots) {
    Param p = param({1, 2, 3}, {0.5f, 0.5f, 0.5f});
    std::vector<Param*> ps{&p};
    std::vector<std::unique_ptr<Solver>> solvers;
    solvers.push_back(std::make_unique<Sgd>(SgdOptions{}));
    solvers.push_back(std::make_unique<Sgd>(SgdOptions{0.1f, 0.9f}));
    solvers.push_back(std::make_unique<Adam>(AdamOptions{}));
    solvers.push_back(std::make_unique<AdamW>(AdamWOptions{}));
    for (float momentum : {0.0f, 0.9f})
        for (bool centered : {false, true}) {
            RmspropOptions o;
            o.momentum = momentum;
            o.centered = centered;
            solvers.push_back(std::make_unique<Rmsprop>(o));
        }
    for (auto& s : solvers) EXPECT_EQ(s->state_tensors_per_param(), s->state_slots(dev(), ps).size()) << s->kind();
}

}  // namespace
}  // namespace xylem::test
