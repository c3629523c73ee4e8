// The training loop: minibatch SGD over an image dataset, with device-side loss and accuracy
// accumulation, a live progress line, metrics.json, a CSV log, resumable checkpoints (every epoch,
// every train.checkpoint_every steps, and when interrupted) and the best one by a chosen metric.
#pragma once

#include <iosfwd>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "app/batch_feed.h"
#include "xylem/backend.h"
#include "xylem/config.h"
#include "xylem/io/idx.h"
#include "xylem/layers/loss.h"
#include "xylem/layers/sequential.h"

namespace xylem::app {

struct EpochMetrics {
    int epoch = 0;
    double train_loss = 0;      // mean per-sample loss over the epoch
    double test_accuracy = 0;   // fraction in [0, 1]
    bool has_validation = false;
    double val_loss = 0, val_accuracy = 0;  // over the held-out set (data.validation)
    double seconds = 0;         // training wall time of the epoch (evaluation excluded)
    double images_per_second = 0;
    double transfers_per_step = 0;  // host<->device copies per training step
    double h2d_bytes_per_step = 0;
    int64_t steps = 0;
};

nlohmann::json to_json(const EpochMetrics& m);
EpochMetrics epoch_metrics_from_json(const nlohmann::json& j);

struct TrainResult {
    std::vector<EpochMetrics> epochs;  // every epoch of the run, the resumed ones included
    std::string checkpoint_path, metrics_path, log_path;
    std::string last_checkpoint, best_checkpoint;  // resumable; "" if none was written
    int stopped_by_signal = 0;  // SIGINT / SIGTERM asked the run to stop; last_checkpoint resumes it
    int next_epoch = 0;         // where a stopped run resumes: epoch (1-based) and step in it
    int64_t next_step = 0;
    bool already_complete = false;  // a resumed run had nothing left to train
};

struct TrainOptions {
    bool profile = false;  // print the per-op profile after training
    bool progress = true;  // progress lines on `out`
    std::string resume_from;  // a training checkpoint to continue from ("" = a new run)
    // The command-line overrides this run was started with, kept in its checkpoints so that a
    // resume re-applies them (train.batch_size from --batch-size, ...).
    nlohmann::json overrides = nlohmann::json::object();

    static TrainOptions quiet() {  // no progress output (tests, benchmarks)
        TrainOptions o;
        o.progress = false;
        return o;
    }
};

TrainResult train(const RunConfig& config, Device& dev, std::ostream& out, const TrainOptions& options = {});

// Fraction of `data` the model classifies correctly; counts accumulate on the device.
double evaluate(Sequential& model, Device& dev, const io::Dataset& data, int64_t batch_size = 1000);
// The same over a device-resident set (int32 targets): batches are row views, nothing moves.
double evaluate(Sequential& model, Device& dev, const ResidentData& data, int64_t batch_size = 1000);

// Copies images [first, first+count) in `order` into a batch tensor laid out [count, 1, rows, cols].
void fill_batch(const io::Dataset& data, const std::vector<int64_t>& order, int64_t first, Tensor& images,
                Tensor& labels);
// The same into raw host memory: n images (none if `images` is null), and n int32 labels or n
// one-hot rows of `classes` floats.
void gather_host(const io::Dataset& data, const std::vector<int64_t>& order, int64_t first, int64_t n, float* images,
                 void* targets, DType target_dtype, int64_t classes);

// Why `config` cannot train with train.capture = true on `dev` (one line naming the key), or "".
std::string capture_blocker(const RunConfig& config, Device& dev, const TrainOptions& options);

}  // namespace xylem::app
