// A GPT against PyTorch on every available backend: tests/fixtures/gpt_parity.toml
// (examples/gpt_char.toml's blocks and parameter names, 2 blocks of 4 heads at 32 channels, a
// context of 16, a vocabulary of 27) built as a Net from its parsed config, given PyTorch's
// initial parameters by name (nanoGPT's state_dict keys; the tied lm_head has none of its own),
// then its logits and 20 steps of AdamW (no weight decay on rank <= 1, global-norm clipping, the
// config's warm-up and cosine schedule) on fixed token batches, compared with PyTorch's float64
// run stored in tests/fixtures/gpt_parity.safetensors (written by `bench/torch_gpt.py
// --parity-fixture FILE`; no test runs python). Every comparison is the normalised error of
// support/backends.h, max|got - want| / max(1, max|want|), per tensor.
#include <cmath>
#include <cstring>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "support/backends.h"
#include "support/parity_fixture.h"
#include "xylem/config.h"
#include "xylem/error.h"
#include "xylem/io/safetensors.h"
#include "xylem/layers/loss.h"
#include "xylem/layers/merge.h"
#include "xylem/layers/net.h"
#include "xylem/layers/registry.h"
#include "xylem/layers/transformer.h"
#include "xylem/op_calls.h"
#include "xylem/solvers/schedule.h"
#include "xylem/solvers/solver.h"

namespace xylem::test {
namespace {

const std::string kConfig = std::string(XYLEM_SOURCE_DIR) + "/tests/fixtures/gpt_parity.toml";
const std::string kFixture = std::string(XYLEM_SOURCE_DIR) + "/tests/fixtures/gpt_parity.safetensors";
// Float32 PyTorch is within 1e-6 of the float64 reference on every tensor after the steps (worst:
// transformer.h.0.attn.c_attn.bias, 9.5e-7: the key bias, whose gradient is 0 up to rounding and
// which Adam moves by that rounding) and within 2e-7 on the logits (the script prints it); native
// and OpenCL (PoCL) are as close (worst 1.8e-6, a c_attn.bias).
constexpr double kTolerance = 1e-4;

const ParityFixture& fixture() {
    static const ParityFixture f(kFixture);
    return f;
}

// An add whose backward gives its second input (the attention or MLP branch of a residual) a zero
// gradient: a bug the test must catch.
class AddWithoutBranchGradient : public Add {
public:
    void backward_inputs(Device& dev, const Tensor& dy, const std::vector<bool>& need_dx,
                         std::vector<const Tensor*>& dxs) override {
        Add::backward_inputs(dev, dy, need_dx, dxs);
        if (!need_dx[1]) return;
        if (!zero_.defined() || zero_.shape() != dy.shape()) zero_ = Tensor(dy.shape(), DType::F32, dev);
        ops::fill(dev, zero_, 0.0f);
        dxs[1] = &zero_;
    }

private:
    Tensor zero_;
};

struct Mutation {
    bool drop_branch_gradient = false;  // every residual add
    bool full_attention = false;        // attention without its causal mask
    std::string perturb;                // an initial tensor to change (its first value + 0.01), "" for none
};

class GptParity : public BackendTest {
protected:
    void SetUp() override {
        BackendTest::SetUp();
        config_ = load_config(kConfig);
        ASSERT_FALSE(config_.layers.empty());
        block_ = static_cast<int64_t>(fixture().meta("block_size"));
        vocab_ = static_cast<int64_t>(fixture().meta("vocab"));
    }

    // Builds the config's model (as the CLI does, named layers wired by name, the head tied by
    // `shares`) and loads the fixture's initial tensors into it; false when it could not (a
    // failure, or skip_ says which op the backend lacks).
    bool build(const Mutation& m = {}) {
        net_ = std::make_unique<Net>();
        LayerContext context(config_.source, config_.seed);
        for (const LayerSpec& l : config_.layers) {
            std::unique_ptr<Layer> layer;
            if (m.drop_branch_gradient && l.type == "add") {
                layer = std::make_unique<AddWithoutBranchGradient>();
            } else if (m.full_attention && l.type == "attention") {
                AttentionOptions o = layer_options<AttentionOptions>(l);
                o.causal = false;
                layer = std::make_unique<Attention>(o, context.next_seed());
            } else {
                layer = build_layer(l, context);
            }
            net_->add(l.name, l.inputs, std::move(layer), l.shares);
        }
        try {
            net_->build(dev(), {block_}, config_.seed);
            net_->check_ops(backend(), true);
        } catch (const Error& e) {
            const std::string what = e.what();
            if (what.find("is not supported by backend") == std::string::npos) throw;
            skip_ = what;
            return false;
        }
        solver_ = make_solver();
        for (uint32_t op : solver_->ops_needed())
            if (!backend().supports(op)) {
                skip_ = unsupported(op);
                return false;
            }
        for (uint32_t op : make_loss(config_.loss)->ops_needed())
            if (!backend().supports(op)) {
                skip_ = unsupported(op);
                return false;
            }
        size_t loaded = 0;
        for (Param* p : net_->state()) {
            const io::LoadedTensor& t = fixture().tensor("init." + p->name);
            EXPECT_EQ(t.dtype, "F32") << p->name;
            EXPECT_EQ(t.shape, p->value.shape()) << p->name;
            if (t.dtype != "F32" || t.shape != p->value.shape()) return false;
            float* dst = p->value.host_write<float>();
            std::memcpy(dst, t.data.data(), t.data.size());
            if (p->name == m.perturb) dst[0] += 0.01f;
            ++loaded;
        }
        size_t in_fixture = 0;
        for (const auto& [name, t] : fixture().file().tensors) in_fixture += name.rfind("init.", 0) == 0;
        EXPECT_EQ(loaded, in_fixture) << "the model's state and PyTorch's state_dict (less lm_head.weight) hold different tensors";
        return loaded == in_fixture;
    }

    // The config's solver, as train/model_builder.cpp's build_solver makes it (that file is in
    // xylem_train, which this test does not link).
    std::unique_ptr<Solver> make_solver() const {
        const SolverSpec& s = config_.solver;
        auto solver = std::make_unique<AdamW>(AdamWOptions{s.lr, s.beta1, s.beta2, s.eps, s.weight_decay});
        solver->set_clipping(ClipOptions{s.clip_value, s.clip_norm});
        solver->set_no_decay_bias(s.no_decay_bias);
        return solver;
    }

    // Batch `step`'s inputs [batch, block] (tokens[step, :, :-1]) or targets (tokens[step, :, 1:]).
    std::vector<int32_t> batch_tokens(int64_t step, bool targets) {
        const io::LoadedTensor& t = fixture().tensor("tokens");
        EXPECT_EQ(t.dtype, "I32");
        const int64_t batch = config_.batch_size, row = block_ + 1;
        std::vector<int32_t> all(t.data.size() / sizeof(int32_t));
        std::memcpy(all.data(), t.data.data(), t.data.size());
        std::vector<int32_t> out;
        for (int64_t b = 0; b < batch; ++b) {
            const int32_t* from = all.data() + (step * batch + b) * row + (targets ? 1 : 0);
            out.insert(out.end(), from, from + block_);
        }
        return out;
    }
    Tensor inputs(int64_t step) { return upload_i32(dev(), {config_.batch_size, block_}, batch_tokens(step, false)); }

    // Eval-mode logits of batch 0, the recipe's steps (the schedule's rate before each), and batch
    // 0's eval-mode logits again; each step's mean cross-entropy per character (computed on the host
    // from the logits) and rate are kept.
    void train() {
        const SolverSpec& s = config_.solver;
        const int64_t batch = config_.batch_size, steps = config_.max_steps;
        ASSERT_EQ(batch, static_cast<int64_t>(fixture().meta("batch")));
        ASSERT_EQ(steps, static_cast<int64_t>(fixture().meta("steps")));
        ASSERT_EQ(s.type, "adamw");
        ASSERT_FLOAT_EQ(s.lr, static_cast<float>(fixture().meta("lr")));
        ASSERT_FLOAT_EQ(s.beta1, static_cast<float>(fixture().meta("beta1")));
        ASSERT_FLOAT_EQ(s.beta2, static_cast<float>(fixture().meta("beta2")));
        ASSERT_FLOAT_EQ(s.eps, static_cast<float>(fixture().meta("eps")));
        ASSERT_FLOAT_EQ(s.weight_decay, static_cast<float>(fixture().meta("weight_decay")));
        ASSERT_FLOAT_EQ(s.clip_norm, static_cast<float>(fixture().meta("clip_norm")));
        ASSERT_TRUE(s.no_decay_bias);
        ASSERT_EQ(s.schedule.type, "cosine");
        ASSERT_EQ(s.schedule.unit, "step");
        ASSERT_EQ(s.schedule.t_max, static_cast<int64_t>(fixture().meta("t_max")));
        ASSERT_DOUBLE_EQ(s.schedule.eta_min, fixture().meta("eta_min"));
        ASSERT_EQ(s.schedule.warmup_steps, static_cast<int64_t>(fixture().meta("warmup_steps")));
        ASSERT_EQ(s.schedule.warmup_start, 0.0);
        std::unique_ptr<Loss> loss = make_loss(config_.loss);
        const std::vector<Param*> params = net_->params();
        logits_eval_ = net_->forward(dev(), inputs(0), false).to_vector();
        losses_.clear();
        lrs_.clear();
        for (int64_t step = 0; step < steps; ++step) {
            // As train/fit.cpp's apply_schedule: the rate after `step` steps, in the step's epoch.
            solver_->set_lr(static_cast<float>(scheduled_lr(s.lr, s.schedule, 0, step)));
            lrs_.push_back(solver_->lr());
            const std::vector<int32_t> y_host = batch_tokens(step, true);
            const Tensor y = upload_i32(dev(), {batch, block_}, y_host);
            const Tensor& logits = net_->forward(dev(), inputs(step), true);
            losses_.push_back(cross_entropy(logits.to_vector(), y_host));
            net_->backward(dev(), loss->backward(dev(), logits, y));
            solver_->step(dev(), params);
        }
        logits_eval_final_ = net_->forward(dev(), inputs(0), false).to_vector();
    }

    static float cross_entropy(const std::vector<float>& logits, const std::vector<int32_t>& y) {
        const size_t classes = logits.size() / y.size();
        double sum = 0;
        for (size_t n = 0; n < y.size(); ++n) {
            const float* row = logits.data() + n * classes;
            double top = row[0], z = 0;
            for (size_t c = 1; c < classes; ++c) top = std::max(top, static_cast<double>(row[c]));
            for (size_t c = 0; c < classes; ++c) z += std::exp(row[c] - top);
            sum += top + std::log(z) - row[y[n]];
        }
        return static_cast<float>(sum / static_cast<double>(y.size()));
    }

    // Every parameter against PyTorch's after the steps; the number that are not within the tolerance.
    int final_mismatches(bool report) {
        int bad = 0;
        for (Param* p : net_->state()) {
            const auto r = near(p->value.to_vector(), fixture().f32_values("final." + p->name), kTolerance);
            if (!r) ++bad;
            if (report) {
                EXPECT_TRUE(r) << p->name << " after " << config_.max_steps << " steps";
            }
        }
        return bad;
    }

    RunConfig config_;
    int64_t block_ = 0, vocab_ = 0;
    std::string skip_;
    std::unique_ptr<Net> net_;
    std::unique_ptr<Solver> solver_;
    std::vector<float> logits_eval_, logits_eval_final_, losses_, lrs_;
};
XYLEM_INSTANTIATE_OVER_BACKENDS(GptParity);

// Builds the model (with a mutation), or skips the test when the backend lacks an op.
#define BUILD_OR_SKIP(...)                             \
    do {                                               \
        if (!build(__VA_ARGS__)) {                     \
            if (!skip_.empty()) GTEST_SKIP() << skip_; \
            return;                                    \
        }                                              \
    } while (0)

// The names PyTorch's state_dict gives the same model are the Net's parameter names, and the tied
// head owns none: its weight is transformer.wte.weight, one tensor for both.
TEST_P(GptParity, StateNamesAreTorchStateDictKeys) {
    BUILD_OR_SKIP();
    EXPECT_NE(net_->find("transformer.h.1.attn"), net_->size());
    EXPECT_NE(net_->find("transformer.h.0.mlp.c_fc"), net_->size());
    const std::vector<Param*> params = net_->params();
    ASSERT_FALSE(params.empty());
    EXPECT_EQ(params.front()->name, "transformer.wte.weight");
    for (const Param* p : params) EXPECT_NE(p->name, "lm_head.weight");
    EXPECT_EQ(net_->output_sample_shape(), (Shape{block_, vocab_}));
}

TEST_P(GptParity, MatchesPyTorchForwardAndTwentyAdamWSteps) {
    BUILD_OR_SKIP();
    train();
    EXPECT_TRUE(near(lrs_, fixture().f32_values("lrs"), 1e-7)) << "the schedule's rates (solvers/schedule.cpp)";
    EXPECT_TRUE(near(logits_eval_, fixture().f32_values("logits_eval"), kTolerance)) << "batch 0, initial parameters";
    EXPECT_TRUE(near(losses_, fixture().f32_values("losses"), kTolerance)) << "each step's loss";
    EXPECT_EQ(final_mismatches(true), 0);
    EXPECT_TRUE(near(logits_eval_final_, fixture().f32_values("logits_eval_final"), kTolerance)) << "batch 0, after the steps";
}

// The comparisons can fail: a changed initial value moves the logits, attention without its causal
// mask gives other logits, and residual adds that drop their branch's gradient leave parameters off
// after the steps.
TEST_P(GptParity, DetectsAPerturbedInitialValue) {
    BUILD_OR_SKIP(Mutation{false, false, "transformer.wte.weight"});  // tied: the head reads it too
    EXPECT_FALSE(near(net_->forward(dev(), inputs(0), false).to_vector(), fixture().f32_values("logits_eval"), kTolerance));
}

TEST_P(GptParity, DetectsAMissingCausalMask) {
    BUILD_OR_SKIP(Mutation{false, true, ""});
    EXPECT_FALSE(near(net_->forward(dev(), inputs(0), false).to_vector(), fixture().f32_values("logits_eval"), kTolerance));
}

TEST_P(GptParity, DetectsADroppedBranchGradient) {
    BUILD_OR_SKIP(Mutation{true, false, ""});
    train();
    EXPECT_TRUE(near(logits_eval_, fixture().f32_values("logits_eval"), kTolerance)) << "the forward pass is unchanged";
    EXPECT_GT(final_mismatches(false), 0);
}

}  // namespace
}  // namespace xylem::test
