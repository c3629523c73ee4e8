// The token layers over every available backend: embedding's lookup against the table and its
// weight gradient against central differences (repeated tokens accumulate), one_hot's rows, and
// their errors. Runs in the conformance kit too (a `gradient` file).
#include <memory>

#include "support/backends.h"
#include "support/gradcheck.h"
#include "xylem/error.h"
#include "xylem/layers/embedding.h"
#include "xylem/layers/net.h"

namespace xylem::test {
namespace {

class TokenLayers : public BackendTest {
protected:
    Rng rng_;
};
XYLEM_INSTANTIATE_OVER_BACKENDS(TokenLayers);

// Every output row is the weight row its token names.
TEST_P(TokenLayers, EmbeddingLooksRowsUp) {
    XYLEM_REQUIRE_OP(XYLEM_OP_GATHER_ROWS);
    XYLEM_REQUIRE_HELPER_OP(XYLEM_OP_FILL);
    const int64_t vocab = 6, dim = 3;
    Embedding layer(vocab, dim, 0.5f);
    layer.bind(dev(), {4}, rng_.engine());
    EXPECT_EQ(layer.output_shape({4}), (Shape{4, dim}));
    EXPECT_EQ(layer.input_dtype(), DType::I32);
    const std::vector<int32_t> tokens = {0, 5, 5, 2, 1, 0, 3, 5};
    Tensor x = upload_i32(dev(), {2, 4}, tokens);
    const Tensor& y = layer.forward(dev(), x, true);
    ASSERT_EQ(y.shape(), (Shape{2, 4, dim}));
    const std::vector<float> w = layer.params()[0]->value.to_vector(), got = y.to_vector();
    for (size_t i = 0; i < tokens.size(); ++i)
        for (int64_t d = 0; d < dim; ++d)
            EXPECT_EQ(got[i * dim + static_cast<size_t>(d)], w[static_cast<size_t>(tokens[i] * dim + d)])
                << "token " << i << " dim " << d;
    for (float v : w) EXPECT_LE(std::fabs(v), 0.5f) << "init bounds the weights";
}

// dJ/dW for J = sum(r * y) by central differences, with tokens that repeat (their rows add up)
// and a token that never occurs (its row's gradient is 0), over [N, T] and [N] inputs.
TEST_P(TokenLayers, EmbeddingWeightGradient) {
    XYLEM_REQUIRE_OP(XYLEM_OP_GATHER_ROWS);
    XYLEM_REQUIRE_OP(XYLEM_OP_SCATTER_ADD_ROWS);
    XYLEM_REQUIRE_HELPER_OP(XYLEM_OP_FILL);
    const int64_t vocab = 7, dim = 4;
    for (const Shape& s : {Shape{3, 5}, Shape{6}}) {
        SCOPED_TRACE("tokens " + to_string(s));
        Embedding layer(vocab, dim);  // N(0, 1): PyTorch's init
        layer.bind(dev(), Shape(s.begin() + 1, s.end()), rng_.engine());
        std::vector<int32_t> tokens = rng_.labels(numel(s), vocab - 1);  // token vocab - 1 never occurs
        tokens[0] = tokens[1] = 2;                                        // a repeat, for sure
        Tensor x = upload_i32(dev(), s, tokens);
        Shape out = s;
        out.push_back(dim);
        const std::vector<double> r = to_double(rng_.uniform(numel(out)));
        auto objective = [&] { return weighted_sum(layer.forward(dev(), x, true), r); };
        objective();
        const Tensor dy = upload(dev(), out, to_float(r));
        layer.backward(dev(), dy, false);
        Param& w = *layer.params()[0];
        const std::vector<float> analytic = w.grad.to_vector();
        EXPECT_TRUE(near(analytic, numeric_gradient(w.value, objective, kGradEps), kGradTol));
        for (int64_t d = 0; d < dim; ++d) EXPECT_EQ(analytic[static_cast<size_t>((vocab - 1) * dim + d)], 0.0f);
        // A second backward overwrites, it does not add to the last step's gradient.
        layer.forward(dev(), x, true);
        layer.backward(dev(), dy, false);
        EXPECT_EQ(w.grad.to_vector(), analytic);
    }
}

TEST_P(TokenLayers, OneHotRowsAndNoParameters) {
    XYLEM_REQUIRE_OP(XYLEM_OP_GATHER_ROWS);
    const int64_t vocab = 5;
    OneHot layer(vocab);
    layer.bind(dev(), {3}, rng_.engine());
    EXPECT_TRUE(layer.params().empty());
    const std::vector<int32_t> tokens = {4, 0, 2, 2, 1, 3};
    Tensor x = upload_i32(dev(), {2, 3}, tokens);
    const Tensor& y = layer.forward(dev(), x, false);
    ASSERT_EQ(y.shape(), (Shape{2, 3, vocab}));
    const std::vector<float> got = y.to_vector();
    for (size_t i = 0; i < tokens.size(); ++i)
        for (int64_t c = 0; c < vocab; ++c)
            EXPECT_EQ(got[i * vocab + static_cast<size_t>(c)], c == tokens[i] ? 1.0f : 0.0f) << "token " << i;
}

// Float input, and a model asking for the gradient of token indices, are errors naming the layer.
TEST_P(TokenLayers, MisuseIsAnErrorNamingTheLayer) {
    XYLEM_REQUIRE_OP(XYLEM_OP_GATHER_ROWS);
    XYLEM_REQUIRE_HELPER_OP(XYLEM_OP_FILL);
    Net model;
    model.add(std::make_unique<Embedding>(4, 2));
    model.build(dev(), {3}, 1);
    EXPECT_EQ(model.input_dtype(), DType::I32);
    Tensor floats = upload(dev(), {1, 3}, {0.0f, 1.0f, 2.0f});
    try {
        model.forward(dev(), floats, false);
        FAIL() << "no error";
    } catch (const Error& e) {
        EXPECT_TRUE(contains(e.what(), "model layer 0 (embedding) takes int32")) << e.what();
    }
    OneHot one_hot(4);
    one_hot.set_label("model layer 1 (one_hot)");
    one_hot.bind(dev(), {3}, rng_.engine());
    Tensor tokens = upload_i32(dev(), {1, 3}, {0, 1, 3});
    const Shape y = one_hot.forward(dev(), tokens, true).shape();
    Tensor dy(y, DType::F32, dev());
    try {
        one_hot.backward(dev(), dy, true);
        FAIL() << "no error";
    } catch (const Error& e) {
        EXPECT_TRUE(contains(e.what(), "model layer 1 (one_hot): its input is token indices")) << e.what();
    }
    EXPECT_THROW(Embedding(0, 3), Error);
}

}  // namespace
}  // namespace xylem::test
