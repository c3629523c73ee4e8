// Transformer layers over every available backend: gradients against central differences for
// layer_norm (with and without bias), both GELUs, the position embedding, causal and full
// multi-head attention (with and without bias) and a whole pre-LN GPT block with a tied output
// head; decoding with the key/value cache gives the full forward's outputs; the errors name the
// layer and the numbers.
#include <cmath>
#include <memory>

#include "support/backends.h"
#include "support/gradcheck.h"
#include "xylem/error.h"
#include "xylem/layers/elementwise.h"
#include "xylem/layers/embedding.h"
#include "xylem/layers/linear.h"
#include "xylem/layers/merge.h"
#include "xylem/layers/net.h"
#include "xylem/layers/transformer.h"

namespace xylem::test {
namespace {

class TransformerGradient : public BackendTest {
protected:
    Rng rng_;

    void check_layer(Layer& layer, Tensor& x, double tol = kGradTol) {
        check_layer_gradients(dev(), layer, x, rng_, kGradEps, tol);
    }
    Tensor random(const Shape& shape, float lo = -1.0f, float hi = 1.0f) {
        return upload(dev(), shape, rng_.uniform(numel(shape), lo, hi));
    }
};
XYLEM_INSTANTIATE_OVER_BACKENDS(TransformerGradient);

#define REQUIRE_OPS(...) \
    for (uint32_t op_ : {__VA_ARGS__}) XYLEM_REQUIRE_OP(op_)

AttentionOptions attention_options(int64_t heads, bool causal, bool bias) {
    AttentionOptions o;
    o.heads = heads;
    o.causal = causal;
    o.bias = bias;
    return o;
}

TEST_P(TransformerGradient, LayerNormWithAndWithoutBias) {
    REQUIRE_OPS(XYLEM_OP_FILL, XYLEM_OP_LAYER_NORM_FWD, XYLEM_OP_LAYER_NORM_BWD);
    for (bool bias : {true, false}) {
        SCOPED_TRACE(bias ? "bias" : "no bias");
        LayerNorm ln(1e-5f, bias);
        ln.bind(dev(), {5, 7}, rng_.engine());
        // Parameters away from their init so that a transposed or missing term shows.
        for (Param* p : ln.params()) set_values(p->value, rng_.uniform(p->value.numel(), 0.5f, 1.5f));
        Tensor x = random({2, 5, 7});
        check_layer(ln, x);
    }
}

TEST_P(TransformerGradient, GeluBothForms) {
    REQUIRE_OPS(XYLEM_OP_ACT_FWD, XYLEM_OP_ACT_BWD);
    if (backend().api().abi_minor < 7) GTEST_SKIP() << "GELU came with ABI 1.7; the plugin is 1." << backend().api().abi_minor;
    for (xylem_activation act : {XYLEM_ACT_GELU, XYLEM_ACT_GELU_TANH}) {
        SCOPED_TRACE(act == XYLEM_ACT_GELU ? "gelu" : "gelu tanh");
        Activation gelu(act);
        Tensor x = random({3, 17}, -3.0f, 3.0f);
        check_layer(gelu, x);
    }
}

TEST_P(TransformerGradient, PositionEmbeddingShorterThanItsTable) {
    REQUIRE_OPS(XYLEM_OP_FILL, XYLEM_OP_ADD, XYLEM_OP_REDUCE);
    PositionEmbedding pe(9, 0.5f);
    pe.bind(dev(), {6, 4}, rng_.engine());
    Tensor x = random({3, 6, 4});
    check_layer(pe, x);
    // Rows past the sequence get no gradient.
    const std::vector<float> g = pe.params()[0]->grad.to_vector();
    for (size_t i = 6 * 4; i < g.size(); ++i) ASSERT_EQ(g[i], 0.0f) << "row " << i / 4;
}

TEST_P(TransformerGradient, AttentionCausalAndFullWithAndWithoutBias) {
    REQUIRE_OPS(XYLEM_OP_FILL, XYLEM_OP_LINEAR_FWD, XYLEM_OP_GEMM, XYLEM_OP_BIAS_GRAD, XYLEM_OP_PERMUTE,
                XYLEM_OP_GEMM_BATCHED, XYLEM_OP_MASKED_SOFTMAX, XYLEM_OP_SOFTMAX_BWD);
    for (bool causal : {true, false})
        for (bool bias : {true, false}) {
            SCOPED_TRACE(std::string(causal ? "causal" : "full") + (bias ? ", bias" : ", no bias"));
            Attention attn(attention_options(2, causal, bias), 7);
            attn.bind(dev(), {5, 6}, rng_.engine());
            ASSERT_EQ(attn.params().size(), bias ? 4u : 2u);
            EXPECT_EQ(attn.params()[0]->name, "c_attn.weight");
            Tensor x = random({2, 5, 6});
            check_layer(attn, x);
        }
}

// A causal model's output at position t depends on positions <= t only.
TEST_P(TransformerGradient, CausalAttentionNeverReadsTheFuture) {
    REQUIRE_OPS(XYLEM_OP_FILL, XYLEM_OP_LINEAR_FWD, XYLEM_OP_PERMUTE, XYLEM_OP_GEMM_BATCHED, XYLEM_OP_MASKED_SOFTMAX);
    Attention attn(attention_options(2, true, true), 7);
    attn.bind(dev(), {6, 4}, rng_.engine());
    Tensor x = random({1, 6, 4});
    const std::vector<float> before = attn.forward(dev(), x, false).to_vector();
    x.host_read_write<float>()[5 * 4 + 1] += 1.0f;  // the last position only
    const std::vector<float> after = attn.forward(dev(), x, false).to_vector();
    for (size_t i = 0; i < 5 * 4; ++i) ASSERT_EQ(before[i], after[i]) << "element " << i;
    bool changed = false;
    for (size_t i = 5 * 4; i < before.size(); ++i) changed = changed || before[i] != after[i];
    EXPECT_TRUE(changed);
}

// embedding -> position -> [ln -> attention -> add -> ln -> linear -> gelu -> linear -> add] -> ln -> head
// tied to the embedding: every parameter's gradient (the tied one gets both uses).
Net gpt_block_net(int64_t vocab, int64_t channels, int64_t time, uint64_t seed) {
    Net net;
    net.add("wte", {"input"}, std::make_unique<Embedding>(vocab, channels, 0.0f, 0.5f));
    net.add("wpe", {"wte"}, std::make_unique<PositionEmbedding>(time, 0.5f));
    net.add("ln_1", {"wpe"}, std::make_unique<LayerNorm>(1e-5f, true));
    net.add("attn", {"ln_1"}, std::make_unique<Attention>(attention_options(2, true, true), seed));
    net.add("res_1", {"wpe", "attn"}, std::make_unique<Add>());
    net.add("ln_2", {"res_1"}, std::make_unique<LayerNorm>(1e-5f, true));
    net.add("c_fc", {"ln_2"}, std::make_unique<Linear>(3 * channels));
    net.add("gelu", {"c_fc"}, std::make_unique<Activation>(XYLEM_ACT_GELU));
    net.add("c_proj", {"gelu"}, std::make_unique<Linear>(channels));
    net.add("res_2", {"res_1", "c_proj"}, std::make_unique<Add>());
    net.add("ln_f", {"res_2"}, std::make_unique<LayerNorm>(1e-5f, false));
    net.add("lm_head", {"ln_f"}, std::make_unique<Linear>(vocab, false), "wte");
    return net;
}

TEST_P(TransformerGradient, GptBlockWithTiedHead) {
    REQUIRE_OPS(XYLEM_OP_FILL, XYLEM_OP_GATHER_ROWS, XYLEM_OP_SCATTER_ADD_ROWS, XYLEM_OP_ADD, XYLEM_OP_REDUCE,
                XYLEM_OP_LAYER_NORM_FWD, XYLEM_OP_LAYER_NORM_BWD, XYLEM_OP_LINEAR_FWD, XYLEM_OP_GEMM,
                XYLEM_OP_BIAS_GRAD, XYLEM_OP_PERMUTE, XYLEM_OP_GEMM_BATCHED, XYLEM_OP_MASKED_SOFTMAX,
                XYLEM_OP_SOFTMAX_BWD, XYLEM_OP_ACT_FWD, XYLEM_OP_ACT_BWD, XYLEM_OP_COPY, XYLEM_OP_AXPBY);
    if (backend().api().abi_minor < 7) GTEST_SKIP() << "GELU came with ABI 1.7; the plugin is 1." << backend().api().abi_minor;
    const int64_t vocab = 7, channels = 4, time = 5;
    Net net = gpt_block_net(vocab, channels, time, 3);
    net.build(dev(), {time}, 11);
    Tensor tokens = tensor_from_i32({0, 3, 6, 3, 1, 2, 2, 5, 4, 0}, {2, time});
    const Shape out = net.forward(dev(), tokens, true).shape();
    ASSERT_EQ(out, (Shape{2, time, vocab}));
    const std::vector<double> r = to_double(rng_.uniform(numel(out), -1.0f, 1.0f));
    auto objective = [&] { return weighted_sum(net.forward(dev(), tokens, true), r); };
    objective();
    const Tensor dy = upload(dev(), out, to_float(r));
    net.backward(dev(), dy);
    const std::vector<Param*> ps = net.params();
    std::vector<std::vector<float>> analytic;
    for (Param* p : ps) analytic.push_back(p->grad.to_vector());
    ASSERT_EQ(ps[0]->name, "wte.weight");
    for (size_t i = 0; i < ps.size(); ++i)
        EXPECT_TRUE(near(analytic[i], numeric_gradient(ps[i]->value, objective, kGradEps), 5e-4))
            << "gradient of " << ps[i]->name;
    for (const Param* p : ps) EXPECT_NE(p->name, "lm_head.weight") << "the tied head has no parameter of its own";
}

// Decoding one token at a time with the key/value cache gives the full forward's outputs.
TEST_P(TransformerGradient, DecodingWithTheCacheMatchesTheFullForward) {
    REQUIRE_OPS(XYLEM_OP_FILL, XYLEM_OP_GATHER_ROWS, XYLEM_OP_ADD, XYLEM_OP_LAYER_NORM_FWD, XYLEM_OP_LINEAR_FWD,
                XYLEM_OP_PERMUTE, XYLEM_OP_GEMM_BATCHED, XYLEM_OP_MASKED_SOFTMAX, XYLEM_OP_ACT_FWD, XYLEM_OP_COPY,
                XYLEM_OP_AXPBY);
    if (backend().api().abi_minor < 7) GTEST_SKIP() << "GELU came with ABI 1.7; the plugin is 1." << backend().api().abi_minor;
    const int64_t vocab = 7, channels = 4, time = 6;
    Net net = gpt_block_net(vocab, channels, time, 3);
    net.build(dev(), {time}, 11);
    const std::vector<int32_t> seq = {1, 4, 4, 0, 6, 2};
    const std::vector<float> full = net.forward(dev(), tensor_from_i32(seq, {1, time}), false).to_vector();
    EXPECT_EQ(net.max_positions(), time);
    net.set_decoding(true);
    for (int64_t t = 0; t < time; ++t) {
        const std::vector<float> step = net.forward(dev(), tensor_from_i32({seq[t]}, {1, 1}), false).to_vector();
        ASSERT_EQ(step.size(), static_cast<size_t>(vocab));
        const std::vector<float> want(full.begin() + t * vocab, full.begin() + (t + 1) * vocab);
        EXPECT_TRUE(near(step, to_double(want), 1e-5)) << "position " << t;
    }
    // Past the position table: a clear error, not a read past it.
    try {
        net.forward(dev(), tensor_from_i32({1}, {1, 1}), false);
        ADD_FAILURE() << "no error past the table";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("positions 6 to 6 pass its table of 6 (max_len)"), std::string::npos)
            << e.what();
    }
    net.reset_state();  // a new sequence starts at position 0
    const std::vector<float> again = net.forward(dev(), tensor_from_i32({seq[0]}, {1, 1}), false).to_vector();
    EXPECT_TRUE(near(again, to_double(std::vector<float>(full.begin(), full.begin() + vocab)), 1e-5));
    net.set_decoding(false);
}

// A sequence longer than the cache's first capacity (64 positions): the cache grows, keeping what it
// holds; a prefix fed in one forward, then single steps, give the full forward's outputs.
TEST_P(TransformerGradient, TheCacheGrowsAndTakesAPrefixAtOnce) {
    REQUIRE_OPS(XYLEM_OP_FILL, XYLEM_OP_GATHER_ROWS, XYLEM_OP_ADD, XYLEM_OP_LAYER_NORM_FWD, XYLEM_OP_LINEAR_FWD,
                XYLEM_OP_PERMUTE, XYLEM_OP_GEMM_BATCHED, XYLEM_OP_MASKED_SOFTMAX, XYLEM_OP_ACT_FWD, XYLEM_OP_COPY,
                XYLEM_OP_AXPBY);
    if (backend().api().abi_minor < 7) GTEST_SKIP() << "GELU came with ABI 1.7; the plugin is 1." << backend().api().abi_minor;
    const int64_t vocab = 7, channels = 4, time = 150;
    Net net = gpt_block_net(vocab, channels, time, 3);
    net.build(dev(), {time}, 11);
    std::vector<int32_t> seq(static_cast<size_t>(time));
    for (int64_t t = 0; t < time; ++t) seq[static_cast<size_t>(t)] = static_cast<int32_t>((t * 5 + t / 7) % vocab);
    const std::vector<float> full = net.forward(dev(), tensor_from_i32(seq, {1, time}), false).to_vector();
    net.set_decoding(true);
    const int64_t prefix = 40;
    const std::vector<float> first =
        net.forward(dev(), tensor_from_i32(std::vector<int32_t>(seq.begin(), seq.begin() + prefix), {1, prefix}), false)
            .to_vector();
    EXPECT_TRUE(near(first, to_double(std::vector<float>(full.begin(), full.begin() + prefix * vocab)), 1e-5));
    for (int64_t t = prefix; t < time; ++t) {
        const std::vector<float> step = net.forward(dev(), tensor_from_i32({seq[static_cast<size_t>(t)]}, {1, 1}), false).to_vector();
        const std::vector<float> want(full.begin() + t * vocab, full.begin() + (t + 1) * vocab);
        ASSERT_TRUE(near(step, to_double(want), 1e-5)) << "position " << t;
    }
    net.set_decoding(false);
}

TEST_P(TransformerGradient, ErrorsNameTheLayerAndTheNumbers) {
    {
        Net net;
        net.add("wte", {"input"}, std::make_unique<Embedding>(5, 6));
        net.add("attn", {"wte"}, std::make_unique<Attention>(attention_options(4, true, true), 1));
        try {
            net.build(dev(), {3}, 1);
            ADD_FAILURE() << "heads not dividing the width were accepted";
        } catch (const Error& e) {
            EXPECT_NE(std::string(e.what()).find("heads = 4 does not divide the 6 channels"), std::string::npos)
                << e.what();
        }
    }
    {
        Net net;
        net.add("wte", {"input"}, std::make_unique<Embedding>(5, 4));
        net.add("wpe", {"wte"}, std::make_unique<PositionEmbedding>(8, 0.02f));
        try {
            net.build(dev(), {9}, 1);
            ADD_FAILURE() << "a sequence longer than the table was accepted";
        } catch (const Error& e) {
            EXPECT_NE(std::string(e.what()).find("a sequence of 9 positions is longer than its table of 8 (max_len)"),
                      std::string::npos)
                << e.what();
        }
    }
    {
        Net net;  // a tied head with a bias: two tensors where the embedding has one
        net.add("wte", {"input"}, std::make_unique<Embedding>(5, 4));
        net.add("head", {"wte"}, std::make_unique<Linear>(5, true), "wte");
        try {
            net.build(dev(), {3}, 1);
            ADD_FAILURE() << "a tied head with a bias was accepted";
        } catch (const Error& e) {
            EXPECT_NE(std::string(e.what()).find("a tied output head needs bias = false"), std::string::npos)
                << e.what();
        }
    }
}

}  // namespace
}  // namespace xylem::test
