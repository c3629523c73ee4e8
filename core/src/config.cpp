// TOML config parsing with toml++: every key is known, every value has the right type.
#include "xylem/config.h"

#include <cmath>
#include <algorithm>
#include <filesystem>
#include <sstream>
#include <toml++/toml.h>

#include "config_depth.h"
#include "xylem/error.h"
#include "xylem/io/input_file.h"
#include "model_config.h"
#include "toml_section.h"

namespace xylem {
namespace {

// Set by the layer registry (layers/registry.cpp) when xylem_layers is linked.
LayerTableParser layer_table_parser = nullptr;

void parse_schedule(const Section& s, ScheduleSpec& sc) {
    s.allow({"type", "unit", "step_size", "milestones", "gamma", "t_max", "eta_min", "warmup_steps", "warmup_start"});
    s.get("type", sc.type);
    s.get("unit", sc.unit);
    s.get("step_size", sc.step_size, ranges::schedule_period);
    s.get_shape("milestones", sc.milestones, ranges::schedule_period);
    s.get("gamma", sc.gamma);
    s.get("t_max", sc.t_max, ranges::schedule_period);
    s.get("eta_min", sc.eta_min);
    s.get("warmup_steps", sc.warmup_steps, ranges::warmup_steps);
    s.get("warmup_start", sc.warmup_start);
    if (sc.unit != "epoch" && sc.unit != "step") s.fail("unit", "must be \"epoch\" or \"step\" (got '" + sc.unit + "')");
    // Each type names the keys it needs; a key another type uses is an error, not silently ignored.
    auto only = [&](std::initializer_list<const char*> used) {
        for (const char* k : {"step_size", "milestones", "gamma", "t_max", "eta_min"}) {
            bool ok = false;
            for (const char* u : used) ok |= std::string(u) == k;
            if (!ok && s.node(k)) s.fail(k, "is not used by a '" + sc.type + "' schedule");
        }
    };
    if (sc.type == "none") {
        only({});
    } else if (sc.type == "step") {
        only({"step_size", "gamma"});
        if (!s.node("step_size")) s.fail("step_size", "is required for a step schedule");
    } else if (sc.type == "multistep") {
        only({"milestones", "gamma"});
        if (sc.milestones.empty()) s.fail("milestones", "must list at least one epoch or step for a multistep schedule");
        for (size_t i = 0; i < sc.milestones.size(); ++i)
            if (i && sc.milestones[i] <= sc.milestones[i - 1]) s.fail("milestones", "must be increasing");
    } else if (sc.type == "exponential") {
        only({"gamma"});
    } else if (sc.type == "cosine") {
        only({"t_max", "eta_min"});
        if (!s.node("t_max")) s.fail("t_max", "is required for a cosine schedule");
        if (!(sc.eta_min >= 0)) s.fail("eta_min", "must be >= 0");
    } else {
        s.fail("type", "must be one of none, step, multistep, exponential, cosine (got '" + sc.type + "')");
    }
    if (!(sc.gamma > 0 && sc.gamma <= 1)) s.fail("gamma", "must be in (0, 1]");
    if (!(sc.warmup_start >= 0 && sc.warmup_start <= 1)) s.fail("warmup_start", "must be in [0, 1]");
}

}  // namespace

RunConfig parse_config(const std::string& text, const std::string& source) {
    check_toml_depth(text, source);  // before toml++, which a deep dotted key crashes
    toml::table root;
    try {
        root = toml::parse(text, source);
    } catch (const toml::parse_error& e) {
        std::ostringstream msg;
        msg << source << ":" << e.source().begin.line << ":" << e.source().begin.column << ": " << e.description();
        throw Error(msg.str());
    }
    RunConfig c;
    c.source = source;
    c.text = text;
    Section top(root, "", source);
    top.allow({"backend", "plugin_path", "threads", "data", "model", "loss", "solver", "train"});
    top.get_list("backend", c.backend);
    if (c.backend.empty()) top.fail("backend", "must name at least one backend");
    top.get_list("plugin_path", c.plugin_path);
    top.get("threads", c.threads, ranges::threads);

    Section data = top.sub("data");
    data.allow({"dir", "resident", "validation", "text", "text_exclude", "seq_len", "sampling", "block_size"});
    data.get("dir", c.data_dir);
    data.get("resident", c.data_resident);
    data.get_list("text", c.text_paths);
    data.get_list("text_exclude", c.text_exclude);
    data.get("seq_len", c.seq_len, ranges::seq_len);
    data.get("sampling", c.sampling);
    data.get("block_size", c.block_size, ranges::block_size);
    if (data.node("text")) {
        if (c.text_paths.empty()) data.fail("text", "must name at least one file or folder");
        if (data.node("dir")) data.fail("text", "cannot be combined with data.dir (text or images, not both)");
        if (c.sampling != "streams" && c.sampling != "windows")
            data.fail("sampling", "must be \"streams\" or \"windows\" (got '" + c.sampling + "')");
        if (c.sampling == "windows") {
            if (!data.node("block_size"))
                data.fail("block_size", "is required with data.sampling = \"windows\": the characters of each window");
            if (data.node("seq_len"))
                data.fail("seq_len", "applies to data.sampling = \"streams\"; windows are data.block_size characters long");
        } else if (data.node("block_size")) {
            data.fail("block_size", "applies to data.sampling = \"windows\"; streams read data.seq_len characters per batch");
        }
    } else {
        for (const char* k : {"text_exclude", "seq_len", "sampling", "block_size"})
            if (data.node(k)) data.fail(k, "applies to text data only (set data.text)");
    }
    if (const toml::node* n = data.node("validation")) {
        if (n->is_integer()) {
            data.get("validation", c.validation_count, ranges::validation_count);
        } else if (n->is_floating_point()) {
            c.validation_fraction = n->as_floating_point()->get();
            if (!(c.validation_fraction >= 0 && c.validation_fraction < 1))
                data.fail("validation", "must be a fraction in [0, 1) or a count >= 0");
        } else {
            data.fail("validation", "must be a fraction in [0, 1) or a count of images");
        }
    } else if (c.is_text()) {
        c.validation_fraction = 0.05;  // the end of the text: char-rnn's held-out share
    }

    if (top.node("model")) {
        if (!layer_table_parser)
            top.sub("model").fail("layers", "cannot be read by this program: it does not link the layer registry (xylem_layers)");
        parse_model(top.sub("model"), layer_table_parser, c);
    }

    Section loss = top.sub("loss");
    loss.allow({"type"});
    loss.get("type", c.loss);
    if (c.loss != "cross_entropy" && c.loss != "nll" && c.loss != "mse")
        loss.fail("type", "must be one of cross_entropy, nll, mse (got '" + c.loss + "')");
    if (c.is_text() && c.loss == "mse")
        loss.fail("type", "is mse, which does not apply to text data: a character model predicts classes (cross_entropy or nll)");

    Section solver = top.sub("solver");
    solver.allow({"type", "lr", "momentum", "dampening", "weight_decay", "nesterov", "beta1", "beta2", "eps", "alpha",
                  "centered", "clip_value", "clip_norm", "no_decay_bias", "schedule"});
    SolverSpec& sv = c.solver;
    solver.get("type", sv.type);
    if (sv.type == "adam" || sv.type == "adamw") sv.lr = 0.001f;
    if (sv.type == "adamw") sv.weight_decay = 0.01f;  // torch.optim.AdamW's defaults
    solver.get("lr", sv.lr);
    solver.get("momentum", sv.momentum);
    solver.get("dampening", sv.dampening);
    solver.get("weight_decay", sv.weight_decay);
    solver.get("nesterov", sv.nesterov);
    solver.get("beta1", sv.beta1);
    solver.get("beta2", sv.beta2);
    solver.get("eps", sv.eps);
    solver.get("alpha", sv.alpha);
    solver.get("centered", sv.centered);
    solver.get("clip_value", sv.clip_value);
    solver.get("clip_norm", sv.clip_norm);
    solver.get("no_decay_bias", sv.no_decay_bias);
    if (sv.type != "sgd" && sv.type != "adam" && sv.type != "adamw" && sv.type != "rmsprop")
        solver.fail("type", "must be one of sgd, adam, adamw, rmsprop (got '" + sv.type + "')");
    if (!(sv.lr > 0)) solver.fail("lr", "must be positive");
    // A key another solver type uses would be silently ignored by this one: name it instead.
    const struct {
        const char* key;
        std::vector<std::string> types;
    } only_for[] = {{"momentum", {"sgd", "rmsprop"}}, {"dampening", {"sgd"}},          {"nesterov", {"sgd"}},
                    {"beta1", {"adam", "adamw"}},       {"beta2", {"adam", "adamw"}},   {"eps", {"adam", "adamw", "rmsprop"}},
                    {"alpha", {"rmsprop"}},             {"centered", {"rmsprop"}}};
    for (const auto& [key, types] : only_for) {
        if (!solver.node(key) || std::find(types.begin(), types.end(), sv.type) != types.end()) continue;
        std::string list;
        for (const std::string& t : types) list += (list.empty() ? "" : ", ") + t;
        solver.fail(key, "applies to solver type " + list + ", not " + sv.type);
    }
    if (sv.type == "rmsprop" && !(sv.alpha >= 0 && sv.alpha < 1)) solver.fail("alpha", "must be in [0, 1)");
    if (solver.node("clip_value") && !(sv.clip_value > 0)) solver.fail("clip_value", "must be positive (> 0)");
    if (solver.node("clip_norm") && !(sv.clip_norm > 0)) solver.fail("clip_norm", "must be positive (> 0)");
    if (sv.clip_value > 0 && sv.clip_norm > 0)
        solver.fail("clip_norm", "cannot be combined with solver.clip_value (choose one way to clip)");
    parse_schedule(solver.sub("schedule"), sv.schedule);

    Section train = top.sub("train");
    train.allow({"epochs", "batch_size", "seed", "print_every", "max_steps", "steps_per_epoch", "out", "init", "capture",
                 "fusion", "checkpoint_every", "on_nonfinite", "best_metric", "test_every_epoch", "early_stopping"});
    train.get("epochs", c.epochs, ranges::epochs);
    train.get("batch_size", c.batch_size, ranges::batch_size);
    train.get("seed", c.seed, ranges::seed);
    train.get("print_every", c.print_every, ranges::print_every);
    train.get("max_steps", c.max_steps, ranges::max_steps);
    train.get("steps_per_epoch", c.steps_per_epoch, ranges::steps_per_epoch);
    train.get("out", c.out_dir);
    train.get("init", c.init);
    if (train.node("init") && c.init.empty()) train.fail("init", "must name a checkpoint file (or leave the key out)");
    train.get("capture", c.capture);
    train.get("fusion", c.fusion);
    train.get("checkpoint_every", c.checkpoint_every, ranges::checkpoint_every);
    train.get("test_every_epoch", c.test_every_epoch);
    train.get("on_nonfinite", c.on_nonfinite);
    train.get("best_metric", c.best_metric);
    if (c.on_nonfinite != "stop" && c.on_nonfinite != "continue")
        train.fail("on_nonfinite", "must be \"stop\" or \"continue\" (got '" + c.on_nonfinite + "')");
    if (!c.best_metric.empty() && c.best_metric != "val_loss" && c.best_metric != "val_accuracy" &&
        c.best_metric != "train_loss")
        train.fail("best_metric", "must be one of val_loss, val_accuracy, train_loss (got '" + c.best_metric + "')");
    const bool has_validation = c.validation_fraction > 0 || c.validation_count > 0;
    if (c.best_metric.rfind("val_", 0) == 0 && !has_validation)
        train.fail("best_metric", "is '" + c.best_metric + "' but there is no validation set (set data.validation)");
    if (c.best_metric.empty()) c.best_metric = has_validation ? "val_loss" : "train_loss";
    if (train.node("early_stopping")) {
        const Section es = train.sub("early_stopping");
        es.allow({"metric", "patience", "min_delta"});
        EarlyStopping& e = c.early_stopping;
        es.get("metric", e.metric);
        es.get("patience", e.patience, ranges::patience);
        es.get("min_delta", e.min_delta);
        if (e.metric.empty()) e.metric = c.best_metric;
        if (e.metric != "val_loss" && e.metric != "val_accuracy" && e.metric != "train_loss")
            es.fail("metric", "must be one of val_loss, val_accuracy, train_loss (got '" + e.metric + "')");
        if (e.metric.rfind("val_", 0) == 0 && !has_validation)
            es.fail("metric", "is '" + e.metric + "' but there is no validation set (set data.validation)");
        if (!(e.min_delta >= 0)) es.fail("min_delta", "must be >= 0");
    }

    if (c.out_dir.empty()) c.out_dir = "runs/" + std::filesystem::path(source).stem().string();
    return c;
}

void set_layer_table_parser(LayerTableParser parser) { layer_table_parser = parser; }

RunConfig load_config(const std::string& path) {
    return parse_config(io::read_regular_file(path, "configs"), path);
}

}  // namespace xylem
