// Builds a Net model, its loss and its solver from a run configuration.
#pragma once

#include <memory>

#include "xylem/config.h"
#include "xylem/layers/loss.h"
#include "xylem/layers/net.h"
#include "xylem/solvers/solver.h"

namespace xylem::train {

// `vocabulary`: the data's vocabulary size (text data), for layers that take their size from it
// (embedding and one_hot without `vocab`, linear out = "vocab"); 0 when the data has none.
std::unique_ptr<Net> build_model(const RunConfig& config, int64_t vocabulary = 0);
std::unique_ptr<Solver> build_solver(const RunConfig& config);
// The model of `config`, built on `dev` to run samples of `input_sample` in batches of `batch`
// without training (eval, predict, sample, `xylem run`, export): refused before anything is
// allocated when its parameters and a batch's outputs cannot fit on the device (memory_plan.h).
// Its parameters are zeros with no gradients (Net::build's `training` false): the caller loads
// every one of them next (a checkpoint, the ONNX initializers).
std::unique_ptr<Net> build_inference_model(const RunConfig& config, Device& dev, const Shape& input_sample,
                                           int64_t batch, int64_t vocabulary = 0);
// The same in the batch train::run_batch chooses for the device (the CLI's eval and predict of
// images), written to `batch`.
std::unique_ptr<Net> build_run_model(const RunConfig& config, Device& dev, const Shape& input_sample, int64_t& batch);
// The same for a model of several inputs (config.model_inputs): one sample shape each.
std::unique_ptr<Net> build_inference_model(const RunConfig& config, Device& dev, std::span<const Shape> input_samples,
                                           int64_t batch, int64_t vocabulary = 0);

}  // namespace xylem::train
