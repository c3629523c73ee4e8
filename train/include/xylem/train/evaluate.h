// Evaluation: accuracy (and the loss) of a model over a data set, accumulated on the device and
// read once at the end.
#pragma once

#include <functional>

#include "xylem/train/batch_source.h"
#include "xylem/io/idx.h"
#include "xylem/layers/loss.h"
#include "xylem/layers/net.h"

namespace xylem::train {

// Runs the model over `source` in its own order (sample 0 first), `batch_size` samples at a time
// (the last batch may be shorter), in inference mode: fn(first, n, targets, output) for each batch,
// with the batch's targets and the model's output [n, classes] (a token set's: [n, steps, classes])
// on the device. The one batching loop that evaluate, score and predict share; over a host data
// set it reads HostBatches of int32 labels.
using BatchFn = std::function<void(int64_t first, int64_t n, const Tensor& labels, const Tensor& output)>;
void for_each_batch(Net& model, Device& dev, BatchSource& source, int64_t batch_size, const BatchFn& fn);
void for_each_batch(Net& model, Device& dev, const io::Dataset& data, int64_t batch_size, const BatchFn& fn);

// Fraction of the labels (a token set: of its tokens) the model predicts; counts accumulate on
// the device. A batch source's targets must be int32 labels.
double evaluate(Net& model, Device& dev, BatchSource& source, int64_t batch_size = 1000);
double evaluate(Net& model, Device& dev, const io::Dataset& data, int64_t batch_size = 1000);
// The same over a device-resident set (int32 targets): batches are row views, nothing moves.
double evaluate(Net& model, Device& dev, const ResidentData& data, int64_t batch_size = 1000);

// Mean loss (per sample; a token set's: per token) and accuracy over a held-out set (the
// validation set). A recurrent model carries its state along a token set's batches: reset it first.
struct Scores {
    double loss = 0, accuracy = 0;
};
Scores score(Net& model, Loss& loss, Device& dev, const io::Dataset& data, int64_t classes,
             int64_t batch_size = 1000);

}  // namespace xylem::train
