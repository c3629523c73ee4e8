// The step fusion pass (xylem/fusion.h) on every backend: chains run as one launch with the results
// of the ops run one by one, per-step values are bound at each run, values read later are stored,
// and steps that differ from the recording run as issued.
#include <gtest/gtest.h>

#include <cmath>

#include "../support/backends.h"
#include "xylem/error.h"
#include "xylem/fusion.h"
#include "xylem/op_calls.h"

using namespace xylem;
using xylem::test::backend_named;

namespace {

class Fusion : public ::testing::TestWithParam<std::string> {
protected:
    Device& dev() { return *backend_named(GetParam())->device(0); }
    bool fused_op() { return backend_named(GetParam())->supports(XYLEM_OP_FUSED_ELEMENTWISE); }
};

struct Chain {
    static constexpr int64_t rows = 37, cols = 29;  // not multiples of any tile
    Tensor a, b, row, t1, t2, t3, out;
    std::vector<float> ha, hb, hrow;

    explicit Chain(Device& dev) {
        test::Rng rng;
        ha = rng.uniform(rows * cols), hb = rng.uniform(rows * cols), hrow = rng.uniform(cols);
        a = tensor_from(ha, {rows, cols});
        b = tensor_from(hb, {rows, cols});
        row = tensor_from(hrow, {cols});
        for (Tensor* t : {&t1, &t2, &t3, &out}) *t = Tensor({rows, cols}, DType::F32, dev);
    }
    // out = alpha*tanh(a*b + row) + 2*a: four ops, three intermediates
    void issue(Device& dev, float alpha) {
        ops::mul(dev, a, b, t1);
        ops::add(dev, 1.0f, t1, 1.0f, row, t2);
        ops::act_fwd(dev, XYLEM_ACT_TANH, t2, t3);
        ops::axpby(dev, alpha, t3, 2.0f, a, out);
    }
    float expected(size_t i, float alpha) const {
        const size_t j = i % cols;
        return alpha * std::tanh(ha[i] * hb[i] + hrow[j]) + 2.0f * ha[i];
    }
    void check(float alpha) const {
        const std::vector<float> got = out.to_vector();
        for (size_t i = 0; i < got.size(); ++i) ASSERT_NEAR(got[i], expected(i, alpha), 2e-6) << "element " << i;
    }
};

}  // namespace

TEST_P(Fusion, ChainRunsAsOneLaunchWithItsPerStepValues) {
    Chain c(dev());
    fusion::StepFusion f(dev(), true);
    const float alphas[] = {0.5f, -1.5f, 3.0f, 0.25f};  // a new value every step: never frozen
    for (int step = 0; step < 4; ++step) {
        f.run([&] { c.issue(dev(), alphas[step]); });
        c.check(alphas[step]);
        EXPECT_EQ(f.last_step_ops(), 4u);
    }
    ASSERT_EQ(f.programs().size(), 1u);
    EXPECT_EQ(f.programs()[0].members, "mul, add, act_fwd, axpby");
    EXPECT_EQ(f.programs()[0].ops_replaced, 4u);
    if (fused_op()) {
        EXPECT_EQ(f.last_step_launches(), 1u);
        EXPECT_EQ(f.note(), "");
    } else {  // the members run one by one on the same backend, and the note says so
        EXPECT_EQ(f.last_step_launches(), 4u);
        EXPECT_NE(f.note().find("has no fused_elementwise"), std::string::npos) << f.note();
    }
}

TEST_P(Fusion, AnIntermediateReadAfterTheChainIsStored) {
    Chain c(dev());
    Tensor soft({Chain::rows, Chain::cols}, DType::F32, dev());
    fusion::StepFusion f(dev(), true);
    for (int step = 0; step < 3; ++step)
        f.run([&] {
            c.issue(dev(), 1.0f);
            ops::softmax_fwd(dev(), false, c.t1, soft);  // reads t1 (a*b) after the chain
        });
    c.check(1.0f);
    const std::vector<float> s = soft.to_vector();
    for (int64_t r = 0; r < Chain::rows; ++r) {
        double z = 0;
        for (int64_t j = 0; j < Chain::cols; ++j) z += std::exp(double(c.ha[r * Chain::cols + j]) * c.hb[r * Chain::cols + j]);
        for (int64_t j = 0; j < Chain::cols; ++j) {
            const size_t i = static_cast<size_t>(r * Chain::cols + j);
            ASSERT_NEAR(s[i], std::exp(double(c.ha[i]) * c.hb[i]) / z, 1e-6) << "row " << r;
        }
    }
    if (fused_op()) {
        EXPECT_EQ(f.last_step_launches(), 2u);
    }
}

TEST_P(Fusion, AStepThatDiffersFromTheRecordingRunsAsIssued) {
    Chain c(dev());
    fusion::StepFusion f(dev(), true);
    f.run([&] { c.issue(dev(), 1.0f); });
    f.run([&] { c.issue(dev(), 1.0f); });  // recorded
    f.run([&] {                            // other ops first: the plan no longer applies
        ops::fill(dev(), c.t3, 7.0f);
        c.issue(dev(), 2.0f);
    });
    c.check(2.0f);
    EXPECT_EQ(f.last_step_launches(), 5u);
    EXPECT_NE(f.note().find("other ops than the recorded step"), std::string::npos) << f.note();
    f.run([&] { c.issue(dev(), -1.0f); });  // the recorded step again: fused again
    c.check(-1.0f);
    if (fused_op()) {
        EXPECT_EQ(f.last_step_launches(), 1u);
    }
}

TEST_P(Fusion, AHostReadInsideAChainRunsTheHeldOpsFirst) {
    Chain c(dev());
    fusion::StepFusion f(dev(), true);
    std::vector<float> seen;
    for (int step = 0; step < 3; ++step)
        f.run([&] {
            ops::mul(dev(), c.a, c.b, c.t1);
            ops::add(dev(), 1.0f, c.t1, 1.0f, c.row, c.t2);
            seen = c.t2.to_vector();  // the host waits for the add: it must have run
            ops::act_fwd(dev(), XYLEM_ACT_TANH, c.t2, c.t3);
            ops::axpby(dev(), 1.0f, c.t3, 2.0f, c.a, c.out);
        });
    c.check(1.0f);
    for (size_t i = 0; i < seen.size(); ++i)
        ASSERT_NEAR(seen[i], c.ha[i] * c.hb[i] + c.hrow[i % Chain::cols], 1e-6) << "element " << i;
}

TEST_P(Fusion, OffRunsEveryOpAsIssued) {
    Chain c(dev());
    fusion::StepFusion f(dev(), false);
    for (int step = 0; step < 3; ++step) f.run([&] { c.issue(dev(), 1.0f); });
    c.check(1.0f);
    EXPECT_EQ(f.last_step_launches(), 4u);
    EXPECT_TRUE(f.programs().empty());
}

TEST(FusionSwitch, EnvironmentOverridesTheConfig) {
    ::setenv("XYLEM_FUSION", "0", 1);
    EXPECT_FALSE(fusion::enabled(true));
    ::setenv("XYLEM_FUSION", "1", 1);
    EXPECT_TRUE(fusion::enabled(false));
    ::setenv("XYLEM_FUSION", "off", 1);  // every spelling of a switch (xylem/env.h); anything else is an error
    EXPECT_FALSE(fusion::enabled(true));
    ::setenv("XYLEM_FUSION", "no", 1);
    EXPECT_FALSE(fusion::enabled(true));
    ::setenv("XYLEM_FUSION", "abc", 1);
    EXPECT_THROW(fusion::enabled(true), Error);
    ::unsetenv("XYLEM_FUSION");
    EXPECT_TRUE(fusion::enabled(true));
    EXPECT_FALSE(fusion::enabled(false));
}

INSTANTIATE_TEST_SUITE_P(Backends, Fusion, ::testing::ValuesIn(xylem::test::available_backends()),
                         xylem::test::backend_param_name);
