// Training and evaluation loops.
#include "xylem/train/trainer.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <numeric>
#include <optional>
#include <ostream>
#include <random>
#include <sstream>

#include "xylem/train/checkpoint.h"
#include "xylem/train/data_parallel.h"
#include "xylem/train/evaluate.h"
#include "xylem/train/interrupt.h"
#include "xylem/train/model_builder.h"
#include "xylem/train/run_data.h"
#include "xylem/train/run_files.h"
#include "xylem/train/run_report.h"
#include "xylem/train/text_data.h"
#include "xylem/solvers/schedule.h"
#include "xylem/error.h"
#include "xylem/fusion.h"
#include "xylem/graph.h"
#include "xylem/io/atomic_file.h"
#include "xylem/op_calls.h"
#include "xylem/profiler.h"
#include "xylem/transfer.h"

namespace xylem::train {
namespace {

using Clock = std::chrono::steady_clock;
const std::string kLossScope = "loss (forward + backward)", kSolverScope = "solver update";
double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

void check_labels(const io::Dataset& d, int64_t classes, const std::string& what) {
    for (int64_t i = 0; i < static_cast<int64_t>(d.labels.size()); ++i)  // a token set has one per token
        if (d.labels[static_cast<size_t>(i)] >= classes)
            throw Error(what + " label " + std::to_string(d.labels[static_cast<size_t>(i)]) + " at index " +
                        std::to_string(i) + " is out of range for a model with " + std::to_string(classes) +
                        " outputs");
}

}  // namespace

std::string capture_blocker(const RunConfig& c, Device& dev, const RunOptions& opt) {
    if (!c.capture) return "";
    const std::string key = "train.capture = true";
    if (opt.data_parallel)
        return key + " is not supported in a distributed run (a captured step cannot include the gradient sum over "
                     "the ranks); set train.capture = false";
    if (!dev.supports_capture())
        return key + ": backend '" + dev.backend().name() +
               "' cannot capture a training step (its plugin has no capture entries); set train.capture = false";
    // Per-step host values baked into op attributes would be replayed frozen at their captured value.
    if (c.solver.schedule.active())
        return key + " does not support solver.schedule: a captured step replays the learning rate it was recorded "
                     "with; set train.capture = false or remove the schedule";
    if (std::string why = build_solver(c)->capture_blocker(); !why.empty()) return why;  // each solver knows its own
    // Layers drawing dropout masks are refused once the model is built (Run::Run), named by their layer names.
    if (opt.profile) return key + " cannot be profiled (--profile syncs after every op, which a graph cannot record)";
    return "";
}

namespace {

std::string where(int epoch, int64_t step) { return "epoch " + std::to_string(epoch) + " step " + std::to_string(step); }

// One training run: set up from the config (or a checkpoint), then epochs of steps. Its state
// is `st_` (what a checkpoint saves) plus the model, solver and data it owns.
class Run {
public:
    Run(const RunConfig& c, Device& dev, std::ostream& out, const RunOptions& opt);
    RunResult go();

private:
    void check_ops();
    void restore();
    std::string nothing_left() const;  // why a resumed run has nothing to train, or ""
    void banner();
    // One epoch's steps from st_.step on; false if a signal or a non-finite loss stopped it.
    bool run_steps(int epoch);
    void end_epoch(int epoch);
    void save_last();
    void write_metrics();
    void print_fusion_profile();
    void progress(int epoch, int64_t step, double loss, bool last_of_epoch);
    void apply_schedule(int epoch);
    int64_t steps_left_in_run() const;
    void start_data_parallel();
    [[noreturn]] void nonfinite(float total, int epoch, int64_t step);

    const RunConfig& c_;
    Device& dev_;
    std::ostream& out_;
    const RunOptions& opt_;
    DataParallel* const dp_;  // null unless this process is one rank of a distributed run
    const bool resuming_;
    std::vector<std::string> stale_;  // before files_: preparing the folder fills it
    const RunFiles files_;
    const RunData data_;
    std::unique_ptr<Net> model_;
    std::unique_ptr<Loss> loss_;
    std::unique_ptr<Solver> solver_;
    std::vector<Param*> params_;
    int64_t classes_ = 0, steps_per_epoch_ = 0;
    TrainingState st_;
    std::mt19937_64 shuffle_rng_;
    std::vector<int64_t> order_;
    RunResult result_;
    std::map<std::string, std::string> meta_;
    RunReport report_;

    // Per-epoch counters of this process.
    Clock::time_point epoch_t0_, run_t0_;
    int64_t first_step_ = 0, steps_this_process_ = 0;
    TransferCounts transfers0_;

    // The step machinery: the batch source, the device loss sum, the captured step.
    BatchFeed* feed_ = nullptr;
    std::optional<ResidentData> test_resident_;
    Tensor loss_sum_;
    Graph graph_;
    int64_t eager_full_steps_ = 0;
    // Full-size steps run through the fusion pass (xylem/fusion.h): recorded once, then fused.
    fusion::StepFusion fusion_;

    // A distributed run: this rank's parts of the validation and test sets (it scores only those).
    io::Dataset validation_shard_, test_shard_;
};

Run::Run(const RunConfig& c, Device& dev, std::ostream& out, const RunOptions& opt)
    : c_(c), dev_(dev), out_(out), opt_(opt), dp_(opt.data_parallel), resuming_(!opt.resume_from.empty()),
      // The out dir must take files before any work is done, not after an epoch of training; in a
      // distributed run only rank 0 writes there.
      files_(dp_ && !dp_->root() ? run_file_names(c.out_dir) : prepare_run_dir(c.out_dir, &stale_)),
      data_(load_run_data(c)), shuffle_rng_(c.seed),
      report_(out, opt.progress, files_, resuming_, data_.is_text() ? c.seq_len : 0), loss_sum_({1}, DType::F32, dev),
      fusion_(dev, fusion::enabled(c.fusion)) {
    if (dp_ && data_.is_text())
        throw Error(c.source + ": data-parallel training (mpirun) does not shard text streams yet; run text models "
                               "in one process");
    model_ = build_model(c, data_.vocabulary.size());
    model_->build(dev, input_sample_shape(data_.train), c.seed);
    check_model_fits_data(c, *model_, data_);
    if (c.capture)  // any layer drawing dropout masks (a dropout layer, a stacked lstm/gru with dropout)
        for (size_t i = 0; i < model_->size(); ++i) {
            const auto ops = model_->layer(i).ops_needed(true);
            if (std::find(ops.begin(), ops.end(), uint32_t{XYLEM_OP_DROPOUT_FWD}) != ops.end())
                throw Error(c.source + ": train.capture = true does not support " + model_->layer(i).label() +
                            ": it draws a new dropout mask every step and a captured step would replay one mask");
        }
    loss_ = make_loss(c.loss);
    loss_->check_output(model_->output_sample_shape());
    classes_ = model_->output_sample_shape().back();
    check_labels(data_.train, classes_, c.data_dir + " training");
    check_labels(data_.test, classes_, c.data_dir + " test");
    solver_ = build_solver(c);
    check_ops();
    params_ = model_->params();
    const int64_t count = data_.train.count;
    steps_per_epoch_ = (count + c.batch_size - 1) / c.batch_size;
    if (c.steps_per_epoch > 0) steps_per_epoch_ = std::min(steps_per_epoch_, c.steps_per_epoch);
    result_.checkpoint_path = files_.model;
    result_.metrics_path = files_.metrics;
    result_.log_path = files_.log;
    meta_ = {{"format", "pt"}, {"producer", "xylem"}, {"config", c.source}, {"backend", dev.backend().name()}};
    result_.text = data_.is_text();
    if (data_.is_text()) meta_[kVocabularyKey] = vocabulary_metadata(data_.vocabulary);  // eval, sample, resume read it
}

// Every op training will run is checked before any work is done: the layers' forward and backward
// ops, the loss, the solver and the loop's own (counters, resident batches).
void Run::check_ops() {
    Backend& backend = dev_.backend();
    model_->check_ops(backend, true);
    for (uint32_t op : loss_->ops_needed()) backend.require(op, "loss " + c_.loss);
    for (uint32_t op : solver_->ops_needed()) backend.require(op, "solver " + solver_->kind());
    for (uint32_t op : {XYLEM_OP_FILL, XYLEM_OP_ACCURACY}) backend.require(op, "the training loop");
    if (c_.data_resident)
        for (uint32_t op : {XYLEM_OP_GATHER_ROWS, XYLEM_OP_COPY}) backend.require(op, "data.resident = true");
}

// Everything from the checkpoint: parameters, solver state, counters, order, RNG, metrics.
void Run::restore() {
    const std::string& from = opt_.resume_from;
    check_resumed_vocabulary(from, data_);
    TrainingState saved = load_training_checkpoint(from, *model_, *solver_, dev_);
    if (saved.order.size() != static_cast<size_t>(data_.train.count))
        throw Error(from + ": the run trained on " + std::to_string(saved.order.size()) + " images, the data now gives " +
                    std::to_string(data_.train.count) + " (data.dir or data.validation changed?)");
    for (int32_t i : saved.order)
        if (i < 0 || i >= data_.train.count) throw Error(from + ": corrupt training state: order entry out of range");
    if (saved.step >= steps_per_epoch_)
        throw Error(from + ": the run stopped at " + where(saved.epoch, saved.step) + " but an epoch now has " +
                    std::to_string(steps_per_epoch_) + " steps (train.steps_per_epoch changed?)");
    std::istringstream rng_text(saved.shuffle_rng);
    rng_text >> shuffle_rng_;
    if (rng_text.fail()) throw Error(from + ": corrupt training state: the shuffle generator's state");
    if (saved.best_metric != c_.best_metric) {  // judged anew by the metric asked for now
        saved.best_metric = c_.best_metric;
        saved.has_best = false;
    }
    st_ = std::move(saved);
    for (const nlohmann::json& e : st_.epochs) {
        EpochMetrics m = epoch_metrics_from_json(e);
        // A run that train.max_steps ended inside an epoch goes on with that epoch: its partial
        // metrics are replaced when it completes.
        if (!m.complete && m.epoch == st_.epoch && st_.step > 0) continue;
        result_.epochs.push_back(m);
    }
    st_.epochs = nlohmann::json::array();
    for (const EpochMetrics& m : result_.epochs) st_.epochs.push_back(to_json(m));
    result_.last_checkpoint = from;
}

std::string Run::nothing_left() const {
    if (st_.epoch > c_.epochs)
        return "the run has finished " + std::to_string(st_.epoch - 1) + " of " + std::to_string(c_.epochs) +
               " epoch(s); pass --epochs N to train further";
    if (c_.max_steps > 0 && static_cast<int64_t>(st_.global_step) >= c_.max_steps)
        return "the run has taken its " + std::to_string(st_.global_step) + " steps (train.max_steps " +
               std::to_string(c_.max_steps) + "); pass --max-steps N to train further";
    const EarlyStopping& es = c_.early_stopping;
    if (es.patience > 0) {
        const Stagnation s = stagnation(result_.epochs, es.metric, es.min_delta);
        if (s.epochs_since_best >= es.patience)
            return "early stopping ended the run: " + es.metric + " has not improved for " +
                   std::to_string(s.epochs_since_best) + " epoch(s) (train.early_stopping.patience " +
                   std::to_string(es.patience) + ")";
    }
    return "";
}

int64_t Run::steps_left_in_run() const {
    int64_t left = (steps_per_epoch_ - st_.step) + static_cast<int64_t>(c_.epochs - st_.epoch) * steps_per_epoch_;
    if (c_.max_steps > 0) left = std::min<int64_t>(left, c_.max_steps - static_cast<int64_t>(st_.global_step));
    return std::max<int64_t>(left, 0);
}

void Run::banner() {
    if (!opt_.progress) return;
    out_ << opt_.backend_choice << "backend " << dev_.backend().name() << ", device " << dev_.name() << "\nmodel:\n" << model_->summary();
    if (data_.is_text()) out_ << "data: " << data_.description;
    else {
        out_ << "data: " << data_.train.count << " training images";
        if (data_.validation.count) out_ << ", " << data_.validation.count << " held out for validation";
        out_ << ", " << data_.test.count << " test images";
    }
    out_ << "; " << steps_per_epoch_ << " steps per epoch of batch " << c_.batch_size << "\n";
    if (dp_) out_ << dp_->describe(c_.batch_size);
    for (const std::string& f : stale_) out_ << "removed a temp file left by a killed run: " << f << "\n";
    if (resuming_)
        out_ << "resuming " << opt_.resume_from << " at " << where(st_.epoch, st_.step) << " of " << c_.epochs
             << " epochs\n";
    else if (std::filesystem::exists(files_.last))
        out_ << "note: " << files_.last << " holds an earlier run's checkpoint; this run replaces it at its "
             << "first checkpoint (xylem train --resume " << files_.dir << " would continue it instead)\n";
    out_ << std::flush;
}

void Run::apply_schedule(int epoch) {
    if (c_.solver.schedule.active())
        solver_->set_lr(static_cast<float>(scheduled_lr(c_.solver.lr, c_.solver.schedule, epoch - 1,
                                                        static_cast<int64_t>(st_.global_step))));
}

void Run::save_last() {
    if (dp_) dp_->average_buffers(*model_);  // every rank: a collective
    if (!files_.write) return;
    save_training_checkpoint(files_.last, *model_, *solver_, dev_, st_, meta_);
    result_.last_checkpoint = files_.last;
}

// --profile's fusion table: launches per step and every fused program with the ops it replaced.
void Run::print_fusion_profile() {
    out_ << "\nfusion: " << (fusion_.enabled() ? "on" : "off (train.fusion = false or XYLEM_FUSION=0)")
         << "; launches per training step: " << fusion_.last_step_launches() << " (" << fusion_.last_step_ops()
         << " ops issued)\n";
    if (const std::string note = fusion_.note(); !note.empty() && fusion_.enabled()) out_ << "  note: " << note << "\n";
    // Programs with the same members (one per time step of a recurrent layer, one per parameter's
    // update) are listed once, with their count and one program's expressions.
    std::vector<std::pair<std::string, std::vector<const fusion::ProgramInfo*>>> kinds;
    for (const fusion::ProgramInfo& p : fusion_.programs()) {
        auto it = std::find_if(kinds.begin(), kinds.end(), [&](const auto& k) { return k.first == p.members; });
        if (it == kinds.end()) kinds.push_back({p.members, {&p}});
        else it->second.push_back(&p);
    }
    for (const auto& [members, list] : kinds) {
        int64_t lo = list.front()->elements, hi = lo;
        for (const fusion::ProgramInfo* p : list) lo = std::min(lo, p->elements), hi = std::max(hi, p->elements);
        out_ << "  " << list.size() << " program(s) of " << list.front()->ops_replaced << " ops -> 1 launch each, over "
             << (lo == hi ? std::to_string(lo) : std::to_string(lo) + " to " + std::to_string(hi)) << " elements: " << members
             << "\n      e.g. " << list.front()->text << "\n";
    }
}

void Run::write_metrics() {
    RunSummary sum;
    sum.config = c_.source;
    sum.backend = dev_.backend().name();
    sum.device = dev_.name();
    sum.batch_size = c_.batch_size;
    sum.seed = c_.seed;
    sum.has_best = st_.has_best;
    sum.best_metric = st_.best_metric;
    sum.best_value = st_.best_value;
    sum.best_checkpoint = files_.best;
    sum.finish_reason = result_.finish_reason;
    report_.metrics(result_.epochs, sum);
}

void Run::progress(int epoch, int64_t step, double loss, bool last_of_epoch) {
    if (!report_.showing()) return;
    const double per_step = since(run_t0_) / static_cast<double>(std::max<int64_t>(steps_this_process_, 1));
    Progress p;
    p.epoch = epoch;
    p.epochs = c_.epochs;
    p.step = step;
    p.steps_per_epoch = steps_per_epoch_;
    p.loss = loss;
    p.lr = solver_->lr();
    p.images_per_second = static_cast<double>((step - first_step_) * c_.batch_size) / std::max(since(epoch_t0_), 1e-9);
    p.eta_epoch_seconds = per_step * static_cast<double>(steps_per_epoch_ - step);
    p.eta_run_seconds = per_step * static_cast<double>(steps_left_in_run());
    p.last_of_epoch = last_of_epoch;
    report_.progress(p);
}

RunResult Run::go() {
    if (resuming_) restore();
    else {
        st_.order.resize(static_cast<size_t>(data_.train.count));
        std::iota(st_.order.begin(), st_.order.end(), 0);
        st_.best_metric = c_.best_metric;
        st_.config_text = c_.text;
        st_.config_source = c_.source;
    }
    st_.overrides = opt_.overrides;
    if (std::string why = nothing_left(); !why.empty()) {
        result_.already_complete = true;
        result_.finish_reason = why;
        result_.next_epoch = st_.epoch;
        return std::move(result_);
    }
    // Parameters live on the host until now (initialised or loaded): move them to the device once.
    for (Param* p : model_->state()) p->value.upload(dev_);
    if (dp_) start_data_parallel();
    banner();

    order_.assign(st_.order.begin(), st_.order.end());
    BatchFeed feed(data_.train, dev_, loss_->target_dtype(), classes_, c_.data_resident, c_.capture);
    feed_ = &feed;
    if (c_.data_resident && data_.test.count)
        test_resident_ = upload_dataset(dp_ ? test_shard_ : data_.test, dev_, DType::I32, classes_);
    if (opt_.profile) {
        profiler::reset();
        profiler::enable(true);
    }
    run_t0_ = Clock::now();
    bool finished = false;
    for (int epoch = st_.epoch; epoch <= c_.epochs && !finished; ++epoch) {
        if (!run_steps(epoch)) break;  // a signal: last.safetensors is written
        end_epoch(epoch);
        finished = !result_.finish_reason.empty() || (c_.max_steps > 0 && static_cast<int64_t>(st_.global_step) >= c_.max_steps);
        if (stop_signal() != 0 && !finished && epoch < c_.epochs) result_.stopped_by_signal = stop_signal();
        if (result_.stopped_by_signal) break;
    }
    result_.next_epoch = st_.epoch;
    result_.next_step = st_.step;
    if (opt_.profile && (!dp_ || dp_->root())) {  // a distributed run: rank 0's own profile
        profiler::enable(false);
        out_ << "\nprofile (each op timed with a device sync):\n";
        profiler::print(out_);
        print_fusion_profile();
    }
    if (dp_) dp_->check_identical(*model_);
    write_metrics();
    if (!result_.stopped_by_signal && files_.write) save_checkpoint(result_.checkpoint_path, *model_, meta_);
    return std::move(result_);
}

// Every rank built the same model from the same config: check that, share rank 0's state, and
// take this rank's parts of the evaluation sets.
void Run::start_data_parallel() {
    DataParallel::Identity id;
    id.config = fingerprint(c_.text + opt_.overrides.dump());
    const int64_t sizes[3] = {data_.train.count, data_.validation.count, data_.test.count};
    id.data = fingerprint(sizes, sizeof sizes);
    const int64_t where[3] = {st_.epoch, st_.step, static_cast<int64_t>(st_.global_step)};
    id.position = fingerprint(st_.shuffle_rng, fingerprint(where, sizeof where));
    dp_->start(id, *model_, *solver_, c_.batch_size);
    validation_shard_ = dp_->shard_of(data_.validation);
    test_shard_ = dp_->shard_of(data_.test);
}

void Run::nonfinite(float total, int epoch, int64_t step) {
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
bool Run::run_steps(int epoch) {
    model_->reset_state();  // recurrent state carries over between batches, not from the last epoch or a validation
    if (st_.step > 0 && !st_.carried.empty()) model_->restore_carried_state(st_.carried);  // resumed mid-epoch
    if (st_.step == 0) {  // a fresh epoch: shuffle, and note the generator's state for the next one
        if (data_.shuffled()) std::shuffle(order_.begin(), order_.end(), shuffle_rng_);
        st_.order.assign(order_.begin(), order_.end());
        std::ostringstream rng_text;
        rng_text << shuffle_rng_;
        st_.shuffle_rng = rng_text.str();
        st_.loss_sum = 0;
        st_.seen = st_.seen_at_print = 0;
        st_.loss_at_print = 0;
    }
    st_.epoch = epoch;
    feed_->begin_epoch(order_);  // resident data: the epoch's one upload (the order), before the count
    ops::fill(dev_, loss_sum_, dp_ ? dp_->share_of(st_.loss_sum) : st_.loss_sum);
    transfers0_ = transfer_counts();
    epoch_t0_ = Clock::now();
    first_step_ = st_.step;
    const int64_t batch = c_.batch_size;
    auto run_step = [&](int64_t first, int64_t n) {
        if (n == 0) {  // a rank whose shard of a short tail batch is empty
            dp_->step_without_samples();
            solver_->step(dev_, params_);
            return;
        }
        auto [x, y] = feed_->enqueue(first, n);
        const Tensor& logits = model_->forward(dev_, x, true);
        const Tensor* dlogits = nullptr;
        {
            profiler::Scope scope(&kLossScope);
            loss_->forward(dev_, logits, y, loss_sum_);
            dlogits = &loss_->backward(dev_, logits, y);
        }
        model_->backward(dev_, *dlogits);
        profiler::Scope scope(&kSolverScope);
        solver_->step(dev_, params_);
    };
    // Full-size steps run eagerly until every buffer and solver slot exists and SGD is past its
    // first-step special case; then one is captured and replayed. Tail batches stay eager.
    constexpr int64_t kWarmupSteps = 1;
    for (int64_t step = st_.step; step < steps_per_epoch_; ++step) {
        const int64_t first = step * batch, n = std::min(batch, data_.train.count - first);
        // A distributed run's rank trains on its part of the global batch.
        const DataParallel::Shard mine = dp_ ? dp_->begin_step(first, n) : DataParallel::Shard{first, n};
        apply_schedule(epoch);
        if (mine.count > 0) feed_->stage(mine.first, mine.count);
        {
            StrictTransfers strict;  // anything but the batch's explicit upload crossing the bus is a bug
            if (graph_.defined() && n == batch) {
                graph_.launch();
            } else if (c_.capture && n == batch && eager_full_steps_ >= kWarmupSteps) {
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
        const bool run_done = c_.max_steps > 0 && static_cast<int64_t>(st_.global_step) >= c_.max_steps;
        const bool last = step + 1 == steps_per_epoch_ || run_done;
        const bool log_row = (step + 1) % c_.print_every == 0 || last;
        // The first line comes after the first step, then at least every second on a terminal.
        bool show =
            log_row || (report_.showing() && (steps_this_process_ == 1 || (report_.terminal() && report_.seconds_since_shown() >= 1.0)));
        bool stop = stop_signal() != 0 && !last;  // the epoch's end writes its own checkpoint
        if (dp_) dp_->agree(show, stop);  // every rank takes the same branches below
        const bool checkpoint =
            !last && (stop || (c_.checkpoint_every > 0 && st_.global_step % static_cast<uint64_t>(c_.checkpoint_every) == 0));
        if (!show && !checkpoint) continue;
        // The host's only read of the loss (summed over the ranks of a distributed run).
        const float total = dp_ ? dp_->global_sum(loss_sum_) : loss_sum_.to_vector()[0];
        if (!std::isfinite(total) && c_.on_nonfinite == "stop") nonfinite(total, epoch, step + 1);
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
            r.lr = solver_->lr();
            report_.interval_row(r);
        }
        if (show) progress(epoch, step + 1, recent, last);
        if (checkpoint) {
            st_.carried = carried_snapshot(*model_);
            save_last();
        }
        if (stop) {
            result_.stopped_by_signal = stop_signal();
            return false;
        }
        if (run_done) break;
    }
    return true;
}

void Run::end_epoch(int epoch) {
    EpochMetrics m;
    m.epoch = epoch;
    m.seconds = since(epoch_t0_);
    m.steps = st_.step;
    m.complete = st_.step == steps_per_epoch_;
    m.train_loss = static_cast<double>(st_.loss_sum) / static_cast<double>(st_.seen);
    m.lr = solver_->lr();
    const double steps_run = static_cast<double>(st_.step - first_step_);
    m.images_per_second = static_cast<double>(st_.seen - first_step_ * c_.batch_size) / m.seconds;
    const TransferCounts t = transfer_counts() - transfers0_;
    m.transfers_per_step = static_cast<double>(t.count()) / steps_run;
    m.h2d_bytes_per_step = static_cast<double>(t.h2d_bytes) / steps_run;
    // An epoch that max_steps cut short resumes mid-stream: keep the recurrent state before
    // validation resets it. A complete epoch's successor starts from zero.
    st_.carried = m.complete ? std::map<std::string, SavedTensor>{} : carried_snapshot(*model_);
    const bool was_profiling = profiler::enabled();
    profiler::enable(false);  // the profile covers training steps only
    if (dp_) dp_->average_buffers(*model_);  // every rank scores with the same running statistics
    if (data_.validation.count) {
        model_->reset_state();
        const Scores v = dp_ ? dp_->score(*model_, *loss_, dev_, validation_shard_, data_.validation.count, classes_)
                             : score(*model_, *loss_, dev_, data_.validation, classes_, data_.eval_batch(c_.batch_size));
        m.has_validation = true;
        m.val_loss = v.loss;
        m.val_accuracy = v.accuracy;
    }
    // The run ends here if this was its last epoch, its last step, or early stopping says so.
    std::vector<EpochMetrics> with_this = result_.epochs;
    with_this.push_back(m);
    const EarlyStopping& es = c_.early_stopping;
    if (es.patience > 0) {
        const Stagnation s = stagnation(with_this, es.metric, es.min_delta);
        if (s.epochs_since_best >= es.patience) {
            char why[256];
            std::snprintf(why, sizeof why, "early stopping: %s has not improved for %d epoch(s) (best %.6g at epoch %d)",
                          es.metric.c_str(), s.epochs_since_best, s.best_value, s.best_epoch);
            result_.finish_reason = why;
        }
    }
    const bool run_done = c_.max_steps > 0 && static_cast<int64_t>(st_.global_step) >= c_.max_steps;
    if (run_done && epoch < c_.epochs && result_.finish_reason.empty())
        result_.finish_reason = "train.max_steps: " + std::to_string(c_.max_steps) + " steps done";
    const bool final_epoch = epoch == c_.epochs || !result_.finish_reason.empty();
    if ((c_.test_every_epoch || final_epoch) && data_.test.count) {  // text data has no test set
        m.has_test = true;
        if (dp_)
            m.test_accuracy = test_resident_ ? dp_->accuracy(*model_, dev_, *test_resident_, data_.test.count)
                                             : dp_->accuracy(*model_, dev_, test_shard_, data_.test.count);
        else
            m.test_accuracy = test_resident_ ? evaluate(*model_, dev_, *test_resident_) : evaluate(*model_, dev_, data_.test);
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
    save_last();
    if (best && files_.write) {
        save_training_checkpoint(files_.best, *model_, *solver_, dev_, st_, meta_);
        result_.best_checkpoint = files_.best;
    }
    report_.epoch(m, st_.best_metric, best, result_.finish_reason);
    write_metrics();
}

}  // namespace

RunResult run(const RunConfig& c, Device& dev, std::ostream& out, const RunOptions& opt) {
    if (std::string why = capture_blocker(c, dev, opt); !why.empty()) throw Error(c.source + ": " + why);
    if (c.epochs < 1) throw Error(c.source + ": key 'train.epochs' must be at least 1");
    Run run(c, dev, out, opt);
    return run.go();
}

}  // namespace xylem::train
