// lstm and gru over every available backend: outputs and carried state against a float64
// reference (tests/support/reference_rnn.h), truncated back-propagation through time (state kept
// between batches of one shape, dropped by reset_state and by another batch shape), sampling one
// step at a time, PyTorch's parameter names and init, the config keys, the ops a step issues
// (one GEMM and one run of elementwise ops per time step) and no transfers in a steady step.
#include <algorithm>
#include <cmath>
#include <memory>

#include "support/config_errors.h"
#include "support/backends.h"
#include "support/gradcheck.h"
#include "support/reference_rnn.h"
#include "xylem/config.h"
#include "xylem/error.h"
#include "xylem/layers/elementwise.h"
#include "xylem/layers/embedding.h"
#include "xylem/layers/gru.h"
#include "xylem/layers/lstm.h"
#include "xylem/layers/merge.h"
#include "xylem/layers/net.h"
#include "xylem/layers/registry.h"
#include "xylem/transfer.h"

namespace xylem::test {
namespace {

using Vec = std::vector<double>;

std::unique_ptr<Recurrent> make(bool lstm, int64_t hidden, int64_t layers, float dropout = 0.0f,
                                float forget_bias = 0.0f, float init = 0.0f) {
    RecurrentOptions o;
    o.hidden = hidden;
    o.layers = layers;
    o.dropout = dropout;
    o.forget_bias = forget_bias;
    o.init = init;
    if (lstm) return std::make_unique<Lstm>(o, 77);
    return std::make_unique<Gru>(o, 77);
}

std::vector<ref::RnnWeights> host_weights(Recurrent& layer) {
    const std::vector<Param*> p = layer.params();
    std::vector<ref::RnnWeights> w(p.size() / 4);
    for (size_t l = 0; l < w.size(); ++l)
        w[l] = {to_double(p[4 * l]->value.to_vector()), to_double(p[4 * l + 1]->value.to_vector()),
                to_double(p[4 * l + 2]->value.to_vector()), to_double(p[4 * l + 3]->value.to_vector())};
    return w;
}

// The layer's carried state ([H, B], unit-major) in the reference's [B, H].
Vec state_of(Recurrent& layer, int64_t level, int cell, int64_t batch) {
    const std::vector<float> s = layer.state(level, cell).to_vector();
    const int64_t h = layer.hidden();
    Vec out(s.size());
    for (int64_t u = 0; u < h; ++u)
        for (int64_t b = 0; b < batch; ++b) out[b * h + u] = s[u * batch + b];
    return out;
}

// A reference run's state: [level][B*H], zero.
struct RefState {
    std::vector<Vec> h, c;
    RefState(int64_t levels, int64_t batch, int64_t hidden)
        : h(levels, Vec(batch * hidden, 0.0)), c(levels, Vec(batch * hidden, 0.0)) {}
};

class RecurrentLayer : public BackendTest {
protected:
    void require(const Recurrent& layer) {
        for (uint32_t op : layer.ops_needed(true)) XYLEM_REQUIRE_OP(op);
    }
    Rng rng_;
};
XYLEM_INSTANTIATE_OVER_BACKENDS(RecurrentLayer);

// Two consecutive batches: the second starts where the first ended, in training and evaluation,
// with one and two levels (dropout only acts in training, so evaluation is checked with it on).
TEST_P(RecurrentLayer, OutputsAndCarriedStateMatchTheReference) {
    for (bool lstm : {true, false})
        for (int64_t levels : {1, 2})
            for (bool train : {true, false}) {
                SCOPED_TRACE(std::string(lstm ? "lstm" : "gru") + " levels " + std::to_string(levels) +
                             (train ? " training" : " evaluation"));
                const int64_t batch = 3, time = 4, features = 5, hidden = 6;
                auto layer = make(lstm, hidden, levels, train ? 0.0f : 0.5f, lstm ? 1.0f : 0.0f);
                require(*layer);
                layer->bind(dev(), {time, features}, rng_.engine());
                const auto w = host_weights(*layer);
                RefState st(levels, batch, hidden);
                for (int round = 0; round < 2; ++round) {
                    const Vec xv = to_double(rng_.uniform(batch * time * features, -2.0f, 2.0f));
                    Tensor x = upload(dev(), {batch, time, features}, to_float(xv));
                    const std::vector<float> y = layer->forward(dev(), x, train).to_vector();
                    const Vec want = ref::rnn_forward(lstm, w, hidden, xv, batch, time, features, st.h, st.c);
                    EXPECT_TRUE(near(y, want, 1e-5)) << "output of batch " << round;
                    for (int64_t l = 0; l < levels; ++l) {
                        EXPECT_TRUE(near(to_float(state_of(*layer, l, 0, batch)), st.h[l], 1e-5)) << "h, level " << l;
                        if (lstm) {
                            EXPECT_TRUE(near(to_float(state_of(*layer, l, 1, batch)), st.c[l], 1e-5)) << "c, level " << l;
                        }
                    }
                }
            }
}

// reset_state starts the next batch from zero; so does a batch of another shape (a tail batch),
// and the full batch after it.
TEST_P(RecurrentLayer, ResetAndAnotherBatchShapeStartFromZero) {
    for (bool lstm : {true, false}) {
        SCOPED_TRACE(lstm ? "lstm" : "gru");
        const int64_t time = 3, features = 2, hidden = 4, levels = 2;
        auto layer = make(lstm, hidden, levels);
        require(*layer);
        layer->bind(dev(), {time, features}, rng_.engine());
        const auto w = host_weights(*layer);
        auto batch_of = [&](int64_t n) {
            const Vec xv = to_double(rng_.uniform(n * time * features, -2.0f, 2.0f));
            return std::make_pair(xv, upload(dev(), {n, time, features}, to_float(xv)));
        };
        auto from_zero = [&](const Vec& xv, int64_t n) {
            RefState st(levels, n, hidden);
            return ref::rnn_forward(lstm, w, hidden, xv, n, time, features, st.h, st.c);
        };
        auto [x4, t4] = batch_of(4);
        auto [x2, t2] = batch_of(2);
        layer->forward(dev(), t4, true);
        EXPECT_FALSE(near(layer->forward(dev(), t4, true).to_vector(), from_zero(x4, 4), 1e-3)) << "state not carried";
        EXPECT_TRUE(near(layer->forward(dev(), t2, true).to_vector(), from_zero(x2, 2), 1e-5)) << "tail batch";
        EXPECT_TRUE(near(layer->forward(dev(), t4, true).to_vector(), from_zero(x4, 4), 1e-5)) << "after the tail";
        layer->reset_state();
        EXPECT_TRUE(near(layer->forward(dev(), t4, false).to_vector(), from_zero(x4, 4), 1e-5)) << "after reset_state";
    }
}

// A mid-epoch checkpoint keeps the carried state (carried_state); a new layer given it
// (restore_carried_state) continues the sequence exactly as the layer that never stopped. Bad
// saved state is an Error naming the layer and the tensor, and changes nothing.
TEST_P(RecurrentLayer, SavedCarriedStateContinuesTheSequence) {
    for (bool lstm : {true, false}) {
        SCOPED_TRACE(lstm ? "lstm" : "gru");
        const int64_t time = 3, features = 2, hidden = 4, levels = 2, batch = 3;
        auto a = make(lstm, hidden, levels), b = make(lstm, hidden, levels);
        require(*a);
        std::mt19937_64 ra(5), rb(5);
        a->bind(dev(), {time, features}, ra);
        b->bind(dev(), {time, features}, rb);
        a->set_label("model.layers[1] (" + a->kind() + ")");
        b->set_label(a->label());
        EXPECT_TRUE(a->carried_state().empty()) << "no forward yet";
        const Tensor x1 = upload(dev(), {batch, time, features}, rng_.uniform(batch * time * features, -2.0f, 2.0f));
        const Tensor x2 = upload(dev(), {batch, time, features}, rng_.uniform(batch * time * features, -2.0f, 2.0f));
        a->forward(dev(), x1, true);
        std::map<std::string, SavedTensor> saved;
        std::vector<std::string> names;
        for (const auto& [name, t] : a->carried_state()) {
            names.push_back(name);
            saved[name] = SavedTensor{t->shape(), t->to_vector()};
            EXPECT_EQ(t->shape(), (Shape{hidden, batch})) << name;
        }
        const std::vector<std::string> want =
            lstm ? std::vector<std::string>{"h_l0", "c_l0", "h_l1", "c_l1"} : std::vector<std::string>{"h_l0", "h_l1"};
        EXPECT_EQ(names, want);
        const std::vector<float> continued = a->forward(dev(), x2, true).to_vector();

        auto refused = [&](std::map<std::string, SavedTensor> bad) {
            try {
                b->restore_carried_state(bad);
            } catch (const Error& e) {
                return std::string(e.what());
            }
            return std::string("(no error)");
        };
        auto without = saved;
        without.erase("h_l1");
        EXPECT_EQ(refused(without), b->label() + ": the checkpoint's carried state has no 'h_l1'");
        auto wrong = saved;
        wrong["h_l1"].shape = {hidden + 1, batch};
        EXPECT_EQ(refused(wrong), b->label() + ": carried state 'h_l1' is [" + std::to_string(hidden + 1) +
                                      ", 3], expected [4, 3] (the batch of 'h_l0')");
        auto extra = saved;
        extra["h_l2"] = saved["h_l0"];
        EXPECT_TRUE(refused(extra).find("has 'h_l2', which this layer does not carry") != std::string::npos) << refused(extra);

        // From zero, b's second batch differs from a's; restored, it is a's.
        b->forward(dev(), x1, true);  // b's own state after x1 (the same as a's): replaced by the restore
        b->reset_state();
        EXPECT_FALSE(near(b->forward(dev(), x2, true).to_vector(), to_double(continued), 1e-4)) << "zero state";
        b->reset_state();
        b->restore_carried_state(saved);
        EXPECT_TRUE(near(b->forward(dev(), x2, true).to_vector(), to_double(continued), 1e-6));
        b->restore_carried_state(saved);
        b->reset_state();  // a reset drops a pending restore
        EXPECT_FALSE(near(b->forward(dev(), x2, true).to_vector(), to_double(continued), 1e-4));
    }
}

// Sampling feeds one character at a time: T = 1 steps chain into the whole sequence's outputs.
TEST_P(RecurrentLayer, OneStepAtATimeEqualsTheWholeSequence) {
    for (bool lstm : {true, false}) {
        SCOPED_TRACE(lstm ? "lstm" : "gru");
        const int64_t time = 6, features = 3, hidden = 5, levels = 2;
        auto layer = make(lstm, hidden, levels, 0.3f);
        require(*layer);
        layer->bind(dev(), {time, features}, rng_.engine());
        const Vec xv = to_double(rng_.uniform(time * features, -2.0f, 2.0f));
        Tensor whole = upload(dev(), {1, time, features}, to_float(xv));
        layer->forward(dev(), upload(dev(), {2, time, features}, rng_.uniform(2 * time * features)), true);  // training
        layer->reset_state();
        const std::vector<float> want = layer->forward(dev(), whole, false).to_vector();
        layer->reset_state();
        std::vector<float> got;
        for (int64_t t = 0; t < time; ++t) {
            Tensor xt = upload(dev(), {1, 1, features}, to_float(Vec(xv.begin() + t * features, xv.begin() + (t + 1) * features)));
            const std::vector<float> y = layer->forward(dev(), xt, false).to_vector();
            got.insert(got.end(), y.begin(), y.end());
        }
        EXPECT_TRUE(near(got, to_double(want), 1e-6));
    }
}

TEST_P(RecurrentLayer, ParametersAreNamedShapedAndDrawnAsPyTorchs) {
    const int64_t features = 3, hidden = 4;
    for (bool lstm : {true, false}) {
        SCOPED_TRACE(lstm ? "lstm" : "gru");
        const int64_t g = (lstm ? 4 : 3) * hidden;
        auto layer = make(lstm, hidden, 2);
        layer->set_param_prefix("2.");
        std::mt19937_64 rng(5);
        layer->bind(dev(), {7, features}, rng);
        const std::vector<Param*> p = layer->params();
        ASSERT_EQ(p.size(), 8u);
        const std::pair<std::string, Shape> want[] = {
            {"2.weight_ih_l0", {g, features}}, {"2.weight_hh_l0", {g, hidden}}, {"2.bias_ih_l0", {g}},
            {"2.bias_hh_l0", {g}},             {"2.weight_ih_l1", {g, hidden}}, {"2.weight_hh_l1", {g, hidden}},
            {"2.bias_ih_l1", {g}},             {"2.bias_hh_l1", {g}}};
        for (size_t i = 0; i < p.size(); ++i) {
            EXPECT_EQ(p[i]->name, want[i].first);
            EXPECT_EQ(p[i]->value.shape(), want[i].second) << p[i]->name;
            EXPECT_EQ(p[i]->grad.shape(), want[i].second) << p[i]->name;
            const std::vector<float> v = p[i]->value.to_vector();
            const float worst = std::fabs(*std::max_element(v.begin(), v.end(), [](float a, float b) {
                return std::fabs(a) < std::fabs(b);
            }));
            EXPECT_LE(worst, 0.5f) << "U(-1/sqrt(hidden), 1/sqrt(hidden)) for " << p[i]->name;
            EXPECT_GT(worst, 0.3f) << p[i]->name;
        }
    }
    // init = 0.08: char-rnn's U(-0.08, 0.08); forget_bias adds to bias_ih's f rows only, after the same draw.
    auto plain = make(true, hidden, 1, 0.0f, 0.0f, 0.08f), biased = make(true, hidden, 1, 0.0f, 1.0f, 0.08f);
    std::mt19937_64 r1(9), r2(9);
    plain->bind(dev(), {2, features}, r1);
    biased->bind(dev(), {2, features}, r2);
    for (size_t i = 0; i < 4; ++i) {
        const std::vector<float> a = plain->params()[i]->value.to_vector(), b = biased->params()[i]->value.to_vector();
        for (size_t j = 0; j < a.size(); ++j) {
            EXPECT_LE(std::fabs(a[j]), 0.08f);
            const bool forget = i == 2 && j >= static_cast<size_t>(hidden) && j < static_cast<size_t>(2 * hidden);
            EXPECT_FLOAT_EQ(b[j], a[j] + (forget ? 1.0f : 0.0f)) << plain->params()[i]->name << "[" << j << "]";
        }
    }
}

// Per time step the forward issues one GEMM and one run of elementwise ops (lstm 9, gru 11), and
// the backward one run (lstm 12, gru 10) and one GEMM: what the step fusion pass turns into 2 + 2
// launches. A steady step moves nothing between host and device.
TEST_P(RecurrentLayer, OpsPerTimeStepAndNoTransfersInASteadyStep) {
    for (bool lstm : {true, false}) {
        SCOPED_TRACE(lstm ? "lstm" : "gru");
        const int64_t batch = 2, features = 3, hidden = 4, levels = 2;
        auto launches = [&](int64_t time) {
            auto layer = make(lstm, hidden, levels, 0.2f);
            require(*layer);
            layer->bind(dev(), {time, features}, rng_.engine());
            Tensor x = upload(dev(), {batch, time, features}, rng_.uniform(batch * time * features));
            Tensor dy = upload(dev(), {batch, time, hidden}, rng_.uniform(batch * time * hidden));
            x.upload(dev());
            dy.upload(dev());
            layer->forward(dev(), x, true);
            layer->backward(dev(), dy, true);  // the first step allocates and uploads its gather indices
            StrictTransfers strict;
            const TransferCounts t0 = transfer_counts();
            const uint64_t l0 = dev().launches();
            layer->forward(dev(), x, true);
            const uint64_t l1 = dev().launches();
            layer->backward(dev(), dy, true);
            dev().sync();
            EXPECT_EQ((transfer_counts() - t0).count(), 0u) << "time " << time;
            return std::make_pair(l1 - l0, dev().launches() - l1);
        };
        const auto [f5, b5] = launches(5);
        const auto [f4, b4] = launches(4);
        EXPECT_EQ(f5 - f4, static_cast<uint64_t>(levels * (1 + (lstm ? 9 : 11)))) << "forward launches per step";
        EXPECT_EQ(b5 - b4, static_cast<uint64_t>(levels * (1 + (lstm ? 12 : 10)))) << "backward launches per step";
    }
}

TEST_P(RecurrentLayer, WrongInputsAreErrorsNamingTheLayer) {
    auto layer = make(true, 4, 1);
    layer->set_label("model layer 1 (lstm)");
    try {
        layer->bind(dev(), {12}, rng_.engine());
        ADD_FAILURE() << "a flat input was accepted";
    } catch (const Error& e) {
        EXPECT_TRUE(contains(e.what(), "model layer 1 (lstm): expects [time, features] per sample")) << e.what();
    }
    layer->bind(dev(), {5, 3}, rng_.engine());
    EXPECT_EQ(layer->output_shape({9, 3}), (Shape{9, 4}));
    try {
        layer->forward(dev(), Tensor({2, 5, 4}, DType::F32, dev()), true);
        ADD_FAILURE() << "4 features were accepted by a layer bound to 3";
    } catch (const Error& e) {
        EXPECT_TRUE(contains(e.what(), "model layer 1 (lstm): input: got [2, 5, 4], expected [2, 5, 3]")) << e.what();
    }
    try {
        layer->forward(dev(), Tensor({2, 5, 3}, DType::I32, dev()), true);
        ADD_FAILURE() << "int32 inputs were accepted";
    } catch (const Error& e) {
        EXPECT_TRUE(contains(e.what(), "model layer 1 (lstm): expects float features")) << e.what();
    }
    try {
        layer->backward(dev(), Tensor({2, 5, 4}, DType::F32, dev()), true);
        ADD_FAILURE() << "backward before forward";
    } catch (const Error& e) {
        EXPECT_TRUE(contains(e.what(), "backward before any forward")) << e.what();
    }
}

// ---- config ----------------------------------------------------------------------------------

TEST(RecurrentConfig, KeysAreReadIntoTheOptions) {
    const RunConfig c = parse_config(
        "[[model.layers]]\ntype = \"lstm\"\nhidden = 128\nlayers = 2\ndropout = 0.5\nforget_bias = 1.0\ninit = 0.08\n"
        "[[model.layers]]\ntype = \"gru\"\nhidden = 7\n",
        "t.toml");
    const RecurrentOptions& l = layer_options<RecurrentOptions>(c.layers[0]);
    EXPECT_EQ(l.hidden, 128);
    EXPECT_EQ(l.layers, 2);
    EXPECT_FLOAT_EQ(l.dropout, 0.5f);
    EXPECT_FLOAT_EQ(l.forget_bias, 1.0f);
    EXPECT_FLOAT_EQ(l.init, 0.08f);
    const RecurrentOptions& g = layer_options<RecurrentOptions>(c.layers[1]);
    EXPECT_EQ(g.hidden, 7);
    EXPECT_EQ(g.layers, 1);
    EXPECT_EQ(g.dropout, 0.0f);
    EXPECT_EQ(g.init, 0.0f);
    LayerContext context(c.source, c.seed);
    EXPECT_EQ(build_layer(c.layers[0], context)->kind(), "lstm");
    EXPECT_EQ(build_layer(c.layers[1], context)->kind(), "gru");
}

TEST(RecurrentConfig, BadValuesNameTheirKey) {
    const std::string lstm = "[[model.layers]]\ntype = \"lstm\"\n", gru = "[[model.layers]]\ntype = \"gru\"\n";
    EXPECT_EQ(config_error_of(lstm), "test.toml: key 'model.layers[0].hidden' is required for a lstm layer");
    EXPECT_EQ(config_error_of(gru), "test.toml: key 'model.layers[0].hidden' is required for a gru layer");
    EXPECT_EQ(config_error_of(lstm + "hidden = 0\n"),
              "test.toml: key 'model.layers[0].hidden' must be in [1, 2147483647], got 0");
    EXPECT_EQ(config_error_of(lstm + "hidden = 8\nlayers = 0\n"),
              "test.toml: key 'model.layers[0].layers' must be in [1, 1024], got 0");
    EXPECT_EQ(config_error_of(lstm + "hidden = 8\ndropout = 1.0\n"), "test.toml: key 'model.layers[0].dropout' must be in [0, 1)");
    EXPECT_EQ(config_error_of(gru + "hidden = 8\ninit = 0\n"),
              "test.toml: key 'model.layers[0].init' must be positive (the bound of U(-init, init)); leave it out for "
              "PyTorch's 1/sqrt(hidden)");
    EXPECT_EQ(config_error_of(gru + "hidden = 8\nforget_bias = 1\n"),
              "test.toml: unknown key 'model.layers[0].forget_bias' (known keys here: dropout, enabled, hidden, init, "
              "inputs, layers, name, shares, type)");
}


// Dropout between stacked levels draws a new mask for every training forward (a counter feeds the
// seed), and a run resumed with the saved counter draws the masks the uninterrupted run drew next.
// The plain dropout layer keeps the same promise. A counter that never advanced would train on one
// fixed mask: outputs that do not change from one step to the next.
TEST_P(RecurrentLayer, DropoutDrawsANewMaskEachTrainingStepAndTheSameAfterResume) {
    const int64_t time = 4, features = 3, hidden = 6, batch = 5;
    const std::vector<float> xv = rng_.uniform(batch * time * features, -2.0f, 2.0f);
    const Tensor x = upload(dev(), {batch, time, features}, xv);
    auto counter = [](Layer& l) { return l.counters().at(0).second; };
    for (bool lstm : {true, false}) {
        SCOPED_TRACE(lstm ? "lstm" : "gru");
        auto a = make(lstm, hidden, 3, 0.5f), b = make(lstm, hidden, 3, 0.5f);
        require(*a);
        std::mt19937_64 ra(5), rb(5);  // the same weights
        a->bind(dev(), {time, features}, ra);
        b->bind(dev(), {time, features}, rb);
        std::vector<std::vector<float>> steps;
        uint64_t after_first = 0;
        for (int step = 0; step < 3; ++step) {
            a->reset_state();  // only the masks may differ between steps
            steps.push_back(a->forward(dev(), x, true).to_vector());
            if (step == 0) after_first = *counter(*a);
        }
        EXPECT_NE(steps[0], steps[1]) << "the second step drew the first step's masks";
        EXPECT_NE(steps[1], steps[2]) << "the third step drew the second step's masks";
        EXPECT_NE(steps[0], steps[2]);
        // Inference drops nothing: the same output every time, whatever the counter.
        a->reset_state();
        const std::vector<float> eval = a->forward(dev(), x, false).to_vector();
        a->reset_state();
        EXPECT_EQ(a->forward(dev(), x, false).to_vector(), eval);
        // Resumed after the first step: the counter restored, the second step's masks again.
        *counter(*b) = after_first;
        b->reset_state();
        EXPECT_EQ(b->forward(dev(), x, true).to_vector(), steps[1]) << "a resumed run drew other masks";
    }
    Dropout d(0.5f, 77), e(0.5f, 77);
    std::mt19937_64 rd(1);
    d.bind(dev(), {batch, time * features}, rd);
    e.bind(dev(), {batch, time * features}, rd);
    const Tensor flat = upload(dev(), {batch, time * features}, xv);
    const std::vector<float> d1 = d.forward(dev(), flat, true).to_vector();
    const uint64_t d_after_first = *counter(d);
    const std::vector<float> d2 = d.forward(dev(), flat, true).to_vector();
    EXPECT_NE(d1, d2) << "dropout layer: the same mask twice";
    *counter(e) = d_after_first;
    EXPECT_EQ(e.forward(dev(), flat, true).to_vector(), d2) << "dropout layer: a resumed run drew another mask";
}

// A one_hot's token ids handed to the layer (Layer::take_token_ids, as the Net does for one_hot ->
// lstm): level 0 gathers W_ih's columns and scatters their gradient. The outputs are the one-hot
// GEMM's to the bit (its other products are zeros) and the parameter gradients the same sums in
// another order, for lstm and gru, one and two levels, repeated and unused tokens; a float
// one-hot input still takes the GEMM in the same layer; the ids have no gradient.
TEST_P(RecurrentLayer, TokenIdsGiveTheOneHotResults) {
    for (bool lstm : {true, false})
        for (int64_t levels : {1, 2}) {
            SCOPED_TRACE(std::string(lstm ? "lstm" : "gru") + " levels " + std::to_string(levels));
            const int64_t batch = 3, time = 5, vocab = 7, hidden = 6;
            auto ids_layer = make(lstm, hidden, levels, 0.0f, 1.0f), plain = make(lstm, hidden, levels, 0.0f, 1.0f);
            require(*plain);
            ids_layer->bind(dev(), {time, vocab}, rng_.engine());
            plain->bind(dev(), {time, vocab}, rng_.engine());
            if (!ids_layer->take_token_ids(vocab, dev().backend())) {
                EXPECT_FALSE(dev().backend().supports(XYLEM_OP_PERMUTE) &&
                             dev().backend().supports(XYLEM_OP_SCATTER_ADD_ROWS));
                continue;
            }
            EXPECT_FALSE(make(lstm, hidden, levels)->take_token_ids(vocab + 1, dev().backend())) << "unbound layer";
            require(*ids_layer);
            for (size_t i = 0; i < plain->params().size(); ++i)
                set_values(plain->params()[i]->value, ids_layer->params()[i]->value.to_vector());
            std::vector<int32_t> ids(static_cast<size_t>(batch * time));
            std::vector<float> one_hot(ids.size() * vocab, 0.0f);
            for (size_t k = 0; k < ids.size(); ++k) {
                ids[k] = static_cast<int32_t>(rng_.engine()() % (vocab - 1));  // the last token never occurs
                one_hot[k * vocab + static_cast<size_t>(ids[k])] = 1.0f;
            }
            const Tensor x_ids = upload_i32(dev(), {batch, time}, ids);
            const Tensor x_hot = upload(dev(), {batch, time, vocab}, one_hot);
            const Tensor dy = upload(dev(), {batch, time, hidden}, rng_.uniform(batch * time * hidden));
            for (int pass = 0; pass < 2; ++pass) {  // the second from the carried state
                const std::vector<float> y = ids_layer->forward(dev(), x_ids, true).to_vector();
                EXPECT_EQ(y, plain->forward(dev(), x_hot, true).to_vector()) << "pass " << pass;
                ids_layer->backward(dev(), dy, false);
                plain->backward(dev(), dy, false);
                for (size_t i = 0; i < plain->params().size(); ++i)
                    EXPECT_TRUE(near(ids_layer->params()[i]->grad.to_vector(), to_double(plain->params()[i]->grad.to_vector()),
                                     1e-5))
                        << "pass " << pass << ": gradient of " << plain->params()[i]->name;
            }
            const std::vector<float> unused = ids_layer->params()[0]->grad.to_vector();
            for (int64_t u = 0; u < (lstm ? 4 : 3) * hidden; ++u)
                EXPECT_EQ(unused[static_cast<size_t>(u * vocab + vocab - 1)], 0.0f) << "a token no step names";
            ids_layer->reset_state();
            plain->reset_state();
            EXPECT_EQ(ids_layer->forward(dev(), x_hot, true).to_vector(), plain->forward(dev(), x_hot, true).to_vector())
                << "one-hot floats in the layer that takes ids";
            ids_layer->forward(dev(), x_ids, true);
            ids_layer->set_label("model layer 1 (lstm)");
            try {
                ids_layer->backward(dev(), dy, true);
                ADD_FAILURE() << "a gradient for token ids";
            } catch (const Error& e) {
                EXPECT_TRUE(contains(e.what(), "model layer 1 (lstm): its input is token ids")) << e.what();
            }
        }
}

// The Net hands the ids over only where the one_hot's one reader takes them: not to two readers.
TEST_P(RecurrentLayer, NetPassesTokenIdsToTheOneHotsOnlyReader) {
    const int64_t vocab = 5, time = 4;
    {
        Net net;
        net.add("hot", {"input"}, std::make_unique<OneHot>(vocab));
        net.add("rnn", {"hot"}, make(true, 3, 1));
        for (uint32_t op : net.layer(1).ops_needed(true)) XYLEM_REQUIRE_OP(op);
        net.build(dev(), {time}, 3);
        const bool passed = dev().backend().supports(XYLEM_OP_PERMUTE) && dev().backend().supports(XYLEM_OP_SCATTER_ADD_ROWS);
        EXPECT_EQ(contains(net.summary(), "(read as token ids)"), passed) << net.summary();
        const Tensor& y = net.forward(dev(), upload_i32(dev(), {2, time}, {0, 1, 2, 3, 4, 4, 3, 2}), true);
        EXPECT_EQ(y.shape(), (Shape{2, time, 3}));
        // An id past the vocabulary is an error naming the lookup, as through the one_hot's own.
        try {
            net.forward(dev(), upload_i32(dev(), {2, time}, {0, 1, 2, 3, 4, 5, 3, 2}), true);
            dev().sync();
            ADD_FAILURE() << "id 5 of a vocabulary of 5 was accepted";
        } catch (const Error& e) {
            EXPECT_TRUE(contains(e.what(), "gather_rows")) << e.what();
            EXPECT_TRUE(contains(e.what(), "5")) << e.what();
        }
    }
    Net net;
    net.add("hot", {"input"}, std::make_unique<OneHot>(vocab));
    net.add("a", {"hot"}, make(true, 3, 1));
    net.add("b", {"hot"}, make(false, 3, 1));
    net.add("y", {"a", "b"}, std::make_unique<Add>());
    net.build(dev(), {time}, 3);
    EXPECT_FALSE(contains(net.summary(), "(read as token ids)")) << net.summary();
}

}  // namespace
}  // namespace xylem::test
