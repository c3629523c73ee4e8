// Transformer layers: layer normalisation, a learned position embedding and causal multi-head
// self-attention (GPT-2 / nanoGPT's blocks). Each is a few core ops: layer_norm_fwd/bwd, add and a
// reduce, and for attention two linear layers around ONE attention op per pass (ops.h's
// attention_fwd/bwd; the core composes it when a backend lacks it) with the head split and merge as
// permute ops. Sequences are [batch, time, channels].
#pragma once

#include <memory>

#include "xylem/layers/layer.h"
#include "xylem/layers/linear.h"

namespace xylem {

// [[model.layers]] type = "layer_norm": eps (1e-5), bias (true). Over the last axis, as
// torch.nn.LayerNorm(channels): weight (ones) and bias (zeros).
struct LayerNormOptions {
    float eps = 1e-5f;
    bool bias = true;
};

class LayerNorm : public Layer {
public:
    LayerNorm(float eps, bool bias);
    std::string kind() const override { return "layer_norm"; }
    Shape output_shape(const Shape& input) const override;
    void bind(Device& dev, const Shape& input, std::mt19937_64& rng) override;
    const Tensor& forward(Device& dev, const Tensor& x, bool train) override;
    const Tensor& backward(Device& dev, const Tensor& dy, bool need_dx) override;
    std::vector<Param*> params() override;
    ParamFloats param_floats_of(const std::vector<Shape>& in) const override {
        return {in[0].back() * (has_bias_ ? 2 : 1), 0};
    }
    bool can_accumulate_param_grads() const override { return true; }
    std::vector<uint32_t> ops_needed(bool backward) const override;

private:
    float eps_;
    bool has_bias_;
    int64_t width_ = 0;
    Param weight_, bias_;
    Tensor x_, y_, mean_, rstd_, dx_;
};

// [[model.layers]] type = "position_embedding": max_len (required: the longest sequence, nanoGPT's
// block_size), init_std (0.02; 0: PyTorch's N(0, 1)). y[b, t] = x[b, t] + weight[t]; in decoding
// the positions continue from the previous forwards'.
struct PositionEmbeddingOptions {
    int64_t max_len = 0;
    float init_std = 0.02f;
};

class PositionEmbedding : public Layer {
public:
    PositionEmbedding(int64_t max_len, float init_std);
    std::string kind() const override { return "position_embedding"; }
    Shape output_shape(const Shape& input) const override;
    void bind(Device& dev, const Shape& input, std::mt19937_64& rng) override;
    const Tensor& forward(Device& dev, const Tensor& x, bool train) override;
    const Tensor& backward(Device& dev, const Tensor& dy, bool need_dx) override;
    std::vector<Param*> params() override { return {&weight_}; }
    ParamFloats param_floats_of(const std::vector<Shape>& in) const override { return {max_len_ * in[0].back(), 0}; }
    bool can_accumulate_param_grads() const override { return true; }
    std::vector<uint32_t> ops_needed(bool backward) const override;
    void set_decoding(bool on) override { decoding_ = on, offset_ = 0; }
    void reset_state() override { offset_ = 0; }
    int64_t max_positions() const override { return max_len_; }

private:
    int64_t max_len_, width_ = 0, offset_ = 0, time_ = 0;
    float init_std_;
    bool decoding_ = false;
    Param weight_;  // [max_len, channels]
    Tensor y_, dy_passed_;
};

// [[model.layers]] type = "attention": heads (required, dividing the channels), causal (true),
// bias (true), dropout (0: on the attention probabilities), init_std (0: PyTorch's linear init;
// 0.02 is GPT-2's), proj_init_std (c_proj's, default init_std; GPT-2: 0.02/sqrt(2*layers)).
// Parameters as nanoGPT's CausalSelfAttention: c_attn.weight [3C, C] (q, k, v stacked), c_attn.bias,
// c_proj.weight [C, C], c_proj.bias.
struct AttentionOptions {
    int64_t heads = 0;
    bool causal = true, bias = true;
    float dropout = 0, init_std = 0, proj_init_std = -1;
};

class Attention : public Layer {
public:
    Attention(const AttentionOptions& options, uint64_t seed);
    std::string kind() const override { return "attention"; }
    Shape output_shape(const Shape& input) const override;
    void bind(Device& dev, const Shape& input, std::mt19937_64& rng) override;
    const Tensor& forward(Device& dev, const Tensor& x, bool train) override;
    const Tensor& backward(Device& dev, const Tensor& dy, bool need_dx) override;
    std::vector<Param*> params() override;
    ParamFloats param_floats_of(const std::vector<Shape>& in) const override {
        const int64_t c = in[0].back();
        return {4 * c * c + (o_.bias ? 4 * c : 0), 0};
    }
    bool can_accumulate_param_grads() const override { return true; }
    std::vector<uint32_t> ops_needed(bool backward) const override;
    std::vector<std::pair<std::string, uint64_t*>> counters() override { return {{"dropout_calls", &calls_}}; }
    void set_decoding(bool on) override;
    void reset_state() override { cached_ = 0; }

private:
    xylem_attention_attrs attrs(bool train, int32_t kv_length) const;
    // Decoding: appends this forward's keys and values to the cache (growing it) and returns the
    // number of cached positions.
    int64_t append_to_cache(Device& dev, int64_t b, int64_t t);

    AttentionOptions o_;
    uint64_t seed_, calls_ = 0;
    int64_t channels_ = 0, head_dim_ = 0;
    std::unique_ptr<Linear> c_attn_, c_proj_;
    bool decoding_ = false;
    int64_t cached_ = 0;            // positions in the cache
    Tensor cache_k_, cache_v_;      // [B, H, capacity, head_dim]
    Tensor qkv_heads_, q_, k_, v_;  // [3, B, H, T, D] and its three parts
    Tensor o_heads_, lse_, merged_; // [B, H, T, D], [B, H, T], [B, T, C]
    Tensor do_heads_, dqkv_heads_, dqkv_;
    uint64_t seed_used_ = 0;
    float dropout_used_ = 0;
};

}  // namespace xylem
