// Numerical gradient checks for every layer, over every available backend: input and parameter
// gradients from backward() against central differences of J = sum(r * forward(x)).
#include <cmath>
#include <memory>

#include "support/backends.h"
#include "support/gradcheck.h"
#include "support/reference.h"
#include "xylem/layers/elementwise.h"
#include "xylem/layers/linear.h"
#include "xylem/layers/reshape.h"
#include "xylem/op_calls.h"

namespace xylem::test {
namespace {

class LayerGradient : public BackendTest {
protected:
    void check_layer(Layer& layer, Tensor& x) { check_layer_gradients(dev(), layer, x, rng_); }
    Rng rng_;
};
XYLEM_INSTANTIATE_OVER_BACKENDS(LayerGradient);

TEST_P(LayerGradient, LinearEveryFusedActivationWithAndWithoutBias) {
    XYLEM_REQUIRE_OP(XYLEM_OP_LINEAR_FWD);
    XYLEM_REQUIRE_OP(XYLEM_OP_GEMM);
    XYLEM_REQUIRE_OP(XYLEM_OP_BIAS_GRAD);
    XYLEM_REQUIRE_OP(XYLEM_OP_ACT_BWD);
    struct Size {
        int64_t n, in, out;
    };
    for (xylem_activation act : {XYLEM_ACT_NONE, XYLEM_ACT_RELU, XYLEM_ACT_SIGMOID, XYLEM_ACT_TANH})
        for (bool bias : {true, false})
            for (Size s : {Size{3, 4, 5}, Size{1, 7, 2}}) {
                SCOPED_TRACE("activation " + std::to_string(act) + " bias " + std::to_string(bias) + " N " +
                             std::to_string(s.n) + " in " + std::to_string(s.in) + " out " + std::to_string(s.out));
                Linear lin(s.out, bias);
                lin.bind(dev(), {s.in}, rng_.engine());
                if (act != XYLEM_ACT_NONE) {
                    ASSERT_TRUE(lin.fuse_activation(act, backend()));
                }
                ASSERT_EQ(lin.params().size(), bias ? 2u : 1u);
                Tensor x({s.n, s.in}, DType::F32, dev());
                draw_away_from_kink(rng_, x, lin.params()[0]->value, bias ? &lin.params()[1]->value : nullptr, 0.05);
                check_layer(lin, x);
            }
}

TEST_P(LayerGradient, Activations) {
    XYLEM_REQUIRE_OP(XYLEM_OP_ACT_FWD);
    XYLEM_REQUIRE_OP(XYLEM_OP_ACT_BWD);
    for (xylem_activation act : {XYLEM_ACT_RELU, XYLEM_ACT_SIGMOID, XYLEM_ACT_TANH, XYLEM_ACT_RELU6}) {
        SCOPED_TRACE("activation " + std::to_string(act));
        if (act == XYLEM_ACT_RELU6 && backend().api().abi_minor < 8) continue;  // came with ABI 1.8
        Activation layer(act);
        layer.bind(dev(), {2, 5}, rng_.engine());
        // |x| >= 0.1 keeps ReLU's kink out of reach of the +-0.01 steps; for ReLU6 a third of the
        // values are moved past its other kink, to 6.1..8, where the gradient is 0.
        std::vector<float> v = rng_.away_from_zero(30, 0.1f, 2.0f);
        if (act == XYLEM_ACT_RELU6)
            for (size_t i = 0; i < v.size(); i += 3) v[i] = 6.1f + std::fabs(v[i]);
        Tensor x = upload(dev(), {3, 2, 5}, v);
        check_layer(layer, x);
    }
}

TEST_P(LayerGradient, SoftmaxAndLogSoftmax) {
    XYLEM_REQUIRE_OP(XYLEM_OP_SOFTMAX_FWD);
    XYLEM_REQUIRE_OP(XYLEM_OP_SOFTMAX_BWD);
    for (bool log : {false, true})
        for (Shape s : {Shape{4, 7}, Shape{1, 3}, Shape{2, 3, 5}}) {
            SCOPED_TRACE(std::string(log ? "log_softmax" : "softmax") + " input " + to_string(s));
            Softmax layer(log);
            layer.bind(dev(), Shape(s.begin() + 1, s.end()), rng_.engine());
            Tensor x = upload(dev(), s, rng_.uniform(numel(s), -2.0f, 2.0f));
            check_layer(layer, x);
        }
}

TEST_P(LayerGradient, ReshapeAndFlatten) {
    const std::pair<Shape, Shape> cases[] = {{{-1}, {12}}, {{4, 3}, {4, 3}}, {{2, -1}, {2, 6}}};
    for (const auto& [target, per_sample_out] : cases) {
        SCOPED_TRACE("target " + to_string(target));
        Reshape layer(target, target.size() == 1 ? "flatten" : "reshape");
        layer.bind(dev(), {3, 4}, rng_.engine());
        EXPECT_EQ(layer.output_shape({3, 4}), per_sample_out);
        const auto xv = rng_.uniform(24);
        Tensor x = upload(dev(), {2, 3, 4}, xv);
        const Tensor& y = layer.forward(dev(), x, true);
        EXPECT_EQ(y.shape(), batched(2, per_sample_out));
        EXPECT_TRUE(near(y.to_vector(), to_double(xv), 0.0)) << "a reshape must not change values";
        check_layer(layer, x);
    }
}

// Dropout's mask changes on every training forward, so the check runs on one forward: the
// gradient must be dy times the mask that the forward applied (y = x*mask).
TEST_P(LayerGradient, DropoutGradientIsTheMask) {
    XYLEM_REQUIRE_OP(XYLEM_OP_DROPOUT_FWD);
    XYLEM_REQUIRE_OP(XYLEM_OP_MUL);
    const int64_t n = 1000;
    Dropout layer(0.5f, 1234);
    layer.bind(dev(), {n / 4}, rng_.engine());
    const auto xv = rng_.away_from_zero(n, 0.5f, 1.5f);
    Tensor x = upload(dev(), {4, n / 4}, xv);
    const std::vector<float> y1 = layer.forward(dev(), x, true).to_vector();
    std::vector<double> mask(xv.size());
    int64_t dropped = 0;
    for (size_t i = 0; i < xv.size(); ++i) {
        mask[i] = static_cast<double>(y1[i]) / xv[i];
        dropped += mask[i] == 0.0;
        ASSERT_TRUE(std::fabs(mask[i]) < 1e-6 || std::fabs(mask[i] - 2.0) < 1e-6) << "mask " << mask[i] << " at " << i;
    }
    EXPECT_NEAR(static_cast<double>(dropped) / n, 0.5, 0.08);
    const auto dy = rng_.uniform(n);
    const std::vector<float> dx = layer.backward(dev(), upload(dev(), x.shape(), dy), true).to_vector();
    EXPECT_TRUE(near(dx, ref::mul(to_double(dy), mask), 1e-6));
    // The next training forward draws a fresh mask.
    const std::vector<float> y2 = layer.forward(dev(), x, true).to_vector();
    EXPECT_FALSE(near(y2, to_double(y1), 1e-3)) << "two training forwards used the same mask";
    // Evaluation: identity both ways.
    EXPECT_TRUE(near(layer.forward(dev(), x, false).to_vector(), to_double(xv), 0.0));
    EXPECT_TRUE(near(layer.backward(dev(), upload(dev(), x.shape(), dy), true).to_vector(), to_double(dy), 0.0));
}

TEST_P(LayerGradient, DropoutAtZeroIsIdentityInTraining) {
    Dropout layer(0.0f, 1);
    Tensor x = upload(dev(), {3, 5}, rng_.uniform(15));
    check_layer(layer, x);
}

}  // namespace
}  // namespace xylem::test
