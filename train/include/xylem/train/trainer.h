// The training loop: minibatch SGD over an image dataset, with device-side loss and accuracy
// accumulation, a live progress line, metrics.json, a CSV log, resumable checkpoints (every epoch,
// every train.checkpoint_every steps, and when interrupted) and the best one by a chosen metric.
#pragma once

#include <iosfwd>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "xylem/train/batch_feed.h"
#include "xylem/train/evaluate.h"
#include "xylem/train/run_report.h"
#include "xylem/backend.h"
#include "xylem/config.h"
#include "xylem/io/idx.h"
#include "xylem/layers/loss.h"
#include "xylem/layers/net.h"

namespace xylem::train {

class DataParallel;  // xylem/train/data_parallel.h

struct RunResult {
    std::vector<EpochMetrics> epochs;  // every epoch of the run, the resumed ones included
    std::string checkpoint_path, metrics_path, log_path;
    std::string last_checkpoint, best_checkpoint;  // resumable; "" if none was written
    int stopped_by_signal = 0;  // SIGINT / SIGTERM asked the run to stop; last_checkpoint resumes it
    int next_epoch = 0;         // where a stopped run resumes: epoch (1-based) and step in it
    int64_t next_step = 0;
    bool already_complete = false;  // a resumed run had nothing left to train
    std::string finish_reason;      // why the run ended before its last epoch ("early stopping: ...", "train.max_steps ...")
    bool text = false;  // a text run: losses are nats per character, and there is no test set
};

struct RunOptions {
    bool profile = false;  // print the per-op profile after training
    bool progress = true;  // progress lines on `out`
    std::string backend_choice;  // lines the banner starts with: how the backend was chosen (describe_choice)
    std::string resume_from;  // a training checkpoint to continue from ("" = a new run)
    // The command-line overrides this run was started with, kept in its checkpoints so that a
    // resume re-applies them (train.batch_size from --batch-size, ...).
    nlohmann::json overrides = nlohmann::json::object();
    // This process is one rank of a data-parallel run (`mpirun -np N xylem train`); null: alone.
    DataParallel* data_parallel = nullptr;

    static RunOptions quiet() {  // no progress output (tests, benchmarks)
        RunOptions o;
        o.progress = false;
        return o;
    }
};

RunResult run(const RunConfig& config, Device& dev, std::ostream& out, const RunOptions& options = {});


// Why `config` cannot train with train.capture = true on `dev` (one line naming the key), or "".
std::string capture_blocker(const RunConfig& config, Device& dev, const RunOptions& options);

}  // namespace xylem::train
