// RMSprop and AdamW over every available backend against numbers from PyTorch itself
// (torch.optim.RMSprop / torch.optim.AdamW in float64, three steps from the same parameter and
// gradients), printed by tests/solvers/torch_reference.py, which also checks that the float64
// formulas in tests/support/reference.h agree with torch to 1e-16. No python runs here.
#include <algorithm>

#include "support/backends.h"
#include "support/gradcheck.h"
#include "xylem/error.h"
#include "xylem/op_calls.h"
#include "xylem/solvers/solver.h"

namespace xylem::test {
namespace {

constexpr double kTol = 2e-6;  // normalized error of three float32 steps against float64 torch

const std::vector<float> kP0 = {0.5f, -1.0f, 2.0f, 0.1f, -0.25f};
const std::vector<std::vector<float>> kGrads = {
    {0.3f, -0.2f, 0.05f, 1.5f, -0.7f}, {-0.1f, 0.4f, 0.2f, -0.9f, 0.0f}, {0.25f, 0.25f, -0.6f, 0.3f, 0.8f}};

class SolverTorchTest : public BackendTest {
protected:
    // Three steps of `solver` from kP0 with kGrads; returns the parameter.
    std::vector<float> run(Solver& solver) {
        Param p{"w", upload(dev(), {5}, kP0), upload(dev(), {5}, kGrads[0])};
        for (const auto& g : kGrads) {
            set_values(p.grad, g);
            solver.step(dev(), {&p});
        }
        return p.value.to_vector();
    }
    static std::vector<std::string> slot_names(Solver& s, Device& dev, Param& p) {
        std::vector<std::string> names;
        for (const auto& slot : s.state_slots(dev, {&p})) names.push_back(slot.name);
        std::sort(names.begin(), names.end());
        return names;
    }
};
XYLEM_INSTANTIATE_OVER_BACKENDS(SolverTorchTest);

TEST_P(SolverTorchTest, RmspropMatchesTorch) {
    XYLEM_REQUIRE_OP(XYLEM_OP_RMSPROP_UPDATE);
    XYLEM_REQUIRE_HELPER_OP(XYLEM_OP_FILL);
    struct Case {
        RmspropOptions o;
        std::vector<double> torch_param;                 // torch.optim.RMSprop after three steps
        std::vector<std::string> torch_state;            // the keys of torch's optimizer.state[p] (sorted, no "step")
    };
    const Case cases[] = {
        {{0.01f, 0.99f, 1e-8f, 0.0f, 0.0f, false},
         {0.3693846925419909, -1.0385515474740812, 1.8975835666836978, 0.03459302101243255, -0.22558450018698906},
         {"square_avg"}},
        {{0.01f, 0.9f, 1e-8f, 0.1f, 0.0f, false},
         {0.45181560025949524, -1.0027277181803493, 1.9627113162061565, 0.0791264483440899, -0.24160138415411395},
         {"square_avg"}},
        {{0.005f, 0.99f, 1e-8f, 0.0f, 0.9f, false},
         {0.36348709133489004, -0.9740653407622112, 1.819622717235028, 0.005034414950127176, -0.1522922623077785},
         {"momentum_buffer", "square_avg"}},
        {{0.01f, 0.9f, 1e-8f, 0.0f, 0.0f, true},
         {0.4552366840142887, -1.0124975486321806, 1.9640810194809368, 0.07773765909564798, -0.2415759635581174},
         {"grad_avg", "square_avg"}},
        {{0.005f, 0.8f, 1e-6f, 0.01f, 0.5f, true},
         {0.4749539750978422, -1.0001084600019183, 1.9698919538384376, 0.08517966954098649, -0.23731284648523357},
         {"grad_avg", "momentum_buffer", "square_avg"}},
    };
    for (const Case& c : cases) {
        SCOPED_TRACE("lr " + std::to_string(c.o.lr) + " alpha " + std::to_string(c.o.alpha) + " wd " +
                     std::to_string(c.o.weight_decay) + " momentum " + std::to_string(c.o.momentum) + " centered " +
                     std::to_string(c.o.centered));
        Rmsprop solver(c.o);
        EXPECT_TRUE(near(run(solver), c.torch_param, kTol));
        Param p{"w", upload(dev(), {5}, kP0), upload(dev(), {5}, kP0)};
        EXPECT_EQ(slot_names(solver, dev(), p), c.torch_state);
        EXPECT_EQ(solver.steps(), 3u);
    }
}

TEST_P(SolverTorchTest, AdamwMatchesTorch) {
    XYLEM_REQUIRE_OP(XYLEM_OP_ADAMW_UPDATE);
    XYLEM_REQUIRE_HELPER_OP(XYLEM_OP_FILL);
    struct Case {
        AdamWOptions o;
        std::vector<double> torch_param;  // torch.optim.AdamW after three steps
    };
    const Case cases[] = {
        {{0.001f, 0.9f, 0.999f, 1e-8f, 0.01f},
         {0.4979457974460467, -0.9998949584116326, 1.9984377973996246, 0.09855155872965518, -0.24846254952392188}},
        {{0.05f, 0.8f, 0.95f, 1e-6f, 0.5f},
         {0.36675892906230473, -0.9302846746759794, 1.7844145466531949, 0.02755276061701204, -0.16485239459074677}},
    };
    for (const Case& c : cases) {
        SCOPED_TRACE("lr " + std::to_string(c.o.lr) + " wd " + std::to_string(c.o.weight_decay));
        AdamW solver(c.o);
        EXPECT_EQ(solver.kind(), "adamw");
        EXPECT_TRUE(near(run(solver), c.torch_param, kTol));
        Param p{"w", upload(dev(), {5}, kP0), upload(dev(), {5}, kP0)};
        EXPECT_EQ(slot_names(solver, dev(), p), (std::vector<std::string>{"exp_avg", "exp_avg_sq"}));
    }
}

// AdamW is not Adam with L2 decay: with the same weight decay the two differ (the decay is not
// divided by sqrt(v)), and with none they agree.
TEST_P(SolverTorchTest, AdamwDiffersFromAdamOnlyThroughTheDecay) {
    XYLEM_REQUIRE_OP(XYLEM_OP_ADAMW_UPDATE);
    XYLEM_REQUIRE_OP(XYLEM_OP_ADAM_UPDATE);
    XYLEM_REQUIRE_HELPER_OP(XYLEM_OP_FILL);
    Adam adam(AdamOptions{0.05f, 0.8f, 0.95f, 1e-6f, 0.5f});
    AdamW adamw(AdamWOptions{0.05f, 0.8f, 0.95f, 1e-6f, 0.5f});
    const auto a = run(adam), w = run(adamw);
    EXPECT_FALSE(near(a, to_double(w), 1e-3));
    Adam adam0(AdamOptions{0.05f, 0.8f, 0.95f, 1e-6f, 0.0f});
    AdamW adamw0(AdamWOptions{0.05f, 0.8f, 0.95f, 1e-6f, 0.0f});
    EXPECT_TRUE(near(run(adam0), to_double(run(adamw0)), 1e-6));
}

TEST(SolverOptions, RmspropAndAdamwSettingsAreChecked) {
    EXPECT_THROW(Rmsprop(RmspropOptions{0.0f}), Error);
    EXPECT_THROW(Rmsprop(RmspropOptions{0.01f, 1.0f}), Error);
    EXPECT_THROW(Rmsprop(RmspropOptions{0.01f, -0.1f}), Error);
    EXPECT_THROW(Rmsprop(RmspropOptions{0.01f, 0.99f, 1e-8f, 0.0f, -0.5f}), Error);
    EXPECT_THROW(AdamW(AdamWOptions{0.001f, 1.0f}), Error);
    EXPECT_THROW(AdamW(AdamWOptions{0.001f, 0.9f, 0.999f, 1e-8f, -0.1f}), Error);
    EXPECT_NO_THROW(Rmsprop(RmspropOptions{}));
    EXPECT_NO_THROW(AdamW(AdamWOptions{}));
    EXPECT_EQ(AdamWOptions{}.weight_decay, 0.01f);  // torch.optim.AdamW's default
}

}  // namespace
}  // namespace xylem::test
