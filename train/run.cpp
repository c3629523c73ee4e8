// A configured training run: set up from the config (or a checkpoint), then fit() with the run's callbacks.
#include "xylem/train/run.h"

#include <algorithm>
#include <filesystem>
#include <map>
#include <optional>
#include <ostream>

#include "xylem/error.h"
#include "xylem/fusion.h"
#include "xylem/train/batch_source.h"
#include "xylem/train/checkpoint.h"
#include "xylem/train/data_parallel.h"
#include "xylem/train/memory_plan.h"
#include "xylem/train/model_builder.h"
#include "xylem/train/run_callbacks.h"
#include "xylem/train/run_data.h"
#include "xylem/train/run_files.h"
#include "xylem/train/run_folder.h"
#include "xylem/io/checksum.h"
#include "xylem/train/text_data.h"

namespace xylem::train {
namespace {

void check_labels(const io::Dataset& d, int64_t classes, const std::string& what) {
    for (int64_t i = 0; i < static_cast<int64_t>(d.labels.size()); ++i)  // a token set has one per token
        if (d.labels[static_cast<size_t>(i)] >= classes)
            throw Error(what + " label " + std::to_string(d.labels[static_cast<size_t>(i)]) + " at index " +
                        std::to_string(i) + " is out of range for a model with " + std::to_string(classes) +
                        " outputs");
}

std::string where(int epoch, int64_t step) { return "epoch " + std::to_string(epoch) + " step " + std::to_string(step); }

// One training run: its files, data, model, loss and solver, and where it stands (`st_`, what a
// checkpoint saves), handed to fit() with the callbacks that report, checkpoint, score and stop it.
class Run {
public:
    Run(const RunConfig& c, Device& dev, std::ostream& out, const RunOptions& opt);
    RunResult go();

private:
    void check_ops();
    uint64_t resident_bytes() const;  // what data.resident keeps on the device
    void restore();
    void check_run_record(const TrainingState& saved);
    void start_folder();
    std::string nothing_left() const;  // why a resumed run has nothing to train, or ""
    void banner();
    void start_data_parallel();

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
    int64_t classes_ = 0;
    const FitOptions fit_;
    TrainingState st_;
    std::map<std::string, std::string> meta_;
    RunRecord record_;                // who this run is: run.json and every checkpoint's kRunRecordKey
    std::vector<std::string> notes_;  // what the banner says about the folder and the checkpoint
    RunReport report_;
    EarlyStoppingCallbacks early_stopping_;
    // A distributed run: this rank's parts of the validation and test sets (it scores only those).
    io::Dataset validation_shard_, test_shard_;
};

Run::Run(const RunConfig& c, Device& dev, std::ostream& out, const RunOptions& opt)
    : c_(c), dev_(dev), out_(out), opt_(opt), dp_(opt.data_parallel), resuming_(!opt.resume_from.empty()),
      // The out dir must take files before any work is done, not after an epoch of training; in a
      // distributed run only rank 0 writes there.
      files_(dp_ && !dp_->root() ? run_file_names(c.out_dir) : prepare_run_dir(c.out_dir, &stale_)),
      data_(load_run_data(c)), fit_([&] {
          FitOptions o = fit_options(c, data_.shuffled());
          o.profile = opt.profile;
          o.data_parallel = opt.data_parallel;
          o.resumed_from = opt.resume_from;
          return o;
      }()),
      report_(out, opt.progress, files_, resuming_, data_.is_text() ? data_.train.steps : 0),
      early_stopping_(c.early_stopping) {
    // Windows are independent samples: the ranks split each global batch as they split images.
    if (dp_ && data_.is_text() && !data_.windowed())
        throw Error(c.source + ": data-parallel training (mpirun) does not shard text streams yet; run text models "
                               "in one process, or sample windows (data.sampling = \"windows\")");
    model_ = build_model(c, data_.vocabulary.size());
    solver_ = build_solver(c);
    // Before anything is allocated: what the model, its gradients, the solver's state and a step
    // need on the device, against what the device has.
    check_memory_fits(training_memory(*model_, input_sample_shape(data_.train), *solver_, c.batch_size, resident_bytes()),
                      dev, c.source, "training this model");
    model_->build(dev, input_sample_shape(data_.train), c.seed);
    check_trainable_shape(*model_);
    // Fine-tuning: a new run starts from the checkpoint's tensors (all checked before any is set).
    if (!resuming_ && !c.init.empty()) load_checkpoint(c.init, *model_);
    check_model_fits_data(c, *model_, data_);
    loss_ = make_loss(c.loss);
    loss_->check_output(model_->output_sample_shape());
    classes_ = model_->output_sample_shape().back();
    check_labels(data_.train, classes_, c.data_dir + " training");
    check_labels(data_.test, classes_, c.data_dir + " test");
    // Before any work: what a captured step could not replay (fit checks it again).
    if (std::string why = capture_blocker(fit_, *model_, *solver_, dev); !why.empty()) throw Error(c.source + ": " + why);
    check_ops();
    meta_ = {{"format", "pt"}, {"producer", "xylem"}, {"config", c.source}, {"backend", dev.backend().name()}};
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

uint64_t Run::resident_bytes() const {
    if (!c_.data_resident) return 0;
    uint64_t n = data_.windowed() ? ResidentWindowBatches::resident_bytes(data_.windows) : 0;
    for (const io::Dataset* d : {&data_.train, &data_.test})
        n += (d->images.size() + d->labels.size() + d->tokens.size()) * sizeof(float);
    return n;
}

// Everything from the checkpoint: parameters, solver state, counters, order, RNG, metrics.
void Run::restore() {
    const std::string& from = opt_.resume_from;
    check_resumed_vocabulary(from, data_);
    TrainingState saved = load_training_checkpoint(from, *model_, *solver_, dev_);  // verifies its checksums
    check_run_record(saved);
    const int64_t count = data_.train_count();
    if (saved.order.size() != static_cast<size_t>(count))
        throw Error(from + ": the run trained on " + std::to_string(saved.order.size()) +
                    (data_.windowed()  ? " windows of data.block_size characters, the text now gives "
                     : data_.is_text() ? " sequences of data.seq_len characters, the text now gives "
                                       : " images, the data now gives ") +
                    std::to_string(count) +
                    (data_.is_text() ? " (data.text or data.validation changed?)" : " (data.dir or data.validation changed?)"));
    std::vector<bool> seen(static_cast<size_t>(count), false);  // a permutation of the samples: each once
    for (int32_t i : saved.order) {
        if (i < 0 || i >= count) throw Error(from + ": corrupt training state: order entry out of range");
        if (seen[static_cast<size_t>(i)])
            throw Error(from + ": corrupt training state: the training order holds sample " + std::to_string(i) +
                        " more than once");
        seen[static_cast<size_t>(i)] = true;
    }
    const int64_t steps = steps_per_epoch(count, fit_);
    if (saved.step > steps)  // == steps: stopped at the epoch's end, before its scores (resumes with them)
        throw Error(from + ": the run stopped at " + where(saved.epoch, saved.step) + " but an epoch now has " +
                    std::to_string(steps) + " steps (train.steps_per_epoch changed?)");
    st_ = std::move(saved);  // fit() restores the shuffle generator and judges "best" by the metric asked for now
}

// The checkpoint must be this folder's run's (run.json), and the data must be what it trained on.
void Run::check_run_record(const TrainingState& saved) {
    const std::string& from = opt_.resume_from;
    const std::optional<RunRecord> folder = read_folder_record(c_.out_dir);
    const nlohmann::json now = data_fingerprints(c_);
    if (saved.run_record.is_null()) {  // an older xylem's checkpoint: nothing to compare
        if (folder)
            throw Error("cannot resume " + c_.out_dir + ": " + from + " records no run, but the folder belongs to run " +
                        folder->id + " (started " + folder->started + "): a checkpoint copied in from elsewhere? "
                        "Resume it in its own folder, or start a new run here");
        notes_.push_back("note: " + from + " was written by an older xylem: it records no data fingerprints" +
                         (saved.checksummed ? "" : " and no tensor checksums") +
                         ", so the data it trained on (and its weights) could not be verified");
        record_ = RunRecord::fresh(saved.config_text, now);
        return;
    }
    RunRecord rec = RunRecord::from_json(saved.run_record, from);
    if (folder && folder->id != rec.id)
        throw Error("cannot resume " + c_.out_dir + ": " + from + " belongs to run " + rec.id + " (started " + rec.started +
                    "), but the folder belongs to run " + folder->id + " (started " + folder->started +
                    ", its run.json): a checkpoint copied in from another run's folder? Resume it in its own folder, "
                    "or start a new run here");
    if (rec.config != io::checksum_text(io::xxh64(saved.config_text.data(), saved.config_text.size())))
        throw Error(from + ": corrupt training state: its config does not match the config checksum of its run record");
    if (const std::string changed = changed_data(rec.data, now); !changed.empty()) {
        if (!opt_.accept_changed_data)
            throw Error("cannot resume " + c_.out_dir + ": the data changed since " + from + " was written: " + changed +
                        "; pass --accept-changed-data to train on with the data as it is now");
        notes_.push_back("note: training on changed data (--accept-changed-data): " + changed);
        rec.data = now;
    }
    if (!saved.checksummed) notes_.push_back("note: " + from + " holds no tensor checksums: its weights were not verified");
    record_ = std::move(rec);
}

// Rank 0, before the first step: a new run takes the folder for itself (an earlier run's files
// move to earlier.N); either way run.json says whose the folder is, and every checkpoint repeats it.
void Run::start_folder() {
    if (!resuming_) {
        if (files_.write) {
            const bool had_checkpoint = std::filesystem::exists(std::filesystem::symlink_status(files_.last));
            if (const std::string aside = move_earlier_run_aside(c_.out_dir); !aside.empty())
                notes_.push_back("moved the earlier run's files in " + c_.out_dir + " to " + aside +
                                 (had_checkpoint ? " (xylem train --resume " + aside + " continues that run)" : ""));
        }
        record_ = RunRecord::fresh(c_.text, files_.write ? data_fingerprints(c_) : nlohmann::json::object());
    }
    meta_[kRunRecordKey] = record_.to_json().dump();
    if (files_.write) write_folder_record(c_.out_dir, record_);
    if (resuming_) report_.resume_log_at(st_.epoch, st_.step);
}

std::string Run::nothing_left() const {
    if (st_.epoch > c_.epochs)
        return "the run has finished " + std::to_string(st_.epoch - 1) + " of " + std::to_string(c_.epochs) +
               " epoch(s); pass --epochs N to train further";
    if (c_.max_steps > 0 && static_cast<int64_t>(st_.global_step) >= c_.max_steps)
        return "the run has taken its " + std::to_string(st_.global_step) + " steps (train.max_steps " +
               std::to_string(c_.max_steps) + "); pass --max-steps N to train further";
    return early_stopping_.already_stopped(finished_epochs(st_));
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
    out_ << "; " << steps_per_epoch(data_.train_count(), fit_) << " steps per epoch of batch " << c_.batch_size << "\n";
    if (dp_) out_ << dp_->describe(c_.batch_size);
    for (const std::string& f : stale_) out_ << "removed a temp file left by a killed run: " << f << "\n";
    for (const std::string& n : notes_) out_ << n << "\n";
    if (resuming_)
        out_ << "resuming " << opt_.resume_from << " at " << where(st_.epoch, st_.step) << " of " << c_.epochs
             << " epochs\n";
    else if (!c_.init.empty())
        out_ << "initial weights: " << c_.init << " (train.init)\n";
    out_ << std::flush;
}

// Every rank built the same model from the same config: check that, share rank 0's state, and
// take this rank's parts of the evaluation sets.
void Run::start_data_parallel() {
    DataParallel::Identity id;
    id.config = fingerprint(c_.text + opt_.overrides.dump());
    const int64_t sizes[3] = {data_.train_count(), data_.validation.count, data_.test.count};
    id.data = fingerprint(sizes, sizeof sizes);
    const int64_t where[3] = {st_.epoch, st_.step, static_cast<int64_t>(st_.global_step)};
    id.position = fingerprint(st_.shuffle_rng, fingerprint(where, sizeof where));
    id.backend = dev_.backend().name();
    dp_->start(id, *model_, *solver_, c_.batch_size);
    validation_shard_ = dp_->shard_of(data_.validation);
    test_shard_ = dp_->shard_of(data_.test);
}

RunResult Run::go() {
    RunResult result;
    result.checkpoint_path = files_.model;
    result.metrics_path = files_.metrics;
    result.log_path = files_.log;
    result.text = data_.is_text();
    if (resuming_) {
        restore();
        result.last_checkpoint = opt_.resume_from;
    } else {
        st_.config_text = c_.text;
        st_.config_source = c_.source;
    }
    st_.overrides = opt_.overrides;
    if (std::string why = nothing_left(); !why.empty()) {
        result.epochs = finished_epochs(st_);
        result.already_complete = true;
        result.finish_reason = why;
        result.next_epoch = st_.epoch;
        return result;
    }
    // Parameters live on the host until now (initialised or loaded): move them to the device once.
    for (Param* p : model_->state()) p->value.upload(dev_);
    if (dp_) start_data_parallel();
    start_folder();  // after every check that can refuse the run: a refused run changes nothing in the folder
    banner();

    const std::unique_ptr<BatchSource> batches =
        data_.windowed() ? make_window_source(data_.windows, dev_, c_.data_resident, c_.capture)
                         : make_batch_source(data_.train, dev_, loss_->target_dtype(), classes_, c_.data_resident, c_.capture);
    std::optional<ResidentData> test_resident;
    if (c_.data_resident && data_.test.count)
        test_resident = upload_dataset(dp_ ? test_shard_ : data_.test, dev_, DType::I32, classes_);
    ScoringCallbacks::Sets sets;
    sets.validation = dp_ ? &validation_shard_ : &data_.validation;
    sets.test = dp_ ? &test_shard_ : &data_.test;
    sets.test_resident = test_resident ? &*test_resident : nullptr;
    sets.validation_total = data_.validation.count;
    sets.test_total = data_.test.count;
    sets.classes = classes_;
    sets.validation_batch = data_.eval_batch(c_.batch_size);
    sets.test_every_epoch = c_.test_every_epoch;
    ScoringCallbacks scoring(sets, dp_);
    RunSummary summary;
    summary.config = c_.source;
    summary.backend = dev_.backend().name();
    summary.device = dev_.name();
    summary.batch_size = c_.batch_size;
    summary.seed = c_.seed;
    summary.best_checkpoint = files_.best;
    ReportCallbacks reports(report_, summary, out_, opt_.profile && (!dp_ || dp_->root()));  // rank 0's profile
    CheckpointCallbacks checkpoints(files_, meta_);
    // In this order: scores before the early-stopping rule judges them; the epoch's report and
    // metrics.json after its checkpoints; metrics.json before the final model file.
    std::vector<Callbacks*> callbacks{&scoring, &early_stopping_, &reports, &checkpoints};
    callbacks.insert(callbacks.end(), opt_.callbacks.begin(), opt_.callbacks.end());

    static_cast<FitResult&>(result) = fit(*model_, *loss_, *solver_, dev_, *batches, st_, fit_, callbacks);
    result.next_epoch = st_.epoch;
    result.next_step = st_.step;
    return result;
}

}  // namespace

FitOptions fit_options(const RunConfig& c, bool shuffle) {
    FitOptions o;
    o.epochs = c.epochs;
    o.batch_size = c.batch_size;
    o.steps_per_epoch = c.steps_per_epoch;
    o.max_steps = c.max_steps;
    o.shuffle = shuffle;
    o.seed = c.seed;
    o.print_every = c.print_every;
    o.checkpoint_every = c.checkpoint_every;
    o.best_metric = c.best_metric;
    o.stop_on_nonfinite = c.on_nonfinite == "stop";
    o.base_lr = c.solver.lr;
    o.schedule = c.solver.schedule;
    o.capture = c.capture;
    o.fusion = fusion::enabled(c.fusion);
    return o;
}

RunResult run(const RunConfig& c, Device& dev, std::ostream& out, const RunOptions& opt) {
    if (c.epochs < 1) throw Error(c.source + ": key 'train.epochs' must be at least 1");
    Run r(c, dev, out, opt);
    return r.go();
}

}  // namespace xylem::train
