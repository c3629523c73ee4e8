// The training loop as a library: fit() trains a built model with a loss and a solver on the
// batches of a BatchSource, epoch after epoch, from a TrainingState (what a training checkpoint
// saves, so a resumed run continues bit-identically) and reports through Callbacks. Step capture,
// step fusion, learning-rate schedules, train.max_steps and data-parallel ranks are its own; what
// is shown, written, scored and decided between steps belongs to the callbacks (run.h composes
// the ones `xylem train` uses).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "xylem/config.h"
#include "xylem/train/batch_source.h"
#include "xylem/train/callbacks.h"
#include "xylem/train/checkpoint.h"
#include "xylem/train/run_report.h"

namespace xylem::train {

class DataParallel;  // data_parallel.h

// The [train] keys fit() uses, by the names docs/training.md gives them.
struct FitOptions {
    int epochs = 1;                // train.epochs: the run's last epoch (a resumed state continues towards it)
    int64_t batch_size = 32;       // train.batch_size
    int64_t steps_per_epoch = 0;   // train.steps_per_epoch: at most this many steps an epoch; 0: the whole source
    int64_t max_steps = 0;         // train.max_steps: steps over the whole run; 0: no limit
    bool shuffle = true;           // a new order every epoch (text streams keep theirs)
    uint64_t seed = 1;             // train.seed: the shuffle generator of a new run (a resumed one keeps its own)
    int64_t print_every = 100;     // train.print_every: a log row (and a loss read, a sync) every N steps
    int64_t checkpoint_every = 0;  // train.checkpoint_every: a "last" checkpoint every N steps; 0: epoch ends only
    std::string best_metric = "train_loss";  // train.best_metric: "train_loss", "val_loss" or "val_accuracy"
    bool stop_on_nonfinite = true;  // train.on_nonfinite = "stop": a NaN or infinite loss ends the run (an Error)
    // solver.schedule over solver.lr: the rate set before every step; inactive leaves the solver's.
    double base_lr = 0;
    ScheduleSpec schedule;
    bool capture = false;  // train.capture: record one full-size step and replay it (see capture_blocker)
    bool fusion = true;    // train.fusion (after XYLEM_FUSION, fusion::enabled)
    bool profile = false;  // time the training steps' ops (profiler.h); scoring is left out
    // One rank of a data-parallel run, already started (DataParallel::start); null: alone.
    DataParallel* data_parallel = nullptr;
    // The checkpoint `state` was read from: the last good one until a callback writes another.
    std::string resumed_from;
};

struct FitResult {
    std::vector<EpochMetrics> epochs;  // every epoch of the run, the resumed ones included
    std::string last_checkpoint, best_checkpoint;  // what on_checkpoint last wrote of each kind; "" if none
    int stopped_by_signal = 0;  // the stop_requested() value that ended the run early; 0 if none did
    // Why the run ended before its last epoch ("early stopping: ...", "train.max_steps: ..."), or "".
    std::string finish_reason;
};

// Steps in one epoch over `samples` samples.
int64_t steps_per_epoch(int64_t samples, const FitOptions& options);

// The epochs a state has finished, from its metrics. An epoch that train.max_steps cut short and
// that the state goes on with is left out: it is scored again when it completes.
std::vector<EpochMetrics> finished_epochs(const TrainingState& state);

// Why one step of `model` cannot be captured with these options on `dev` (one line naming the
// key), or "": steps that read per-step values on the host (a schedule, Adam's bias corrections, a
// dropout mask's seed) would replay them frozen, and some backends and modes cannot record.
std::string capture_blocker(const FitOptions& options, Net& model, Solver& solver, Device& dev);

// An Error unless the model has one input and one output, the shape fit trains (the loss reads
// one output, a batch source feeds one input): naming the model's outputs. Run before anything
// is written.
void check_trainable_shape(const Net& model);

// Trains from `state` (a default TrainingState starts a new run; one read from a training
// checkpoint resumes it exactly) until options.epochs or options.max_steps, a callback's
// stop_after_epoch or stop_requested, and leaves `state` where the run stopped. The model is
// built, its parameters are moved to `dev`, and `data` gives its samples with targets in
// loss.target_dtype(). Callbacks are asked in the order given.
FitResult fit(Net& model, Loss& loss, Solver& solver, Device& dev, BatchSource& data, TrainingState& state,
              const FitOptions& options, const std::vector<Callbacks*>& callbacks = {});

}  // namespace xylem::train
