// Net as a graph, over every available backend: parameter gradients against central differences
// for fan-out (y = f(x) + g(x)), concat, a residual block with batch norm and tied weights; the
// accumulate rule (a second consumer's gradient is never dropped); activation fusion only for a
// sole reader; the backward hook and grad_ready_nodes with a shared weight; a model built to run
// (no gradients, nothing drawn); and the build-time
// errors that name the layer (unknown input, duplicate name, cycle, unused output, add and mul shapes, a transpose's perm).
#include <algorithm>
#include <cmath>
#include <functional>
#include <memory>

#include "support/backends.h"
#include "support/gradcheck.h"
#include "xylem/error.h"
#include "xylem/layers/batchnorm.h"
#include "xylem/layers/conv.h"
#include "xylem/layers/elementwise.h"
#include "xylem/layers/linear.h"
#include "xylem/layers/merge.h"
#include "xylem/layers/net.h"
#include "xylem/layers/reshape.h"
#include "xylem/layers/slice.h"
#include "xylem/op_calls.h"

namespace xylem::test {
namespace {

class NetGraphTest : public BackendTest {
protected:
    Rng rng_;

    // Plain SGD steps (lr 0.1) on random gradients of every output: parameters and running
    // statistics move.
    void sgd_steps(Net& net, const Tensor& x, int steps) {
        for (int step = 0; step < steps; ++step) {
            net.forward(dev(), x, true);
            std::vector<Tensor> dys;
            for (size_t k = 0; k < net.output_count(); ++k)
                dys.push_back(upload(dev(), net.output(k).shape(), rng_.uniform(net.output(k).numel(), -1.0f, 1.0f)));
            std::vector<const Tensor*> ptrs;
            for (const Tensor& d : dys) ptrs.push_back(&d);
            net.backward(dev(), ptrs);
            for (Param* p : net.params()) {
                std::vector<float> v = p->value.to_vector(), g = p->grad.to_vector();
                for (size_t i = 0; i < v.size(); ++i) v[i] -= 0.1f * g[i];
                set_values(p->value, v);
            }
        }
    }

    // J = sum(r * net(x)) with random r: every parameter's gradient against central differences.
    void check_gradients(Net& net, Tensor& x, double tol = kGradTol, double eps = kGradEps) {
        const Shape out = net.forward(dev(), x, true).shape();
        const std::vector<double> r = to_double(rng_.uniform(numel(out), -1.0f, 1.0f));
        auto objective = [&] { return weighted_sum(net.forward(dev(), x, true), r); };
        objective();
        const Tensor dy = upload(dev(), out, to_float(r));
        net.backward(dev(), dy);
        const std::vector<Param*> ps = net.params();
        std::vector<std::vector<float>> analytic;
        for (Param* p : ps) analytic.push_back(p->grad.to_vector());
        for (size_t i = 0; i < ps.size(); ++i)
            EXPECT_TRUE(near(analytic[i], numeric_gradient(ps[i]->value, objective, eps), tol))
                << "gradient of " << ps[i]->name;
    }

};
XYLEM_INSTANTIATE_OVER_BACKENDS(NetGraphTest);

// Skips the test unless the backend runs every op listed.
#define REQUIRE_OPS(...)                        \
    for (uint32_t op_ : {__VA_ARGS__}) XYLEM_REQUIRE_OP(op_)
#define LINEAR_OPS                                                                                          \
    XYLEM_OP_FILL, XYLEM_OP_LINEAR_FWD, XYLEM_OP_GEMM, XYLEM_OP_BIAS_GRAD, XYLEM_OP_ACT_FWD, XYLEM_OP_ACT_BWD, \
        XYLEM_OP_ADD, XYLEM_OP_COPY, XYLEM_OP_AXPBY

std::unique_ptr<Layer> linear(int64_t out) { return std::make_unique<Linear>(out); }
// The summary's row for the node `name` ("" when it has none).
std::string summary_line(const std::string& summary, const std::string& name) {
    const size_t at = summary.find("  " + name + " ");
    return at == std::string::npos ? std::string() : summary.substr(at, summary.find('\n', at) - at);
}
std::unique_ptr<Layer> act(xylem_activation a) { return std::make_unique<Activation>(a); }
std::unique_ptr<Layer> conv(int64_t out, int32_t kernel, int32_t stride = 1, int32_t padding = 0, bool bias = true) {
    Conv2dOptions o;
    o.out_channels = out;
    o.kernel_h = o.kernel_w = kernel;
    o.stride = stride;
    o.padding = padding;
    o.bias = bias;
    return std::make_unique<Conv2d>(o);
}

// y = f(t) + g(t), t = h(x): h's gradient is the sum of both branches'.
TEST_P(NetGraphTest, FanOutSumsBothBranches) {
    REQUIRE_OPS(LINEAR_OPS);
    Net net;
    net.add("h", {"input"}, linear(5));
    net.add("f", {"h"}, linear(5));
    net.add("g", {"h"}, act(XYLEM_ACT_TANH));
    net.add("y", {"f", "g"}, std::make_unique<Add>());
    net.build(dev(), {4}, 3);
    Tensor x = upload(dev(), {3, 4}, rng_.uniform(12, -1.0f, 1.0f));
    check_gradients(net, x);
}

// A second consumer's gradient must reach the producer: with g's contribution dropped, h's
// gradient would equal what f alone gives. Compared against a net without g.
TEST_P(NetGraphTest, SecondConsumerGradientIsNotDropped) {
    REQUIRE_OPS(LINEAR_OPS);
    auto make = [&](bool both) {
        auto net = std::make_unique<Net>();
        net->add("h", {"input"}, linear(5));
        net->add("f", {"h"}, linear(5));
        if (both) {
            net->add("g", {"h"}, linear(5));
            net->add("y", {"f", "g"}, std::make_unique<Add>());
        }
        net->build(dev(), {4}, 3);
        return net;
    };
    std::unique_ptr<Net> one = make(false), two = make(true);
    Tensor x = upload(dev(), {3, 4}, rng_.uniform(12, -1.0f, 1.0f));
    Tensor dy = upload(dev(), {3, 5}, rng_.uniform(15, -1.0f, 1.0f));
    for (Net* n : {one.get(), two.get()}) {
        n->forward(dev(), x, true);
        n->backward(dev(), dy);
    }
    // h and f start from the same seed in both nets: h's gradient differs exactly by g's share.
    const std::vector<float> alone = one->params()[0]->grad.to_vector(), summed = two->params()[0]->grad.to_vector();
    double diff = 0;
    for (size_t i = 0; i < alone.size(); ++i) diff = std::max(diff, std::abs(static_cast<double>(alone[i] - summed[i])));
    EXPECT_GT(diff, 1e-3) << "h's gradient ignores g";
    Tensor x2 = x;
    check_gradients(*two, x2);
}

// The same tensor read twice by one layer: x + x has gradient 2.
TEST_P(NetGraphTest, OneTensorTwiceInOneLayer) {
    REQUIRE_OPS(LINEAR_OPS);
    Net net;
    net.add("h", {"input"}, linear(3));
    net.add("y", {"h", "h"}, std::make_unique<Add>());
    net.build(dev(), {2}, 5);
    Tensor x = upload(dev(), {4, 2}, rng_.uniform(8, -1.0f, 1.0f));
    check_gradients(net, x);
}

// add with a trailing-shape broadcast: a [T, F] + b [F] per sample.
TEST_P(NetGraphTest, AddBroadcastsATrailingShape) {
    REQUIRE_OPS(LINEAR_OPS, XYLEM_OP_GATHER_ROWS, XYLEM_OP_REDUCE);
    Net net;
    net.add("a", {"input"}, linear(4));                                   // [3, 4]
    net.add("flat", {"input"}, std::make_unique<Reshape>(Shape{-1}, "flatten"));
    net.add("b", {"flat"}, linear(4));                                    // [4]
    net.add("y", {"a", "b"}, std::make_unique<Add>());
    net.build(dev(), {3, 2}, 11);
    EXPECT_EQ(net.output_sample_shape(), (Shape{3, 4}));
    Tensor x = upload(dev(), {5, 3, 2}, rng_.uniform(30, -1.0f, 1.0f));
    check_gradients(net, x);
}

// sub: a - b of one shape and with b a trailing part (its gradient -dy, summed over its copies).
TEST_P(NetGraphTest, SubOfOneShapeAndOfATrailingPart) {
    REQUIRE_OPS(LINEAR_OPS, XYLEM_OP_GATHER_ROWS, XYLEM_OP_REDUCE);
    for (bool spread : {false, true}) {
        SCOPED_TRACE(spread ? "a [3, 4] - b [4]" : "a - b, one shape");
        Net net;
        net.add("a", {"input"}, linear(4));
        if (spread) net.add("flat", {"input"}, std::make_unique<Reshape>(Shape{-1}, "flatten"));
        net.add("b", {spread ? "flat" : "input"}, linear(4));
        net.add("y", {"a", "b"}, std::make_unique<Add>(true));
        net.build(dev(), {3, 2}, 29);
        EXPECT_EQ(net.output_sample_shape(), (Shape{3, 4}));
        Tensor x = upload(dev(), {5, 3, 2}, rng_.uniform(30, -1.0f, 1.0f));
        check_gradients(net, x);
    }
}

// mul of one shape: SiLU's h * sigmoid(h) (h read by two layers) and h * h (one tensor twice in
// one layer: gradient 2h).
TEST_P(NetGraphTest, MulOfOneShape) {
    REQUIRE_OPS(LINEAR_OPS, XYLEM_OP_MUL);
    for (bool square : {false, true}) {
        SCOPED_TRACE(square ? "h * h" : "h * sigmoid(h)");
        Net net;
        net.add("h", {"input"}, linear(5));
        if (square) {
            net.add("y", {"h", "h"}, std::make_unique<Mul>());
        } else {
            net.add("s", {"h"}, act(XYLEM_ACT_SIGMOID));
            net.add("y", {"h", "s"}, std::make_unique<Mul>());
        }
        net.build(dev(), {4}, 13);
        Tensor x = upload(dev(), {3, 4}, rng_.uniform(12, -1.0f, 1.0f));
        check_gradients(net, x);
    }
}

// mul with b spread over a: its trailing part (a [3, 4] * b [4]), and a squeeze-and-excitation
// gate, one value per channel (a [3, 5, 5] * b [3, 1, 1] from a conv over the whole map).
TEST_P(NetGraphTest, MulSpreadsATrailingShapeOrAChannelGate) {
    REQUIRE_OPS(LINEAR_OPS, XYLEM_OP_MUL, XYLEM_OP_GATHER_ROWS, XYLEM_OP_REDUCE);
    {
        Net net;
        net.add("a", {"input"}, linear(4));  // [3, 4]
        net.add("flat", {"input"}, std::make_unique<Reshape>(Shape{-1}, "flatten"));
        net.add("b", {"flat"}, linear(4));  // [4]
        net.add("y", {"a", "b"}, std::make_unique<Mul>());
        net.build(dev(), {3, 2}, 17);
        EXPECT_EQ(net.output_sample_shape(), (Shape{3, 4}));
        Tensor x = upload(dev(), {5, 3, 2}, rng_.uniform(30, -1.0f, 1.0f));
        check_gradients(net, x);
    }
    REQUIRE_OPS(XYLEM_OP_CONV2D_FWD, XYLEM_OP_CONV2D_BWD_DATA, XYLEM_OP_CONV2D_BWD_FILTER);
    Net net;
    net.add("a", {"input"}, conv(3, 3, 1, 1));  // [3, 5, 5]
    net.add("squeeze", {"input"}, conv(3, 5));  // [3, 1, 1]
    net.add("gate", {"squeeze"}, act(XYLEM_ACT_SIGMOID));
    net.add("y", {"a", "gate"}, std::make_unique<Mul>());
    net.build(dev(), {2, 5, 5}, 19);
    EXPECT_EQ(net.output_sample_shape(), (Shape{3, 5, 5}));
    Tensor x = upload(dev(), {2, 2, 5, 5}, rng_.uniform(100, -1.0f, 1.0f));
    check_gradients(net, x);
}

// transpose of each sample's axes (a [2, 3, 4] sample to [4, 2, 3]), between layers with
// parameters: its gradient is the inverse permutation.
TEST_P(NetGraphTest, TransposeReordersEachSamplesAxes) {
    REQUIRE_OPS(LINEAR_OPS, XYLEM_OP_PERMUTE);
    Net net;
    net.add("a", {"input"}, linear(24));
    net.add("grid", {"a"}, std::make_unique<Reshape>(Shape{2, 3, 4}));
    net.add("t", {"grid"}, std::make_unique<Transpose>(Shape{2, 0, 1}));
    net.add("flat", {"t"}, std::make_unique<Reshape>(Shape{-1}, "flatten"));
    net.add("b", {"flat"}, linear(3));
    net.build(dev(), {5}, 23);
    Tensor x = upload(dev(), {3, 5}, rng_.uniform(15, -1.0f, 1.0f));
    check_gradients(net, x);
    // The layer's own output, against numpy.transpose of its input.
    Net alone;
    alone.add("t", {"input"}, std::make_unique<Transpose>(Shape{2, 0, 1}));
    alone.build(dev(), {2, 3, 4}, 1);
    std::vector<float> v(48);
    for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(i);
    Tensor g = upload(dev(), {2, 2, 3, 4}, v);
    const std::vector<float> y = alone.forward(dev(), g, false).to_vector();
    EXPECT_EQ(alone.output_sample_shape(), (Shape{4, 2, 3}));
    for (int n = 0; n < 2; ++n)
        for (int k = 0; k < 4; ++k)
            for (int i = 0; i < 2; ++i)
                for (int j = 0; j < 3; ++j)
                    EXPECT_EQ(y[static_cast<size_t>(((n * 4 + k) * 2 + i) * 3 + j)], v[static_cast<size_t>(((n * 2 + i) * 3 + j) * 4 + k)]);
}

// concat of feature vectors (axis 1) and of images along channels (1) and width (-1).
TEST_P(NetGraphTest, ConcatGradients) {
    REQUIRE_OPS(LINEAR_OPS, XYLEM_OP_GATHER_ROWS, XYLEM_OP_CONV2D_FWD, XYLEM_OP_CONV2D_BWD_DATA, XYLEM_OP_CONV2D_BWD_FILTER);
    {
        Net net;
        net.add("h", {"input"}, linear(5));
        net.add("a", {"h"}, linear(3));
        net.add("b", {"h"}, act(XYLEM_ACT_TANH));
        net.add("cat", {"a", "b"}, std::make_unique<Concat>(1));
        net.add("y", {"cat"}, linear(2));
        net.build(dev(), {4}, 3);
        EXPECT_EQ(net.output_sample_shape(), Shape{2});
        Tensor x = upload(dev(), {3, 4}, rng_.uniform(12, -1.0f, 1.0f));
        check_gradients(net, x);
    }
    for (int64_t axis : {int64_t{1}, int64_t{-1}}) {
        Net net;
        net.add("a", {"input"}, conv(2, 3, 1, 1));
        net.add("b", {"input"}, conv(axis == 1 ? 3 : 2, 1));
        net.add("cat", {"a", "b", "a"}, std::make_unique<Concat>(axis));
        net.add("y", {"cat"}, conv(2, 3));
        net.build(dev(), {1, 5, 4}, 3);
        EXPECT_EQ(net.output_sample_shape(), axis == 1 ? (Shape{2, 3, 2}) : (Shape{2, 3, 10})) << "axis " << axis;
        Tensor x = upload(dev(), {2, 1, 5, 4}, rng_.uniform(40, -1.0f, 1.0f));
        check_gradients(net, x);
    }
}

// concat's values along an inner axis (gradient checks cannot see a consistent misplacement): per
// sample a = [2, 3] and b = its first column [2, 1], along the last axis: each row's 3 values of a,
// then its 1 of b.
TEST_P(NetGraphTest, ConcatAlongAnInnerAxisJoinsEachRow) {
    REQUIRE_OPS(XYLEM_OP_COPY, XYLEM_OP_GATHER_ROWS);
    Net net;
    net.add("a", {"input"}, std::make_unique<Reshape>(Shape{2, 3}));
    net.add("b", {"a"}, std::make_unique<Slice>(SliceOptions{2, 0, 1}));
    net.add("cat", {"a", "b"}, std::make_unique<Concat>(-1));
    net.build(dev(), {6}, 1);
    ASSERT_EQ(net.output_sample_shape(), (Shape{2, 4}));
    const std::vector<float> x = rng_.uniform(12, -1.0f, 1.0f);  // 2 samples of [2, 3]
    const std::vector<float> y = net.forward(dev(), upload(dev(), {2, 6}, x), false).to_vector();
    std::vector<float> want;
    for (size_t row = 0; row < 4; ++row) {  // (sample, row)
        for (size_t k = 0; k < 3; ++k) want.push_back(x[row * 3 + k]);
        want.push_back(x[row * 3]);
    }
    EXPECT_EQ(y, want);
}

// relu(bn(conv(relu(bn(conv(s))))) + s) with s = conv(x) feeding both the block and the shortcut.
TEST_P(NetGraphTest, ResidualBlockWithBatchNorm) {
    REQUIRE_OPS(LINEAR_OPS, XYLEM_OP_CONV2D_FWD, XYLEM_OP_CONV2D_BWD_DATA, XYLEM_OP_CONV2D_BWD_FILTER, XYLEM_OP_BATCHNORM_FWD,
             XYLEM_OP_BATCHNORM_BWD);
    Net net;
    net.add("stem", {"input"}, conv(3, 3, 1, 1));
    net.add("conv1", {"stem"}, conv(3, 3, 1, 1, false));
    net.add("bn1", {"conv1"}, std::make_unique<BatchNorm>());
    net.add("act1", {"bn1"}, act(XYLEM_ACT_TANH));
    net.add("conv2", {"act1"}, conv(3, 3, 1, 1, false));
    net.add("bn2", {"conv2"}, std::make_unique<BatchNorm>());
    net.add("add", {"bn2", "stem"}, std::make_unique<Add>());
    net.add("out", {"add"}, act(XYLEM_ACT_TANH));
    net.build(dev(), {2, 4, 4}, 9);
    Tensor x = upload(dev(), {3, 2, 4, 4}, rng_.uniform(96, -1.0f, 1.0f));
    check_gradients(net, x, 5e-4, 2e-3);  // batch statistics over 48 values per channel: a little more float noise
}

// A ReLU after a batch norm runs inside the batch norm's ops (ABI 1.11) where the backend takes it:
// the same outputs and gradients as the two layers run one after the other (here: the same model
// with the batch norm also a model output, which leaves the ReLU a layer: both checked numerically
// on their own); inference folds the pair into the conv before them.
TEST_P(NetGraphTest, TrainingRunsTheReluInsideTheBatchNorm) {
    REQUIRE_OPS(LINEAR_OPS, XYLEM_OP_CONV2D_FWD, XYLEM_OP_CONV2D_BWD_DATA, XYLEM_OP_CONV2D_BWD_FILTER, XYLEM_OP_BATCHNORM_FWD,
             XYLEM_OP_BATCHNORM_BWD);
    if (!ops::batchnorm_takes_relu(backend(), {4, 5, 5})) GTEST_SKIP() << "backend does not take the batch norm's ReLU";
    auto model = [&](bool bn_is_output) {
        auto net = std::make_unique<Net>();
        net->add("conv1", {"input"}, conv(4, 3, 1, 1, false));
        net->add("bn1", {"conv1"}, std::make_unique<BatchNorm>());
        net->add("relu1", {"bn1"}, act(XYLEM_ACT_RELU));
        net->add("conv2", {"relu1"}, conv(3, 3, 1, 1));
        if (bn_is_output) net->set_outputs({"conv2", "bn1"});
        net->build(dev(), {2, 5, 5}, 13);
        return net;
    };
    auto fused = model(false), plain = model(true);
    EXPECT_TRUE(contains(summary_line(fused->summary(), "relu1"), "(fused into bn1)")) << fused->summary();
    EXPECT_TRUE(contains(summary_line(fused->summary(), "relu1"), "(folded into conv1 for inference)"))
        << fused->summary();
    EXPECT_FALSE(contains(summary_line(plain->summary(), "relu1"), "fused")) << plain->summary();
    Tensor x = upload(dev(), {4, 2, 5, 5}, rng_.uniform(200, -1.0f, 1.0f));
    const std::vector<float> y = fused->forward(dev(), x, true).to_vector();
    EXPECT_TRUE(near(y, to_double(plain->forward(dev(), x, true).to_vector()), 1e-6)) << "forward";
    const Tensor dy = upload(dev(), {4, 3, 5, 5}, rng_.uniform(300, -1.0f, 1.0f));
    fused->backward(dev(), dy);
    plain->backward(dev(), std::vector<const Tensor*>{&dy, nullptr});
    const auto pf = fused->params(), pp = plain->params();
    ASSERT_EQ(pf.size(), pp.size());
    for (size_t i = 0; i < pf.size(); ++i)
        EXPECT_TRUE(near(pf[i]->grad.to_vector(), to_double(pp[i]->grad.to_vector()), 1e-5)) << pf[i]->name;
    // Inference: folded into conv1, and the same as the layers run one by one.
    sgd_steps(*fused, x, 2);
    fused->set_fold_batch_norms(false);
    const std::vector<float> unfolded = fused->forward(dev(), x, false).to_vector();
    fused->set_fold_batch_norms(true);
    EXPECT_TRUE(near(fused->forward(dev(), x, false).to_vector(), to_double(unfolded), 1e-5));
}

// Only activations conv2d_fwd runs as its epilogue are fused or folded (fusable_activation): a
// GELU after conv -> batchnorm stays a layer (folding it made inference fail: conv2d_fwd refuses
// GELU), ReLU6 (ABI 1.8) is fused into a conv and folded with a batch norm; folded and unfolded
// inference agree.
TEST_P(NetGraphTest, OnlyEpilogueActivationsAreFusedOrFolded) {
    REQUIRE_OPS(LINEAR_OPS, XYLEM_OP_CONV2D_FWD, XYLEM_OP_BATCHNORM_FWD);
    if (backend().api().abi_minor < 8) GTEST_SKIP() << "ReLU6 came with ABI 1.8";
    Net net;
    net.add("conv1", {"input"}, conv(4, 3, 1, 1));  // folds bn1, not the GELU
    net.add("bn1", {"conv1"}, std::make_unique<BatchNorm>());
    net.add("gelu", {"bn1"}, act(XYLEM_ACT_GELU));
    net.add("conv2", {"gelu"}, conv(4, 3, 1, 1));  // fuses its ReLU6
    net.add("relu6a", {"conv2"}, act(XYLEM_ACT_RELU6));
    net.add("conv3", {"relu6a"}, conv(4, 3, 1, 1));  // folds bn3 and the ReLU6
    net.add("bn3", {"conv3"}, std::make_unique<BatchNorm>());
    net.add("relu6b", {"bn3"}, act(XYLEM_ACT_RELU6));
    net.build(dev(), {3, 6, 6}, 5);
    const std::string summary = net.summary();
    auto line_of = [&](const std::string& name) { return summary_line(summary, name); };
    EXPECT_TRUE(contains(line_of("bn1"), "(folded into conv1 for inference)")) << summary;
    EXPECT_FALSE(contains(line_of("gelu"), "folded")) << summary;
    EXPECT_FALSE(contains(line_of("gelu"), "fused")) << summary;
    EXPECT_TRUE(contains(line_of("relu6a"), "fused")) << summary;
    EXPECT_TRUE(contains(line_of("relu6b"), "(folded into conv3 for inference)")) << summary;
    // Inputs large enough that some values pass 6.
    Tensor x = upload(dev(), {2, 3, 6, 6}, rng_.uniform(216, -8.0f, 8.0f));
    net.set_fold_batch_norms(false);
    const std::vector<float> unfolded = net.forward(dev(), x, false).to_vector();
    net.set_fold_batch_norms(true);
    EXPECT_TRUE(near(net.forward(dev(), x, false).to_vector(), to_double(unfolded), 1e-5));
}

// Inference folds each batch norm into the convolution it reads (with the activation after it,
// when the batch norm is that activation's one reader): the same outputs as the layers run one by
// one, after training steps have moved the parameters and running statistics; training runs
// unfolded; a conv whose output has another reader, or which fused an activation, is not folded.
TEST_P(NetGraphTest, InferenceFoldsBatchNormIntoTheConvolutionBeforeIt) {
    REQUIRE_OPS(LINEAR_OPS, XYLEM_OP_CONV2D_FWD, XYLEM_OP_CONV2D_BWD_DATA, XYLEM_OP_CONV2D_BWD_FILTER, XYLEM_OP_BATCHNORM_FWD,
             XYLEM_OP_BATCHNORM_BWD);
    Net net;
    net.add("conv1", {"input"}, conv(4, 3, 1, 1));                 // folds bn1 and relu1
    net.add("bn1", {"conv1"}, std::make_unique<BatchNorm>());
    net.add("relu1", {"bn1"}, act(XYLEM_ACT_RELU));
    net.add("conv2", {"relu1"}, conv(4, 3, 2, 1, false));          // folds bn2 only: bn2 has two readers
    net.add("bn2", {"conv2"}, std::make_unique<BatchNorm>());
    net.add("tanh", {"bn2"}, act(XYLEM_ACT_TANH));
    net.add("conv3", {"bn2"}, conv(4, 1));                          // conv3's output is read twice: not folded
    net.add("bn3", {"conv3"}, std::make_unique<BatchNorm>());
    net.add("sum1", {"tanh", "bn3"}, std::make_unique<Add>());
    net.add("sum", {"sum1", "conv3"}, std::make_unique<Add>());
    net.add("conv4", {"sum"}, conv(4, 3, 1, 1));                   // fuses its relu: bn4 reads relu(conv4)
    net.add("relu4", {"conv4"}, act(XYLEM_ACT_RELU));
    net.add("bn4", {"relu4"}, std::make_unique<BatchNorm>());
    net.build(dev(), {3, 6, 6}, 21);
    const std::string summary = net.summary();
    auto line_of = [&](const std::string& name) { return summary_line(summary, name); };
    EXPECT_TRUE(contains(line_of("bn1"), "(folded into conv1 for inference)")) << summary;
    EXPECT_TRUE(contains(line_of("relu1"), "(folded into conv1 for inference)")) << summary;
    EXPECT_TRUE(contains(line_of("bn2"), "(folded into conv2 for inference)")) << summary;
    for (const char* kept : {"tanh", "bn3", "bn4"}) EXPECT_FALSE(contains(line_of(kept), "folded")) << summary;
    Tensor x = upload(dev(), {5, 3, 6, 6}, rng_.uniform(540, -1.0f, 1.0f));
    // Training steps move the weights and the running statistics away from their initial values.
    sgd_steps(net, x, 3);
    net.set_fold_batch_norms(false);
    const std::vector<float> unfolded = net.forward(dev(), x, false).to_vector();
    net.set_fold_batch_norms(true);
    const std::vector<float> folded = net.forward(dev(), x, false).to_vector();
    EXPECT_TRUE(near(folded, to_double(unfolded), 1e-5));
    EXPECT_NE(folded, net.forward(dev(), x, true).to_vector()) << "training used the running statistics";
    // A parameter changed after the last inference pass is folded in at the next one.
    Param* gamma = net.params()[2];  // conv1.weight, conv1.bias, bn1.weight, ...
    ASSERT_EQ(gamma->name, "bn1.weight");
    std::vector<float> g = gamma->value.to_vector();
    for (float& v : g) v *= 1.5f;
    set_values(gamma->value, g);
    net.set_fold_batch_norms(false);
    const std::vector<float> unfolded2 = net.forward(dev(), x, false).to_vector();
    net.set_fold_batch_norms(true);
    EXPECT_TRUE(near(net.forward(dev(), x, false).to_vector(), to_double(unfolded2), 1e-5));
    double moved = 0;
    for (size_t i = 0; i < unfolded.size(); ++i) moved = std::max(moved, std::fabs(double(unfolded[i]) - unfolded2[i]));
    EXPECT_GT(moved, 1e-3) << "the change did not reach the output";
}

// A model built to run (eval, predict, `xylem run`) lends its convolutions and pools buffers that
// outlive only their readers (Net's inference memory plan): the same outputs, bit for bit, as the
// same model built to train (which keeps one buffer per layer), over batches of two sizes and with
// the folds on and off, while holding fewer bytes than the maps it computes; a training-mode
// forward of the model built to run (no loans, unfolded after a folded one) writes none of the
// buffers earlier loans left its layers. The graph has
// residual adds folded into convolutions (one whose shortcut comes later in the order, one whose
// shortcut is the model input), a map read by three layers, a model output that other layers also
// read, a pool, a reshape (a view of the pool's buffer), a linear, a softmax and a mul.
TEST_P(NetGraphTest, ARunOnlyModelReusesItsMapBuffersWithTheSameOutputs) {
    REQUIRE_OPS(LINEAR_OPS, XYLEM_OP_CONV2D_FWD, XYLEM_OP_CONV2D_BWD_DATA, XYLEM_OP_CONV2D_BWD_FILTER, XYLEM_OP_BATCHNORM_FWD,
                XYLEM_OP_BATCHNORM_BWD, XYLEM_OP_POOL2D_FWD, XYLEM_OP_POOL2D_BWD);
    auto make = [&] {
        auto net = std::make_unique<Net>();
        net->add("stem", {"input"}, conv(4, 3, 1, 1));
        net->add("stem_relu", {"stem"}, act(XYLEM_ACT_RELU));
        net->add("conv1", {"stem_relu"}, conv(4, 3, 1, 1, false));
        net->add("bn1", {"conv1"}, std::make_unique<BatchNorm>());
        net->add("relu1", {"bn1"}, act(XYLEM_ACT_RELU));
        net->add("conv2", {"relu1"}, conv(4, 3, 1, 1, false));
        net->add("bn2", {"conv2"}, std::make_unique<BatchNorm>());
        net->add("proj", {"stem_relu"}, conv(4, 1));  // the shortcut, after conv2
        net->add("add1", {"bn2", "proj"}, std::make_unique<Add>());
        net->add("relu2", {"add1"}, act(XYLEM_ACT_RELU));
        net->add("conv3", {"relu2"}, conv(5, 3, 1, 1));
        net->add("conv4", {"relu2"}, conv(5, 3, 1, 1));
        net->add("both", {"conv3", "conv4"}, std::make_unique<Add>());
        net->add("squeeze", {"both"}, conv(4, 1));
        net->add("mid", {"squeeze", "relu2"}, std::make_unique<Add>());  // relu2: three readers
        net->add("conv7", {"mid"}, conv(5, 3, 1, 1));  // two maps of conv4's size while it must live
        net->add("conv8", {"mid"}, conv(5, 3, 1, 1));
        net->add("both2", {"conv7", "conv8"}, std::make_unique<Add>());
        net->add("conv5", {"both2"}, conv(3, 3, 1, 1));
        net->add("in_res", {"conv5", "input"}, std::make_unique<Add>());  // the model input as R
        net->add("pool", {"in_res"}, std::make_unique<Pool2d>(Pool2dOptions{}));
        net->add("conv6", {"pool"}, conv(4, 3, 1, 1));
        net->add("out", {"conv6", "pool"}, std::make_unique<Concat>());
        net->add("flat", {"pool"}, std::make_unique<Reshape>(Shape{48}));  // a view of the pool's buffer
        net->add("fc", {"flat"}, linear(6));
        net->add("probs", {"fc"}, std::make_unique<Softmax>(false));
        net->add("gate", {"probs", "fc"}, std::make_unique<Mul>());
        net->set_outputs({"out", "conv4", "gate"});  // conv4: an output that a layer reads too
        return net;
    };
    std::unique_ptr<Net> trained = make(), run = make();
    trained->build(dev(), {3, 8, 8}, 5);
    run->build(dev(), {3, 8, 8}, 5, /*training=*/false);
    Tensor x = upload(dev(), {4, 3, 8, 8}, rng_.uniform(768, -1.0f, 1.0f));
    sgd_steps(*trained, x, 2);
    // The estimate before building (nothing fused or folded: every node runs), for the memory
    // check of the inference commands, counts at most every output.
    const Net::Footprint before = make()->footprint(Shape{3, 8, 8});
    EXPECT_LE(before.run_outputs_per_sample, before.outputs_per_sample);
    const std::vector<Param*> from = trained->state(), to = run->state();  // the running statistics too
    ASSERT_EQ(from.size(), to.size());
    for (size_t i = 0; i < from.size(); ++i) {
        ASSERT_EQ(from[i]->name, to[i]->name);
        set_values(to[i]->value, from[i]->value.to_vector());
    }
    for (bool fold : {false, true}) {  // folded last: the training-mode forward below runs unfolded
        trained->set_fold_batch_norms(fold);
        run->set_fold_batch_norms(fold);
        for (int64_t batch : {4, 7, 4}) {
            SCOPED_TRACE("fold " + std::to_string(fold) + ", batch " + std::to_string(batch));
            Tensor xb = upload(dev(), {batch, 3, 8, 8}, rng_.uniform(batch * 192, -1.0f, 1.0f));
            trained->forward(dev(), xb, false);
            const std::vector<float> want0 = trained->output(0).to_vector(), want1 = trained->output(1).to_vector(),
                                     want2 = trained->output(2).to_vector();
            run->forward(dev(), xb, false);
            EXPECT_EQ(run->output(0).to_vector(), want0) << "out";
            EXPECT_EQ(run->output(1).to_vector(), want1) << "conv4";
            EXPECT_EQ(run->output(2).to_vector(), want2) << "gate";
        }
    }
    // A training-mode forward of the model built to run takes no loans, and must not write into
    // the buffers earlier loans left its layers (the plan's, shared with other layers).
    trained->forward(dev(), x, true);
    const std::vector<float> want = trained->output(0).to_vector();
    run->forward(dev(), x, true);
    EXPECT_EQ(run->output(0).to_vector(), want) << "training-mode forward";
    run->forward(dev(), x, false);
    // The outputs of the layers that take loans, for a batch of 4 (the last one, folded), per
    // sample: five of [4, 8, 8] (stem, conv1, conv2, proj, squeeze), four of [5, 8, 8] (conv3,
    // conv4, conv7, conv8), conv5's [3, 8, 8], the pool's [3, 4, 4], conv6's [4, 4, 4], the
    // concat's [7, 4, 4] and three of [6] (fc, probs, gate).
    const size_t maps = 4 * sizeof(float) * (5 * 256 + 4 * 320 + 192 + 48 + 64 + 112 + 18);
    EXPECT_EQ(trained->plan_bytes(), 0u);
    EXPECT_GT(run->plan_bytes(), 0u);
    EXPECT_LT(run->plan_bytes(), maps) << "the plan kept a buffer per layer, or the batch of 7's";
    // The estimate of what a forward holds, played on the shapes alone: the plan's buffers as a
    // first forward takes them (the model above still holds the batch of 7's where they served
    // the 4 again), and the one layer that takes no loan, the reshape (a view, which the estimate
    // cannot see before the run: it counts its 48 floats on top). The model built to train holds
    // every output.
    std::unique_ptr<Net> fresh = make();
    fresh->build(dev(), {3, 8, 8}, 5, /*training=*/false);
    fresh->forward(dev(), x, false);
    const Net::Footprint built = fresh->footprint(Shape{3, 8, 8});
    EXPECT_EQ(4 * sizeof(float) * static_cast<size_t>(built.run_outputs_per_sample),
              fresh->plan_bytes() + 4 * sizeof(float) * 48);
    EXPECT_LE(built.run_outputs_per_sample, before.run_outputs_per_sample);
    const Net::Footprint training = trained->footprint(Shape{3, 8, 8});
    EXPECT_EQ(training.run_outputs_per_sample, training.outputs_per_sample);
}

// Inference folds a residual add into the convolution that feeds it (conv [-> batchnorm] -> add
// [-> activation] as one conv2d_fwd with the add's other input as R, ABI 1.10): conv2 -> bn2 runs
// at the add's turn, after its shortcut `proj` (later in the order); a conv with neither bias nor
// batch norm gets zeros for a bias; the add whose other input is a model input folds too; an add
// whose conv side has another reader, a sub, and an add of two non-conv tensors do not. The same
// outputs as the layers one by one, before and after training steps; training runs unfolded.
TEST_P(NetGraphTest, InferenceFoldsAResidualAddIntoTheConvolution) {
    REQUIRE_OPS(LINEAR_OPS, XYLEM_OP_CONV2D_FWD, XYLEM_OP_CONV2D_BWD_DATA, XYLEM_OP_CONV2D_BWD_FILTER, XYLEM_OP_BATCHNORM_FWD,
                XYLEM_OP_BATCHNORM_BWD, XYLEM_OP_ADD);
    Net net;
    net.add("stem", {"input"}, conv(4, 3, 1, 1));
    net.add("stem_relu", {"stem"}, act(XYLEM_ACT_RELU));             // fused into stem
    net.add("conv1", {"stem_relu"}, conv(4, 3, 1, 1, false));
    net.add("bn1", {"conv1"}, std::make_unique<BatchNorm>());
    net.add("relu1", {"bn1"}, act(XYLEM_ACT_RELU));                  // folded into conv1
    net.add("conv2", {"relu1"}, conv(4, 3, 1, 1, false));
    net.add("bn2", {"conv2"}, std::make_unique<BatchNorm>());
    net.add("proj", {"stem_relu"}, conv(4, 1));                      // the shortcut, after conv2
    net.add("add1", {"bn2", "proj"}, std::make_unique<Add>());       // conv2's residual: proj
    net.add("relu2", {"add1"}, act(XYLEM_ACT_RELU));                 // folded into conv2 with add1
    net.add("conv3", {"relu2"}, conv(4, 3, 1, 1, false));            // no bias, no batch norm
    net.add("add2", {"relu2", "conv3"}, std::make_unique<Add>());    // conv3's residual: relu2
    net.add("conv4", {"add2"}, conv(4, 3, 1, 1));
    net.add("tanh4", {"conv4"}, act(XYLEM_ACT_TANH));                // fused: conv4 has an activation
    net.add("add3", {"tanh4", "add2"}, std::make_unique<Add>());     // not folded
    net.add("conv5", {"add3"}, conv(4, 3, 1, 1));
    net.add("sub", {"conv5", "add3"}, std::make_unique<Add>(true));  // a sub: not folded
    net.add("conv6", {"sub"}, conv(4, 3, 1, 1));
    net.add("twice", {"conv6", "conv6"}, std::make_unique<Add>());   // conv6 read twice: not folded
    net.build(dev(), {3, 6, 6}, 23);
    const std::string summary = net.summary();
    auto line_of = [&](const std::string& name) { return summary_line(summary, name); };
    if (backend().api().abi_minor >= 10) {
        EXPECT_TRUE(contains(line_of("bn2"), "(folded into conv2 for inference)")) << summary;
        EXPECT_TRUE(contains(line_of("add1"), "(conv2's residual input for inference)")) << summary;
        EXPECT_TRUE(contains(line_of("relu2"), "(folded into conv2 for inference)")) << summary;
        EXPECT_TRUE(contains(line_of("add2"), "(conv3's residual input for inference)")) << summary;
    }
    for (const char* kept : {"add3", "sub", "twice"}) EXPECT_FALSE(contains(line_of(kept), "residual")) << summary;
    Tensor x = upload(dev(), {5, 3, 6, 6}, rng_.uniform(540, -1.0f, 1.0f));
    auto compare = [&] {
        net.set_fold_batch_norms(false);
        const std::vector<float> unfolded = net.forward(dev(), x, false).to_vector();
        net.set_fold_batch_norms(true);
        const std::vector<float> folded = net.forward(dev(), x, false).to_vector();
        EXPECT_TRUE(near(folded, to_double(unfolded), 1e-5));
        return folded;
    };
    const std::vector<float> before = compare();
    sgd_steps(net, x, 2);
    EXPECT_NE(compare(), before) << "the training steps did not reach the folded pass";
}

// A residual whose other input is the model input itself, and a conv whose output is the add's
// second input: y = relu(x + conv(x)) folds with R = x.
TEST_P(NetGraphTest, AResidualFromTheModelInputFolds) {
    REQUIRE_OPS(XYLEM_OP_FILL, XYLEM_OP_CONV2D_FWD, XYLEM_OP_ADD, XYLEM_OP_ACT_FWD);
    Net net;
    net.add("conv", {"input"}, conv(3, 3, 1, 1));
    net.add("add", {"input", "conv"}, std::make_unique<Add>());
    net.add("relu", {"add"}, act(XYLEM_ACT_RELU));
    net.build(dev(), {3, 5, 5}, 3);
    if (backend().api().abi_minor >= 10) {
        EXPECT_TRUE(contains(net.summary(), "(conv's residual input for inference)")) << net.summary();
    }
    Tensor x = upload(dev(), {2, 3, 5, 5}, rng_.uniform(150, -1.0f, 1.0f));
    net.set_fold_batch_norms(false);
    const std::vector<float> unfolded = net.forward(dev(), x, false).to_vector();
    net.set_fold_batch_norms(true);
    EXPECT_TRUE(near(net.forward(dev(), x, false).to_vector(), to_double(unfolded), 1e-6));
}

// A model built to run (Net::build's training false): every parameter and buffer zero, no
// gradients, nothing drawn; backward refused; with a trained model's state copied in, its outputs
// are the trained model's to the bit.
TEST_P(NetGraphTest, AModelBuiltToRunHasNoGradientsAndRunsLoadedValues) {
    REQUIRE_OPS(LINEAR_OPS, XYLEM_OP_CONV2D_FWD, XYLEM_OP_CONV2D_BWD_DATA, XYLEM_OP_CONV2D_BWD_FILTER, XYLEM_OP_BATCHNORM_FWD,
             XYLEM_OP_BATCHNORM_BWD);
    auto make = [] {
        auto net = std::make_unique<Net>();
        net->add("conv", {"input"}, conv(4, 3, 1, 1));
        net->add("bn", {"conv"}, std::make_unique<BatchNorm>());
        net->add("relu", {"bn"}, act(XYLEM_ACT_RELU));
        net->add("flat", {"relu"}, std::make_unique<Reshape>(Shape{-1}, "flatten"));
        net->add("fc", {"flat"}, linear(3));
        return net;
    };
    auto trained = make(), runner = make();
    trained->build(dev(), {2, 5, 5}, 7);
    runner->build(dev(), {2, 5, 5}, 7, /*training=*/false);
    Tensor x = upload(dev(), {4, 2, 5, 5}, rng_.uniform(200, -1.0f, 1.0f));
    for (int step = 0; step < 2; ++step) {  // moves the running statistics off their initial values
        const Tensor& y = trained->forward(dev(), x, true);
        trained->backward(dev(), upload(dev(), y.shape(), rng_.uniform(y.numel(), -1.0f, 1.0f)));
    }
    const std::vector<Param*> from = trained->state(), to = runner->state();
    ASSERT_EQ(from.size(), to.size());
    for (size_t i = 0; i < to.size(); ++i) {
        ASSERT_EQ(to[i]->name, from[i]->name);
        EXPECT_FALSE(to[i]->grad.defined()) << to[i]->name;
        const std::vector<float> v = to[i]->value.to_vector();
        const bool zero = std::all_of(v.begin(), v.end(), [](float e) { return e == 0.0f; });
        // batch norm's scale and running variance start at 1, as in a training build
        if (to[i]->name != "bn.weight" && to[i]->name != "bn.running_var") {
            EXPECT_TRUE(zero) << to[i]->name;
        }
        set_values(to[i]->value, from[i]->value.to_vector());
    }
    EXPECT_EQ(runner->forward(dev(), x, false).to_vector(), trained->forward(dev(), x, false).to_vector());
    const Tensor& y = runner->forward(dev(), x, false);
    EXPECT_THROW(runner->backward(dev(), upload(dev(), y.shape(), std::vector<float>(y.numel(), 1.0f))), Error);
}

// Tied weights: b uses a's weight and bias. One parameter, updated once, whose gradient is the sum
// of both uses.
TEST_P(NetGraphTest, TiedWeightsAreOneParameterWithSummedGradient) {
    REQUIRE_OPS(LINEAR_OPS);
    Net net;
    net.add("a", {"input"}, linear(4));
    net.add("t", {"a"}, act(XYLEM_ACT_TANH));
    net.add("b", {"t"}, linear(4), "a");
    net.build(dev(), {4}, 13);
    ASSERT_EQ(net.params().size(), 2u);
    EXPECT_EQ(net.params()[0]->name, "a.weight");
    EXPECT_EQ(net.state().size(), 2u);  // checkpoints hold it once
    EXPECT_NE(net.summary().find("shared with a"), std::string::npos) << net.summary();
    Tensor x = upload(dev(), {3, 4}, rng_.uniform(12, -1.0f, 1.0f));
    check_gradients(net, x);
    // Both uses read the weight the solver updates: a change to it shows in both.
    const std::vector<float> before = net.forward(dev(), x, false).to_vector();
    Param* w = net.params()[0];
    std::vector<float> v = w->value.to_vector();
    v[0] += 0.5f;
    set_values(w->value, v);
    EXPECT_NE(net.forward(dev(), x, false).to_vector(), before);
}

// The hook fires per node with parameters in reverse topological order; a shared weight's gradient
// is ready only after its last writer (the lowest node).
TEST_P(NetGraphTest, BackwardHookAndReadyNodesWithASharedWeight) {
    REQUIRE_OPS(LINEAR_OPS);
    Net net;
    net.add("a", {"input"}, linear(4));
    net.add("p", {"a"}, linear(4));
    net.add("b", {"p"}, linear(4), "a");
    net.build(dev(), {4}, 13);
    std::vector<size_t> order;
    net.set_backward_hook([&](size_t node) { order.push_back(node); });
    Tensor x = upload(dev(), {2, 4}, rng_.uniform(8, -1.0f, 1.0f));
    Tensor dy = upload(dev(), {2, 4}, rng_.uniform(8, -1.0f, 1.0f));
    net.forward(dev(), x, true);
    net.backward(dev(), dy);
    EXPECT_EQ(order, (std::vector<size_t>{2, 1, 0}));
    EXPECT_EQ(net.grad_ready_nodes(), (std::vector<size_t>{0, 0, 1, 1}));  // a.weight, a.bias, p.weight, p.bias
}

// An activation fuses into the linear layer it reads only when it is that layer's one reader.
TEST_P(NetGraphTest, FusionOnlyForASoleReader) {
    REQUIRE_OPS(LINEAR_OPS);
    Net shared;
    shared.add("h", {"input"}, linear(5));
    shared.add("r", {"h"}, act(XYLEM_ACT_RELU));
    shared.add("y", {"r", "h"}, std::make_unique<Add>());
    shared.build(dev(), {4}, 3);
    EXPECT_EQ(shared.summary().find("fused into"), std::string::npos) << shared.summary();
    Tensor x = upload(dev(), {3, 4}, rng_.uniform(12, -1.0f, 1.0f));
    // relu(h) + h must see h before the relu.
    const std::vector<float> y = shared.forward(dev(), x, false).to_vector();
    Param* w = shared.params()[0];
    Param* b = shared.params()[1];
    const std::vector<float> xv = x.to_vector(), wv = w->value.to_vector(), bv = b->value.to_vector();
    for (int64_t n = 0; n < 3; ++n)
        for (int64_t o = 0; o < 5; ++o) {
            double h = bv[o];
            for (int64_t i = 0; i < 4; ++i) h += static_cast<double>(xv[n * 4 + i]) * wv[o * 4 + i];
            EXPECT_NEAR(y[n * 5 + o], std::max(h, 0.0) + h, 1e-5) << n << "," << o;
        }
    if (dev().backend().supports(XYLEM_OP_LINEAR_FWD)) {
        Net sole;
        sole.add("h", {"input"}, linear(5));
        sole.add("r", {"h"}, act(XYLEM_ACT_RELU));
        sole.build(dev(), {4}, 3);
        EXPECT_NE(sole.summary().find("(fused into h)"), std::string::npos) << sole.summary();
    }
}

// Two inputs, two outputs, one output also read by another layer:
//   s = linear(a) + linear(b); t = tanh(s) (output 1); u = linear(t) (output 0).
// J = sum(r0 * u) + sum(r1 * t): t's gradient sums its reader's and its own; every parameter's
// gradient against central differences. A null gradient for t is J's second term dropped.
TEST_P(NetGraphTest, SeveralInputsAndOutputsGradients) {
    REQUIRE_OPS(LINEAR_OPS);
    Net net;
    net.set_inputs({"a", "b"});
    net.set_outputs({"u", "t"});
    net.add("ha", {"a"}, linear(5));
    net.add("hb", {"b"}, linear(5));
    net.add("s", {"ha", "hb"}, std::make_unique<Add>());
    net.add("t", {"s"}, act(XYLEM_ACT_TANH));
    net.add("u", {"t"}, linear(2));
    net.build(dev(), std::vector<Shape>{{4}, {3}}, 7);
    EXPECT_EQ(net.output_count(), 2u);
    EXPECT_EQ(net.output_names(), (std::vector<std::string>{"u", "t"}));
    EXPECT_EQ(net.output_sample_shape(1), (Shape{5}));
    EXPECT_NE(net.summary().find("model inputs: a [4], b [3]; outputs: u, t"), std::string::npos) << net.summary();
    Tensor a = upload(dev(), {3, 4}, rng_.uniform(12, -1.0f, 1.0f));
    Tensor b = upload(dev(), {3, 3}, rng_.uniform(9, -1.0f, 1.0f));
    const std::vector<const Tensor*> xs{&a, &b};
    const std::vector<double> r0 = to_double(rng_.uniform(6, -1.0f, 1.0f)), r1 = to_double(rng_.uniform(15, -1.0f, 1.0f));
    for (bool both : {true, false}) {
        auto objective = [&] {
            net.forward(dev(), xs, true);
            return weighted_sum(net.output(0), r0) + (both ? weighted_sum(net.output(1), r1) : 0.0);
        };
        objective();
        const Tensor d0 = upload(dev(), {3, 2}, to_float(r0)), d1 = upload(dev(), {3, 5}, to_float(r1));
        net.backward(dev(), std::vector<const Tensor*>{&d0, both ? &d1 : nullptr});
        const std::vector<Param*> ps = net.params();
        std::vector<std::vector<float>> analytic;
        for (Param* p : ps) analytic.push_back(p->grad.to_vector());
        for (size_t i = 0; i < ps.size(); ++i)
            EXPECT_TRUE(near(analytic[i], numeric_gradient(ps[i]->value, objective, kGradEps), kGradTol))
                << "gradient of " << ps[i]->name << (both ? "" : " (t's gradient null)");
    }
    // u's gradient null: its weights would get none (stale gradients), so backward refuses.
    net.forward(dev(), xs, true);
    const Tensor d1 = upload(dev(), {3, 5}, to_float(r1));
    try {
        net.backward(dev(), std::vector<const Tensor*>{nullptr, &d1});
        ADD_FAILURE() << "backward ran without u's gradient";
    } catch (const Error& e) {
        EXPECT_TRUE(contains(e.what(), "model layer 'u' (linear): no gradient reached its output")) << e.what();
    }
    Tensor d0 = upload(dev(), {3, 2}, to_float(r0));
    try {
        net.backward(dev(), d0);
        ADD_FAILURE() << "backward of one gradient ran on a model of two outputs";
    } catch (const Error& e) {
        EXPECT_TRUE(contains(e.what(), "model has 2 outputs (u, t): backward takes a gradient for each")) << e.what();
    }
}

// Forward checks every input: the count, each shape (named), one batch for all; the one-input
// forms name the inputs a model of several needs.
TEST_P(NetGraphTest, SeveralInputsAreCheckedByName) {
    REQUIRE_OPS(LINEAR_OPS);
    Net net;
    net.set_inputs({"a", "b"});
    net.add("ha", {"a"}, linear(2));
    net.add("hb", {"b"}, linear(2));
    net.add("s", {"ha", "hb"}, std::make_unique<Add>());
    auto error_of = [](const std::function<void()>& f) {
        try {
            f();
        } catch (const Error& e) {
            return std::string(e.what());
        }
        return std::string("(no error)");
    };
    EXPECT_TRUE(contains(error_of([&] { net.build(dev(), Shape{4}, 1); }),
                         "model takes 2 input(s) (a, b), given 1: xylem's datasets feed models of one input"));
    net.build(dev(), std::vector<Shape>{{4}, {3}}, 1);
    Tensor a = upload(dev(), {2, 4}, rng_.uniform(8, -1.0f, 1.0f));
    Tensor b = upload(dev(), {2, 3}, rng_.uniform(6, -1.0f, 1.0f));
    Tensor b3 = upload(dev(), {3, 3}, rng_.uniform(9, -1.0f, 1.0f));
    EXPECT_TRUE(contains(error_of([&] { net.forward(dev(), a, false); }), "model takes 2 input(s) (a, b), given 1"));
    EXPECT_TRUE(contains(error_of([&] { net.forward(dev(), {&b, &a}, false); }),
                         "model input 'a': got batch shape [2, 3], expected [N, 4]"));
    EXPECT_TRUE(contains(error_of([&] { net.forward(dev(), {&a, &b3}, false); }),
                         "model input 'b': batch of 3, input 'a' has 2"));
    EXPECT_EQ(net.forward(dev(), {&a, &b}, false).shape(), (Shape{2, 2}));
    // Names: an input is no layer's, and a layer cannot take an input's name.
    Net dup;
    EXPECT_THROW(dup.set_inputs({"x", "x"}), Error);
    EXPECT_THROW(dup.set_inputs({}), Error);
    dup.set_inputs({"x", "y"});
    EXPECT_TRUE(contains(error_of([&] { dup.add("y", {"x"}, linear(2)); }), "the name 'y' is reserved for the model's input"));
    Net unknown;
    unknown.set_inputs({"x", "y"});
    unknown.add("h", {"z"}, linear(2));
    EXPECT_TRUE(contains(error_of([&] { unknown.build(dev(), std::vector<Shape>{{2}, {2}}, 1); }),
                         "input 'z' names no layer of the model (and is not one of the model's inputs: x, y)"));
    Net outputs;
    outputs.add("h", {"input"}, linear(2));
    outputs.add("g", {"h"}, linear(2));
    outputs.set_outputs({"h", "nope"});
    EXPECT_TRUE(contains(error_of([&] { outputs.build(dev(), Shape{2}, 1); }), "model output 'nope' names no layer"));
}

std::string build_error(Net& net, Device& dev, const Shape& input) {
    try {
        net.build(dev, input, 1);
    } catch (const Error& e) {
        return e.what();
    }
    return "(no error)";
}

// Graph mistakes are refused at build, each naming the layer and what is wrong.
TEST_P(NetGraphTest, GraphErrorsNameTheLayer) {
    REQUIRE_OPS(LINEAR_OPS);
    {
        Net net;
        net.add("a", {"input"}, linear(3));
        net.add("b", {"nope"}, linear(3));
        EXPECT_TRUE(contains(build_error(net, dev(), {2}), "model layer 'b' (linear): input 'nope' names no layer"));
    }
    {
        Net net;
        net.add("a", {"input"}, linear(3));
        try {
            net.add("a", {"a"}, linear(3));
            ADD_FAILURE() << "a duplicate name was taken";
        } catch (const Error& e) {
            EXPECT_TRUE(contains(e.what(), "the name 'a' is taken by model layer 'a' (linear)"));
        }
        EXPECT_THROW(net.add("input", {"a"}, linear(3)), Error);
    }
    {
        Net net;
        net.add("a", {"input"}, linear(3));
        net.add("b", {"a", "d"}, std::make_unique<Add>());
        net.add("c", {"b"}, linear(3));
        net.add("d", {"c"}, linear(3));
        const std::string e = build_error(net, dev(), {2});
        EXPECT_TRUE(contains(e, "model layers form a cycle: ")) << e;
        EXPECT_TRUE(contains(e, "b reads ")) << e;
    }
    {
        Net net;
        net.add("a", {"input"}, linear(3));
        net.add("unused", {"a"}, linear(3));
        net.add("out", {"a"}, linear(2));
        EXPECT_TRUE(contains(build_error(net, dev(), {2}), "model layer 'unused' (linear): its output is read by no layer"));
    }
    {
        Net net;
        net.add("big", {"input"}, linear(4));
        net.add("small", {"input"}, linear(3));
        net.add("sum", {"big", "small"}, std::make_unique<Add>());
        EXPECT_TRUE(contains(build_error(net, dev(), {2}),
                             "model layer 'sum' (add): cannot add 'big' [4] and 'small' [3] per sample"));
    }
    {
        Net net;
        net.add("t", {"input"}, std::make_unique<Transpose>(Shape{0, 0, 1}));
        EXPECT_TRUE(contains(build_error(net, dev(), {2, 3, 4}),
                             "model layer 't' (transpose): perm [0, 0, 1] is not a permutation of the 3 axes of its "
                             "input's sample [2, 3, 4]"));
    }
    {
        Net net;
        net.add("map", {"input"}, conv(3, 1));                    // [3, 4, 4]
        net.add("gate", {"input"}, conv(3, 4));                   // [3, 1, 1]
        net.add("wide", {"gate"}, std::make_unique<Reshape>(Shape{1, 3, 1}));  // [1, 3, 1]: no spread
        net.add("y", {"map", "wide"}, std::make_unique<Mul>());
        EXPECT_TRUE(contains(build_error(net, dev(), {2, 4, 4}),
                             "model layer 'y' (mul): cannot multiply 'map' [3, 4, 4] by 'wide' [1, 3, 1] per sample"));
    }
    {
        Net net;
        net.add("a", {"input"}, linear(3));
        net.add("sum", {"a"}, std::make_unique<Add>());
        EXPECT_TRUE(contains(build_error(net, dev(), {2}), "model layer 'sum' (add): takes 2 input(s), `inputs` names 1 (a)"));
    }
    {
        Net net;
        net.add("a", {"input"}, linear(3));
        net.add("b", {"a"}, act(XYLEM_ACT_TANH), "a");
        EXPECT_TRUE(contains(build_error(net, dev(), {2}), "model layer 'b' (tanh): cannot share parameters"));
    }
    {
        Net net;
        net.add("a", {"input"}, linear(3));
        net.add("b", {"a"}, linear(3), "a");  // a's weight is [3, 2], b's would be [3, 3]
        EXPECT_TRUE(contains(build_error(net, dev(), {2}), "model layer 'b' (linear): shares the parameters of model layer 'a' (linear) but its b.weight is [3, 3] where that layer's is [3, 2]"));
    }
    {
        Net net;
        net.add("a", {"input"}, linear(2), "b");
        net.add("b", {"a"}, linear(2));
        EXPECT_TRUE(contains(build_error(net, dev(), {2}), "model layer 'a' (linear): shares the parameters of model layer 'b' (linear), which runs after it"));
    }
    {
        Net net;
        net.add("a", {"input"}, linear(2));
        net.add("b", {"a"}, linear(2), "nope");
        EXPECT_TRUE(contains(build_error(net, dev(), {2}), "model layer 'b' (linear): shares the parameters of 'nope', which names no layer"));
    }
}

}  // namespace
}  // namespace xylem::test
