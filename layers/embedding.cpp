// Embedding and OneHot: a row lookup forward; the embedding's gradient is a row scatter-add.
#include "xylem/layers/embedding.h"

#include <cmath>

#include "xylem/error.h"
#include "xylem/layers/registry.h"
#include "xylem/op_calls.h"

namespace xylem {

TokenLookup::TokenLookup(int64_t vocab, int64_t width) : vocab_(vocab), width_(width) {
    if (vocab <= 0 || width <= 0)
        throw Error("token layer: vocab and width must be positive, got " + std::to_string(vocab) + " and " +
                    std::to_string(width));
}

Shape TokenLookup::output_shape(const Shape& input) const {
    Shape out = input;
    out.push_back(width_);
    return out;
}

const Tensor& TokenLookup::lookup(Device& dev, const Tensor& table, const Tensor& x) {
    if (x.dtype() != DType::I32)
        throw Error(label() + ": takes int32 token indices (text data, [data] text), got " + dtype_name(x.dtype()) +
                    " input " + to_string(x.shape()));
    const int64_t tokens = x.numel();
    idx_ = x.reshaped({tokens});
    ensure(y_, output_shape(x.shape()), dev);
    Tensor rows = y_.reshaped({tokens, width_});
    ops::gather_rows(dev, table, idx_, rows);  // an index outside [0, vocab) is the op's error
    return y_;
}

void TokenLookup::refuse_input_gradient(bool need_dx) const {
    if (need_dx)
        throw Error(label() + ": its input is token indices, which have no gradient; put it first in the model");
}

Embedding::Embedding(int64_t vocab, int64_t dim, float init, float init_std)
    : TokenLookup(vocab, dim), init_(init), init_std_(init_std) {}

void Embedding::bind(Device& dev, const Shape& input, std::mt19937_64& rng) {
    output_shape(input);
    if (init_ > 0) {
        weight_ = uniform_param(dev, "weight", {vocab_, width_}, init_, rng);
        return;
    }
    // PyTorch's nn.Embedding: N(0, 1); GPT-2's N(0, 0.02^2).
    weight_ = normal_param(dev, "weight", {vocab_, width_}, init_std_ > 0 ? init_std_ : 1.0f, rng);
}

const Tensor& Embedding::forward(Device& dev, const Tensor& x, bool) { return lookup(dev, weight_.value, x); }

const Tensor& Embedding::backward(Device& dev, const Tensor& dy, bool need_dx) {
    if (dy.shape() != y_.shape()) shape_error("output gradient", dy.shape(), y_.shape());
    refuse_input_gradient(need_dx);
    // dW[v] = sum of dy over the tokens equal to v: rows no token names get 0 (a shared weight:
    // another layer wrote the gradient first, and this one adds to it).
    if (param_grad_beta() == 0.0f) ops::fill(dev, weight_.grad, 0.0f);
    ops::scatter_add_rows(dev, dy.reshaped({idx_.numel(), width_}), idx_, weight_.grad);
    return none_;
}

std::vector<uint32_t> Embedding::ops_needed(bool backward) const {
    if (!backward) return {XYLEM_OP_GATHER_ROWS};
    return {XYLEM_OP_GATHER_ROWS, XYLEM_OP_FILL, XYLEM_OP_SCATTER_ADD_ROWS};
}

OneHot::OneHot(int64_t vocab) : TokenLookup(vocab, vocab) {}

void OneHot::bind(Device& dev, const Shape& input, std::mt19937_64&) {
    output_shape(input);
    identity_ = Tensor({vocab_, vocab_}, DType::F32, dev);
    float* e = identity_.host_write<float>();
    for (int64_t i = 0; i < vocab_ * vocab_; ++i) e[i] = i / vocab_ == i % vocab_ ? 1.0f : 0.0f;
    identity_.upload(dev);  // now, not at the first step (where an implicit copy is an error)
}

const Tensor& OneHot::forward(Device& dev, const Tensor& x, bool) { return lookup(dev, identity_, x); }

const Tensor& OneHot::backward(Device&, const Tensor&, bool need_dx) {
    refuse_input_gradient(need_dx);
    return none_;
}

namespace {

const LayerRegistration<EmbeddingOptions> kEmbedding{
    "embedding", {"vocab", "dim", "init", "init_std"},
    [](const ConfigSection& s) {
        EmbeddingOptions o;
        if (!s.has("dim")) s.fail("dim", "is required for an embedding layer");
        s.get("dim", o.dim, ranges::features);
        s.get("vocab", o.vocab, ranges::features);
        s.get("init", o.init);
        if (s.has("init") && !(o.init > 0))
            s.fail("init", "must be positive (the bound of U(-init, init)); leave it out for PyTorch's N(0, 1)");
        s.get("init_std", o.init_std);
        if (s.has("init_std") && !(o.init_std > 0 && std::isfinite(o.init_std)))
            s.fail("init_std", "must be positive and finite (N(0, init_std^2))");
        if (s.has("init") && s.has("init_std")) s.fail("init_std", "and `init` exclude each other: give one");
        return o;
    },
    [](const EmbeddingOptions& o, LayerContext& c) -> std::unique_ptr<Layer> {
        const int64_t vocab = o.vocab ? o.vocab : c.vocabulary("an embedding layer without `vocab`");
        return std::make_unique<Embedding>(vocab, o.dim, o.init, o.init_std);
    }};

const LayerRegistration<OneHotOptions> kOneHot{
    "one_hot", {"vocab"},
    [](const ConfigSection& s) {
        OneHotOptions o;
        s.get("vocab", o.vocab, ranges::features);
        return o;
    },
    [](const OneHotOptions& o, LayerContext& c) -> std::unique_ptr<Layer> {
        return std::make_unique<OneHot>(o.vocab ? o.vocab : c.vocabulary("a one_hot layer without `vocab`"));
    }};

}  // namespace

}  // namespace xylem
