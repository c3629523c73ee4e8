// The training loop: epochs of steps over a batch source, with the step captured or fused, and
// the callbacks asked at fixed points.
#include "xylem/train/fit.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <random>
#include <sstream>

#include "xylem/error.h"
#include "xylem/graph.h"
#include "xylem/op_calls.h"
#include "xylem/profiler.h"
#include "xylem/solvers/schedule.h"
#include "xylem/train/data_parallel.h"
#include "xylem/train/evaluate.h"
#include "xylem/transfer.h"

namespace xylem::train {
namespace {

using Clock = std::chrono::steady_clock;
const std::string kLossScope = "loss (forward + backward)", kSolverScope = "solver update";
double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

std::string where(int epoch, int64_t step) { return "epoch " + std::to_string(epoch) + " step " + std::to_string(step); }

// One call of fit(): the loop's own counters around `st_`, the state a checkpoint saves.
class Loop {
public:
    Loop(Net& model, Loss& loss, Solver& solver, Device& dev, BatchSource& data, TrainingState& state,
         const FitOptions& options, const std::vector<Callbacks*>& callbacks);
    FitResult go();

private:
    // One epoch's steps from st_.step on; false if a stop request or a non-finite loss ended it.
    bool run_steps(int epoch);
    // The epoch's scores, checkpoints and report; false if a stop request cut its scoring short.
    bool end_epoch(int epoch);
    void checkpoint(CheckpointKind kind);
    void progress(int epoch, int64_t step, double loss, bool last_of_epoch);
    void apply_schedule(int epoch);
    int64_t steps_left_in_run() const;
    bool run_done() const { return o_.max_steps > 0 && static_cast<int64_t>(st_.global_step) >= o_.max_steps; }
    int stop_requested() const;
    [[noreturn]] void nonfinite(float total, int epoch, int64_t step);

    Net& model_;
    Loss& loss_;
    Solver& solver_;
    Device& dev_;
    BatchSource& data_;
    TrainingState& st_;
    const FitOptions& o_;
    const std::vector<Callbacks*>& callbacks_;
    DataParallel* const dp_;  // null unless this process is one rank of a distributed run
    std::vector<Param*> params_;
    int64_t steps_per_epoch_ = 0;
    std::mt19937_64 shuffle_rng_;
    std::vector<int64_t> order_;
    FitResult result_;
    fusion::StepFusion fusion_;  // full-size steps run through it: recorded once, then fused
    FitContext ctx_;

    // Per-epoch counters of this process.
    Clock::time_point epoch_t0_, run_t0_;
    int64_t first_step_ = 0, steps_this_process_ = 0;
    TransferCounts transfers0_;

    // The step machinery: the device loss sum and the captured step.
    Tensor loss_sum_;
    Graph graph_;
    int64_t eager_full_steps_ = 0;
};

Loop::Loop(Net& model, Loss& loss, Solver& solver, Device& dev, BatchSource& data, TrainingState& state,
           const FitOptions& options, const std::vector<Callbacks*>& callbacks)
    : model_(model), loss_(loss), solver_(solver), dev_(dev), data_(data), st_(state), o_(options),
      callbacks_(callbacks), dp_(options.data_parallel), params_(model.params()),
      steps_per_epoch_(steps_per_epoch(data.size(), options)), shuffle_rng_(options.seed),
      result_{finished_epochs(state), options.resumed_from, "", 0, ""}, fusion_(dev, options.fusion),
      ctx_{model, loss, solver, dev, options, state, result_.epochs, steps_per_epoch_, fusion_},
      loss_sum_({1}, DType::F32, dev) {
    if (!dp_) ctx_.stop_requested = [this] { return stop_requested(); };
    if (std::string why = capture_blocker(o_, model_, solver_, dev_); !why.empty()) throw Error(why);
    const std::string from = o_.resumed_from.empty() ? std::string("the training state") : o_.resumed_from;
    if (st_.order.empty()) {  // a new run: the data in its own order
        st_.order.resize(static_cast<size_t>(data_.size()));
        std::iota(st_.order.begin(), st_.order.end(), 0);
    }
    if (!st_.shuffle_rng.empty()) {  // set at the start of every epoch
        std::istringstream rng_text(st_.shuffle_rng);
        rng_text >> shuffle_rng_;
        if (rng_text.fail()) throw Error(from + ": corrupt training state: the shuffle generator's state");
    }
    if (st_.best_metric != o_.best_metric) {  // judged anew by the metric asked for now
        st_.best_metric = o_.best_metric;
        st_.has_best = false;
    }
    st_.epochs = nlohmann::json::array();
    for (const EpochMetrics& m : result_.epochs) st_.epochs.push_back(to_json(m));
}

FitResult Loop::go() {
    // Parameters live on the host until now (initialised or loaded): move them to the device once.
    for (Param* p : model_.state()) p->value.upload(dev_);
    order_.assign(st_.order.begin(), st_.order.end());
    if (o_.profile) {
        profiler::reset();
        profiler::enable(true);
    }
    run_t0_ = Clock::now();
    bool finished = false;
    for (int epoch = st_.epoch; epoch <= o_.epochs && !finished; ++epoch) {
        // A stop request (during the steps, or the epoch's scoring): the last checkpoint is written.
        if (!run_steps(epoch) || !end_epoch(epoch)) break;
        finished = !result_.finish_reason.empty() || run_done();
        if (stop_requested() != 0 && !finished && epoch < o_.epochs) result_.stopped_by_signal = stop_requested();
        if (result_.stopped_by_signal) break;
    }
    if (o_.profile) profiler::enable(false);
    if (dp_) dp_->check_identical(model_);
    for (Callbacks* cb : callbacks_) cb->on_fit_end(ctx_, result_);
    return std::move(result_);
}

int Loop::stop_requested() const {
    for (Callbacks* cb : callbacks_)
        if (int s = cb->stop_requested()) return s;
    return 0;
}

int64_t Loop::steps_left_in_run() const {
    int64_t left = (steps_per_epoch_ - st_.step) + static_cast<int64_t>(o_.epochs - st_.epoch) * steps_per_epoch_;
    if (o_.max_steps > 0) left = std::min<int64_t>(left, o_.max_steps - static_cast<int64_t>(st_.global_step));
    return std::max<int64_t>(left, 0);
}

void Loop::apply_schedule(int epoch) {
    if (o_.schedule.active())
        solver_.set_lr(static_cast<float>(
            scheduled_lr(o_.base_lr, o_.schedule, epoch - 1, static_cast<int64_t>(st_.global_step))));
}

void Loop::checkpoint(CheckpointKind kind) {
    if (dp_ && kind == CheckpointKind::last) dp_->average_buffers(model_);  // every rank: a collective
    for (Callbacks* cb : callbacks_) {
        const std::string path = cb->on_checkpoint(ctx_, kind);
        if (path.empty()) continue;
        (kind == CheckpointKind::last ? result_.last_checkpoint : result_.best_checkpoint) = path;
    }
}

void Loop::progress(int epoch, int64_t step, double loss, bool last_of_epoch) {
    const double per_step = since(run_t0_) / static_cast<double>(std::max<int64_t>(steps_this_process_, 1));
    Progress p;
    p.epoch = epoch;
    p.epochs = o_.epochs;
    p.step = step;
    p.steps_per_epoch = steps_per_epoch_;
    p.loss = loss;
    p.lr = solver_.lr();
    p.images_per_second = static_cast<double>((step - first_step_) * o_.batch_size) / std::max(since(epoch_t0_), 1e-9);
    p.eta_epoch_seconds = per_step * static_cast<double>(steps_per_epoch_ - step);
    p.eta_run_seconds = per_step * static_cast<double>(steps_left_in_run());
    p.last_of_epoch = last_of_epoch;
    for (Callbacks* cb : callbacks_) cb->on_progress(ctx_, p);
}

void Loop::nonfinite(float total, int epoch, int64_t step) {
    const std::string why =
        "training stopped: the loss became " + std::string(std::isnan(total) ? "NaN" : "infinite") + " by " +
        where(epoch, step) + " (train.on_nonfinite = \"stop\"); " +
        (result_.last_checkpoint.empty() ? std::string("no checkpoint had been written yet")
                                         : "last good checkpoint: " + result_.last_checkpoint) +
        ". A lower solver.lr usually helps.";
    if (dp_) throw RanksAgreeError(why);  // the global loss: every rank stops here
    throw Error(why);
}

// One step: the batch's upload or gathers, forward, loss, backward, update. Recordable.
bool Loop::run_steps(int epoch) {
    model_.reset_state();  // recurrent state carries over between batches, not from the last epoch or a validation
    if (st_.step > 0 && !st_.carried.empty()) model_.restore_carried_state(st_.carried);  // resumed mid-epoch
    if (st_.step == 0) {  // a fresh epoch: shuffle, and note the generator's state for the next one
        if (o_.shuffle) std::shuffle(order_.begin(), order_.end(), shuffle_rng_);
        st_.order.assign(order_.begin(), order_.end());
        std::ostringstream rng_text;
        rng_text << shuffle_rng_;
        st_.shuffle_rng = rng_text.str();
        st_.loss_sum = 0;
        st_.seen = st_.seen_at_print = 0;
        st_.loss_at_print = 0;
    }
    st_.epoch = epoch;
    data_.begin_epoch(order_);  // resident data: the epoch's one upload (the order), before the count
    ops::fill(dev_, loss_sum_, dp_ ? dp_->share_of(st_.loss_sum) : st_.loss_sum);
    transfers0_ = transfer_counts();
    epoch_t0_ = Clock::now();
    first_step_ = st_.step;
    const int64_t batch = o_.batch_size, count = data_.size();
    auto run_step = [&](int64_t first, int64_t n) {
        if (n == 0) {  // a rank whose shard of a short tail batch is empty
            dp_->step_without_samples();
            solver_.step(dev_, params_);
            return;
        }
        auto [x, y] = data_.enqueue(first, n);
        const Tensor& logits = model_.forward(dev_, x, true);
        const Tensor* dlogits = nullptr;
        {
            profiler::Scope scope(&kLossScope);
            loss_.forward(dev_, logits, y, loss_sum_);
            dlogits = &loss_.backward(dev_, logits, y);
        }
        model_.backward(dev_, *dlogits);
        profiler::Scope scope(&kSolverScope);
        solver_.step(dev_, params_);
    };
    // Full-size steps run eagerly until every buffer and solver slot exists and SGD is past its
    // first-step special case; then one is captured and replayed. Tail batches stay eager.
    constexpr int64_t kWarmupSteps = 1;
    for (int64_t step = st_.step; step < steps_per_epoch_; ++step) {
        const int64_t first = step * batch, n = std::min(batch, count - first);
        // A distributed run's rank trains on its part of the global batch.
        const DataParallel::Shard mine = dp_ ? dp_->begin_step(first, n) : DataParallel::Shard{first, n};
        apply_schedule(epoch);
        if (mine.count > 0) data_.stage(mine.first, mine.count);
        {
            StrictTransfers strict;  // anything but the batch's explicit upload crossing the bus is a bug
            if (graph_.defined() && n == batch) {
                graph_.launch();
            } else if (o_.capture && n == batch && eager_full_steps_ >= kWarmupSteps) {
                // the capture records the fused step: fused programs replay like any op
                graph_ = Graph::capture(dev_, [&] { fusion_.run([&] { run_step(first, n); }); });
                graph_.launch();
            } else if (n == batch) {
                fusion_.run([&] { run_step(mine.first, mine.count); });
                ++eager_full_steps_;
            } else {
                run_step(mine.first, mine.count);  // a tail batch: other shapes than the recorded step
            }
        }
        st_.seen += n;
        st_.step = step + 1;
        ++st_.global_step;
        ++steps_this_process_;
        const bool last = step + 1 == steps_per_epoch_ || run_done();
        const bool log_row = (step + 1) % o_.print_every == 0 || last;
        bool show = log_row;  // besides every print_every steps, whenever a callback wants a line
        for (Callbacks* cb : callbacks_) show = cb->wants_progress(ctx_, steps_this_process_) || show;
        bool stop = stop_requested() != 0 && !last;  // the epoch's end writes its own checkpoint
        if (dp_) dp_->agree(show, stop);  // every rank takes the same branches below
        const bool save =
            !last && (stop || (o_.checkpoint_every > 0 && st_.global_step % static_cast<uint64_t>(o_.checkpoint_every) == 0));
        if (!show && !save) continue;
        // The host's only read of the loss (summed over the ranks of a distributed run).
        const float total = dp_ ? dp_->global_sum(loss_sum_) : loss_sum_.to_vector()[0];
        if (!std::isfinite(total) && o_.stop_on_nonfinite) nonfinite(total, epoch, step + 1);
        st_.loss_sum = total;
        const double recent = (total - st_.loss_at_print) / static_cast<double>(std::max<int64_t>(st_.seen - st_.seen_at_print, 1));
        if (log_row) {
            st_.loss_at_print = total;
            st_.seen_at_print = st_.seen;
            LogRow r;
            r.epoch = epoch;
            r.step = step + 1;
            r.loss = recent;
            r.elapsed_seconds = since(epoch_t0_);
            r.images_per_second = static_cast<double>(st_.seen - first_step_ * batch) / std::max(r.elapsed_seconds, 1e-9);
            r.lr = solver_.lr();
            for (Callbacks* cb : callbacks_) cb->on_log_row(ctx_, r);
        }
        if (show) progress(epoch, step + 1, recent, last);
        if (save) {
            st_.carried = carried_snapshot(model_);
            checkpoint(CheckpointKind::last);
        }
        if (stop) {
            result_.stopped_by_signal = stop_requested();
            return false;
        }
        if (run_done()) break;
    }
    return true;
}

bool Loop::end_epoch(int epoch) {
    EpochMetrics m;
    m.epoch = epoch;
    m.seconds = since(epoch_t0_);
    m.steps = st_.step;
    m.complete = st_.step == steps_per_epoch_;
    m.train_loss = static_cast<double>(st_.loss_sum) / static_cast<double>(st_.seen);
    m.lr = solver_.lr();
    // A run resumed at an epoch's last step (its scoring was interrupted) runs no step here.
    const double steps_run = static_cast<double>(std::max<int64_t>(st_.step - first_step_, 1));
    m.images_per_second = st_.step > first_step_ ? static_cast<double>(st_.seen - first_step_ * o_.batch_size) / m.seconds : 0;
    const TransferCounts t = transfer_counts() - transfers0_;
    m.transfers_per_step = static_cast<double>(t.count()) / steps_run;
    m.h2d_bytes_per_step = static_cast<double>(t.h2d_bytes) / steps_run;
    // An epoch that max_steps cut short resumes mid-stream: keep the recurrent state before
    // validation resets it. A complete epoch's successor starts from zero.
    st_.carried = m.complete ? std::map<std::string, SavedTensor>{} : carried_snapshot(model_);
    const bool was_profiling = profiler::enabled();
    profiler::enable(false);  // the profile covers training steps only
    if (dp_) dp_->average_buffers(model_);  // every rank scores with the same running statistics
    // Ctrl-C while scoring stops within a batch: checkpoint this position (the epoch's steps done,
    // its scores not), so a resume scores the epoch and goes on.
    auto interrupted = [&](const Interrupted& e) {
        profiler::enable(was_profiling);
        result_.stopped_by_signal = e.signal;
        checkpoint(CheckpointKind::last);
        return false;
    };
    try {
        for (Callbacks* cb : callbacks_) cb->on_validation(ctx_, m);
    } catch (const Interrupted& e) {
        return interrupted(e);
    }
    // The run ends here if this was its last epoch, its last step, or a callback says so (early
    // stopping, whose reason wins).
    if (run_done() && epoch < o_.epochs) result_.finish_reason = "train.max_steps: " + std::to_string(o_.max_steps) + " steps done";
    std::vector<EpochMetrics> with_this = result_.epochs;
    with_this.push_back(m);
    for (Callbacks* cb : callbacks_)
        if (std::string why = cb->stop_after_epoch(ctx_, with_this); !why.empty()) {
            result_.finish_reason = why;
            break;
        }
    const bool final_epoch = epoch == o_.epochs || !result_.finish_reason.empty();
    try {
        for (Callbacks* cb : callbacks_) cb->on_test(ctx_, m, final_epoch);
    } catch (const Interrupted& e) {
        result_.finish_reason.clear();
        return interrupted(e);
    }
    profiler::enable(was_profiling);
    result_.epochs.push_back(m);
    st_.epochs.push_back(to_json(m));
    if (m.complete) {  // a resume starts the next epoch; an epoch cut by max_steps resumes where it stopped
        st_.epoch = epoch + 1;
        st_.step = 0;
    }
    const double value = metric_value(st_.best_metric, m);
    const bool best = m.complete && (st_.has_best ? improves(st_.best_metric, value, st_.best_value) : std::isfinite(value));
    if (best) {
        st_.has_best = true;
        st_.best_value = value;
    }
    checkpoint(CheckpointKind::last);
    if (best) checkpoint(CheckpointKind::best);
    for (Callbacks* cb : callbacks_) cb->on_epoch_end(ctx_, m, best, result_.finish_reason);
    return true;
}

}  // namespace

int64_t steps_per_epoch(int64_t samples, const FitOptions& o) {
    const int64_t steps = (samples + o.batch_size - 1) / o.batch_size;
    return o.steps_per_epoch > 0 ? std::min(steps, o.steps_per_epoch) : steps;
}

std::vector<EpochMetrics> finished_epochs(const TrainingState& st) {
    std::vector<EpochMetrics> epochs;
    for (const nlohmann::json& e : st.epochs) {
        EpochMetrics m = epoch_metrics_from_json(e);
        if (!m.complete && m.epoch == st.epoch && st.step > 0) continue;  // goes on, and is replaced when it completes
        epochs.push_back(m);
    }
    return epochs;
}

std::string capture_blocker(const FitOptions& o, Net& model, Solver& solver, Device& dev) {
    if (!o.capture) return "";
    const std::string key = "train.capture = true";
    if (o.data_parallel)
        return key + " is not supported in a distributed run (a captured step cannot include the gradient sum over "
                     "the ranks); set train.capture = false";
    if (!dev.supports_capture())
        return key + ": backend '" + dev.backend().name() +
               "' cannot capture a training step (its plugin has no capture entries); set train.capture = false";
    // Per-step host values baked into op attributes would be replayed frozen at their captured value.
    if (o.schedule.active())
        return key + " does not support solver.schedule: a captured step replays the learning rate it was recorded "
                     "with; set train.capture = false or remove the schedule";
    if (std::string why = solver.capture_blocker(); !why.empty()) return why;  // each solver knows its own
    for (size_t i = 0; i < model.size(); ++i) {  // a dropout layer, a stacked lstm/gru with dropout
        const auto ops = model.layer(i).ops_needed(true);
        if (std::find(ops.begin(), ops.end(), uint32_t{XYLEM_OP_DROPOUT_FWD}) != ops.end())
            return key + " does not support " + model.layer(i).label() +
                   ": it draws a new dropout mask every step and a captured step would replay one mask";
    }
    if (o.profile) return key + " cannot be profiled (--profile syncs after every op, which a graph cannot record)";
    return "";
}

void check_trainable_shape(const Net& model) {
    if (model.output_count() == 1) return;  // one input: build() refused the rest already
    std::string names;
    for (const std::string& n : model.output_names()) names += (names.empty() ? "" : ", ") + n;
    throw Error("model has " + std::to_string(model.output_count()) + " outputs (" + names +
                "): training fits a model of one output (its loss reads one); list one in [model] outputs");
}

FitResult fit(Net& model, Loss& loss, Solver& solver, Device& dev, BatchSource& data, TrainingState& state,
              const FitOptions& options, const std::vector<Callbacks*>& callbacks) {
    if (options.epochs < 1) throw Error("fit: options.epochs must be at least 1");
    if (options.batch_size < 1 || options.print_every < 1) throw Error("fit: options.batch_size and print_every must be at least 1");
    if (data.size() < 1) throw Error("fit: the batch source has no samples");
    check_trainable_shape(model);
    return Loop(model, loss, solver, dev, data, state, options, callbacks).go();
}

}  // namespace xylem::train
