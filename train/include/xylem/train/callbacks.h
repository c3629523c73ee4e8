// What fit() tells the code around it while it trains, and what that code decides: progress
// lines, log rows, checkpoints, scores between epochs, early stopping and stop requests (signals)
// all go through Callbacks. fit() owns the steps and the state a checkpoint saves; a callback
// never drives the loop, it answers when asked. Every hook has a default that does nothing, so a
// callback overrides only what it is for. run.h composes the ones a configured run uses.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "xylem/backend.h"
#include "xylem/fusion.h"
#include "xylem/layers/loss.h"
#include "xylem/layers/net.h"
#include "xylem/solvers/solver.h"
#include "xylem/train/checkpoint.h"
#include "xylem/train/run_report.h"

namespace xylem::train {

struct FitOptions;  // fit.h
struct FitResult;

// What a callback may look at: the model, its loss, solver and device, the options, where the
// run stands (`state`, what a training checkpoint saves) and the epochs finished so far.
struct FitContext {
    Net& model;
    Loss& loss;
    Solver& solver;
    Device& dev;
    const FitOptions& options;
    const TrainingState& state;
    const std::vector<EpochMetrics>& epochs;
    int64_t steps_per_epoch;
    const fusion::StepFusion& fusion;  // the step fusion pass, for a profile report
    // The callbacks' stop requests (a signal number, or 0), for work between steps that should stop
    // within one batch (scoring: evaluate.h's StopCheck). Empty in a distributed run, whose ranks
    // may only stop together, at a step.
    std::function<int()> stop_requested = {};
};

// Which resumable checkpoint fit asks for: the latest position (every epoch, every
// checkpoint_every steps, and when a stop is requested), or the best epoch so far.
enum class CheckpointKind { last, best };

class Callbacks {
public:
    virtual ~Callbacks() = default;

    // After a step: whether to show a progress line now (fit reads the loss for it, a device sync).
    // `steps_run`: steps this process has run. Every print_every steps a line is shown anyway.
    virtual bool wants_progress(const FitContext&, int64_t /*steps_run*/) { return false; }
    virtual void on_progress(const FitContext&, const Progress&) {}
    // Every print_every steps and at an epoch's last step: the loss of the steps since the last row.
    virtual void on_log_row(const FitContext&, const LogRow&) {}
    // Polled after every step: nonzero (a signal number) asks the run to stop; fit asks for a
    // checkpoint first and returns with FitResult::stopped_by_signal set to it.
    virtual int stop_requested() { return 0; }
    // Writes a checkpoint of ctx.model, ctx.solver and ctx.state; returns the file written, or "".
    virtual std::string on_checkpoint(const FitContext&, CheckpointKind) { return ""; }

    // The end of an epoch, in this order. The profiler is off and a data-parallel run's buffers
    // are averaged over the ranks. Scores go into `m`: the held-out set's every epoch, then,
    // once fit knows whether this is the run's final epoch, the test set's.
    virtual void on_validation(const FitContext&, EpochMetrics& /*m*/) {}
    // Why the run should end after this epoch ("" to go on), judged over `epochs` (this one last).
    virtual std::string stop_after_epoch(const FitContext&, const std::vector<EpochMetrics>& /*epochs*/) { return ""; }
    virtual void on_test(const FitContext&, EpochMetrics& /*m*/, bool /*final_epoch*/) {}
    // After the epoch's checkpoints: `best` if it is the best epoch by state.best_metric so far;
    // `finish_reason` says why the run ends here early ("" if it does not).
    virtual void on_epoch_end(const FitContext&, const EpochMetrics&, bool /*best*/,
                              const std::string& /*finish_reason*/) {}

    // After the last step (or a stop): ctx.epochs holds every epoch of the run.
    virtual void on_fit_end(const FitContext&, const FitResult&) {}
};

}  // namespace xylem::train
