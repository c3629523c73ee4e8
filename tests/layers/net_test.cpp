// Net over every available backend: the parameter gradients of a small MLP through
// Net::backward (with the ReLU fused into its linear layer), and build-time shape errors
// that name the layer and both shapes.
#include "xylem/layers/net.h"

#include <memory>

#include "support/backends.h"
#include "support/gradcheck.h"
#include "xylem/error.h"
#include "xylem/layers/elementwise.h"
#include "xylem/layers/linear.h"
#include "xylem/layers/loss.h"
#include "xylem/layers/reshape.h"

namespace xylem::test {
namespace {

class SequentialTest : public BackendTest {
protected:
    Rng rng_;
};
XYLEM_INSTANTIATE_OVER_BACKENDS(SequentialTest);

std::unique_ptr<Layer> flatten() {
    return std::make_unique<Reshape>(Shape{-1}, "flatten");
}

// The summary a user sees: each layer's output shape and parameter count, and the totals.
TEST_P(SequentialTest, SummaryListsShapesAndParameterCounts) {
    XYLEM_REQUIRE_OP(XYLEM_OP_FILL);
    Net model;
    model.add(flatten());
    model.add(std::make_unique<Linear>(500));
    model.add(std::make_unique<Activation>(XYLEM_ACT_TANH));
    model.add(std::make_unique<Linear>(3));
    model.build(dev(), {2, 3}, 7);
    const std::string s = model.summary();
    EXPECT_NE(s.find("linear"), std::string::npos) << s;
    EXPECT_NE(s.find("[500]"), std::string::npos) << s;
    EXPECT_NE(s.find("3,500"), std::string::npos) << s;   // 6 * 500 + 500
    EXPECT_NE(s.find("1,503"), std::string::npos) << s;   // 500 * 3 + 3
    EXPECT_NE(s.find("parameters: 5,003 trainable (19.5 KiB"), std::string::npos) << s;
}

// flatten -> linear(5) -> relu -> linear(3), cross-entropy on top.
TEST_P(SequentialTest, MlpParameterGradients) {
    for (uint32_t op : {XYLEM_OP_FILL, XYLEM_OP_LINEAR_FWD, XYLEM_OP_GEMM, XYLEM_OP_BIAS_GRAD, XYLEM_OP_ACT_FWD,
                        XYLEM_OP_ACT_BWD, XYLEM_OP_XENT_FWD, XYLEM_OP_XENT_BWD})
        XYLEM_REQUIRE_OP(op);
    Net model;
    model.add(flatten());
    model.add(std::make_unique<Linear>(5));
    model.add(std::make_unique<Activation>(XYLEM_ACT_RELU));
    model.add(std::make_unique<Linear>(3));
    model.build(dev(), {2, 3}, 7);
    EXPECT_EQ(model.output_sample_shape(), Shape{3});
    const std::vector<Param*> ps = model.params();
    ASSERT_EQ(ps.size(), 4u);
    EXPECT_EQ(ps[0]->name, "1.weight");
    EXPECT_EQ(ps[1]->name, "1.bias");
    EXPECT_EQ(ps[2]->name, "3.weight");
    EXPECT_EQ(ps[3]->name, "3.bias");

    const int64_t n = 4;
    Tensor x({n, 2, 3}, DType::F32, dev());
    draw_away_from_kink(rng_, x, ps[0]->value, &ps[1]->value, 0.05);
    set_values(ps[2]->value, rng_.uniform(15));
    set_values(ps[3]->value, rng_.uniform(3));
    Tensor labels = upload_i32(dev(), {n}, rng_.labels(n, 3));
    CrossEntropyLoss loss;
    auto objective = [&] {
        Tensor sum = upload(dev(), {1}, {0.0f});
        loss.forward(dev(), model.forward(dev(), x, true), labels, sum);
        return static_cast<double>(sum.to_vector()[0]) / n;
    };

    const Tensor& y = model.forward(dev(), x, true);
    model.backward(dev(), loss.backward(dev(), y, labels));
    std::vector<std::vector<float>> analytic;
    for (Param* p : ps) analytic.push_back(p->grad.to_vector());
    for (size_t i = 0; i < ps.size(); ++i)
        EXPECT_TRUE(near(analytic[i], numeric_gradient(ps[i]->value, objective, kGradEps), kGradTol))
            << "gradient of " << ps[i]->name;
}

// The backward hook (data-parallel training starts a bucket's sum from it): called once per layer
// with parameters, last layer first, when that layer's gradients are final. Gradients that are views
// into one contiguous buffer (how data-parallel training lays them out) come out bit for bit the same.
TEST_P(SequentialTest, BackwardHookAndGradientsInOneBuffer) {
    for (uint32_t op : {XYLEM_OP_FILL, XYLEM_OP_LINEAR_FWD, XYLEM_OP_GEMM, XYLEM_OP_BIAS_GRAD, XYLEM_OP_ACT_FWD,
                        XYLEM_OP_ACT_BWD, XYLEM_OP_XENT_FWD, XYLEM_OP_XENT_BWD})
        XYLEM_REQUIRE_OP(op);
    auto make = [&] {
        auto m = std::make_unique<Net>();
        m->add(flatten());
        m->add(std::make_unique<Linear>(5));
        m->add(std::make_unique<Activation>(XYLEM_ACT_RELU));
        m->add(std::make_unique<Linear>(3));
        m->build(dev(), {2, 3}, 7);
        return m;
    };
    std::unique_ptr<Net> own = make(), flat = make();
    // flat's gradients: slices of one buffer, in reverse parameter order.
    std::vector<Param*> fp = flat->params();
    int64_t total = 0;
    for (Param* p : fp) total += p->grad.numel();
    Tensor buffer({total}, DType::F32, dev());
    int64_t at = 0;
    for (auto it = fp.rbegin(); it != fp.rend(); ++it) {
        const Shape shape = (*it)->grad.shape();
        (*it)->grad = buffer.rows(at, (*it)->grad.numel()).reshaped(shape);
        at += (*it)->grad.numel();
    }
    std::vector<size_t> order;
    std::vector<std::vector<float>> at_hook;
    flat->set_backward_hook([&](size_t layer) {
        order.push_back(layer);
        for (Param* p : flat->layer(layer).params()) at_hook.push_back(p->grad.to_vector());
    });

    const int64_t n = 4;
    Tensor x = upload(dev(), {n, 2, 3}, rng_.uniform(n * 6, -1.0f, 1.0f));
    Tensor labels = upload_i32(dev(), {n}, rng_.labels(n, 3));
    CrossEntropyLoss loss;
    for (Net* m : {own.get(), flat.get()}) {
        const Tensor& y = m->forward(dev(), x, true);
        m->backward(dev(), loss.backward(dev(), y, labels));
    }
    EXPECT_EQ(order, (std::vector<size_t>{3, 1}));
    const std::vector<Param*> op = own->params();
    ASSERT_EQ(at_hook.size(), 4u);
    // At the hooks: 3.weight, 3.bias (layer 3), then 1.weight, 1.bias, each already final.
    const size_t hook_index[4] = {2, 3, 0, 1};
    for (size_t i = 0; i < op.size(); ++i) {
        EXPECT_EQ(fp[i]->grad.to_vector(), op[i]->grad.to_vector()) << op[i]->name;
        EXPECT_EQ(at_hook[hook_index[i]], op[i]->grad.to_vector()) << op[i]->name << " at its hook";
    }
}

std::string build_error(Net& model, Device& dev, const Shape& input) {
    try {
        model.build(dev, input, 1);
    } catch (const Error& e) {
        return e.what();
    }
    return "<no error>";
}

// An image-like sample (rank 3 and more) needs a flatten; a sequence [time, features] does not.
TEST_P(SequentialTest, LinearOnNonFlatInputNamesLayerAndShapes) {
    XYLEM_REQUIRE_OP(XYLEM_OP_FILL);
    Net model;
    model.add(std::make_unique<Linear>(4));
    const std::string msg = build_error(model, dev(), {1, 2, 3});
    EXPECT_TRUE(contains(msg, "model layer 0 (linear)"));
    EXPECT_TRUE(contains(msg, "add a flatten layer"));
    EXPECT_TRUE(contains(msg, "[1, 2, 3]"));
    EXPECT_TRUE(contains(msg, "[6]"));
    // Deeper in the model: a reshape back to 3-D before the second linear layer.
    Net deep;
    deep.add(flatten());
    deep.add(std::make_unique<Linear>(6));
    deep.add(std::make_unique<Reshape>(Shape{2, 3, 1}));
    deep.add(std::make_unique<Linear>(2));
    const std::string deep_msg = build_error(deep, dev(), {2, 3});
    EXPECT_TRUE(contains(deep_msg, "model layer 3 (linear)"));
    EXPECT_TRUE(contains(deep_msg, "[2, 3, 1]"));
    EXPECT_TRUE(contains(deep_msg, "[6]"));
}

// Per time step: [time, in] -> [time, out] with the same weights, equal to the flat layer on each row.
TEST_P(SequentialTest, LinearOverASequenceAppliesToEveryStep) {
    XYLEM_REQUIRE_OP(XYLEM_OP_FILL);
    XYLEM_REQUIRE_OP(XYLEM_OP_LINEAR_FWD);
    Net seq;
    seq.add(std::make_unique<Linear>(4));
    seq.build(dev(), {3, 5}, 7);
    EXPECT_EQ(seq.output_sample_shape(), (Shape{3, 4}));
    Net flat;
    flat.add(std::make_unique<Linear>(4));
    flat.build(dev(), {5}, 7);  // the same seed: the same weights
    std::vector<float> xv(2 * 3 * 5);
    for (size_t i = 0; i < xv.size(); ++i) xv[i] = static_cast<float>(i % 7) * 0.25f - 0.5f;
    const Tensor x = upload(dev(), {2, 3, 5}, xv), x_rows = upload(dev(), {6, 5}, xv);
    const std::vector<float> y = seq.forward(dev(), x, false).to_vector();
    EXPECT_EQ(seq.forward(dev(), x, false).shape(), (Shape{2, 3, 4}));
    EXPECT_EQ(y, flat.forward(dev(), x_rows, false).to_vector());
}

TEST_P(SequentialTest, WrongFeatureCountNamesLayerAndShapes) {
    XYLEM_REQUIRE_OP(XYLEM_OP_FILL);
    Net model;
    model.add(flatten());
    model.add(std::make_unique<Linear>(5));
    model.build(dev(), {2, 3}, 1);
    Layer& linear = model.layer(1);
    try {
        linear.output_shape({7});
        ADD_FAILURE() << "no error for 7 features into a 6-feature layer";
    } catch (const Error& e) {
        EXPECT_TRUE(contains(e.what(), "model layer 1 (linear)"));
        EXPECT_TRUE(contains(e.what(), "[7]"));
        EXPECT_TRUE(contains(e.what(), "[6]"));
    }
    try {
        linear.forward(dev(), Tensor({3, 7}, DType::F32, dev()), false);
        ADD_FAILURE() << "no error for a [3, 7] batch into a 6-feature layer";
    } catch (const Error& e) {
        EXPECT_TRUE(contains(e.what(), "model layer 1 (linear)"));
        EXPECT_TRUE(contains(e.what(), "[3, 7]"));
        EXPECT_TRUE(contains(e.what(), "[3, 6]"));
    }
    try {
        model.forward(dev(), Tensor({3, 7}, DType::F32, dev()), false);
        ADD_FAILURE() << "no error for a model input of the wrong shape";
    } catch (const Error& e) {
        EXPECT_TRUE(contains(e.what(), "[3, 7]"));
        EXPECT_TRUE(contains(e.what(), "2, 3]"));
    }
}

}  // namespace
}  // namespace xylem::test
