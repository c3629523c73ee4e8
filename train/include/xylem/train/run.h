// A training run from a config: the data it names, the model, loss and solver it builds, its out
// dir, and fit() with the run's callbacks (run_callbacks.h): a live progress line, metrics.json, a
// CSV log, resumable checkpoints (every epoch, every train.checkpoint_every steps, and when a
// stop is requested) and the best one by a chosen metric, early stopping, validation and test
// scores. `xylem train` is this plus its flags, the backend choice and a signal handler.
#pragma once

#include <iosfwd>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "xylem/backend.h"
#include "xylem/config.h"
#include "xylem/train/callbacks.h"
#include "xylem/train/fit.h"
#include "xylem/train/run_report.h"

namespace xylem::train {

class DataParallel;  // data_parallel.h

struct RunResult : FitResult {  // epochs, last and best checkpoints, stop signal, finish reason
    std::string checkpoint_path, metrics_path, log_path;
    int next_epoch = 0;  // where a stopped run resumes: epoch (1-based) and step in it
    int64_t next_step = 0;
    bool already_complete = false;  // a resumed run had nothing left to train
    bool text = false;  // a text run: losses are nats per character, and there is no test set
};

struct RunOptions {
    bool profile = false;  // print the per-op profile after training
    bool progress = true;  // progress lines on `out`
    std::string backend_choice;  // lines the banner starts with: how the backend was chosen (describe_choice)
    std::string resume_from;  // a training checkpoint to continue from ("" = a new run)
    // Resume even though a data file's fingerprint differs from the checkpoint's (--accept-changed-data):
    // the run says so and records the data it trains on now. Without it that is an error naming the file.
    bool accept_changed_data = false;
    // The command-line overrides this run was started with, kept in its checkpoints so that a
    // resume re-applies them (train.batch_size from --batch-size, ...).
    nlohmann::json overrides = nlohmann::json::object();
    // This process is one rank of a data-parallel run (`mpirun -np N xylem train`); null: alone.
    DataParallel* data_parallel = nullptr;
    // Asked after the run's own callbacks: the caller's (`xylem train` passes its InterruptGuard,
    // whose stop requests end the run at a checkpoint).
    std::vector<Callbacks*> callbacks;

    static RunOptions quiet() {  // no progress output (tests, benchmarks)
        RunOptions o;
        o.progress = false;
        return o;
    }
};

RunResult run(const RunConfig& config, Device& dev, std::ostream& out, const RunOptions& options = {});

// fit()'s options for a config: its [train] keys, the schedule, and the data's shuffling (`shuffle`).
FitOptions fit_options(const RunConfig& config, bool shuffle);

}  // namespace xylem::train
