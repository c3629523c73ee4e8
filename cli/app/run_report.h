// What a run reports: per-epoch metrics (metrics.json, the epoch line), the live progress line
// with the epoch's and the whole run's ETA, and the metric rules for "best" and early stopping.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <ostream>
#include <string>
#include <vector>

namespace xylem::app {

struct EpochMetrics {
    int epoch = 0;
    int64_t steps = 0;          // steps run in the epoch (fewer than a full epoch if train.max_steps ended it)
    bool complete = true;       // false: train.max_steps ended the run inside this epoch
    double train_loss = 0;      // mean per-sample loss over the epoch
    bool has_validation = false;
    double val_loss = 0, val_accuracy = 0;  // over the held-out set (data.validation)
    bool has_test = false;      // the test set is scored at the end, and every epoch if asked
    double test_accuracy = 0;   // fraction in [0, 1]
    double lr = 0;              // the learning rate of the epoch's last step
    double seconds = 0;         // training wall time of the epoch (evaluation excluded)
    double images_per_second = 0;
    double transfers_per_step = 0;  // host<->device copies per training step
    double h2d_bytes_per_step = 0;
};

nlohmann::json to_json(const EpochMetrics& m);
EpochMetrics epoch_metrics_from_json(const nlohmann::json& j);

// A metric of an epoch by name: "train_loss", "val_loss" or "val_accuracy".
double metric_value(const std::string& metric, const EpochMetrics& m);
// Whether `value` beats `best` by more than `min_delta` (accuracies higher, losses lower).
bool improves(const std::string& metric, double value, double best, double min_delta = 0);
// Epochs since the last one that improved `metric` by more than min_delta, over complete epochs,
// and that epoch (0 if none). Early stopping stops when the count reaches its patience.
struct Stagnation {
    int epochs_since_best = 0;
    int best_epoch = 0;
    double best_value = 0;
};
Stagnation stagnation(const std::vector<EpochMetrics>& epochs, const std::string& metric, double min_delta);

// "1:05" (minutes:seconds), or "h:mm:ss" past an hour.
std::string format_duration(double seconds);

}  // namespace xylem::app
