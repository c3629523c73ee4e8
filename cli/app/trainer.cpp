// Training and evaluation loops.
#include "app/trainer.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <numeric>
#include <optional>
#include <ostream>
#include <random>
#include <sstream>

#include "app/checkpoint.h"
#include "app/interrupt.h"
#include "app/model_builder.h"
#include "app/run_data.h"
#include "app/run_files.h"
#include "xylem/error.h"
#include "xylem/graph.h"
#include "xylem/io/atomic_file.h"
#include "xylem/op_calls.h"
#include "xylem/profiler.h"
#include "xylem/transfer.h"

namespace xylem::app {
namespace {

using Clock = std::chrono::steady_clock;
const std::string kLossScope = "loss (forward + backward)", kSolverScope = "solver update";
double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

std::string format_eta(double seconds) {
    if (!std::isfinite(seconds) || seconds < 0) seconds = 0;
    const long s = std::lround(seconds);
    char buf[32];
    std::snprintf(buf, sizeof buf, "%ld:%02ld", s / 60, s % 60);
    return buf;
}

// Batch tensors for each batch size seen (the full size and the epoch's tail), reused.
struct BatchSlots {
    std::map<int64_t, std::pair<Tensor, Tensor>> slots;
    std::pair<Tensor, Tensor>& get(int64_t n, const io::Dataset& d, Device& dev, DType label_dtype, int64_t classes) {
        auto it = slots.find(n);
        if (it != slots.end()) return it->second;
        Tensor x({n, 1, d.rows, d.cols}, DType::F32, dev);
        Tensor y = label_dtype == DType::I32 ? Tensor({n}, DType::I32, dev) : Tensor({n, classes}, DType::F32, dev);
        return slots.emplace(n, std::make_pair(x, y)).first->second;
    }
};

void check_labels(const io::Dataset& d, int64_t classes, const std::string& what) {
    for (int64_t i = 0; i < d.count; ++i)
        if (d.labels[static_cast<size_t>(i)] >= classes)
            throw Error(what + " label " + std::to_string(d.labels[static_cast<size_t>(i)]) + " at index " +
                        std::to_string(i) + " is out of range for a model with " + std::to_string(classes) +
                        " outputs");
}

}  // namespace

void gather_host(const io::Dataset& d, const std::vector<int64_t>& order, int64_t first, int64_t n, float* x,
                 void* targets, DType target_dtype, int64_t classes) {
    const int64_t pixels = d.rows * d.cols;
    auto row = [&](int64_t i) { return order[static_cast<size_t>(first + i)]; };
    for (int64_t i = 0; x && i < n; ++i)
        std::memcpy(x + i * pixels, d.images.data() + row(i) * pixels, static_cast<size_t>(pixels) * sizeof(float));
    if (target_dtype == DType::I32) {
        auto* y = static_cast<int32_t*>(targets);
        for (int64_t i = 0; i < n; ++i) y[i] = d.labels[static_cast<size_t>(row(i))];
    } else {  // one-hot targets for regression losses
        auto* y = static_cast<float*>(targets);
        std::fill(y, y + n * classes, 0.0f);
        for (int64_t i = 0; i < n; ++i) y[i * classes + d.labels[static_cast<size_t>(row(i))]] = 1.0f;
    }
}

void fill_batch(const io::Dataset& d, const std::vector<int64_t>& order, int64_t first, Tensor& images, Tensor& labels) {
    float* x = images.host_write<float>();
    void* y = labels.dtype() == DType::I32 ? static_cast<void*>(labels.host_write<int32_t>())
                                           : static_cast<void*>(labels.host_write<float>());
    gather_host(d, order, first, images.dim(0), x, y, labels.dtype(), labels.dtype() == DType::I32 ? 0 : labels.dim(1));
}

double evaluate(Sequential& model, Device& dev, const io::Dataset& data, int64_t batch_size) {
    std::vector<int64_t> order(static_cast<size_t>(data.count));
    std::iota(order.begin(), order.end(), 0);
    Tensor correct({1}, DType::F32, dev);
    ops::fill(dev, correct, 0.0f);
    BatchSlots slots;
    for (int64_t first = 0; first < data.count; first += batch_size) {
        const int64_t n = std::min(batch_size, data.count - first);
        auto& [x, y] = slots.get(n, data, dev, DType::I32, 0);
        fill_batch(data, order, first, x, y);
        x.upload(dev);
        y.upload(dev);
        ops::accuracy(dev, model.forward(dev, x, false), y, correct);
    }
    return data.count ? correct.to_vector()[0] / static_cast<double>(data.count) : 0.0;
}

double evaluate(Sequential& model, Device& dev, const ResidentData& data, int64_t batch_size) {
    const int64_t count = data.images.dim(0);
    Tensor correct({1}, DType::F32, dev);
    ops::fill(dev, correct, 0.0f);
    for (int64_t first = 0; first < count; first += batch_size) {
        const int64_t n = std::min(batch_size, count - first);
        const Tensor x = data.images.rows(first, n), y = data.targets.rows(first, n);
        ops::accuracy(dev, model.forward(dev, x, false), y, correct);
    }
    return count ? correct.to_vector()[0] / static_cast<double>(count) : 0.0;
}

std::string capture_blocker(const RunConfig& c, Device& dev, const TrainOptions& opt) {
    if (!c.capture) return "";
    const std::string key = "train.capture = true";
    if (!dev.supports_capture())
        return key + ": backend '" + dev.backend().name() +
               "' cannot capture a training step (its plugin has no capture entries); set train.capture = false";
    // Per-step host values baked into op attributes would be replayed frozen at their captured value.
    if (c.solver.type == "adam")
        return key + " does not support solver.type = \"adam\": its bias corrections change every step and a "
                     "captured update would replay one step's";
    for (size_t i = 0; i < c.layers.size(); ++i)
        if (c.layers[i].type == "dropout")
            return key + " does not support model.layers[" + std::to_string(i) +
                   "] (dropout): its mask seed changes every step and a captured step would replay one mask";
    if (opt.profile) return key + " cannot be profiled (--profile syncs after every op, which a graph cannot record)";
    return "";
}

nlohmann::json to_json(const EpochMetrics& m) {
    nlohmann::json j = {{"epoch", m.epoch},
                        {"train_loss", m.train_loss},
                        {"test_accuracy", m.test_accuracy},
                        {"seconds", m.seconds},
                        {"images_per_second", m.images_per_second},
                        {"steps", m.steps},
                        {"transfers_per_step", m.transfers_per_step},
                        {"h2d_bytes_per_step", m.h2d_bytes_per_step}};
    if (m.has_validation) {
        j["val_loss"] = m.val_loss;
        j["val_accuracy"] = m.val_accuracy;
    }
    return j;
}

EpochMetrics epoch_metrics_from_json(const nlohmann::json& j) {
    EpochMetrics m;
    m.epoch = j.at("epoch").get<int>();
    m.train_loss = j.at("train_loss").get<double>();
    m.test_accuracy = j.at("test_accuracy").get<double>();
    m.seconds = j.at("seconds").get<double>();
    m.images_per_second = j.at("images_per_second").get<double>();
    m.steps = j.at("steps").get<int64_t>();
    m.transfers_per_step = j.at("transfers_per_step").get<double>();
    m.h2d_bytes_per_step = j.at("h2d_bytes_per_step").get<double>();
    m.has_validation = j.contains("val_loss");
    if (m.has_validation) {
        m.val_loss = j.at("val_loss").get<double>();
        m.val_accuracy = j.at("val_accuracy").get<double>();
    }
    return m;
}

namespace {

// Mean loss and accuracy over a held-out set, accumulated on the device and read once.
struct Scores {
    double loss = 0, accuracy = 0;
};
Scores score(Sequential& model, Loss& loss, Device& dev, const io::Dataset& data, int64_t classes,
             int64_t batch_size = 1000) {
    std::vector<int64_t> order(static_cast<size_t>(data.count));
    std::iota(order.begin(), order.end(), 0);
    Tensor loss_sum({1}, DType::F32, dev), correct({1}, DType::F32, dev);
    ops::fill(dev, loss_sum, 0.0f);
    ops::fill(dev, correct, 0.0f);
    BatchSlots slots;
    std::map<int64_t, Tensor> onehot;  // regression losses compare with one-hot rows, accuracy with labels
    for (int64_t first = 0; first < data.count; first += batch_size) {
        const int64_t n = std::min(batch_size, data.count - first);
        auto& [x, y] = slots.get(n, data, dev, DType::I32, 0);
        fill_batch(data, order, first, x, y);
        x.upload(dev);
        y.upload(dev);
        const Tensor& output = model.forward(dev, x, false);
        if (loss.target_dtype() == DType::I32) {
            loss.forward(dev, output, y, loss_sum);
        } else {
            auto it = onehot.find(n);
            if (it == onehot.end()) it = onehot.emplace(n, Tensor({n, classes}, DType::F32, dev)).first;
            gather_host(data, order, first, n, nullptr, it->second.host_write<float>(), DType::F32, classes);
            it->second.upload(dev);
            loss.forward(dev, output, it->second, loss_sum);
        }
        ops::accuracy(dev, output, y, correct);
    }
    const double count = static_cast<double>(data.count);
    return {loss_sum.to_vector()[0] / count, correct.to_vector()[0] / count};
}

// Lower is better for losses, higher for accuracies.
bool improves(const std::string& metric, double value, bool has_best, double best) {
    if (!std::isfinite(value)) return false;
    if (!has_best) return true;
    return metric == "val_accuracy" ? value > best : value < best;
}

double metric_value(const std::string& metric, const EpochMetrics& m) {
    if (metric == "val_loss") return m.val_loss;
    if (metric == "val_accuracy") return m.val_accuracy;
    return m.train_loss;
}

std::string where(int epoch, int64_t step) {
    return "epoch " + std::to_string(epoch) + " step " + std::to_string(step);
}

}  // namespace

TrainResult train(const RunConfig& c, Device& dev, std::ostream& out, const TrainOptions& opt) {
    if (std::string why = capture_blocker(c, dev, opt); !why.empty()) throw Error(c.source + ": " + why);
    if (c.epochs < 1) throw Error(c.source + ": key 'train.epochs' must be at least 1");
    // The out dir takes files before any work is done, not after an epoch of training.
    std::vector<std::string> stale;
    const RunFiles files = prepare_run_dir(c.out_dir, &stale);
    const bool resuming = !opt.resume_from.empty();
    const RunData data = load_run_data(c);
    const io::Dataset& train_set = data.train;
    const bool has_validation = data.validation.count > 0;
    auto model = build_model(c);
    model->build(dev, {1, train_set.rows, train_set.cols}, c.seed);
    auto loss = make_loss(c.loss);
    loss->check_output(model->output_sample_shape());
    const int64_t classes = model->output_sample_shape().back();
    check_labels(train_set, classes, c.data_dir + " training");
    check_labels(data.test, classes, c.data_dir + " test");
    auto solver = build_solver(c);
    // Every op training will run is checked before any work is done: the layers' forward and
    // backward ops, the loss, the solver and the loop's own (counters, resident batches).
    Backend& backend = dev.backend();
    model->check_ops(backend, true);
    for (uint32_t op : loss->ops_needed()) backend.require(op, "loss " + c.loss);
    for (uint32_t op : solver->ops_needed()) backend.require(op, "solver " + solver->kind());
    for (uint32_t op : {XYLEM_OP_FILL, XYLEM_OP_ACCURACY}) backend.require(op, "the training loop");
    if (c.data_resident)
        for (uint32_t op : {XYLEM_OP_GATHER_ROWS, XYLEM_OP_COPY}) backend.require(op, "data.resident = true");
    std::vector<Param*> params = model->params();

    TrainResult result;
    result.checkpoint_path = files.model;
    result.metrics_path = files.metrics;
    result.log_path = files.log;

    // Where the run stands. A new run starts at epoch 1 with the order 0..n-1; a resumed one
    // takes everything from its checkpoint (parameters, solver state, counters, order, RNG).
    TrainingState st;
    st.order.resize(static_cast<size_t>(train_set.count));
    std::iota(st.order.begin(), st.order.end(), 0);
    std::mt19937_64 shuffle_rng(c.seed);
    if (resuming) {
        TrainingState saved = load_training_checkpoint(opt.resume_from, *model, *solver, dev);
        if (saved.order.size() != st.order.size())
            throw Error(opt.resume_from + ": the run trained on " + std::to_string(saved.order.size()) +
                        " images, the data now gives " + std::to_string(st.order.size()) +
                        " (data.dir or data.validation changed?)");
        for (int32_t i : saved.order)
            if (i < 0 || i >= train_set.count) throw Error(opt.resume_from + ": corrupt training state: order entry out of range");
        std::istringstream rng_text(saved.shuffle_rng);
        rng_text >> shuffle_rng;
        if (rng_text.fail()) throw Error(opt.resume_from + ": corrupt training state: the shuffle generator's state");
        if (saved.best_metric != c.best_metric) {  // judged anew by the metric asked for now
            saved.best_metric = c.best_metric;
            saved.has_best = false;
        }
        st = std::move(saved);
        for (const nlohmann::json& e : st.epochs) result.epochs.push_back(epoch_metrics_from_json(e));
        result.last_checkpoint = opt.resume_from;
    }
    st.config_text = resuming ? st.config_text : c.text;
    st.config_source = resuming ? st.config_source : c.source;
    if (!resuming) {
        st.overrides = opt.overrides;
        st.best_metric = c.best_metric;
    }
    // Parameters live on the host until now (initialised or loaded): move them to the device once.
    for (Param* p : model->state()) p->value.upload(dev);

    const int64_t batch = c.batch_size;
    int64_t steps_per_epoch = (train_set.count + batch - 1) / batch;
    if (c.max_steps > 0) steps_per_epoch = std::min<int64_t>(steps_per_epoch, c.max_steps);
    if (st.step >= steps_per_epoch) throw Error(opt.resume_from + ": corrupt training state: step beyond the epoch");
    if (st.epoch > c.epochs) {
        result.already_complete = true;
        result.next_epoch = st.epoch;
        return result;
    }

    if (opt.progress) {
        out << "backend " << dev.backend().name() << ", device " << dev.name() << "\nmodel:\n" << model->summary();
        out << "data: " << train_set.count << " training images";
        if (has_validation) out << ", " << data.validation.count << " held out for validation";
        out << ", " << data.test.count << " test images\n";
        for (const std::string& f : stale) out << "removed a temp file left by a killed run: " << f << "\n";
        if (resuming)
            out << "resuming " << opt.resume_from << " at " << where(st.epoch, st.step) << " of " << c.epochs
                << " epochs\n";
        else if (std::filesystem::exists(files.last))
            out << "note: " << files.last << " holds an earlier run's checkpoint; this run replaces it at its "
                << "first checkpoint (xylem train --resume " << files.dir << " would continue it instead)\n";
    }
    const bool tty = opt.progress && isatty(STDOUT_FILENO);
    RunLog log(files.log, resuming);

    const std::map<std::string, std::string> meta{
        {"format", "pt"}, {"producer", "xylem"}, {"config", c.source}, {"backend", dev.backend().name()}};
    auto write_metrics = [&] {
        nlohmann::json j;
        j["config"] = c.source;
        j["backend"] = dev.backend().name();
        j["device"] = dev.name();
        j["batch_size"] = c.batch_size;
        j["seed"] = c.seed;
        j["epochs"] = nlohmann::json::array();
        for (const EpochMetrics& m : result.epochs) j["epochs"].push_back(to_json(m));
        if (!result.epochs.empty()) j["final_test_accuracy"] = result.epochs.back().test_accuracy;
        if (st.has_best) j["best"] = {{"metric", st.best_metric}, {"value", st.best_value}, {"checkpoint", files.best}};
        io::write_file_atomic(files.metrics, j.dump(2) + "\n");
    };
    auto save_last = [&] {
        save_training_checkpoint(files.last, *model, *solver, dev, st, meta);
        result.last_checkpoint = files.last;
    };

    Tensor loss_sum({1}, DType::F32, dev);
    // Capture stages host batches through fixed areas that the graph's copies re-read.
    BatchFeed feed(train_set, dev, loss->target_dtype(), classes, c.data_resident, c.capture);
    std::optional<ResidentData> test_resident;
    if (c.data_resident) test_resident = upload_dataset(data.test, dev, DType::I32, classes);
    // One step: the batch's upload or gathers, forward, loss, backward, update. Recordable.
    auto run_step = [&](int64_t first, int64_t n) {
        auto [x, y] = feed.enqueue(first, n);
        const Tensor& logits = model->forward(dev, x, true);
        const Tensor* dlogits = nullptr;
        {
            profiler::Scope scope(&kLossScope);
            loss->forward(dev, logits, y, loss_sum);
            dlogits = &loss->backward(dev, logits, y);
        }
        model->backward(dev, *dlogits);
        profiler::Scope scope(&kSolverScope);
        solver->step(dev, params);
    };
    // Full-size steps run eagerly until every buffer and solver slot exists and SGD is past its
    // first-step special case; then one is captured and replayed. Tail batches stay eager.
    constexpr int64_t kWarmupSteps = 1;
    int64_t eager_full_steps = 0;
    Graph graph;
    if (opt.profile) {
        profiler::reset();
        profiler::enable(true);
    }
    // A NaN or inf loss: stop (the default) with the last checkpoint that was good, or go on.
    auto check_finite = [&](double total, int epoch, int64_t step) {
        if (std::isfinite(total) || c.on_nonfinite == "continue") return;
        throw Error("training stopped: the loss became " + std::string(std::isnan(total) ? "NaN" : "infinite") +
                    " by " + where(epoch, step) + " (train.on_nonfinite = \"stop\"); " +
                    (result.last_checkpoint.empty() ? std::string("no checkpoint had been written yet")
                                                    : "last good checkpoint: " + result.last_checkpoint) +
                    ". A lower solver.lr usually helps.");
    };

    // The shuffled order a fresh epoch uses; a resumed mid-epoch run already has it.
    std::vector<int64_t> order(st.order.begin(), st.order.end());
    for (int epoch = st.epoch; epoch <= c.epochs && !result.stopped_by_signal; ++epoch) {
        if (st.step == 0) {
            std::shuffle(order.begin(), order.end(), shuffle_rng);
            st.order.assign(order.begin(), order.end());
            std::ostringstream rng_text;
            rng_text << shuffle_rng;
            st.shuffle_rng = rng_text.str();  // the state after this epoch's shuffle: the next epoch's start
            st.loss_sum = 0;
            st.seen = st.seen_at_print = 0;
            st.loss_at_print = 0;
        }
        st.epoch = epoch;
        feed.begin_epoch(order);  // resident data: the epoch's one upload (the order), before the count
        ops::fill(dev, loss_sum, st.loss_sum);
        const TransferCounts transfers0 = transfer_counts();
        const auto t0 = Clock::now();
        const int64_t first_step = st.step;
        for (int64_t step = first_step; step < steps_per_epoch; ++step) {
            const int64_t first = step * batch, n = std::min(batch, train_set.count - first);
            feed.stage(first, n);
            {
                StrictTransfers strict;  // anything but the batch's explicit upload crossing the bus is a bug
                if (graph.defined() && n == batch) {
                    graph.launch();
                } else if (c.capture && n == batch && eager_full_steps >= kWarmupSteps) {
                    graph = Graph::capture(dev, [&] { run_step(first, n); });
                    graph.launch();
                } else {
                    run_step(first, n);
                    eager_full_steps += n == batch;
                }
            }
            st.seen += n;
            st.step = step + 1;
            ++st.global_step;
            const bool last = step + 1 == steps_per_epoch;
            const bool print = (step + 1) % c.print_every == 0 || last;
            const bool stop = stop_signal() != 0 && !last;  // the epoch's end writes its own checkpoint
            const bool checkpoint =
                !last && (stop || (c.checkpoint_every > 0 && st.global_step % static_cast<uint64_t>(c.checkpoint_every) == 0));
            if (!print && !checkpoint) continue;
            const float total = loss_sum.to_vector()[0];  // the host's only read of the loss
            check_finite(total, epoch, step + 1);
            st.loss_sum = total;
            if (print) {
                const double recent = (total - st.loss_at_print) / static_cast<double>(st.seen - st.seen_at_print);
                st.loss_at_print = total;
                st.seen_at_print = st.seen;
                const double elapsed = since(t0),
                             ips = static_cast<double>(st.seen - first_step * batch) / std::max(elapsed, 1e-9);
                log.row(epoch, step + 1, recent, ips, elapsed);
                if (opt.progress) {
                    char line[200];
                    std::snprintf(line, sizeof line, "epoch %d/%d  step %lld/%lld  loss %.4f  %.0f img/s  ETA %s", epoch,
                                  c.epochs, static_cast<long long>(step + 1), static_cast<long long>(steps_per_epoch),
                                  recent, ips,
                                  format_eta(elapsed / static_cast<double>(step + 1 - first_step) *
                                             static_cast<double>(steps_per_epoch - step - 1))
                                      .c_str());
                    out << (tty ? "\r" : "") << line << (tty && !last ? "" : "\n") << std::flush;
                }
            }
            if (checkpoint) save_last();
            if (stop) {
                result.stopped_by_signal = stop_signal();
                break;
            }
        }
        if (result.stopped_by_signal) break;

        EpochMetrics m;
        m.epoch = epoch;
        m.seconds = since(t0);
        m.steps = steps_per_epoch;
        m.train_loss = static_cast<double>(st.loss_sum) / static_cast<double>(st.seen);
        m.images_per_second = static_cast<double>(st.seen - first_step * batch) / m.seconds;
        const TransferCounts t = transfer_counts() - transfers0;
        const double steps_run = static_cast<double>(steps_per_epoch - first_step);
        m.transfers_per_step = static_cast<double>(t.count()) / steps_run;
        m.h2d_bytes_per_step = static_cast<double>(t.h2d_bytes) / steps_run;
        const bool was_profiling = profiler::enabled();
        profiler::enable(false);  // the profile covers training steps only
        if (has_validation) {
            const Scores v = score(*model, *loss, dev, data.validation, classes);
            m.has_validation = true;
            m.val_loss = v.loss;
            m.val_accuracy = v.accuracy;
        }
        m.test_accuracy = test_resident ? evaluate(*model, dev, *test_resident) : evaluate(*model, dev, data.test);
        profiler::enable(was_profiling);
        result.epochs.push_back(m);
        st.epochs.push_back(to_json(m));
        // The epoch is done: a resume starts the next one.
        st.epoch = epoch + 1;
        st.step = 0;
        const double value = metric_value(st.best_metric, m);
        const bool best = improves(st.best_metric, value, st.has_best, st.best_value);
        if (best) {
            st.has_best = true;
            st.best_value = value;
        }
        save_last();
        if (best) {
            save_training_checkpoint(files.best, *model, *solver, dev, st, meta);
            result.best_checkpoint = files.best;
        }
        write_metrics();
        if (opt.progress) {
            char line[300];
            std::string val;
            if (m.has_validation) {
                char v[96];
                std::snprintf(v, sizeof v, ", val loss %.4f, val accuracy %.2f%%", m.val_loss, 100 * m.val_accuracy);
                val = v;
            }
            std::snprintf(line, sizeof line, "epoch %d: train loss %.4f%s, test accuracy %.2f%%, %.2f s, %.0f img/s%s\n",
                          epoch, m.train_loss, val.c_str(), 100 * m.test_accuracy, m.seconds, m.images_per_second,
                          best ? " (best so far)" : "");
            out << line << std::flush;
        }
        if (stop_signal() != 0 && epoch < c.epochs) result.stopped_by_signal = stop_signal();
    }
    result.next_epoch = st.epoch;
    result.next_step = st.step;
    if (opt.profile) {
        profiler::enable(false);
        out << "\nprofile (each op timed with a device sync):\n";
        profiler::print(out);
    }
    if (result.stopped_by_signal) {
        write_metrics();
        return result;
    }
    save_checkpoint(result.checkpoint_path, *model, meta);
    write_metrics();
    return result;
}

}  // namespace xylem::app
