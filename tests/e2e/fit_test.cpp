// fit() as a library, with no config, data files or CLI: a model built in code, a batch source of
// the test's own and callbacks that record what the loop tells them, as the ONNX importer and the
// Python API will use it. Resuming from the TrainingState, in process, continues bit-identically.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "support/backends.h"
#include "xylem/layers/elementwise.h"
#include "xylem/layers/linear.h"
#include "xylem/layers/loss.h"
#include "xylem/layers/merge.h"
#include "xylem/layers/net.h"
#include "xylem/solvers/solver.h"
#include "xylem/train/evaluate.h"
#include "xylem/train/fit.h"

using namespace xylem;

namespace {

constexpr int64_t kFeatures = 4, kSamples = 200;

// Samples held in the test's own arrays: features [n, 4] and a label each, gathered in the loop's
// order on the host and uploaded by enqueue().
class ArraySource final : public train::BatchSource {
public:
    explicit ArraySource(Device& dev) : dev_(dev) {
        std::mt19937 rng(7);
        std::normal_distribution<float> normal;
        for (int64_t i = 0; i < kSamples; ++i) {
            float s = 0;
            for (int64_t f = 0; f < kFeatures; ++f) {
                x_.push_back(normal(rng));
                s += (f < 2 ? 1.0f : -1.0f) * x_.back();
            }
            y_.push_back(s > 0);  // a linearly separable pair of classes
        }
    }
    int64_t size() const override { return kSamples; }
    void begin_epoch(const std::vector<int64_t>& order) override { order_ = &order; }
    void stage(int64_t first, int64_t n) override {
        Slot& s = slot(n);
        float* x = s.x.host_write<float>();
        int32_t* y = s.y.host_write<int32_t>();
        for (int64_t i = 0; i < n; ++i) {
            const int64_t r = (*order_)[static_cast<size_t>(first + i)];
            std::memcpy(x + i * kFeatures, x_.data() + r * kFeatures, kFeatures * sizeof(float));
            y[i] = y_[static_cast<size_t>(r)];
        }
    }
    train::Batch enqueue(int64_t, int64_t n) override {
        Slot& s = slot(n);
        s.x.upload(dev_);
        s.y.upload(dev_);
        return {s.x, s.y};
    }

private:
    struct Slot {
        Tensor x, y;
    };
    Slot& slot(int64_t n) {
        auto it = slots_.find(n);
        if (it == slots_.end())
            it = slots_.emplace(n, Slot{Tensor({n, kFeatures}, DType::F32, dev_), Tensor({n}, DType::I32, dev_)}).first;
        return it->second;
    }
    Device& dev_;
    std::vector<float> x_;
    std::vector<int32_t> y_;
    const std::vector<int64_t>* order_ = nullptr;
    std::map<int64_t, Slot> slots_;
};

// What fit() tells its callbacks, as lines; it may ask for a stop after some steps or an epoch.
struct Recorder : train::Callbacks {
    std::vector<std::string> events;
    int64_t stop_after_steps = 0, steps = 0;
    int stop_after_epoch_no = 0;

    bool wants_progress(const train::FitContext&, int64_t steps_run) override {
        steps = steps_run;
        return false;
    }
    void on_log_row(const train::FitContext&, const train::LogRow& r) override {
        events.push_back("row " + std::to_string(r.epoch) + ":" + std::to_string(r.step));
    }
    int stop_requested() override { return stop_after_steps > 0 && steps >= stop_after_steps ? 2 : 0; }
    std::string on_checkpoint(const train::FitContext& ctx, train::CheckpointKind kind) override {
        events.push_back(kind == train::CheckpointKind::last ? "last" : "best");
        saved_step = ctx.state.step;
        return kind == train::CheckpointKind::last ? "memory:last" : "memory:best";
    }
    void on_validation(const train::FitContext&, train::EpochMetrics& m) override {
        m.has_validation = true;
        m.val_loss = 1.0 / m.epoch;  // what a scorer would write; the loop keeps it
        events.push_back("validation");
    }
    std::string stop_after_epoch(const train::FitContext&, const std::vector<train::EpochMetrics>& epochs) override {
        return epochs.back().epoch == stop_after_epoch_no ? "enough" : "";
    }
    void on_test(const train::FitContext&, train::EpochMetrics&, bool final_epoch) override {
        events.push_back(final_epoch ? "test final" : "test");
    }
    void on_epoch_end(const train::FitContext&, const train::EpochMetrics& m, bool best, const std::string&) override {
        events.push_back("epoch " + std::to_string(m.epoch) + (best ? " best" : ""));
    }
    void on_fit_end(const train::FitContext&, const train::FitResult&) override { events.push_back("end"); }
    int64_t saved_step = -1;
};

// A 4-16-2 MLP, its loss and solver, on the native backend.
struct Trainee {
    std::shared_ptr<Device> dev = test::backend_named("native")->device(0);
    Net model;
    std::unique_ptr<Loss> loss = make_loss("cross_entropy");
    Sgd solver{SgdOptions{0.1f, 0.9f}};
    ArraySource data{*dev};
    Trainee() {
        model.add(std::make_unique<Linear>(16));
        model.add(std::make_unique<Activation>(XYLEM_ACT_RELU));
        model.add(std::make_unique<Linear>(2));
        model.build(*dev, {kFeatures}, 1);
    }
    std::vector<std::vector<float>> params() {
        std::vector<std::vector<float>> out;
        for (Param* p : model.state()) out.push_back(p->value.to_vector());
        return out;
    }
};

train::FitOptions options(int epochs) {
    train::FitOptions o;
    o.epochs = epochs;
    o.batch_size = 20;  // 10 steps an epoch
    o.print_every = 5;
    o.seed = 3;
    return o;
}

}  // namespace

TEST(Fit, LearnsAndAsksItsCallbacksInOrder) {
    Trainee s;
    Recorder r;
    train::TrainingState state;
    const train::FitResult result = train::fit(s.model, *s.loss, s.solver, *s.dev, s.data, state, options(2), {&r});
    ASSERT_EQ(result.epochs.size(), 2u);
    EXPECT_LT(result.epochs[1].train_loss, result.epochs[0].train_loss);
    EXPECT_EQ(result.epochs[1].val_loss, 0.5);  // the callback's score, kept in the epoch's metrics
    EXPECT_EQ(result.last_checkpoint, "memory:last");
    EXPECT_GT(train::evaluate(s.model, *s.dev, s.data), 0.9);
    const std::vector<std::string> expected{"row 1:5", "row 1:10", "validation", "test", "last", "best", "epoch 1 best",
                                            "row 2:5", "row 2:10", "validation", "test final", "last", "best",
                                            "epoch 2 best", "end"};
    EXPECT_EQ(r.events, expected);
    EXPECT_EQ(state.epoch, 3);  // where a resume would start
    EXPECT_EQ(state.global_step, 20u);
}

TEST(Fit, StopAfterEpochEndsTheRunWithItsReason) {
    Trainee s;
    Recorder r;
    r.stop_after_epoch_no = 1;
    train::TrainingState state;
    const train::FitResult result = train::fit(s.model, *s.loss, s.solver, *s.dev, s.data, state, options(3), {&r});
    EXPECT_EQ(result.epochs.size(), 1u);
    EXPECT_EQ(result.finish_reason, "enough");
    EXPECT_NE(std::find(r.events.begin(), r.events.end(), "test final"), r.events.end());
}

// A stop request mid-epoch: a "last" checkpoint of the position, then fit returns; fitting on from
// the same state (with the same model and solver, as a loaded checkpoint would restore them)
// gives the parameters of a run never stopped, bit for bit.
TEST(Fit, StoppedThenContinuedEqualsUninterrupted) {
    Trainee whole;
    train::TrainingState whole_state;
    train::fit(whole.model, *whole.loss, whole.solver, *whole.dev, whole.data, whole_state, options(2));

    Trainee parts;
    Recorder stopper;
    stopper.stop_after_steps = 13;  // epoch 2, step 3
    train::TrainingState state;
    const train::FitResult first = train::fit(parts.model, *parts.loss, parts.solver, *parts.dev, parts.data, state,
                                              options(2), {&stopper});
    EXPECT_EQ(first.stopped_by_signal, 2);
    EXPECT_EQ(stopper.saved_step, 3);
    EXPECT_EQ(state.epoch, 2);
    EXPECT_EQ(state.step, 3);
    EXPECT_EQ(stopper.events.back(), "end");
    const train::FitResult rest = train::fit(parts.model, *parts.loss, parts.solver, *parts.dev, parts.data, state,
                                             options(2));
    EXPECT_EQ(rest.stopped_by_signal, 0);
    EXPECT_EQ(parts.params(), whole.params());
    EXPECT_EQ(state.global_step, whole_state.global_step);
    ASSERT_EQ(rest.epochs.size(), 2u);
    EXPECT_EQ(rest.epochs[1].train_loss, train::finished_epochs(whole_state)[1].train_loss);
}

// Inference over a batch source runs through step fusion (fusion::ForwardFusion): the first batch
// is recorded, every later batch of that size runs the residual add and the ReLU after it as one
// program, and the outputs are those of the forwards run as issued, bit for bit.
TEST(Fit, InferenceBatchesRunFusedWithTheOutputsOfTheOpsAsIssued) {
    Trainee s;
    Net model;
    model.add("h", {"input"}, std::make_unique<Linear>(16));
    model.add("s", {"h", "h"}, std::make_unique<Add>());
    model.add("r", {"s"}, std::make_unique<Activation>(XYLEM_ACT_RELU));
    model.add("y", {"r"}, std::make_unique<Linear>(2));
    model.build(*s.dev, {kFeatures}, 1);
    std::vector<std::vector<float>> fused;
    std::vector<uint64_t> launches;
    uint64_t before = s.dev->launches();
    train::for_each_batch(model, *s.dev, s.data, 30, [&](int64_t, int64_t, const Tensor&, const Tensor& out) {
        launches.push_back(s.dev->launches() - before);
        fused.push_back(out.to_vector());
        before = s.dev->launches();
    });
    ASSERT_EQ(launches.size(), 7u);  // six batches of 30, then 20
    EXPECT_EQ(launches[0], 4u) << "the recorded batch runs its 4 ops";
    for (size_t b = 1; b < 6; ++b) EXPECT_EQ(launches[b], 3u) << "batch " << b << ": add + relu as one program";
    EXPECT_EQ(launches[6], 4u) << "the shorter last batch issues other ops: as issued";
    std::vector<int64_t> order(kSamples);
    for (int64_t i = 0; i < kSamples; ++i) order[static_cast<size_t>(i)] = i;
    s.data.begin_epoch(order);
    for (int64_t first = 0, b = 0; first < kSamples; first += 30, ++b) {
        const int64_t n = std::min<int64_t>(30, kSamples - first);
        s.data.stage(first, n);
        const train::Batch batch = s.data.enqueue(first, n);
        EXPECT_EQ(model.forward(*s.dev, batch.x, false).to_vector(), fused[static_cast<size_t>(b)]) << "batch " << b;
    }
}

