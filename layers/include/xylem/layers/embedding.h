// Token layers: int32 token indices in, one vector per token out (the input layer of a
// character-level language model). Embedding looks each token's row up in a learned table; its
// gradient accumulates the output gradient's rows into the table, several rows into one for a token
// that occurs several times. OneHot is the same lookup in a fixed identity table: nothing to learn
// (char-rnn's default input).
#pragma once

#include "xylem/layers/layer.h"

namespace xylem {

// [[model.layers]] type = "embedding": dim (required), vocab (default: the data's vocabulary size),
// init (> 0: U(-x, x) instead of PyTorch's N(0, 1)), init_std (> 0: N(0, init_std^2); GPT-2: 0.02).
struct EmbeddingOptions {
    int64_t vocab = 0;  // 0: the data's
    int64_t dim = 0;
    float init = 0;
    float init_std = 0;
};
// [[model.layers]] type = "one_hot": vocab (default: the data's vocabulary size).
struct OneHotOptions {
    int64_t vocab = 0;  // 0: the data's
};

// What the two share: int32 indices in [0, vocab) of any per-sample shape S in, S + [width] out.
class TokenLookup : public Layer {
public:
    int64_t vocab() const { return vocab_; }
    DType input_dtype() const override { return DType::I32; }
    Shape output_shape(const Shape& input) const override;

protected:
    TokenLookup(int64_t vocab, int64_t width);
    // y = table[x] row by row (ops::gather_rows); keeps the flat indices for backward.
    const Tensor& lookup(Device& dev, const Tensor& table, const Tensor& x);
    // Token indices have no gradient: a layer before this one cannot learn from it.
    void refuse_input_gradient(bool need_dx) const;

    int64_t vocab_, width_;
    Tensor idx_, y_, none_;  // idx_: the last batch's indices as [tokens]
};

class Embedding : public TokenLookup {
public:
    Embedding(int64_t vocab, int64_t dim, float init = 0, float init_std = 0);
    std::string kind() const override { return "embedding"; }
    void bind(Device& dev, const Shape& input, std::mt19937_64& rng) override;
    const Tensor& forward(Device& dev, const Tensor& x, bool train) override;
    const Tensor& backward(Device& dev, const Tensor& dy, bool need_dx) override;
    std::vector<Param*> params() override { return {&weight_}; }
    ParamFloats param_floats_of(const std::vector<Shape>&) const override { return {vocab_ * width_, 0}; }
    bool can_accumulate_param_grads() const override { return true; }
    std::vector<uint32_t> ops_needed(bool backward) const override;

private:
    float init_, init_std_;
    Param weight_;  // [vocab, dim]
};

class OneHot : public TokenLookup {
public:
    explicit OneHot(int64_t vocab);
    std::string kind() const override { return "one_hot"; }
    void bind(Device& dev, const Shape& input, std::mt19937_64& rng) override;
    const Tensor& forward(Device& dev, const Tensor& x, bool train) override;
    const Tensor& backward(Device& dev, const Tensor& dy, bool need_dx) override;
    std::vector<uint32_t> ops_needed(bool) const override { return {XYLEM_OP_GATHER_ROWS}; }

private:
    Tensor identity_;  // [vocab, vocab], built once at bind
};

}  // namespace xylem
