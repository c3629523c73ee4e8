// lstm and gru trained on opencl and on native from the same seed agree step by step: a 2-level
// model (dropout between the levels, state carried between batches as in char-rnn's truncated
// BPTT) trained for 50 RMSprop steps on a continuous synthetic stream; every step's loss within
// 1e-3 relative and the trained weights within 1e-3 of the largest weight.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>

#include "support/backends.h"
#include "xylem/layers/gru.h"
#include "xylem/layers/loss.h"
#include "xylem/layers/lstm.h"
#include "xylem/layers/net.h"
#include "xylem/op_calls.h"
#include "xylem/solvers/solver.h"

using namespace xylem;

namespace {

constexpr int64_t kBatch = 4, kTime = 8, kFeatures = 3, kHidden = 12, kSteps = 50;

bool opencl_available() {
    const auto names = test::available_backends();
    return std::find(names.begin(), names.end(), "opencl") != names.end();
}

// Batch `step` of kBatch streams read kTime samples at a time: the next batch continues each stream.
void stream_batch(int64_t step, std::vector<float>& x, std::vector<float>& target) {
    x.resize(kBatch * kTime * kFeatures);
    target.resize(kBatch * kTime * kHidden);
    for (int64_t b = 0; b < kBatch; ++b)
        for (int64_t t = 0; t < kTime; ++t) {
            const double tau = static_cast<double>(step * kTime + t);
            for (int64_t f = 0; f < kFeatures; ++f)
                x[(b * kTime + t) * kFeatures + f] = static_cast<float>(std::sin(0.3 * tau * (f + 1) + b));
            for (int64_t h = 0; h < kHidden; ++h)
                target[(b * kTime + t) * kHidden + h] = static_cast<float>(0.5 * std::sin(0.3 * (tau + 1) * (h % 3 + 1) + b + h));
        }
}

struct Trained {
    std::vector<double> losses;
    std::map<std::string, std::vector<float>> weights;
};

Trained train(const std::string& backend, bool lstm) {
    Device& dev = *test::backend_named(backend)->device(0);
    RecurrentOptions o;
    o.hidden = kHidden;
    o.layers = 2;
    o.dropout = 0.2f;
    o.forget_bias = lstm ? 1.0f : 0.0f;
    o.init = 0.08f;
    Net model;
    if (lstm) model.add(std::make_unique<Lstm>(o, 42));
    else model.add(std::make_unique<Gru>(o, 42));
    model.build(dev, {kTime, kFeatures}, 7);
    MseLoss loss;
    RmspropOptions ro;
    ro.lr = 0.01f;
    Rmsprop solver(ro);
    const std::vector<Param*> params = model.params();
    Tensor loss_sum({1}, DType::F32, dev);
    Trained out;
    std::vector<float> xv, yv;
    for (int64_t step = 0; step < kSteps; ++step) {
        stream_batch(step, xv, yv);
        const Tensor x = test::upload(dev, {kBatch, kTime, kFeatures}, xv);
        const Tensor y = test::upload(dev, {kBatch, kTime, kHidden}, yv);
        const Tensor& pred = model.forward(dev, x, true);
        ops::fill(dev, loss_sum, 0.0f);
        loss.forward(dev, pred, y, loss_sum);
        model.backward(dev, loss.backward(dev, pred, y));
        solver.step(dev, params);
        out.losses.push_back(loss_sum.to_vector()[0] / kBatch);
    }
    for (Param* p : params) out.weights[p->name] = p->value.to_vector();
    return out;
}

class RecurrentAgreement : public ::testing::TestWithParam<bool> {};

TEST_P(RecurrentAgreement, OpenclAndNativeAgreeStepByStep) {
    if (!opencl_available()) GTEST_SKIP() << "no OpenCL platform on this machine";
    const bool lstm = GetParam();
    const Trained n = train("native", lstm), c = train("opencl", lstm);
    ASSERT_EQ(n.losses.size(), static_cast<size_t>(kSteps));
    for (int64_t s = 0; s < kSteps; ++s)
        EXPECT_NEAR(c.losses[s], n.losses[s], 1e-3 * std::fabs(n.losses[s])) << "step " << s + 1;
    EXPECT_LT(n.losses.back(), 0.8 * n.losses.front()) << "the model did not learn: the comparison proves little";
    for (const auto& [name, wn] : n.weights) {
        const std::vector<float>& wc = c.weights.at(name);
        ASSERT_EQ(wn.size(), wc.size()) << name;
        double worst = 0, scale = 1e-3;
        for (size_t i = 0; i < wn.size(); ++i) {
            worst = std::max(worst, static_cast<double>(std::fabs(wn[i] - wc[i])));
            scale = std::max(scale, static_cast<double>(std::fabs(wn[i])));
        }
        EXPECT_LE(worst / scale, 1e-3) << "largest difference in " << name;
    }
}

INSTANTIATE_TEST_SUITE_P(Cells, RecurrentAgreement, ::testing::Values(true, false),
                         [](const ::testing::TestParamInfo<bool>& info) { return std::string(info.param ? "lstm" : "gru"); });

}  // namespace
