// Numerical gradient checks for lstm and gru over every available backend: the input and every
// parameter gradient of a batch that starts from a non-zero state carried over from the batch
// before (truncated back-propagation through time: the carried state is a constant), with one
// and two levels, dropout between levels and a forget-gate bias.
#include <memory>

#include "support/backends.h"
#include "support/gradcheck.h"
#include "xylem/layers/gru.h"
#include "xylem/layers/lstm.h"

namespace xylem::test {
namespace {

struct Case {
    bool lstm;
    int64_t batch, time, features, hidden, layers;
    float dropout = 0.0f, forget_bias = 0.0f;
};

std::string describe(const Case& c) {
    return std::string(c.lstm ? "lstm" : "gru") + " batch " + std::to_string(c.batch) + " time " +
           std::to_string(c.time) + " features " + std::to_string(c.features) + " hidden " + std::to_string(c.hidden) +
           " layers " + std::to_string(c.layers) + " dropout " + std::to_string(c.dropout) + " forget_bias " +
           std::to_string(c.forget_bias);
}

class RecurrentGradient : public BackendTest {
protected:
    void check(const Case& c) {
        SCOPED_TRACE(describe(c));
        RecurrentOptions o;
        o.hidden = c.hidden;
        o.layers = c.layers;
        o.dropout = c.dropout;
        o.forget_bias = c.forget_bias;
        o.init = 0.6f;  // wider than 1/sqrt(hidden): gates away from their linear middle
        std::unique_ptr<Recurrent> layer;
        if (c.lstm) layer = std::make_unique<Lstm>(o, 1234);
        else layer = std::make_unique<Gru>(o, 1234);
        for (uint32_t op : layer->ops_needed(true)) XYLEM_REQUIRE_OP(op);
        layer->bind(dev(), {c.time, c.features}, rng_.engine());
        const Shape x_shape{c.batch, c.time, c.features};

        // The first batch leaves a state behind; the check is on the second batch, from that state.
        Tensor x1 = upload(dev(), x_shape, rng_.uniform(numel(x_shape)));
        layer->forward(dev(), x1, true);
        const int cells = c.lstm ? 2 : 1;
        std::vector<std::vector<float>> carried;
        for (int64_t l = 0; l < c.layers; ++l)
            for (int cell = 0; cell < cells; ++cell) {
                carried.push_back(layer->state(l, cell).to_vector());
                double sum = 0;
                for (float v : carried.back()) sum += std::fabs(v);
                ASSERT_GT(sum, 0.01) << "level " << l << " cell " << cell << ": the carried state is zero";
            }
        // Every evaluation starts from the same carried state and draws the same dropout masks.
        uint64_t* mask_calls = layer->counters().at(0).second;
        const uint64_t calls = *mask_calls;
        Tensor x = upload(dev(), x_shape, rng_.uniform(numel(x_shape)));
        auto run = [&]() -> const Tensor& {
            size_t k = 0;
            for (int64_t l = 0; l < c.layers; ++l)
                for (int cell = 0; cell < cells; ++cell) set_values(layer->state(l, cell), carried[k++]);
            *mask_calls = calls;
            return layer->forward(dev(), x, true);
        };
        const Shape y_shape = run().shape();
        ASSERT_EQ(y_shape, (Shape{c.batch, c.time, c.hidden}));
        const std::vector<double> r = to_double(rng_.uniform(numel(y_shape)));
        auto objective = [&] { return weighted_sum(run(), r); };
        objective();
        const Tensor dy = upload(dev(), y_shape, to_float(r));
        const Tensor& dx = layer->backward(dev(), dy, true);
        ASSERT_EQ(dx.shape(), x_shape);
        const std::vector<float> analytic_dx = dx.to_vector();
        std::vector<std::vector<float>> analytic;
        for (Param* p : layer->params()) analytic.push_back(p->grad.to_vector());

        EXPECT_TRUE(near(analytic_dx, numeric_gradient(x, objective, kGradEps), kGradTol)) << "input gradient";
        size_t i = 0;
        for (Param* p : layer->params())
            EXPECT_TRUE(near(analytic[i++], numeric_gradient(p->value, objective, kGradEps), kGradTol))
                << "gradient of parameter " << p->name;
    }
    Rng rng_;
};
XYLEM_INSTANTIATE_OVER_BACKENDS(RecurrentGradient);

TEST_P(RecurrentGradient, LstmOneLevelWithForgetBias) { check({true, 2, 3, 3, 4, 1, 0.0f, 1.0f}); }
TEST_P(RecurrentGradient, LstmTwoLevelsWithDropout) { check({true, 3, 3, 2, 3, 2, 0.4f, 0.0f}); }
TEST_P(RecurrentGradient, LstmOneStepOneSample) { check({true, 1, 1, 2, 2, 1}); }
TEST_P(RecurrentGradient, GruOneLevel) { check({false, 2, 3, 3, 4, 1}); }
TEST_P(RecurrentGradient, GruTwoLevelsWithDropout) { check({false, 3, 3, 2, 3, 2, 0.4f}); }

}  // namespace
}  // namespace xylem::test
