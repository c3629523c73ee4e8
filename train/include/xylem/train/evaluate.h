// Evaluation: accuracy (and the loss) of a model over a data set, accumulated on the device and
// read once at the end.
#pragma once

#include <functional>

#include "xylem/error.h"
#include "xylem/train/batch_source.h"
#include "xylem/io/idx.h"
#include "xylem/layers/loss.h"
#include "xylem/layers/net.h"

namespace xylem::train {

// The batch evaluate() and predict() run a model in when none is given (Python's evaluate and
// predict, validation during training), and the most run_batch gives.
constexpr int64_t kEvaluationBatch = 1000;

// The batch the CLI's eval and predict run a model built to run in (`input_samples` its samples,
// before or after build): kEvaluationBatch, less on a CPU device (Device::on_host) where that
// many samples' inference memory plan (Net::Footprint::run_outputs_per_sample) passes
// kRunCacheBytes, so that the few maps the plan keeps stay in the last-level cache between
// layers. ResNet-20's evaluation on the 2-vCPU Xeon, images/s by batch: 1000 3,465, 334 3,725,
// 250 3,792, 200 3,814, 160 3,748 (its plan: 150 KB a sample, so 36 MiB is 250 of them); before
// the plan, with every map in memory at once, smaller batches had been no faster. At least
// kMinRunBatch (per-op costs). PoCL (one pair): 114 images/s at 1000, 121 at 250.
constexpr uint64_t kRunCacheBytes = uint64_t{36} << 20;
constexpr int64_t kMinRunBatch = 64;
int64_t run_batch(Net& model, std::span<const Shape> input_samples, Device& dev);
inline int64_t run_batch(Net& model, const Shape& input_sample, Device& dev) {
    return run_batch(model, std::span<const Shape>(&input_sample, 1), dev);
}

// Asked before each batch of an evaluation: nonzero (a signal number) stops it with Interrupted,
// so Ctrl-C during a long validation takes effect within one batch. Empty: never stops.
using StopCheck = std::function<int()>;
struct Interrupted : Error {
    explicit Interrupted(int signal_) : Error("evaluation interrupted by signal " + std::to_string(signal_)), signal(signal_) {}
    int signal;
};

// Runs the model over `source` in its own order (sample 0 first), `batch_size` samples at a time
// (the last batch may be shorter), in inference mode: fn(first, n, targets, output) for each batch,
// with the batch's targets and the model's output [n, classes] (a token set's: [n, steps, classes])
// on the device. The one batching loop that evaluate, score and predict share; over a host data
// set it reads HostBatches of int32 labels.
using BatchFn = std::function<void(int64_t first, int64_t n, const Tensor& labels, const Tensor& output)>;
void for_each_batch(Net& model, Device& dev, BatchSource& source, int64_t batch_size, const BatchFn& fn,
                    const StopCheck& stop = {});
void for_each_batch(Net& model, Device& dev, const io::Dataset& data, int64_t batch_size, const BatchFn& fn,
                    const StopCheck& stop = {});

// Fraction of the labels (a token set: of its tokens) the model predicts; counts accumulate on
// the device. A batch source's targets must be int32 labels.
double evaluate(Net& model, Device& dev, BatchSource& source, int64_t batch_size = kEvaluationBatch, const StopCheck& stop = {});
double evaluate(Net& model, Device& dev, const io::Dataset& data, int64_t batch_size = kEvaluationBatch, const StopCheck& stop = {});
// The same over a device-resident set (int32 targets): batches are row views, nothing moves.
double evaluate(Net& model, Device& dev, const ResidentData& data, int64_t batch_size = kEvaluationBatch, const StopCheck& stop = {});

// Mean loss (per sample; a token set's: per token) and accuracy over a held-out set (the
// validation set). A recurrent model carries its state along a token set's batches: reset it first.
struct Scores {
    double loss = 0, accuracy = 0;
};
Scores score(Net& model, Loss& loss, Device& dev, const io::Dataset& data, int64_t classes,
             int64_t batch_size = kEvaluationBatch, const StopCheck& stop = {});

}  // namespace xylem::train
