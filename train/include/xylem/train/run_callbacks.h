// The callbacks a configured run (run.h) trains with. Each is usable alone with fit(): a program
// that builds its own model and batch source can still write the run's files, keep its
// checkpoints, score its held-out and test sets and stop early the way `xylem train` does.
#pragma once

#include <map>
#include <optional>
#include <ostream>
#include <string>

#include "xylem/config.h"
#include "xylem/io/idx.h"
#include "xylem/train/batch_source.h"
#include "xylem/train/callbacks.h"
#include "xylem/train/run_files.h"
#include "xylem/train/run_report.h"

namespace xylem::train {

class DataParallel;  // data_parallel.h

// RunReport as callbacks: progress lines, log.csv rows, each epoch's line and metrics.json (after
// every epoch and at the end), and with `print_profile` the --profile tables at the end.
class ReportCallbacks final : public Callbacks {
public:
    // `summary`: what metrics.json says besides the epochs; its best_* fields and finish_reason are
    // taken from the run as it goes.
    ReportCallbacks(RunReport& report, RunSummary summary, std::ostream& out, bool print_profile);
    bool wants_progress(const FitContext&, int64_t steps_run) override;
    void on_progress(const FitContext&, const Progress& p) override { report_.progress(p); }
    void on_log_row(const FitContext&, const LogRow& row) override { report_.interval_row(row); }
    void on_epoch_end(const FitContext& ctx, const EpochMetrics& m, bool best,
                      const std::string& finish_reason) override;
    void on_fit_end(const FitContext& ctx, const FitResult& result) override;

private:
    void write_metrics(const FitContext& ctx, const std::string& finish_reason);
    RunReport& report_;
    RunSummary summary_;
    std::ostream& out_;
    bool print_profile_;
};

// The run's checkpoints in its out dir (RunFiles): last.safetensors and best.safetensors, both
// resumable, and model.safetensors (parameters only) at the end unless a stop ended the run.
// Nothing is written where files.write is false (the other ranks of a distributed run).
class CheckpointCallbacks final : public Callbacks {
public:
    CheckpointCallbacks(const RunFiles& files, std::map<std::string, std::string> metadata)
        : files_(files), metadata_(std::move(metadata)) {}
    std::string on_checkpoint(const FitContext& ctx, CheckpointKind kind) override;
    void on_fit_end(const FitContext& ctx, const FitResult& result) override;

private:
    const RunFiles& files_;
    std::map<std::string, std::string> metadata_;  // the safetensors metadata of every file written
};

// [train] early_stopping: ends the run once `metric` has not improved by more than min_delta for
// `patience` complete epochs. Off with patience 0.
class EarlyStoppingCallbacks final : public Callbacks {
public:
    explicit EarlyStoppingCallbacks(EarlyStopping rule) : rule_(std::move(rule)) {}
    std::string stop_after_epoch(const FitContext&, const std::vector<EpochMetrics>& epochs) override;
    // Why a resumed run's finished epochs already ended it ("" if they did not).
    std::string already_stopped(const std::vector<EpochMetrics>& epochs) const;

private:
    EarlyStopping rule_;
};

// The held-out set's loss and accuracy every epoch, and the test set's accuracy at the final
// epoch (every epoch with `test_every_epoch`), over host data sets or a resident test set. In a
// data-parallel run each rank scores its shard and the scores are summed.
class ScoringCallbacks final : public Callbacks {
public:
    struct Sets {
        const io::Dataset* validation = nullptr;  // this process's part of each (a shard of a distributed run)
        const io::Dataset* test = nullptr;
        const ResidentData* test_resident = nullptr;  // the test set on the device instead (data.resident)
        int64_t validation_total = 0, test_total = 0;  // their sizes over every rank
        int64_t classes = 0;
        int64_t validation_batch = 1000;
        bool test_every_epoch = false;
    };
    ScoringCallbacks(const Sets& sets, DataParallel* data_parallel) : sets_(sets), dp_(data_parallel) {}
    void on_validation(const FitContext& ctx, EpochMetrics& m) override;
    void on_test(const FitContext& ctx, EpochMetrics& m, bool final_epoch) override;

private:
    Sets sets_;
    DataParallel* dp_;
};

}  // namespace xylem::train
