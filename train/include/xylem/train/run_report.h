// What a run reports: per-epoch metrics and the rules that judge them ("best", early stopping),
// and RunReport, the one place that shows and writes a run's progress: the live line, the epoch
// line, log.csv and metrics.json. ReportCallbacks (run_callbacks.h) calls it; it knows nothing of the loop.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <ostream>
#include <string>
#include <vector>

#include "xylem/train/run_files.h"

namespace xylem::train {

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

// What metrics.json says about the run besides its epochs.
struct RunSummary {
    std::string config, backend, device;
    int64_t batch_size = 0;
    uint64_t seed = 0;
    bool has_best = false;
    std::string best_metric, best_checkpoint;
    double best_value = 0;
    std::string finish_reason;  // why the run ended before its last epoch, or ""
};

// One live progress line.
struct Progress {
    int epoch = 0, epochs = 0;
    int64_t step = 0, steps_per_epoch = 0;
    double loss = 0, lr = 0, images_per_second = 0;
    double eta_epoch_seconds = 0, eta_run_seconds = 0;
    bool last_of_epoch = false;
};

class RunReport {
public:
    // `show`: print progress to `out` (a terminal gets one line rewritten in place).
    // `chars_per_sample` > 0: a text run, whose samples are sequences of that many characters and
    // whose losses are nats per character: lines show bits per character and characters per
    // second too, log.csv and metrics.json add the bits.
    RunReport(std::ostream& out, bool show, const RunFiles& files, bool resuming, int64_t chars_per_sample = 0);
    bool showing() const { return show_; }
    // Rewrite the progress line in place ("\r") or not, when `out` is not the process's stdout (whose
    // isatty decides by default): the Python package's stream to sys.stdout in a notebook says yes.
    void set_live(bool live) { tty_ = show_ && live; }
    bool terminal() const { return tty_; }
    double seconds_since_shown() const;

    // A resumed run's position: log.csv is cut back to it before the first new row (RunLog::keep_until).
    void resume_log_at(int epoch, int64_t step) {
        if (write_) log_.keep_until(epoch, step);
    }
    void progress(const Progress& p);
    void interval_row(const LogRow& row) {  // every print_every steps
        if (write_) log_.row(row);
    }
    // The epoch's row in log.csv and its line on `out` ("(best ... so far)" when it is).
    void epoch(const EpochMetrics& m, const std::string& best_metric, bool best, const std::string& finish_reason);
    void metrics(const std::vector<EpochMetrics>& epochs, const RunSummary& summary);

private:
    std::ostream& out_;
    bool show_, tty_;
    int64_t chars_per_sample_;
    bool write_;  // RunFiles::write: false on the other ranks of a distributed run
    RunLog log_;
    std::string metrics_path_;
    double last_shown_ = 0;  // seconds on a steady clock
};

}  // namespace xylem::train
