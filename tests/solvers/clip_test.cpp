// Gradient clipping through Solver::step (by value, by global norm) and weight decay left off
// biases and normalisation parameters (no_decay_bias), over every available backend.
#include <cmath>
#include <cstring>
#include <memory>

#include "support/backends.h"
#include "support/gradcheck.h"
#include "xylem/error.h"
#include "xylem/layers/batchnorm.h"
#include "xylem/layers/conv.h"
#include "xylem/layers/linear.h"
#include "xylem/op_calls.h"
#include "xylem/solvers/solver.h"
#include "xylem/transfer.h"

namespace xylem::test {
namespace {

constexpr double kTol = 1e-6;

class ClipTest : public BackendTest {
protected:
    Param param(const std::vector<float>& p, const std::vector<float>& g) {
        const Shape s{static_cast<int64_t>(p.size())};
        return Param{"p", upload(dev(), s, p), upload(dev(), s, g)};
    }
    void require_sgd_and(std::initializer_list<uint32_t> ops) {
        for (uint32_t op : ops) required_ops().tested.push_back(op);
        for (uint32_t op : {XYLEM_OP_FILL, XYLEM_OP_SGD_UPDATE})
            if (!backend().supports(op)) skip_ = unsupported(op);
        for (uint32_t op : ops)
            if (!backend().supports(op)) skip_ = unsupported(op);
    }
    std::string skip_;
};
XYLEM_INSTANTIATE_OVER_BACKENDS(ClipTest);

#define XYLEM_SKIP_IF_UNSUPPORTED() \
    if (!skip_.empty()) GTEST_SKIP() << skip_

TEST_P(ClipTest, ClipValueClampsEveryGradientBeforeTheUpdate) {
    require_sgd_and({XYLEM_OP_CLAMP});
    XYLEM_SKIP_IF_UNSUPPORTED();
    const std::vector<float> p = {1.0f, 1.0f, 1.0f, 1.0f, 1.0f}, g = {-2.0f, 0.3f, 0.7f, -0.1f, 0.5f};
    Param a = param(p, g);
    Sgd sgd(SgdOptions{1.0f});
    sgd.set_clipping(ClipOptions{0.5f, 0.0f});
    sgd.step(dev(), {&a});
    EXPECT_TRUE(near(a.grad.to_vector(), {-0.5, 0.3, 0.5, -0.1, 0.5}, kTol)) << "clipped gradient";
    EXPECT_TRUE(near(a.value.to_vector(), {1.5, 0.7, 0.5, 1.1, 0.5}, kTol)) << "parameter";
}

// torch.nn.utils.clip_grad_norm_([a, b], 0.5) on these gradients: total_norm 1.9729419656948857
// (tests/solvers/torch_reference.py), each gradient scaled by 0.5 / (total_norm + 1e-6).
TEST_P(ClipTest, ClipNormScalesAllGradientsByTheGlobalNorm) {
    require_sgd_and({XYLEM_OP_SUM_SQUARES, XYLEM_OP_CLIP_BY_NORM});
    XYLEM_SKIP_IF_UNSUPPORTED();
    const std::vector<float> ga = {0.3f, -0.2f, 0.05f, 1.5f, -0.7f}, gb = {-0.1f, 0.4f, 0.2f, -0.9f, 0.0f};
    Param a = param(std::vector<float>(5, 0.0f), ga), b = param(std::vector<float>(5, 0.0f), gb);
    Sgd sgd(SgdOptions{0.1f});
    sgd.set_clipping(ClipOptions{0.0f, 0.5f});
    sgd.step(dev(), {&a, &b});
    const double coef = 0.5 / (1.9729419656948857 + 1e-6);
    std::vector<double> want_a, want_b;
    double clipped = 0.0;
    for (float v : ga) want_a.push_back(-0.1 * coef * v), clipped += coef * v * coef * v;
    for (float v : gb) want_b.push_back(-0.1 * coef * v), clipped += coef * v * coef * v;
    EXPECT_TRUE(near(a.value.to_vector(), want_a, kTol));
    EXPECT_TRUE(near(b.value.to_vector(), want_b, kTol));
    // The gradients themselves are clipped in place, to global norm max_norm.
    double norm = 0.0;
    for (const Param* p : {&a, &b})
        for (float v : p->grad.to_vector()) norm += static_cast<double>(v) * v;
    EXPECT_NEAR(std::sqrt(norm), 0.5, 1e-6);
    EXPECT_NEAR(std::sqrt(clipped), 0.5, 1e-6);
}

// A norm under max_norm leaves every gradient bit for bit (the factor is exactly 1).
TEST_P(ClipTest, ClipNormUnderTheLimitChangesNothing) {
    require_sgd_and({XYLEM_OP_SUM_SQUARES, XYLEM_OP_CLIP_BY_NORM});
    XYLEM_SKIP_IF_UNSUPPORTED();
    Rng rng;
    const auto g = rng.uniform(129, -0.01f, 0.01f);
    Param a = param(std::vector<float>(129, 0.0f), g);
    Sgd sgd(SgdOptions{0.1f});
    sgd.set_clipping(ClipOptions{0.0f, 100.0f});
    sgd.step(dev(), {&a});
    const auto got = a.grad.to_vector();
    EXPECT_EQ(std::memcmp(got.data(), g.data(), g.size() * sizeof(float)), 0);
}

// Clipping stays on the device: a step makes no host<->device copy at all, not even an explicit
// read of the norm (counted), and none that strict mode would refuse. The first step puts the
// gradients and the solver state on the device. (On a host-memory backend nothing is ever copied;
// the check bites on a backend with its own memory, such as opencl.)
TEST_P(ClipTest, ClippingMakesNoTransferInsideAStep) {
    require_sgd_and({XYLEM_OP_CLAMP, XYLEM_OP_SUM_SQUARES, XYLEM_OP_CLIP_BY_NORM});
    XYLEM_SKIP_IF_UNSUPPORTED();
    Rng rng;
    const auto g = rng.uniform(4099, -4.0f, 4.0f);
    for (const ClipOptions& clip : {ClipOptions{0.5f, 0.0f}, ClipOptions{0.0f, 1.0f}}) {
        SCOPED_TRACE("clip_value " + std::to_string(clip.value) + " clip_norm " + std::to_string(clip.norm));
        Param a = param(std::vector<float>(4099, 0.0f), g), b = param(std::vector<float>(3, 0.0f), {1.0f, 2.0f, 3.0f});
        Sgd sgd(SgdOptions{0.1f, 0.9f});
        sgd.set_clipping(clip);
        sgd.step(dev(), {&a, &b});
        const auto before = a.value.to_vector();
        const TransferCounts start = transfer_counts();
        {
            StrictTransfers strict;
            EXPECT_NO_THROW(sgd.step(dev(), {&a, &b}));
        }
        EXPECT_EQ((transfer_counts() - start).count(), 0u) << "host<->device copies inside the step";
        // The second step saw already-clipped gradients: with momentum 0.9 it moved by 1.9x the first.
        const auto after = a.value.to_vector();
        std::vector<double> want(before.size());
        for (size_t i = 0; i < before.size(); ++i) want[i] = 2.9 * before[i];
        EXPECT_TRUE(near(after, want, 1e-5));
    }
}

TEST_P(ClipTest, OpsNeededNameTheClippingOps) {
    Sgd sgd(SgdOptions{0.1f});
    auto has = [](const std::vector<uint32_t>& ops, uint32_t op) { return std::find(ops.begin(), ops.end(), op) != ops.end(); };
    EXPECT_FALSE(has(sgd.ops_needed(), XYLEM_OP_CLAMP));
    EXPECT_FALSE(has(sgd.ops_needed(), XYLEM_OP_SUM_SQUARES));
    sgd.set_clipping(ClipOptions{1.0f, 0.0f});
    EXPECT_TRUE(has(sgd.ops_needed(), XYLEM_OP_CLAMP));
    sgd.set_clipping(ClipOptions{0.0f, 1.0f});
    EXPECT_TRUE(has(sgd.ops_needed(), XYLEM_OP_SUM_SQUARES));
    EXPECT_TRUE(has(sgd.ops_needed(), XYLEM_OP_CLIP_BY_NORM));
    EXPECT_FALSE(has(sgd.ops_needed(), XYLEM_OP_CLAMP));
}

TEST(ClipOptionsCheck, BadSettingsAreErrorsNamingTheKey) {
    Sgd sgd(SgdOptions{0.1f});
    auto message = [&](const ClipOptions& c) {
        try {
            sgd.set_clipping(c);
        } catch (const Error& e) {
            return std::string(e.what());
        }
        return std::string("<no error>");
    };
    EXPECT_NE(message({-1.0f, 0.0f}).find("solver.clip_value"), std::string::npos);
    EXPECT_NE(message({0.0f, -1.0f}).find("solver.clip_norm"), std::string::npos);
    EXPECT_NE(message({1.0f, 1.0f}).find("cannot both be set"), std::string::npos);
}

// Every solver, with zero gradients: only weight decay moves a parameter. With no_decay_bias the
// Linear and Conv2d biases and the BatchNorm weight and bias (rank 1) keep their values exactly,
// while the weights (rank 2 and 4) decay; without it everything moves.
TEST_P(ClipTest, NoDecayBiasSparesRankOneParametersForEverySolver) {
    for (uint32_t op : {XYLEM_OP_FILL, XYLEM_OP_SGD_UPDATE, XYLEM_OP_ADAM_UPDATE, XYLEM_OP_ADAMW_UPDATE,
                        XYLEM_OP_RMSPROP_UPDATE})
        XYLEM_REQUIRE_OP(op);
    std::mt19937_64 rng(7);
    Linear lin(3);
    lin.bind(dev(), {4}, rng);
    Conv2d conv(Conv2dOptions{2, 3, 3});
    conv.bind(dev(), {1, 5, 5}, rng);
    BatchNorm bn;
    bn.bind(dev(), {3}, rng);
    std::vector<Param*> params;
    for (Layer* l : std::initializer_list<Layer*>{&lin, &conv, &bn})
        for (Param* p : l->params()) params.push_back(p);
    ASSERT_EQ(params.size(), 6u);
    auto make = [](int kind) -> std::unique_ptr<Solver> {
        switch (kind) {
        case 0: return std::make_unique<Sgd>(SgdOptions{0.1f, 0.9f, 0.0f, 0.1f});
        case 1: return std::make_unique<Adam>(AdamOptions{0.01f, 0.9f, 0.999f, 1e-8f, 0.1f});
        case 2: return std::make_unique<AdamW>(AdamWOptions{0.01f, 0.9f, 0.999f, 1e-8f, 0.1f});
        default: return std::make_unique<Rmsprop>(RmspropOptions{0.01f, 0.99f, 1e-8f, 0.1f, 0.5f, true});
        }
    };
    for (int kind = 0; kind < 4; ++kind)
        for (bool no_decay : {true, false}) {
            auto solver = make(kind);
            SCOPED_TRACE(solver->kind() + (no_decay ? " with" : " without") + " no_decay_bias");
            solver->set_no_decay_bias(no_decay);
            std::vector<std::vector<float>> before;
            for (Param* p : params) {
                ops::fill(dev(), p->value, 0.5f);  // BatchNorm's bias starts at 0, which decay cannot move
                ops::fill(dev(), p->grad, 0.0f);
                before.push_back(p->value.to_vector());
            }
            for (int t = 0; t < 2; ++t) solver->step(dev(), params);
            for (size_t i = 0; i < params.size(); ++i) {
                const bool spared = no_decay && params[i]->value.shape().size() == 1;
                const auto after = params[i]->value.to_vector();
                const bool same = std::memcmp(after.data(), before[i].data(), after.size() * sizeof(float)) == 0;
                EXPECT_EQ(same, spared) << "parameter " << i << " " << to_string(params[i]->value.shape());
            }
        }
}

TEST(SolverCapture, PerStepAttributesBlockCapture) {
    EXPECT_NE(Adam(AdamOptions{}).capture_blocker().find("solver.type = \"adam\""), std::string::npos);
    EXPECT_NE(AdamW(AdamWOptions{}).capture_blocker().find("solver.type = \"adamw\""), std::string::npos);
    EXPECT_EQ(Rmsprop(RmspropOptions{}).capture_blocker(), "");
    Sgd clipped(SgdOptions{0.1f});
    clipped.set_clipping(ClipOptions{0.0f, 1.0f});
    EXPECT_EQ(clipped.capture_blocker(), "");  // the clipping factor is computed on the device
}

}  // namespace
}  // namespace xylem::test
