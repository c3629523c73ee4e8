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

#include "app/checkpoint.h"
#include "app/model_builder.h"
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
    for (int64_t i = 0; i < n; ++i)
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

TrainResult train(const RunConfig& c, Device& dev, std::ostream& out, const TrainOptions& opt) {
    // parse_config and the flags keep epochs in range; a RunConfig built in code is checked here,
    // since a run of no epochs has no metrics to report (run_train read past an empty list).
    if (c.epochs < ranges::epochs.lo)
        throw Error(c.source + ": train.epochs is " + std::to_string(c.epochs) + "; a run needs at least one epoch");
    if (std::string why = capture_blocker(c, dev, opt); !why.empty()) throw Error(c.source + ": " + why);
    const io::Dataset train_set = io::load_mnist_dir(c.data_dir, true);
    const io::Dataset test_set = io::load_mnist_dir(c.data_dir, false);
    auto model = build_model(c);
    model->build(dev, {1, train_set.rows, train_set.cols}, c.seed);
    auto loss = make_loss(c.loss);
    loss->check_output(model->output_sample_shape());
    const int64_t classes = model->output_sample_shape().back();
    check_labels(train_set, classes, c.data_dir + " training");
    check_labels(test_set, classes, c.data_dir + " test");
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
    // Parameters are initialised on the host: move them to the device once, before the strict steps.
    for (Param* p : model->state()) p->value.upload(dev);

    namespace fs = std::filesystem;
    fs::create_directories(c.out_dir);
    TrainResult result;
    result.checkpoint_path = (fs::path(c.out_dir) / "model.safetensors").string();
    result.metrics_path = (fs::path(c.out_dir) / "metrics.json").string();
    result.log_path = (fs::path(c.out_dir) / "log.csv").string();
    std::ofstream log(result.log_path);
    if (!log) throw Error(result.log_path + ": cannot write the training log");
    log << "epoch,step,loss,images_per_second,elapsed_seconds\n";

    if (opt.progress) out << "backend " << dev.backend().name() << ", device " << dev.name() << "\nmodel:\n" << model->summary();
    const bool tty = opt.progress && isatty(STDOUT_FILENO);

    std::mt19937_64 shuffle_rng(c.seed);
    std::vector<int64_t> order(static_cast<size_t>(train_set.count));
    std::iota(order.begin(), order.end(), 0);
    Tensor loss_sum({1}, DType::F32, dev);
    // Capture stages host batches through fixed areas that the graph's copies re-read.
    BatchFeed feed(train_set, dev, loss->target_dtype(), classes, c.data_resident, c.capture);
    std::optional<ResidentData> test_resident;
    if (c.data_resident) test_resident = upload_dataset(test_set, dev, DType::I32, classes);
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
    const int64_t batch = c.batch_size;
    int64_t steps_per_epoch = (train_set.count + batch - 1) / batch;
    if (c.max_steps > 0) steps_per_epoch = std::min<int64_t>(steps_per_epoch, c.max_steps);
    if (opt.profile) {
        profiler::reset();
        profiler::enable(true);
    }

    for (int epoch = 1; epoch <= c.epochs; ++epoch) {
        std::shuffle(order.begin(), order.end(), shuffle_rng);
        feed.begin_epoch(order);  // resident data: the epoch's one upload (the order), before the count
        ops::fill(dev, loss_sum, 0.0f);
        const TransferCounts transfers0 = transfer_counts();
        const auto t0 = Clock::now();
        int64_t seen = 0, seen_at_print = 0;
        double loss_at_print = 0;
        for (int64_t step = 0; step < steps_per_epoch; ++step) {
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
            seen += n;
            const bool last = step + 1 == steps_per_epoch;
            if ((step + 1) % c.print_every == 0 || last) {
                const double total = loss_sum.to_vector()[0];  // the host's only read of the loss
                const double recent = (total - loss_at_print) / static_cast<double>(seen - seen_at_print);
                loss_at_print = total;
                seen_at_print = seen;
                const double elapsed = since(t0), ips = static_cast<double>(seen) / elapsed;
                log << epoch << "," << step + 1 << "," << recent << "," << ips << "," << elapsed << "\n";
                if (opt.progress) {
                    char line[200];
                    std::snprintf(line, sizeof line, "epoch %d/%d  step %lld/%lld  loss %.4f  %.0f img/s  ETA %s", epoch,
                                  c.epochs, static_cast<long long>(step + 1), static_cast<long long>(steps_per_epoch),
                                  recent, ips, format_eta(elapsed / (step + 1) * (steps_per_epoch - step - 1)).c_str());
                    out << (tty ? "\r" : "") << line << (tty && !last ? "" : "\n") << std::flush;
                }
            }
        }
        EpochMetrics m;
        m.epoch = epoch;
        m.seconds = since(t0);
        m.steps = steps_per_epoch;
        m.train_loss = loss_sum.to_vector()[0] / static_cast<double>(seen);
        m.images_per_second = static_cast<double>(seen) / m.seconds;
        const TransferCounts t = transfer_counts() - transfers0;
        m.transfers_per_step = static_cast<double>(t.count()) / static_cast<double>(steps_per_epoch);
        m.h2d_bytes_per_step = static_cast<double>(t.h2d_bytes) / static_cast<double>(steps_per_epoch);
        const bool was_profiling = profiler::enabled();
        profiler::enable(false);  // the profile covers training steps only
        m.test_accuracy = test_resident ? evaluate(*model, dev, *test_resident) : evaluate(*model, dev, test_set);
        profiler::enable(was_profiling);
        result.epochs.push_back(m);
        if (opt.progress) {
            char line[200];
            std::snprintf(line, sizeof line, "epoch %d: train loss %.4f, test accuracy %.2f%%, %.2f s, %.0f img/s\n", epoch,
                          m.train_loss, 100 * m.test_accuracy, m.seconds, m.images_per_second);
            out << line << std::flush;
        }
    }
    if (opt.profile) {
        profiler::enable(false);
        out << "\nprofile (each op timed with a device sync):\n";
        profiler::print(out);
    }

    save_checkpoint(result.checkpoint_path, *model,
                    {{"format", "pt"}, {"producer", "xylem"}, {"config", c.source}, {"backend", dev.backend().name()}});
    nlohmann::json j;
    j["config"] = c.source;
    j["backend"] = dev.backend().name();
    j["device"] = dev.name();
    j["batch_size"] = c.batch_size;
    j["seed"] = c.seed;
    for (const EpochMetrics& m : result.epochs)
        j["epochs"].push_back({{"epoch", m.epoch}, {"train_loss", m.train_loss}, {"test_accuracy", m.test_accuracy},
                               {"seconds", m.seconds}, {"images_per_second", m.images_per_second}, {"steps", m.steps},
                               {"transfers_per_step", m.transfers_per_step}, {"h2d_bytes_per_step", m.h2d_bytes_per_step}});
    if (!result.epochs.empty()) j["final_test_accuracy"] = result.epochs.back().test_accuracy;
    io::write_file_atomic(result.metrics_path, j.dump(2) + "\n");
    return result;
}

}  // namespace xylem::app
