// LayerNorm, PositionEmbedding and Attention (transformer.h).
#include "xylem/layers/transformer.h"

#include <cmath>

#include "xylem/error.h"
#include "xylem/layers/registry.h"
#include "xylem/op_calls.h"

namespace xylem {

namespace {
// A sequence batch [B, T, C] (the per-sample shape [T, C]).
void expect_sequence(const Layer& l, const Shape& input) {
    if (input.size() != 2)
        throw Error(l.label() + ": expects a sequence [time, channels] per sample, got " + to_string(input) +
                    " (put an embedding layer first)");
}
}  // namespace

// ---- LayerNorm -------------------------------------------------------------------------------

LayerNorm::LayerNorm(float eps, bool bias) : eps_(eps), has_bias_(bias) {
    if (!(eps >= 0.0f) || !std::isfinite(eps)) throw Error("layer_norm: eps must be finite and >= 0");
}

Shape LayerNorm::output_shape(const Shape& input) const {
    if (input.empty()) shape_error("needs at least one axis (the normalised one)", input, {width_ ? width_ : -1});
    if (width_ && input.back() != width_) shape_error("last axis does not match the weight", input, {width_});
    return input;
}

void LayerNorm::bind(Device& dev, const Shape& input, std::mt19937_64&) {
    output_shape(input);
    width_ = input.back();
    weight_ = constant_param(dev, "weight", {width_}, 1.0f);
    if (has_bias_) bias_ = constant_param(dev, "bias", {width_}, 0.0f);
}

const Tensor& LayerNorm::forward(Device& dev, const Tensor& x, bool) {
    if (x.shape().empty() || x.shape().back() != width_) shape_error("input", x.shape(), {-1, width_});
    x_ = x;
    const int64_t rows = x.numel() / width_;
    ensure(y_, x.shape(), dev);
    ensure(mean_, {rows}, dev);
    ensure(rstd_, {rows}, dev);
    ops::layer_norm_fwd(dev, x, weight_.value, has_bias_ ? &bias_.value : nullptr, y_, mean_, rstd_, eps_);
    return y_;
}

const Tensor& LayerNorm::backward(Device& dev, const Tensor& dy, bool) {
    if (dy.shape() != y_.shape()) shape_error("output gradient", dy.shape(), y_.shape());
    // The op writes dX whether or not it is needed: it comes from the same per-row sums as dgamma.
    ops::layer_norm_bwd(dev, dy, x_, weight_.value, mean_, rstd_, ensure(dx_, dy.shape(), dev), weight_.grad,
                        has_bias_ ? &bias_.grad : nullptr, eps_, param_grad_beta());
    return dx_;
}

std::vector<Param*> LayerNorm::params() {
    if (has_bias_) return {&weight_, &bias_};
    return {&weight_};
}

std::vector<uint32_t> LayerNorm::ops_needed(bool backward) const {
    if (!backward) return {XYLEM_OP_FILL, XYLEM_OP_LAYER_NORM_FWD};
    return {XYLEM_OP_FILL, XYLEM_OP_LAYER_NORM_FWD, XYLEM_OP_LAYER_NORM_BWD};
}

// ---- PositionEmbedding -----------------------------------------------------------------------

PositionEmbedding::PositionEmbedding(int64_t max_len, float init_std) : max_len_(max_len), init_std_(init_std) {
    if (max_len < 1) throw Error("position_embedding: max_len must be positive");
}

Shape PositionEmbedding::output_shape(const Shape& input) const {
    expect_sequence(*this, input);
    if (input[0] > max_len_)
        throw Error(label() + ": a sequence of " + std::to_string(input[0]) + " positions is longer than its table of " +
                    std::to_string(max_len_) + " (max_len)");
    if (width_ && input[1] != width_) shape_error("channels do not match the table", input, {input[0], width_});
    return input;
}

void PositionEmbedding::bind(Device& dev, const Shape& input, std::mt19937_64& rng) {
    output_shape(input);
    width_ = input[1];
    weight_ = normal_param(dev, "weight", {max_len_, width_}, init_std_ > 0 ? init_std_ : 1.0f, rng);
}

const Tensor& PositionEmbedding::forward(Device& dev, const Tensor& x, bool train) {
    if (x.shape().size() != 3 || x.dim(2) != width_) shape_error("input", x.shape(), {-1, -1, width_});
    if (decoding_ && train) throw Error(label() + ": a training forward while decoding (sampling) is on");
    const int64_t b = x.dim(0), t = x.dim(1), first = decoding_ ? offset_ : 0;
    if (first + t > max_len_)
        throw Error(label() + ": positions " + std::to_string(first) + " to " + std::to_string(first + t - 1) +
                    " pass its table of " + std::to_string(max_len_) + " (max_len)" +
                    (decoding_ ? "; the sampler restarts its context before that" : ""));
    time_ = t;
    ensure(y_, x.shape(), dev);
    // x viewed as [B, T*C] plus the table's rows [first, first + t) as one row vector.
    const Tensor rows = weight_.value.rows(first, t).reshaped({t * width_});
    Tensor y = y_.reshaped({b, t * width_});
    ops::add(dev, 1.0f, x.reshaped({b, t * width_}), 1.0f, rows, y);
    if (decoding_) offset_ += t;
    return y_;
}

const Tensor& PositionEmbedding::backward(Device& dev, const Tensor& dy, bool) {
    if (dy.shape() != y_.shape()) shape_error("output gradient", dy.shape(), y_.shape());
    const int64_t b = dy.dim(0), t = time_;
    // dW[t] = sum over the batch of dy[:, t]; the rows past t get nothing (0, or kept when shared).
    const float beta = param_grad_beta();
    if (beta == 0.0f && t < max_len_) {
        Tensor rest = weight_.grad.rows(t, max_len_ - t);
        ops::fill(dev, rest, 0.0f);
    }
    Tensor used = weight_.grad.rows(0, t).reshaped({t * width_});
    ops::reduce(dev, dy.reshaped({b, t * width_}), used, XYLEM_REDUCE_SUM, 0, beta);
    dy_passed_ = dy;  // dx = dy
    return dy_passed_;
}

std::vector<uint32_t> PositionEmbedding::ops_needed(bool backward) const {
    if (!backward) return {XYLEM_OP_FILL, XYLEM_OP_ADD};
    return {XYLEM_OP_FILL, XYLEM_OP_ADD, XYLEM_OP_REDUCE};
}

// ---- Attention -------------------------------------------------------------------------------

namespace {
// [B, T, 3, H, D] -> [3, B, H, T, D]: q, k and v each one dense [B, H, T, D] block.
const std::vector<int> kSplitHeads = {2, 0, 3, 1, 4};
const std::vector<int> kJoinSplit = {1, 3, 0, 2, 4};  // its inverse
// [B, H, T, D] <-> [B, T, H, D]: merging the heads back into channels (the permutation is its own inverse).
const std::vector<int> kSwapTimeHeads = {0, 2, 1, 3};

Tensor part(const Tensor& stacked, int64_t i, const Shape& shape) {
    const int64_t n = numel(shape);
    return stacked.reshaped({3, n}).rows(i, 1).reshaped(shape);
}
}  // namespace

Attention::Attention(const AttentionOptions& options, uint64_t seed) : o_(options), seed_(seed) {
    if (o_.heads < 1) throw Error("attention: heads must be positive");
    if (!(o_.dropout >= 0.0f && o_.dropout < 1.0f)) throw Error("attention: dropout must be in [0, 1)");
}

Shape Attention::output_shape(const Shape& input) const {
    expect_sequence(*this, input);
    if (input[1] % o_.heads)
        throw Error(label() + ": heads = " + std::to_string(o_.heads) + " does not divide the " +
                    std::to_string(input[1]) + " channels of its input " + to_string(input));
    if (channels_ && input[1] != channels_) shape_error("channels do not match the weights", input, {input[0], channels_});
    return input;
}

void Attention::bind(Device& dev, const Shape& input, std::mt19937_64& rng) {
    output_shape(input);
    channels_ = input[1];
    head_dim_ = channels_ / o_.heads;
    const float proj_std = o_.proj_init_std >= 0 ? o_.proj_init_std : o_.init_std;
    c_attn_ = std::make_unique<Linear>(3 * channels_, o_.bias, 0.0f, o_.init_std);
    c_proj_ = std::make_unique<Linear>(channels_, o_.bias, 0.0f, proj_std);
    c_attn_->set_label(label() + " c_attn");
    c_proj_->set_label(label() + " c_proj");
    c_attn_->set_param_prefix(param_prefix() + "c_attn.");
    c_proj_->set_param_prefix(param_prefix() + "c_proj.");
    c_attn_->bind(dev, input, rng);
    c_proj_->bind(dev, input, rng);
}

std::vector<Param*> Attention::params() {
    if (!c_attn_) return {};  // not bound yet
    std::vector<Param*> ps = c_attn_->params();
    for (Param* p : c_proj_->params()) ps.push_back(p);
    return ps;
}

xylem_attention_attrs Attention::attrs(bool train, int32_t kv_length) const {
    xylem_attention_attrs a{};
    a.scale = 1.0f / std::sqrt(static_cast<float>(head_dim_));
    a.causal = o_.causal ? 1 : 0;
    a.dropout_p = train ? o_.dropout : 0.0f;
    a.kv_length = kv_length;
    return a;
}

void Attention::set_decoding(bool on) {
    decoding_ = on;
    cached_ = 0;
    if (!on) cache_k_ = cache_v_ = Tensor();
}

int64_t Attention::append_to_cache(Device& dev, int64_t b, int64_t t) {
    const int64_t h = o_.heads, d = head_dim_;
    if (cache_k_.defined() && cache_k_.dim(0) != b) {  // another batch of sequences: start afresh
        cache_k_ = cache_v_ = Tensor();
        cached_ = 0;
    }
    const int64_t need = cached_ + t;
    const int64_t capacity = cache_k_.defined() ? cache_k_.dim(2) : 0;
    if (need > capacity) {
        // Grow by doubling, keeping what is cached: each (batch, head)'s rows move to the new stride.
        int64_t grown = capacity ? capacity : 64;
        while (grown < need) grown *= 2;
        Tensor k({b, h, grown, d}, DType::F32, dev), v({b, h, grown, d}, DType::F32, dev);
        for (int64_t bh = 0; cached_ && bh < b * h; ++bh) {
            for (auto [from, to] : {std::pair<Tensor*, Tensor*>{&cache_k_, &k}, {&cache_v_, &v}}) {
                Tensor dst = to->reshaped({b * h * grown, d}).rows(bh * grown, cached_);
                ops::copy(dev, from->reshaped({b * h * capacity, d}).rows(bh * capacity, cached_), dst);
            }
        }
        cache_k_ = k, cache_v_ = v;
    }
    const int64_t cap = cache_k_.dim(2);
    for (int64_t bh = 0; bh < b * h; ++bh) {
        for (auto [from, to] : {std::pair<const Tensor*, Tensor*>{&k_, &cache_k_}, {&v_, &cache_v_}}) {
            Tensor dst = to->reshaped({b * h * cap, d}).rows(bh * cap + cached_, t);
            ops::copy(dev, from->reshaped({b * h * t, d}).rows(bh * t, t), dst);
        }
    }
    cached_ = need;
    return cached_;
}

const Tensor& Attention::forward(Device& dev, const Tensor& x, bool train) {
    if (x.shape().size() != 3 || x.dim(2) != channels_) shape_error("input", x.shape(), {-1, -1, channels_});
    if (decoding_ && train) throw Error(label() + ": a training forward while decoding (sampling) is on");
    const int64_t b = x.dim(0), t = x.dim(1), h = o_.heads, d = head_dim_;
    const Tensor& qkv = c_attn_->forward(dev, x, train);  // [B, T, 3C]
    ensure(qkv_heads_, {3, b, h, t, d}, dev);
    ops::permute(dev, qkv.reshaped({b, t, 3, h, d}), qkv_heads_, kSplitHeads);
    const Shape heads{b, h, t, d};
    q_ = part(qkv_heads_, 0, heads), k_ = part(qkv_heads_, 1, heads), v_ = part(qkv_heads_, 2, heads);
    ensure(o_heads_, heads, dev);
    ensure(lse_, {b, h, t}, dev);
    if (decoding_) {
        const int64_t keys = append_to_cache(dev, b, t);
        ops::attention_fwd(dev, q_, cache_k_, cache_v_, nullptr, o_heads_, lse_,
                           attrs(false, static_cast<int32_t>(keys)));
    } else {
        xylem_attention_attrs a = attrs(train, 0);
        if (a.dropout_p > 0) a.seed = seed_ + 0x632BE59BD9B4E019ull * ++calls_;  // a fresh mask stream per step
        seed_used_ = a.seed, dropout_used_ = a.dropout_p;
        ops::attention_fwd(dev, q_, k_, v_, nullptr, o_heads_, lse_, a);
    }
    ensure(merged_, {b, t, channels_}, dev);
    Tensor merged = merged_.reshaped({b, t, h, d});
    ops::permute(dev, o_heads_, merged, kSwapTimeHeads);
    return c_proj_->forward(dev, merged_, train);
}

const Tensor& Attention::backward(Device& dev, const Tensor& dy, bool need_dx) {
    if (decoding_) throw Error(label() + ": backward while decoding (sampling) is on");
    const Tensor& dmerged = c_proj_->backward(dev, dy, true);  // [B, T, C]
    const int64_t b = dmerged.dim(0), t = dmerged.dim(1), h = o_.heads, d = head_dim_;
    const Shape heads{b, h, t, d};
    ensure(do_heads_, heads, dev);
    ops::permute(dev, dmerged.reshaped({b, t, h, d}), do_heads_, kSwapTimeHeads);
    ensure(dqkv_heads_, {3, b, h, t, d}, dev);
    Tensor dq = part(dqkv_heads_, 0, heads), dk = part(dqkv_heads_, 1, heads), dv = part(dqkv_heads_, 2, heads);
    xylem_attention_attrs a = attrs(dropout_used_ > 0, 0);
    a.dropout_p = dropout_used_, a.seed = seed_used_;  // the forward's mask
    ops::attention_bwd(dev, do_heads_, q_, k_, v_, o_heads_, lse_, nullptr, dq, dk, dv, a);
    ensure(dqkv_, {b, t, 3 * channels_}, dev);
    Tensor dqkv = dqkv_.reshaped({b, t, 3, h, d});
    ops::permute(dev, dqkv_heads_, dqkv, kJoinSplit);
    return c_attn_->backward(dev, dqkv_, need_dx);
}

std::vector<uint32_t> Attention::ops_needed(bool backward) const {
    // attention_fwd/bwd are not listed: where the backend lacks them (or declines a shape) the call
    // composes them from gemm_batched and masked_softmax (op_calls.h), and says which op is missing.
    std::vector<uint32_t> ops = {XYLEM_OP_FILL, XYLEM_OP_LINEAR_FWD, XYLEM_OP_PERMUTE, XYLEM_OP_COPY};
    if (!backward) return ops;
    ops.push_back(XYLEM_OP_GEMM);
    if (o_.bias) ops.push_back(XYLEM_OP_BIAS_GRAD);
    return ops;
}

namespace {

const LayerRegistration<LayerNormOptions> kLayerNorm{
    "layer_norm", {"eps", "bias"},
    [](const ConfigSection& s) {
        LayerNormOptions o;
        s.get("eps", o.eps);
        if (!(o.eps >= 0) || !std::isfinite(o.eps)) s.fail("eps", "must be finite and >= 0");
        s.get("bias", o.bias);
        return o;
    },
    [](const LayerNormOptions& o, LayerContext&) -> std::unique_ptr<Layer> {
        return std::make_unique<LayerNorm>(o.eps, o.bias);
    }};

const LayerRegistration<PositionEmbeddingOptions> kPositionEmbedding{
    "position_embedding", {"max_len", "init_std"},
    [](const ConfigSection& s) {
        PositionEmbeddingOptions o;
        if (!s.has("max_len")) s.fail("max_len", "is required: the longest sequence it embeds (nanoGPT's block_size)");
        s.get("max_len", o.max_len, ranges::features);
        s.get("init_std", o.init_std);
        if (!(o.init_std >= 0) || !std::isfinite(o.init_std))
            s.fail("init_std", "must be finite and >= 0 (0: N(0, 1), PyTorch's nn.Embedding)");
        return o;
    },
    [](const PositionEmbeddingOptions& o, LayerContext&) -> std::unique_ptr<Layer> {
        return std::make_unique<PositionEmbedding>(o.max_len, o.init_std);
    }};

const LayerRegistration<AttentionOptions> kAttention{
    "attention", {"heads", "causal", "bias", "dropout", "init_std", "proj_init_std"},
    [](const ConfigSection& s) {
        AttentionOptions o;
        if (!s.has("heads")) s.fail("heads", "is required for an attention layer");
        s.get("heads", o.heads, ranges::features);
        s.get("causal", o.causal);
        s.get("bias", o.bias);
        s.get("dropout", o.dropout);
        if (!(o.dropout >= 0 && o.dropout < 1)) s.fail("dropout", "must be in [0, 1)");
        s.get("init_std", o.init_std);
        if (!(o.init_std >= 0) || !std::isfinite(o.init_std))
            s.fail("init_std", "must be finite and >= 0 (0: PyTorch's linear init)");
        s.get("proj_init_std", o.proj_init_std);
        if (s.has("proj_init_std") && (!(o.proj_init_std >= 0) || !std::isfinite(o.proj_init_std)))
            s.fail("proj_init_std", "must be finite and >= 0");
        return o;
    },
    // Each attention layer draws its own dropout mask stream, seeded from the run's seed in model order.
    [](const AttentionOptions& o, LayerContext& c) -> std::unique_ptr<Layer> {
        return std::make_unique<Attention>(o, c.next_seed());
    }};

}  // namespace

}  // namespace xylem
