// Epoch metrics to and from JSON, and the rules that judge them.
#include "app/run_report.h"

#include <cmath>
#include <cstdio>

namespace xylem::app {

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

}  // namespace xylem::app
