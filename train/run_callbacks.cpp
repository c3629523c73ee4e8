// The run's reports, checkpoints, early stopping and scoring, as fit() callbacks.
#include "xylem/train/run_callbacks.h"

#include <algorithm>
#include <cstdio>

#include "xylem/profiler.h"
#include "xylem/train/checkpoint.h"
#include "xylem/train/data_parallel.h"
#include "xylem/train/evaluate.h"
#include "xylem/train/fit.h"

namespace xylem::train {
namespace {

// --profile's fusion table: launches per step and every fused program with the ops it replaced.
void print_fusion_profile(std::ostream& out, const fusion::StepFusion& fusion) {
    out << "\nfusion: " << (fusion.enabled() ? "on" : "off (train.fusion = false or XYLEM_FUSION=0)")
        << "; launches per training step: " << fusion.last_step_launches() << " (" << fusion.last_step_ops()
        << " ops issued)\n";
    if (const std::string note = fusion.note(); !note.empty() && fusion.enabled()) out << "  note: " << note << "\n";
    // Programs with the same members (one per time step of a recurrent layer, one per parameter's
    // update) are listed once, with their count and one program's expressions.
    std::vector<std::pair<std::string, std::vector<const fusion::ProgramInfo*>>> kinds;
    for (const fusion::ProgramInfo& p : fusion.programs()) {
        auto it = std::find_if(kinds.begin(), kinds.end(), [&](const auto& k) { return k.first == p.members; });
        if (it == kinds.end()) kinds.push_back({p.members, {&p}});
        else it->second.push_back(&p);
    }
    for (const auto& [members, list] : kinds) {
        int64_t lo = list.front()->elements, hi = lo;
        for (const fusion::ProgramInfo* p : list) lo = std::min(lo, p->elements), hi = std::max(hi, p->elements);
        out << "  " << list.size() << " program(s) of " << list.front()->ops_replaced << " ops -> 1 launch each, over "
            << (lo == hi ? std::to_string(lo) : std::to_string(lo) + " to " + std::to_string(hi)) << " elements: " << members
            << "\n      e.g. " << list.front()->text << "\n";
    }
}

}  // namespace

ReportCallbacks::ReportCallbacks(RunReport& report, RunSummary summary, std::ostream& out, bool print_profile)
    : report_(report), summary_(std::move(summary)), out_(out), print_profile_(print_profile) {}

bool ReportCallbacks::wants_progress(const FitContext&, int64_t steps_run) {
    // The first line comes after the first step, then at least every second on a terminal.
    return report_.showing() && (steps_run == 1 || (report_.terminal() && report_.seconds_since_shown() >= 1.0));
}

void ReportCallbacks::write_metrics(const FitContext& ctx, const std::string& finish_reason) {
    summary_.has_best = ctx.state.has_best;
    summary_.best_metric = ctx.state.best_metric;
    summary_.best_value = ctx.state.best_value;
    summary_.finish_reason = finish_reason;
    report_.metrics(ctx.epochs, summary_);
}

void ReportCallbacks::on_epoch_end(const FitContext& ctx, const EpochMetrics& m, bool best,
                                   const std::string& finish_reason) {
    report_.epoch(m, ctx.state.best_metric, best, finish_reason);
    write_metrics(ctx, finish_reason);
}

void ReportCallbacks::on_fit_end(const FitContext& ctx, const FitResult& result) {
    if (print_profile_) {
        out_ << "\nprofile (each op timed with a device sync):\n";
        profiler::print(out_);
        print_fusion_profile(out_, ctx.fusion);
    }
    write_metrics(ctx, result.finish_reason);
}

std::string CheckpointCallbacks::on_checkpoint(const FitContext& ctx, CheckpointKind kind) {
    if (!files_.write) return "";
    const std::string& path = kind == CheckpointKind::last ? files_.last : files_.best;
    save_training_checkpoint(path, ctx.model, ctx.solver, ctx.dev, ctx.state, metadata_);
    return path;
}

void CheckpointCallbacks::on_fit_end(const FitContext& ctx, const FitResult& result) {
    if (!result.stopped_by_signal && files_.write) save_checkpoint(files_.model, ctx.model, metadata_);
}

std::string EarlyStoppingCallbacks::stop_after_epoch(const FitContext&, const std::vector<EpochMetrics>& epochs) {
    if (rule_.patience <= 0) return "";
    const Stagnation s = stagnation(epochs, rule_.metric, rule_.min_delta);
    if (s.epochs_since_best < rule_.patience) return "";
    char why[256];
    std::snprintf(why, sizeof why, "early stopping: %s has not improved for %d epoch(s) (best %.6g at epoch %d)",
                  rule_.metric.c_str(), s.epochs_since_best, s.best_value, s.best_epoch);
    return why;
}

std::string EarlyStoppingCallbacks::already_stopped(const std::vector<EpochMetrics>& epochs) const {
    if (rule_.patience <= 0) return "";
    const Stagnation s = stagnation(epochs, rule_.metric, rule_.min_delta);
    if (s.epochs_since_best < rule_.patience) return "";
    return "early stopping ended the run: " + rule_.metric + " has not improved for " +
           std::to_string(s.epochs_since_best) + " epoch(s) (train.early_stopping.patience " +
           std::to_string(rule_.patience) + ")";
}

void ScoringCallbacks::on_validation(const FitContext& ctx, EpochMetrics& m) {
    if (!sets_.validation_total) return;
    ctx.model.reset_state();
    const Scores v =
        dp_ ? dp_->score(ctx.model, ctx.loss, ctx.dev, *sets_.validation, sets_.validation_total, sets_.classes,
                         sets_.validation_batch)
            : score(ctx.model, ctx.loss, ctx.dev, *sets_.validation, sets_.classes, sets_.validation_batch,
                    ctx.stop_requested);
    m.has_validation = true;
    m.val_loss = v.loss;
    m.val_accuracy = v.accuracy;
}

void ScoringCallbacks::on_test(const FitContext& ctx, EpochMetrics& m, bool final_epoch) {
    if (!(sets_.test_every_epoch || final_epoch) || !sets_.test_total) return;  // text data has no test set
    m.has_test = true;
    if (dp_)
        m.test_accuracy = sets_.test_resident ? dp_->accuracy(ctx.model, ctx.dev, *sets_.test_resident, sets_.test_total)
                                              : dp_->accuracy(ctx.model, ctx.dev, *sets_.test, sets_.test_total);
    else
        m.test_accuracy = sets_.test_resident ? evaluate(ctx.model, ctx.dev, *sets_.test_resident, 1000, ctx.stop_requested)
                                              : evaluate(ctx.model, ctx.dev, *sets_.test, 1000, ctx.stop_requested);
}

}  // namespace xylem::train
