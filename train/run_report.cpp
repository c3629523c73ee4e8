// Epoch metrics to and from JSON, and the rules that judge them.
#include "xylem/train/run_report.h"

#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>

#include "xylem/io/atomic_file.h"

namespace xylem::train {

nlohmann::json to_json(const EpochMetrics& m) {
    nlohmann::json j = {{"epoch", m.epoch},
                        {"steps", m.steps},
                        {"train_loss", m.train_loss},
                        {"lr", m.lr},
                        {"seconds", m.seconds},
                        {"images_per_second", m.images_per_second},
                        {"transfers_per_step", m.transfers_per_step},
                        {"h2d_bytes_per_step", m.h2d_bytes_per_step}};
    if (!m.complete) j["partial"] = true;
    if (m.has_validation) {
        j["val_loss"] = m.val_loss;
        j["val_accuracy"] = m.val_accuracy;
    }
    if (m.has_test) j["test_accuracy"] = m.test_accuracy;
    return j;
}

EpochMetrics epoch_metrics_from_json(const nlohmann::json& j) {
    EpochMetrics m;
    m.epoch = j.at("epoch").get<int>();
    m.steps = j.at("steps").get<int64_t>();
    m.complete = !j.value("partial", false);
    m.train_loss = j.at("train_loss").get<double>();
    m.lr = j.at("lr").get<double>();
    m.seconds = j.at("seconds").get<double>();
    m.images_per_second = j.at("images_per_second").get<double>();
    m.transfers_per_step = j.at("transfers_per_step").get<double>();
    m.h2d_bytes_per_step = j.at("h2d_bytes_per_step").get<double>();
    m.has_validation = j.contains("val_loss");
    if (m.has_validation) {
        m.val_loss = j.at("val_loss").get<double>();
        m.val_accuracy = j.at("val_accuracy").get<double>();
    }
    m.has_test = j.contains("test_accuracy");
    if (m.has_test) m.test_accuracy = j.at("test_accuracy").get<double>();
    return m;
}

double metric_value(const std::string& metric, const EpochMetrics& m) {
    if (metric == "val_loss") return m.val_loss;
    if (metric == "val_accuracy") return m.val_accuracy;
    return m.train_loss;
}

bool improves(const std::string& metric, double value, double best, double min_delta) {
    if (!std::isfinite(value)) return false;
    return metric == "val_accuracy" ? value > best + min_delta : value < best - min_delta;
}

Stagnation stagnation(const std::vector<EpochMetrics>& epochs, const std::string& metric, double min_delta) {
    Stagnation s;
    for (const EpochMetrics& m : epochs) {
        if (!m.complete) continue;
        const double v = metric_value(metric, m);
        if (s.best_epoch == 0 ? std::isfinite(v) : improves(metric, v, s.best_value, min_delta)) {
            s.best_epoch = m.epoch;
            s.best_value = v;
            s.epochs_since_best = 0;
        } else {
            ++s.epochs_since_best;
        }
    }
    return s;
}

std::string format_duration(double seconds) {
    if (!std::isfinite(seconds) || seconds < 0) seconds = 0;
    const long s = std::lround(seconds);
    char buf[32];
    if (s >= 3600) std::snprintf(buf, sizeof buf, "%ld:%02ld:%02ld", s / 3600, s / 60 % 60, s % 60);
    else std::snprintf(buf, sizeof buf, "%ld:%02ld", s / 60, s % 60);
    return buf;
}

namespace {
double now_seconds() {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
}  // namespace

RunReport::RunReport(std::ostream& out, bool show, const RunFiles& files, bool resuming, int64_t chars_per_sample)
    : out_(out), show_(show), tty_(show && isatty(STDOUT_FILENO)), chars_per_sample_(chars_per_sample), write_(files.write),
      log_(files.log, resuming, chars_per_sample > 0), metrics_path_(files.metrics), last_shown_(now_seconds()) {}

double RunReport::seconds_since_shown() const { return now_seconds() - last_shown_; }

void RunReport::progress(const Progress& p) {
    if (!show_) return;
    char line[256], loss[64], rate[64];
    if (chars_per_sample_) {
        std::snprintf(loss, sizeof loss, "%.4f (%.3f bpc)", p.loss, bits_per_char(p.loss));
        std::snprintf(rate, sizeof rate, "%.0f char/s", p.images_per_second * static_cast<double>(chars_per_sample_));
    } else {
        std::snprintf(loss, sizeof loss, "%.4f", p.loss);
        std::snprintf(rate, sizeof rate, "%.0f img/s", p.images_per_second);
    }
    std::snprintf(line, sizeof line, "epoch %d/%d  step %lld/%lld  loss %s  lr %.3g  %s  ETA epoch %s, run %s", p.epoch,
                  p.epochs, static_cast<long long>(p.step), static_cast<long long>(p.steps_per_epoch), loss, p.lr, rate,
                  format_duration(p.eta_epoch_seconds).c_str(), format_duration(p.eta_run_seconds).c_str());
    out_ << (tty_ ? "\r" : "") << line << (tty_ && !p.last_of_epoch ? "" : "\n") << std::flush;
    last_shown_ = now_seconds();
}

void RunReport::epoch(const EpochMetrics& m, const std::string& best_metric, bool best, const std::string& finish_reason) {
    LogRow r;
    r.epoch = m.epoch;
    r.step = m.steps;
    r.loss = m.train_loss;
    r.images_per_second = m.images_per_second;
    r.elapsed_seconds = m.seconds;
    r.lr = m.lr;
    r.has_validation = m.has_validation;
    r.val_loss = m.val_loss;
    r.val_accuracy = m.val_accuracy;
    r.kind = "epoch";
    if (write_) log_.row(r);
    if (!show_) return;
    char buf[160];
    const bool text = chars_per_sample_ > 0;
    if (text) std::snprintf(buf, sizeof buf, "epoch %d: train loss %.4f nats/char (%.3f bpc)", m.epoch, m.train_loss, bits_per_char(m.train_loss));
    else std::snprintf(buf, sizeof buf, "epoch %d: train loss %.4f", m.epoch, m.train_loss);
    std::string line = buf;
    if (m.has_validation) {
        if (text)
            std::snprintf(buf, sizeof buf, ", val loss %.4f (%.3f bpc), val accuracy %.2f%%", m.val_loss,
                          bits_per_char(m.val_loss), 100 * m.val_accuracy);
        else std::snprintf(buf, sizeof buf, ", val loss %.4f, val accuracy %.2f%%", m.val_loss, 100 * m.val_accuracy);
        line += buf;
    }
    if (m.has_test) {
        std::snprintf(buf, sizeof buf, ", test accuracy %.2f%%", 100 * m.test_accuracy);
        line += buf;
    }
    if (text)
        std::snprintf(buf, sizeof buf, ", %.2f s, %.0f char/s", m.seconds,
                      m.images_per_second * static_cast<double>(chars_per_sample_));
    else std::snprintf(buf, sizeof buf, ", %.2f s, %.0f img/s", m.seconds, m.images_per_second);
    line += buf;
    if (best) line += " (best " + best_metric + " so far)";
    out_ << line << "\n";
    if (!finish_reason.empty()) out_ << finish_reason << "\n";
    out_ << std::flush;
}

void RunReport::metrics(const std::vector<EpochMetrics>& epochs, const RunSummary& s) {
    if (!write_) return;
    nlohmann::json j;
    j["config"] = s.config;
    j["backend"] = s.backend;
    j["device"] = s.device;
    j["batch_size"] = s.batch_size;
    j["seed"] = s.seed;
    j["epochs"] = nlohmann::json::array();
    for (const EpochMetrics& m : epochs) {
        nlohmann::json e = to_json(m);
        if (chars_per_sample_) {  // losses are nats per character: the same in bits, and the rate in characters
            e["train_bpc"] = bits_per_char(m.train_loss);
            if (m.has_validation) e["val_bpc"] = bits_per_char(m.val_loss);
            e["chars_per_second"] = m.images_per_second * static_cast<double>(chars_per_sample_);
        }
        j["epochs"].push_back(e);
    }
    if (chars_per_sample_) {
        j["loss_unit"] = "nats per character";
        // The characters each sample scores: data.seq_len for streams, data.block_size for windows.
        j["chars_per_sample"] = chars_per_sample_;
    }
    for (auto it = epochs.rbegin(); it != epochs.rend(); ++it)
        if (it->has_test) {
            j["final_test_accuracy"] = it->test_accuracy;
            break;
        }
    if (s.has_best) j["best"] = {{"metric", s.best_metric}, {"value", s.best_value}, {"checkpoint", s.best_checkpoint}};
    if (!s.finish_reason.empty()) j["finished_early"] = s.finish_reason;
    io::write_file_atomic(metrics_path_, j.dump(2) + "\n");
}

}  // namespace xylem::train
