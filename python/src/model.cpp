// xylem.Model's C++ half: building from a config, fit through train::fit, evaluate, predict,
// parameters as NumPy arrays, checkpoints. Every loop is the training library's.
#include "model.h"

#include <signal.h>

#include <cstring>
#include <filesystem>
#include <iostream>
#include <map>

#include <nanobind/stl/map.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/unique_ptr.h>
#include <nanobind/stl/vector.h>

#include "py_callbacks.h"
#include "py_stdout.h"
#include "xylem/layers/loss.h"
#include "xylem/train/array_data.h"
#include "xylem/train/backend_select.h"
#include "xylem/train/batch_source.h"
#include "xylem/train/checkpoint.h"
#include "xylem/train/evaluate.h"
#include "xylem/train/fit.h"
#include "xylem/train/interrupt.h"
#include "xylem/train/memory_plan.h"
#include "xylem/train/model_builder.h"
#include "xylem/train/run.h"
#include "xylem/train/run_callbacks.h"
#include "xylem/train/run_data.h"
#include "xylem/train/run_files.h"
#include "xylem/train/sample.h"
#ifdef XYLEM_HAVE_ONNX
#include "xylem/onnx/importer.h"
#endif

namespace xylem::python {
namespace fs = std::filesystem;

Model::Model(RunConfig config, const std::string& backend, const std::vector<std::string>& plugin_path)
    : config_(std::move(config)) {
    // Unbuilt, for its input type and as a check of the config. A text config's layers may take
    // their size from the vocabulary, which only the data or a checkpoint gives: any byte
    // vocabulary's size stands in (the type does not depend on it); ensure_built uses the real one.
    net_ = value_errors([&] { return train::build_model(config_, config_.is_text() ? 256 : 0); });
    BackendChoice choice;
    {
        nb::gil_scoped_release unlocked;  // probing forks and waits for children
        choice = train::select_backend(registry_, config_, backend, plugin_path);
    }
    backend_choice = train::describe_choice(choice);
    backend_ = choice.backend;
    dev_ = backend_->device(choice.device);
}

std::string Model::backend_name() const { return backend_->name(); }

std::map<std::string, std::string> Model::checkpoint_metadata() const {
    std::map<std::string, std::string> meta{{"format", "pt"}, {"producer", "xylem (Python)"}, {"config", config_.source},
                                            {"backend", backend_->name()}};
    if (!vocabulary.empty()) meta[train::kVocabularyKey] = train::vocabulary_metadata(vocabulary);  // generate, eval, sample read it
    return meta;
}

bool Model::takes_tokens() const { return net_->input_dtype() == DType::I32; }

Net& Model::net() {
    if (!built_)
        throw nb::value_error("the model is not built yet: it is built for the samples of the first array it is "
                              "given (fit, predict, evaluate), or pass input_shape= to Model.from_config");
    return *net_;
}

Loss& Model::loss() {
    Net& n = net();
    value_errors([&] {
        loss_->check_output(n.output_sample_shape());
        return 0;
    });
    return *loss_;
}

int64_t Model::classes() const { return net_->output_sample_shape().back(); }

void Model::ensure_built(const Shape& sample) { ensure_built(std::span<const Shape>(&sample, 1)); }

void Model::ensure_built(std::span<const Shape> samples) {
    if (built_) {
        for (size_t k = 0; k < samples.size() && k < samples_.size(); ++k)
            if (samples[k] != samples_[k])
                throw nb::value_error(("the model was built for samples of shape " + shape_text(samples_[k]) +
                                       (samples_.size() > 1 ? " (input '" + net_->input_names()[k] + "')" : std::string()) +
                                       ", got samples of shape " + shape_text(samples[k]))
                                          .c_str());
        if (samples.size() != samples_.size()) {
            std::string names;
            for (const std::string& s : net_->input_names()) names += (names.empty() ? "" : ", ") + s;
            throw nb::value_error(("the model takes " + std::to_string(samples_.size()) + " input(s) (" + names +
                                   "), given " + std::to_string(samples.size()) +
                                   (samples.size() == 1 ? ": fit and evaluate feed one; predict takes a list of arrays" : ""))
                                      .c_str());
        }
        return;
    }
    value_errors([&] {
        // As train::run builds a configured run's model, in the same order, so the same seed gives
        // the same initial parameters as `xylem train`.
        net_ = train::build_model(config_, vocabulary.size());
        solver_ = train::build_solver(config_);
        net_->build(*dev_, samples, config_.seed);
        loss_ = make_loss(config_.loss);
        return 0;
    });
    built_ = true;
    samples_.assign(samples.begin(), samples.end());
    if (!pending_.empty()) {
        train::load_checkpoint(pending_, *net_);
        pending_.clear();
    }
}

namespace {

// The model's sample shape for an array of samples: its shape less the first dimension, in the
// form image_dataset reads it (train::image_layout: [F] and [H, W] as [1, 1, F] and [1, H, W],
// [C, H, W] as it is); predict also takes other float shapes as they are.
Shape model_sample(const Shape& array_shape, bool tokens, const std::string& what) {
    Shape s(array_shape.begin() + 1, array_shape.end());
    if (tokens || s.empty() || s.size() > 3) return s;
    return value_errors([&] { return train::image_layout(s, what).sample_shape(); });
}

// The arrays as a data set (a copy), checked against the model.
io::Dataset to_dataset(Model& m, const HostArray& x, const HostArray* y, const std::string& what) {
    const Shape xs = array_shape(x);
    if (xs.size() < 2) throw nb::value_error((what + ": x must hold samples along its first dimension, got shape " + shape_text(xs)).c_str());
    const int64_t n = xs[0];
    if (y) {
        const Shape ys = array_shape(*y);
        if (ys.empty() || ys[0] != n)
            throw nb::value_error((what + ": y has shape " + shape_text(ys) + " but x holds " + std::to_string(n) + " samples").c_str());
        if (!is_i32(*y)) throw nb::value_error((what + ": y must be int32 class labels").c_str());
    }
    const bool tokens = m.takes_tokens();
    if (tokens != is_i32(x))
        throw nb::value_error((what + ": the model takes " + (tokens ? "int32 token ids" : "float32 samples") + ", got " +
                               (is_i32(x) ? "int32" : "float32") + " x")
                                  .c_str());
    return value_errors([&] {
        if (tokens) {
            if (y && array_shape(*y) != xs)
                throw Error(what + ": a token model's y holds the next token of every position: shape " + shape_text(xs) +
                            ", got " + shape_text(array_shape(*y)));
            return train::token_dataset(static_cast<const int32_t*>(x.data()), n, xs[1], y ? static_cast<const int32_t*>(y->data()) : nullptr, what);
        }
        if (y && array_shape(*y).size() != 1) throw Error(what + ": y must be one class label per sample, shape (" + std::to_string(n) + ",)");
        const Shape sample(xs.begin() + 1, xs.end());
        return train::image_dataset(static_cast<const float*>(x.data()), n, sample,
                                    y ? static_cast<const int32_t*>(y->data()) : nullptr, 0, what);
    });
}

void check_labels_fit(Model& m, const io::Dataset& d, const std::string& what) {
    const int64_t classes = m.classes();
    for (size_t i = 0; i < d.labels.size(); ++i)
        if (d.labels[i] >= classes)
            throw nb::value_error((what + ": label " + std::to_string(d.labels[i]) + " at index " + std::to_string(i) +
                                   " is out of range for a model with " + std::to_string(classes) + " outputs")
                                      .c_str());
}

void check_token_ids(Model& m, size_t k, const int32_t* ids, int64_t count, const std::string& what) {
    value_errors([&] {
        m.net().check_token_ids(k, ids, count, what);
        return 0;
    });
}

io::Dataset prepared(Model& m, const HostArray& x, const HostArray* y, const std::string& what) {
    io::Dataset d = to_dataset(m, x, y, what);
    m.ensure_built(d.sample_shape());
    if (d.is_tokens()) check_token_ids(m, 0, d.tokens.data(), static_cast<int64_t>(d.tokens.size()), what + ": x");
    if (y) {
        m.loss();  // labels are scored by the loss: a model whose output it cannot read is refused first
        check_labels_fit(m, d, what);
    }
    return d;
}

// What fit takes besides the data, from Python's keywords.
struct FitArgs {
    int epochs = 0;          // 0: the config's
    int64_t batch_size = 0;  // 0: the config's
    bool shuffle = true;
    int verbose = 1;
    nb::object callbacks;
    std::optional<std::string> checkpoint_dir;
    std::string monitor;  // train.best_metric's names; "": the config's, else val_loss with validation data
    int64_t patience = 0;
    double min_delta = 0;
    std::optional<std::string> resume;  // a training checkpoint (or a run folder's last.safetensors) to continue
};

// Where a resumed fit starts: the model, the solver and the position from a training checkpoint
// (what ModelCheckpoint writes), checked against this fit's samples as train::run checks its data.
train::TrainingState resumed_state(Model& m, const std::string& from, int64_t samples, train::FitOptions& o) {
    std::error_code ec;
    const std::string path = fs::is_directory(from, ec) ? (fs::path(from) / "last.safetensors").string() : from;
    train::TrainingState st = train::load_training_checkpoint(path, m.net(), m.solver(), m.device());
    if (st.order.size() != static_cast<size_t>(samples))
        throw nb::value_error((path + ": the run trained on " + std::to_string(st.order.size()) + " samples, this fit gives " +
                               std::to_string(samples) + " (other arrays, or another validation split?)")
                                  .c_str());
    for (int32_t i : st.order)
        if (i < 0 || i >= samples) throw nb::value_error((path + ": corrupt training state: order entry out of range").c_str());
    if (st.step > train::steps_per_epoch(samples, o))
        throw nb::value_error((path + ": the run stopped at step " + std::to_string(st.step) + " of an epoch, which now has " +
                               std::to_string(train::steps_per_epoch(samples, o)) + " steps (another batch_size?)")
                                  .c_str());
    o.resumed_from = path;
    return st;
}

// train::fit over a built model's batches, with the callbacks a configured run uses (scoring,
// early stopping, checkpoints, the report) and the Python ones.
nb::dict run_fit(nb::object owner, Model& m, train::BatchSource& batches, const io::Dataset& validation,
                 train::FitOptions o, int64_t chars_per_sample, const FitArgs& a) {
    const RunConfig& c = m.config();
    if (!a.monitor.empty()) o.best_metric = a.monitor;
    else if (o.best_metric.empty()) o.best_metric = validation.count ? "val_loss" : "train_loss";
    if (validation.count == 0 && o.best_metric != "train_loss")
        throw nb::value_error(("monitor '" + o.best_metric + "' needs validation data (validation_split or validation_data)").c_str());
    Net& net = m.net();
    Loss& loss = m.loss();
    Device& dev = m.device();
    value_errors([&] {
        if (std::string why = train::capture_blocker(o, net, m.solver(), dev); !why.empty()) throw Error(c.source + ": " + why);
        return 0;
    });
    net.check_ops(dev.backend(), true);

    train::ScoringCallbacks::Sets sets;
    sets.validation = &validation;
    sets.validation_total = validation.count;
    sets.classes = m.classes();
    sets.validation_batch = chars_per_sample ? o.batch_size : train::kEvaluationBatch;  // RunData::eval_batch's rule
    train::ScoringCallbacks scoring(sets, nullptr);
    EarlyStopping rule;
    rule.metric = o.best_metric;
    rule.patience = a.patience;
    rule.min_delta = a.min_delta;
    train::EarlyStoppingCallbacks early(rule);
    std::optional<train::RunFiles> files;
    if (a.checkpoint_dir) files = value_errors([&] { return train::prepare_run_dir(*a.checkpoint_dir); });
    std::optional<train::CheckpointCallbacks> checkpoints;
    if (files) checkpoints.emplace(*files, m.checkpoint_metadata());
    train::RunFiles no_files;
    no_files.write = false;
    PyStdout py_stdout;  // progress lines go where Python's prints go (a notebook's cell, a captured stdout)
    std::ostream progress_out(&py_stdout);
    train::RunReport report(progress_out, a.verbose == 1, no_files, false, chars_per_sample);
    report.set_live(PyStdout::live());
    train::RunSummary summary;
    summary.config = c.source;
    summary.backend = dev.backend().name();
    summary.device = dev.name();
    summary.batch_size = o.batch_size;
    summary.seed = o.seed;
    train::ReportCallbacks reports(report, summary, progress_out, false);
    PyCallbacks py(a.callbacks, owner);

    train::TrainingState state;
    state.config_text = c.text;
    state.config_source = c.source;
    if (a.resume) state = resumed_state(m, *a.resume, batches.size(), o);
    std::vector<train::Callbacks*> cbs{&scoring, &early};
    if (a.verbose == 1) cbs.push_back(&reports);
    if (checkpoints) cbs.push_back(&*checkpoints);
    cbs.push_back(&py);
    train::FitResult r;
    {
        nb::gil_scoped_release unlocked;
        train::InterruptGuard interrupts;  // Ctrl-C: finish the step, write the checkpoint, return
        cbs.push_back(&interrupts);
        r = train::fit(net, loss, m.solver(), dev, batches, state, o, cbs);
        progress_out.flush();
    }
    py.rethrow_if_failed();
    nb::list history;
    for (const train::EpochMetrics& e : r.epochs) history.append(epoch_logs(e));
    nb::dict out;
    out["epochs"] = history;
    out["finish_reason"] = r.finish_reason;
    out["last_checkpoint"] = r.last_checkpoint;
    out["best_checkpoint"] = r.best_checkpoint;
    out["stopped_by_signal"] = r.stopped_by_signal;
    out["next_epoch"] = state.epoch;
    out["next_step"] = state.step;
    return out;
}

train::FitOptions fit_options(const RunConfig& c, bool shuffle, const FitArgs& a) {
    train::FitOptions o = train::fit_options(c, shuffle);
    if (a.epochs > 0) o.epochs = a.epochs;
    if (a.batch_size > 0) o.batch_size = a.batch_size;
    return o;
}

// Arrays: the samples as an io::Dataset, batched as a configured run batches its images.
nb::dict fit_arrays(nb::object owner, Model& m, const HostArray& x, const HostArray& y, std::optional<HostArray> vx,
                    std::optional<HostArray> vy, double validation_split, const FitArgs& a) {
    io::Dataset train = prepared(m, x, &y, "fit");
    io::Dataset validation;
    if (vx && vy) validation = prepared(m, *vx, &*vy, "validation_data");
    else if (validation_split > 0)
        validation = value_errors([&] {
            const int64_t held = std::max<int64_t>(1, std::llround(validation_split * static_cast<double>(train.count)));
            return train::split_tail(train, held);
        });
    const RunConfig& c = m.config();
    const train::FitOptions o = fit_options(c, a.shuffle, a);
    value_errors([&] {
        train::check_memory_fits(train::training_memory(m.net(), train::input_sample_shape(train), m.solver(), o.batch_size, 0),
                                 m.device(), c.source, "training this model");
        return 0;
    });
    const std::unique_ptr<train::BatchSource> batches =
        train::make_batch_source(train, m.device(), m.loss().target_dtype(), m.classes(), c.data_resident, c.capture);
    return run_fit(owner, m, *batches, validation, o, train.is_tokens() ? train.steps : 0, a);
}

// A text corpus for a character model: the config's layout (streams or windows) and vocabulary
// rules over the string, as [data] text lays out its files (train::text_data_of).
nb::dict fit_text(nb::object owner, Model& m, const std::string& text, double validation_split, const FitArgs& a) {
    RunConfig c = m.config();
    if (a.batch_size > 0) c.batch_size = static_cast<int>(a.batch_size);  // streams: one per batch row
    if (validation_split > 0) c.validation_fraction = validation_split, c.validation_count = 0;
    train::RunData data;
    {
        train::TextData t = value_errors([&] { return train::text_data_of(c, text); });
        if (!m.vocabulary.empty() && !(m.vocabulary == t.vocabulary) && m.built())
            throw nb::value_error("fit: the text's characters are not the vocabulary the model was built with "
                                  "(a model is built for one vocabulary)");
        if (!m.built()) m.vocabulary = t.vocabulary;
        data.train = std::move(t.train);
        data.validation = std::move(t.validation);
        data.windows = std::move(t.windows);
        data.vocabulary = std::move(t.vocabulary);
    }
    m.ensure_built(train::input_sample_shape(data.train));
    value_errors([&] {
        train::check_model_fits_data(c, m.net(), data);
        return 0;
    });
    const train::FitOptions o = fit_options(c, data.shuffled() && a.shuffle, a);
    Device& dev = m.device();
    const std::unique_ptr<train::BatchSource> batches =
        data.windowed() ? train::make_window_source(data.windows, dev, c.data_resident, c.capture)
                        : train::make_batch_source(data.train, dev, DType::I32, m.classes(), c.data_resident, c.capture);
    return run_fit(owner, m, *batches, data.validation, o, data.train.steps, a);
}

// Any sample shape (an ONNX model's [3, H, W] too): batches straight from the array.
NumpyF32 predict(Model& m, const HostArray& x, int64_t batch_size) {
    const Shape xs = array_shape(x);
    if (xs.size() < 2 || xs[0] < 1)
        throw nb::value_error(("predict: x must hold samples along its first dimension, got shape " + shape_text(xs)).c_str());
    const bool tokens = m.takes_tokens();
    if (tokens != is_i32(x))
        throw nb::value_error((std::string("predict: the model takes ") + (tokens ? "int32 token ids" : "float32 samples") +
                               ", got " + (is_i32(x) ? "int32" : "float32") + " x").c_str());
    m.ensure_built(model_sample(xs, tokens, "predict"));
    if (tokens) check_token_ids(m, 0, static_cast<const int32_t*>(x.data()), numel(xs), "predict: x");
    Net& net = m.net();
    const int64_t n = xs[0];
    Shape out_shape{n};
    for (int64_t v : net.output_sample_shape()) out_shape.push_back(v);
    const int64_t per = numel(net.output_sample_shape());
    std::vector<float> out(static_cast<size_t>(n * per));
    {
        nb::gil_scoped_release unlocked;
        train::ArrayBatches source(x.data(), tokens ? DType::I32 : DType::F32, n, m.sample(), m.device());
        net.reset_state();
        train::for_each_batch(net, m.device(), source, batch_size > 0 ? batch_size : train::kEvaluationBatch,
                              [&](int64_t first, int64_t count, const Tensor&, const Tensor& output) {
                                  std::memcpy(out.data() + first * per, output.host_read<float>(),
                                              static_cast<size_t>(count * per) * sizeof(float));
                              });
    }
    return numpy_f32(std::move(out), out_shape);
}

// One array per model input (each sample's shape as it is: an ONNX graph's), the same N samples
// in each: every output, [N, *output shape] each, in the model's output order.
std::vector<NumpyF32> predict_many(Model& m, const std::vector<HostArray>& xs, int64_t batch_size) {
    const std::vector<std::string>& names = m.input_names();
    if (xs.size() != names.size()) {
        std::string list;
        for (const std::string& s : names) list += (list.empty() ? "" : ", ") + s;
        throw nb::value_error(("predict: the model takes " + std::to_string(names.size()) + " input(s) (" + list +
                               "), got " + std::to_string(xs.size()) + " array(s)")
                                  .c_str());
    }
    std::vector<Shape> samples;
    const int64_t n = array_shape(xs[0]).empty() ? 0 : array_shape(xs[0])[0];
    for (size_t k = 0; k < xs.size(); ++k) {
        const Shape s = array_shape(xs[k]);
        const std::string what = "predict: x[" + std::to_string(k) + "] (input '" + names[k] + "')";
        if (s.size() < 2 || s[0] < 1)
            throw nb::value_error((what + " must hold samples along its first dimension, got shape " + shape_text(s)).c_str());
        if (s[0] != n)
            throw nb::value_error((what + " holds " + std::to_string(s[0]) + " samples, x[0] " + std::to_string(n) +
                                   " (every input holds the same samples)")
                                      .c_str());
        const bool tokens = m.input_takes_tokens(k);
        if (tokens ? !is_i32(xs[k]) : !is_f32(xs[k]))
            throw nb::value_error((what + " takes " + (tokens ? "int32 token ids" : "float32 samples")).c_str());
        samples.emplace_back(s.begin() + 1, s.end());
    }
    m.ensure_built(samples);
    for (size_t k = 0; k < xs.size(); ++k)
        if (m.input_takes_tokens(k))
            check_token_ids(m, k, static_cast<const int32_t*>(xs[k].data()), numel(array_shape(xs[k])),
                            "predict: x[" + std::to_string(k) + "] (input '" + names[k] + "')");
    Net& net = m.net();
    std::vector<std::vector<float>> outs(net.output_count());
    std::vector<int64_t> per(outs.size());
    for (size_t o = 0; o < outs.size(); ++o) {
        per[o] = numel(net.output_sample_shape(o));
        outs[o].resize(static_cast<size_t>(n * per[o]));
    }
    {
        nb::gil_scoped_release unlocked;
        Device& dev = m.device();
        const int64_t step = batch_size > 0 ? batch_size : train::kEvaluationBatch;
        std::vector<Tensor> batch(xs.size());
        std::vector<const Tensor*> ptrs(xs.size());
        net.reset_state();
        for (int64_t first = 0; first < n; first += step) {
            const int64_t count = std::min(step, n - first);
            for (size_t k = 0; k < xs.size(); ++k) {
                Shape s{count};
                s.insert(s.end(), samples[k].begin(), samples[k].end());
                if (!batch[k].defined() || batch[k].shape() != s)
                    batch[k] = Tensor(s, m.input_takes_tokens(k) ? DType::I32 : DType::F32, dev);
                // int32 and float32 alike: 4 bytes a value.
                batch[k].upload_from(dev, static_cast<const char*>(xs[k].data()) + first * numel(samples[k]) * 4);
                ptrs[k] = &batch[k];
            }
            net.forward(dev, ptrs, false);
            for (size_t o = 0; o < outs.size(); ++o)
                std::memcpy(outs[o].data() + first * per[o], net.output(o).host_read<float>(),
                            static_cast<size_t>(count * per[o]) * sizeof(float));
        }
    }
    std::vector<NumpyF32> result;
    for (size_t o = 0; o < outs.size(); ++o) {
        Shape shape{n};
        for (int64_t v : net.output_sample_shape(o)) shape.push_back(v);
        result.push_back(numpy_f32(std::move(outs[o]), shape));
    }
    return result;
}

nb::dict evaluate(Model& m, const HostArray& x, const HostArray& y, int64_t batch_size) {
    io::Dataset d = prepared(m, x, &y, "evaluate");
    train::Scores s;
    {
        nb::gil_scoped_release unlocked;
        m.net().reset_state();
        s = train::score(m.net(), m.loss(), m.device(), d, m.classes(), batch_size > 0 ? batch_size : train::kEvaluationBatch);
    }
    nb::dict out;
    out["loss"] = s.loss;
    out["accuracy"] = s.accuracy;
    return out;
}

RunConfig config_from(const std::string& source) {
    return value_errors([&] {
        std::error_code ec;
        if (fs::is_regular_file(source, ec)) return load_config(source);
        if (source.find('=') == std::string::npos && source.find('[') == std::string::npos)
            throw Error("no config file '" + source + "' (a string without '=' or '[' is read as a path, not TOML text)");
        return parse_config(source, "<config text>");
    });
}

std::unique_ptr<Model> from_config(const std::string& source, const std::string& backend,
                                   const std::vector<std::string>& plugin_path, std::optional<std::vector<int64_t>> input_shape) {
    auto m = std::make_unique<Model>(config_from(source), backend, plugin_path);
    if (input_shape) {
        Shape a{1};
        a.insert(a.end(), input_shape->begin(), input_shape->end());
        m->ensure_built(model_sample(a, m->takes_tokens(), "input_shape"));
    }
    return m;
}

std::unique_ptr<Model> from_onnx(const std::string& path, const std::string& backend, const std::vector<std::string>& plugin_path) {
#ifdef XYLEM_HAVE_ONNX
    // The importer's model graph and parameters (an unsupported op or a malformed file: ValueError).
    const onnx_import::Imported imported = value_errors([&] { return onnx_import::import_file(path); });
    auto m = std::make_unique<Model>(onnx_import::run_config(imported), backend, plugin_path);
    m->ensure_built(imported.input_samples());
    onnx_import::load_parameters(m->net(), imported);
    return m;
#else
    (void)backend, (void)plugin_path;
    throw Error(path + ": this xylem was built without ONNX support: install libonnx-dev and libprotobuf-dev "
                       "(scripts/install-deps.sh) and install the package again");
#endif
}

// A checkpoint's parameters, now or when the model is built; a text model's vocabulary now (the
// model's size depends on it).
void load_checkpoint_into(Model& m, const std::string& path) {
    m.vocabulary = train::read_vocabulary(path);
    if (m.built()) train::load_checkpoint(path, m.net());
    else m.set_pending_checkpoint(path);
}

// Text from a character model, as `xylem sample` draws it: a copy of the model built for one step
// at a time (its parameters copied from this one) and train::sample_text.
std::string generate(Model& m, const std::string& prime, int64_t length, double temperature, int64_t top_k, uint64_t seed) {
    if (m.vocabulary.empty())
        throw nb::value_error("generate needs a character model with its vocabulary: load a checkpoint trained on text "
                              "([data] text) with Model.load(checkpoint, config)");
    if (!(temperature >= 1e-6 && temperature <= 1e6)) throw nb::value_error("temperature must be in [1e-6, 1e6]");
    if (length < 0 || top_k < 0) throw nb::value_error("length and top_k must not be negative");
    const RunConfig& c = m.config();
    auto sampler = value_errors([&] {
        auto s = train::build_inference_model(c, m.device(), {1}, 1, m.vocabulary.size());
        train::check_text_model(c, *s, m.vocabulary, "the loaded checkpoint");
        return s;
    });
    m.ensure_built({c.windows() ? c.block_size : c.seq_len});  // the training shape, if nothing built it yet
    std::map<std::string, Param*> mine;
    for (Param* p : m.net().state()) mine[p->name] = p;
    for (Param* p : sampler->state()) {
        auto it = mine.find(p->name);
        if (it == mine.end() || it->second->value.shape() != p->value.shape())
            throw Error("generate: the sampling model's parameter '" + p->name + "' has no counterpart in the model");
        std::memcpy(p->value.host_write<float>(), it->second->value.host_read<float>(), p->value.bytes());
    }
    train::SampleOptions o;
    o.prime = prime;
    o.length = length;
    o.temperature = temperature;
    o.top_k = top_k;
    o.seed = seed;
    o.output = train::output_kind(c);
    nb::gil_scoped_release unlocked;
    for (Param* p : sampler->state()) p->value.upload(m.device());
    return value_errors([&] { return train::sample_text(*sampler, m.device(), m.vocabulary, o); });
}

nb::dict state_dict(Model& m) {
    nb::dict out;
    for (Param* p : m.net().state()) out[p->name.c_str()] = numpy_f32(p->value.to_vector(), p->value.shape());
    return out;
}

void load_state_dict(Model& m, nb::dict values, bool strict) {
    Net& net = m.net();
    std::map<std::string, Param*> by_name;
    for (Param* p : net.state()) by_name[p->name] = p;
    // Everything is checked before any parameter changes.
    std::vector<std::pair<Param*, HostArray>> todo;
    for (auto [key, value] : values) {
        const std::string name = nb::cast<std::string>(key);
        auto it = by_name.find(name);
        if (it == by_name.end()) {
            if (strict) throw nb::value_error(("load_state_dict: the model has no parameter '" + name + "'").c_str());
            continue;
        }
        HostArray a = nb::cast<HostArray>(value);
        if (!is_f32(a)) throw nb::value_error(("load_state_dict: '" + name + "' must be float32").c_str());
        if (array_shape(a) != it->second->value.shape())
            throw nb::value_error(("load_state_dict: '" + name + "' has shape " + shape_text(array_shape(a)) +
                                   ", the model's is " + shape_text(it->second->value.shape()))
                                      .c_str());
        todo.emplace_back(it->second, a);
        by_name.erase(it);
    }
    if (strict && !by_name.empty())
        throw nb::value_error(("load_state_dict: missing '" + by_name.begin()->first + "' (and " +
                               std::to_string(by_name.size() - 1) + " more); pass strict=False to keep those")
                                  .c_str());
    for (auto& [p, a] : todo)
        std::memcpy(p->value.host_write<float>(), a.data(), static_cast<size_t>(p->value.numel()) * sizeof(float));
}

}  // namespace

void bind_model(nb::module_& m) {
    nb::class_<Model>(m, "Model")
        .def_static("from_config", &from_config, nb::arg("config"), nb::arg("backend") = "", nb::arg("plugin_path") = std::vector<std::string>{},
                    nb::arg("input_shape").none() = nb::none())
        .def_prop_ro("built", &Model::built)
        .def_prop_ro("backend", &Model::backend_name)
        .def_prop_ro("device", [](Model& self) { return self.device().name(); })
        .def_prop_ro("backend_choice", [](Model& self) { return self.backend_choice; })
        .def_prop_ro("takes_tokens", &Model::takes_tokens)
        .def_prop_ro("config_source", [](Model& self) { return self.config().source; })
        .def("summary", [](Model& self) { return self.net().summary(); })
        .def("_fit", [](Model& self, nb::object owner, nb::object x, nb::object y, nb::object vx, nb::object vy,
                        double split, int epochs, int64_t batch, bool shuffle, int verbose, nb::object callbacks,
                        nb::object dir, std::string monitor, int64_t patience, double min_delta, nb::object resume) {
            FitArgs a{epochs, batch, shuffle, verbose, callbacks, std::nullopt, monitor, patience, min_delta, std::nullopt};
            if (!dir.is_none()) a.checkpoint_dir = nb::cast<std::string>(dir);
            if (!resume.is_none()) a.resume = nb::cast<std::string>(resume);
            if (nb::isinstance<nb::str>(x)) return fit_text(owner, self, nb::cast<std::string>(x), split, a);  // UTF-8
            if (nb::isinstance<nb::bytes>(x)) {
                const nb::bytes b = nb::borrow<nb::bytes>(x);
                return fit_text(owner, self, std::string(b.c_str(), b.size()), split, a);
            }
            std::optional<HostArray> vxa, vya;  // None: no validation data
            if (!vx.is_none()) vxa = nb::cast<HostArray>(vx), vya = nb::cast<HostArray>(vy);
            return fit_arrays(owner, self, nb::cast<HostArray>(x), nb::cast<HostArray>(y), vxa, vya, split, a);
        }, nb::arg("owner"), nb::arg("x"), nb::arg("y").none(), nb::arg("vx").none(), nb::arg("vy").none(), nb::arg("split"),
           nb::arg("epochs"), nb::arg("batch"), nb::arg("shuffle"), nb::arg("verbose"), nb::arg("callbacks"),
           nb::arg("dir").none(), nb::arg("monitor"), nb::arg("patience"), nb::arg("min_delta"), nb::arg("resume").none())
        .def("_predict", &predict)
        .def("_predict_many", &predict_many)
        .def_prop_ro("input_names", [](Model& self) { return self.input_names(); })
        .def_prop_ro("output_names", [](Model& self) { return self.output_names(); })
        .def_prop_ro("input_tokens", [](Model& self) {
            std::vector<bool> v;
            for (size_t k = 0; k < self.input_names().size(); ++k) v.push_back(self.input_takes_tokens(k));
            return v;
        })
        .def("_evaluate", &evaluate)
        .def("state_dict", &state_dict)
        .def("load_state_dict", &load_state_dict, nb::arg("state_dict"), nb::arg("strict") = true)
        .def("save", [](Model& self, const std::string& path) { train::save_checkpoint(path, self.net(), self.checkpoint_metadata()); })
        .def("_load_checkpoint", &load_checkpoint_into)
        .def_static("from_onnx", &from_onnx, nb::arg("path"), nb::arg("backend") = "", nb::arg("plugin_path") = std::vector<std::string>{})
        .def("generate", &generate, nb::arg("prime"), nb::arg("length"), nb::arg("temperature"), nb::arg("top_k"), nb::arg("seed"));
}

}  // namespace xylem::python
