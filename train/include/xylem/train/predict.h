// Prediction: each image's most probable classes with their probabilities, the classes' names,
// and the predictions CSV.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "xylem/backend.h"
#include "xylem/config.h"
#include "xylem/io/idx.h"
#include "xylem/layers/net.h"
#include "xylem/train/batch_source.h"
#include "xylem/train/evaluate.h"

namespace xylem::train {

// What a model's outputs are, from its last layer: logits (their softmax is the probabilities),
// probabilities (it ends in softmax) or log-probabilities (it ends in log_softmax).
enum class OutputKind { logits, probabilities, log_probabilities };
OutputKind output_kind(const RunConfig& config);

// The probabilities of one image's `classes` outputs.
void probabilities(const float* outputs, int64_t classes, OutputKind kind, double* p);

struct Predictions {
    int64_t count = 0, classes = 0, k = 0;
    std::vector<int32_t> top;  // count x k class indices, most probable first
    std::vector<double> prob;  // count x k probabilities
};

// Runs a built model over `data` in evaluate.cpp's batches and keeps each image's k best classes.
// They are ranked by the raw outputs, ties to the lower index, so top-1 is exactly the class that
// accuracy (and `xylem eval`) counts, even where two probabilities round to the same float.
// Over a batch source the samples come in its own order (sample 0 first).
Predictions predict(Net& model, Device& dev, BatchSource& source, OutputKind kind, int64_t k,
                    int64_t batch_size = kEvaluationBatch);
Predictions predict(Net& model, Device& dev, const io::Dataset& data, OutputKind kind, int64_t k,
                    int64_t batch_size = kEvaluationBatch);

// Fashion-MNIST's ten names when the model has 10 classes and the data dir is a fashion-mnist
// folder, else each class's index. The one list of class names.
std::vector<std::string> class_names(const RunConfig& config, int64_t classes);

// Writes `p` as CSV, atomically: image,label,top1_class,top1_name,top1_prob,... (label empty
// when `labels` is null). An Error names the file if it cannot be written.
void write_predictions_csv(const std::string& path, const Predictions& p, const std::vector<std::string>& names,
                           const std::vector<int32_t>* labels);

}  // namespace xylem::train
