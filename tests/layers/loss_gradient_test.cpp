// Losses over every available backend: forward adds the batch SUM of per-sample losses to the
// scalar, and backward is the gradient of the batch MEAN (checked by central differences).
#include <cmath>

#include "support/backends.h"
#include "support/gradcheck.h"
#include "support/reference.h"
#include "xylem/error.h"
#include "xylem/layers/elementwise.h"
#include "xylem/layers/loss.h"

namespace xylem::test {
namespace {

class LossGradient : public BackendTest {
protected:
    // The batch-mean loss at `out`: what backward() differentiates.
    double mean_loss(Loss& loss, const Tensor& out, const Tensor& target) {
        Tensor sum = upload(dev(), {1}, {0.0f});
        loss.forward(dev(), out, target, sum);
        return static_cast<double>(sum.to_vector()[0]) / static_cast<double>(out.dim(0));
    }
    Rng rng_;
};
XYLEM_INSTANTIATE_OVER_BACKENDS(LossGradient);

const Shape kClassShapes[] = {{5, 7}, {1, 3}, {6, 1}, {3, 10}};

TEST_P(LossGradient, CrossEntropy) {
    XYLEM_REQUIRE_OP(XYLEM_OP_XENT_FWD);
    XYLEM_REQUIRE_OP(XYLEM_OP_XENT_BWD);
    CrossEntropyLoss loss;
    for (const Shape& s : kClassShapes) {
        SCOPED_TRACE("logits " + to_string(s));
        Tensor x = upload(dev(), s, rng_.uniform(numel(s), -2.0f, 2.0f));
        Tensor labels = upload_i32(dev(), {s[0]}, rng_.labels(s[0], s[1]));
        const std::vector<float> analytic = loss.backward(dev(), x, labels).to_vector();
        const auto numeric = numeric_gradient(
            x, [&] { return mean_loss(loss, x, labels); }, kGradEps);
        EXPECT_TRUE(near(analytic, numeric, kGradTol));
    }
}

TEST_P(LossGradient, NllAloneAndAfterLogSoftmax) {
    XYLEM_REQUIRE_OP(XYLEM_OP_NLL_FWD);
    XYLEM_REQUIRE_OP(XYLEM_OP_NLL_BWD);
    XYLEM_REQUIRE_OP(XYLEM_OP_SOFTMAX_FWD);
    XYLEM_REQUIRE_OP(XYLEM_OP_SOFTMAX_BWD);
    NllLoss loss;
    for (const Shape& s : kClassShapes) {
        SCOPED_TRACE("input " + to_string(s));
        Tensor labels = upload_i32(dev(), {s[0]}, rng_.labels(s[0], s[1]));
        // NLL on its own, with respect to the log-probabilities.
        Tensor logp = upload(dev(), s, rng_.uniform(numel(s), -3.0f, 0.0f));
        const std::vector<float> dlogp = loss.backward(dev(), logp, labels).to_vector();
        EXPECT_TRUE(near(dlogp,
                         numeric_gradient(
                             logp, [&] { return mean_loss(loss, logp, labels); }, kGradEps),
                         kGradTol))
            << "nll alone";
        // LogSoftmax then NLL, with respect to the logits.
        Softmax log_softmax(true);
        log_softmax.bind(dev(), {s[1]}, rng_.engine());
        Tensor x = upload(dev(), s, rng_.uniform(numel(s), -2.0f, 2.0f));
        auto objective = [&] { return mean_loss(loss, log_softmax.forward(dev(), x, true), labels); };
        objective();
        const Tensor& lp = log_softmax.forward(dev(), x, true);
        const std::vector<float> dx = log_softmax.backward(dev(), loss.backward(dev(), lp, labels), true).to_vector();
        EXPECT_TRUE(near(dx, numeric_gradient(x, objective, kGradEps), kGradTol)) << "log_softmax + nll";
    }
}

TEST_P(LossGradient, Mse) {
    XYLEM_REQUIRE_OP(XYLEM_OP_MSE_FWD);
    XYLEM_REQUIRE_OP(XYLEM_OP_MSE_BWD);
    MseLoss loss;
    for (const Shape& s : {Shape{4, 3}, Shape{1, 1}, Shape{3, 2, 5}}) {
        SCOPED_TRACE("prediction " + to_string(s));
        Tensor pred = upload(dev(), s, rng_.uniform(numel(s), -2.0f, 2.0f));
        Tensor target = upload(dev(), s, rng_.uniform(numel(s), -2.0f, 2.0f));
        const std::vector<float> analytic = loss.backward(dev(), pred, target).to_vector();
        const auto numeric = numeric_gradient(
            pred, [&] { return mean_loss(loss, pred, target); }, kGradEps);
        EXPECT_TRUE(near(analytic, numeric, kGradTol));
    }
}

// The forward contract: loss_sum += sum over the batch of the per-sample loss (for MSE the
// per-sample loss is the mean over the sample's elements).
TEST_P(LossGradient, ForwardAddsTheBatchSum) {
    XYLEM_REQUIRE_OP(XYLEM_OP_XENT_FWD);
    XYLEM_REQUIRE_OP(XYLEM_OP_NLL_FWD);
    XYLEM_REQUIRE_OP(XYLEM_OP_MSE_FWD);
    const Shape s{6, 4};
    const auto xv = rng_.uniform(24, -3.0f, 0.0f), tv = rng_.uniform(24);
    const auto labels = rng_.labels(6, 4);
    Tensor x = upload(dev(), s, xv), t = upload(dev(), s, tv), l = upload_i32(dev(), {6}, labels);
    const double xent = ref::xent_sum(to_double(xv), 6, 4, labels), nll = ref::nll_sum(to_double(xv), 6, 4, labels);
    const double mse = ref::mse_sum(to_double(xv), to_double(tv)) / 4.0;
    CrossEntropyLoss ce;
    NllLoss nl;
    MseLoss ms;
    Tensor sum = upload(dev(), {1}, {1.5f});
    ce.forward(dev(), x, l, sum);
    EXPECT_TRUE(near(sum.to_vector(), {1.5 + xent}, 1e-6)) << "cross_entropy";
    ce.forward(dev(), x, l, sum);
    EXPECT_TRUE(near(sum.to_vector(), {1.5 + 2 * xent}, 1e-6)) << "cross_entropy, second batch";
    sum = upload(dev(), {1}, {1.5f});
    nl.forward(dev(), x, l, sum);
    EXPECT_TRUE(near(sum.to_vector(), {1.5 + nll}, 1e-6)) << "nll";
    sum = upload(dev(), {1}, {1.5f});
    ms.forward(dev(), x, t, sum);
    EXPECT_TRUE(near(sum.to_vector(), {1.5 + mse}, 1e-6)) << "mse";
}

// NLL(LogSoftmax(x)) and CrossEntropy(x) are the same function.
TEST_P(LossGradient, NllOfLogSoftmaxEqualsCrossEntropy) {
    XYLEM_REQUIRE_OP(XYLEM_OP_XENT_FWD);
    XYLEM_REQUIRE_OP(XYLEM_OP_NLL_FWD);
    XYLEM_REQUIRE_OP(XYLEM_OP_SOFTMAX_FWD);
    Tensor x = upload(dev(), {7, 9}, rng_.uniform(63, -4.0f, 4.0f));
    Tensor labels = upload_i32(dev(), {7}, rng_.labels(7, 9));
    Softmax log_softmax(true);
    CrossEntropyLoss ce;
    NllLoss nll;
    const double a = mean_loss(ce, x, labels), b = mean_loss(nll, log_softmax.forward(dev(), x, true), labels);
    EXPECT_NEAR(a, b, 1e-5 * std::max(1.0, std::fabs(a)));
}

// Sequences [N, T, C] with one label per step [N, T]: each sample's loss is the mean over its T
// steps (a character model's loss per character), so forward adds sum/T of the N*T rows' losses and
// backward is the gradient of their mean.
TEST_P(LossGradient, ClassLossesOverSequences) {
    XYLEM_REQUIRE_OP(XYLEM_OP_XENT_FWD);
    XYLEM_REQUIRE_OP(XYLEM_OP_XENT_BWD);
    XYLEM_REQUIRE_OP(XYLEM_OP_NLL_FWD);
    XYLEM_REQUIRE_OP(XYLEM_OP_NLL_BWD);
    CrossEntropyLoss ce;
    NllLoss nll;
    for (const Shape& s : {Shape{3, 4, 5}, Shape{1, 2, 3}, Shape{2, 1, 6}}) {
        SCOPED_TRACE("outputs " + to_string(s));
        const int64_t rows = s[0] * s[1];
        const auto xv = rng_.uniform(numel(s), -2.0f, 2.0f);
        const auto lv = rng_.labels(rows, s[2]);
        Tensor x = upload(dev(), s, xv), labels = upload_i32(dev(), {s[0], s[1]}, lv);
        for (Loss* loss : {static_cast<Loss*>(&ce), static_cast<Loss*>(&nll)}) {
            SCOPED_TRACE(loss->kind());
            loss->check_output({s[1], s[2]});  // [time, classes] per sample is a class loss's shape
            const double want = (loss == &ce ? ref::xent_sum(to_double(xv), rows, s[2], lv)
                                             : ref::nll_sum(to_double(xv), rows, s[2], lv)) /
                                static_cast<double>(s[1]);
            Tensor sum = upload(dev(), {1}, {0.0f});
            loss->forward(dev(), x, labels, sum);
            EXPECT_TRUE(near(sum.to_vector(), {want}, 1e-6)) << "the batch sum of per-sample means";
            const std::vector<float> analytic = loss->backward(dev(), x, labels).to_vector();
            EXPECT_EQ(loss->backward(dev(), x, labels).shape(), s);
            EXPECT_TRUE(near(analytic, numeric_gradient(x, [&] { return mean_loss(*loss, x, labels); }, kGradEps), kGradTol));
        }
    }
}

TEST_P(LossGradient, SequenceTargetsMustMatchTheOutputs) {
    XYLEM_REQUIRE_OP(XYLEM_OP_XENT_FWD);
    CrossEntropyLoss ce;
    Tensor x = upload(dev(), {2, 3, 4}, rng_.uniform(24));
    Tensor flat = upload_i32(dev(), {6}, rng_.labels(6, 4));
    Tensor sum = upload(dev(), {1}, {0.0f});
    try {
        ce.forward(dev(), x, flat, sum);
        FAIL() << "no error";
    } catch (const Error& e) {
        EXPECT_TRUE(contains(e.what(), "loss cross_entropy: outputs [2, 3, 4] need int32 targets [2, 3] (one class per "
                                       "time step), got int32 [6]")) << e.what();
    }
    EXPECT_THROW(ce.check_output({2, 3, 4}), Error);
    EXPECT_NO_THROW(ce.check_output({3, 4}));
}

TEST(LossFactory, UnknownKindIsAnErrorListingTheKnownOnes) {
    try {
        make_loss("hinge");
        FAIL() << "no error";
    } catch (const Error& e) {
        EXPECT_TRUE(contains(e.what(), "hinge"));
        EXPECT_TRUE(contains(e.what(), "cross_entropy"));
    }
    EXPECT_EQ(make_loss("mse")->kind(), "mse");
}

}  // namespace
}  // namespace xylem::test
