// Run configuration: the TOML file's schema, parsed strictly (an unknown key or a wrong type
// is an Error naming the key). Environment variables and CLI flags override it later.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "xylem/config_section.h"
#include "xylem/shape.h"

namespace xylem {

// The ranges of the core's integer keys (IntRange: config_section.h). A layer's keys and their
// ranges belong to the layer (layers/include/xylem/layers/registry.h).
namespace ranges {
inline constexpr int64_t kInt32Max = 2147483647;
inline constexpr IntRange threads{0, 1024};  // 0: chosen from the CPU count
inline constexpr IntRange epochs{1, kInt32Max};
inline constexpr IntRange batch_size{1, kInt32Max};
inline constexpr IntRange print_every{1, kInt32Max};
inline constexpr IntRange max_steps{0, INT64_MAX};         // 0: no limit over the run
inline constexpr IntRange steps_per_epoch{0, INT64_MAX};   // 0: the whole epoch
inline constexpr IntRange patience{1, kInt32Max};          // early stopping
inline constexpr IntRange schedule_period{1, INT64_MAX};   // step_size, milestones, t_max
inline constexpr IntRange warmup_steps{0, INT64_MAX};
inline constexpr IntRange validation_count{0, INT64_MAX};  // images (text: characters) held out, or a fraction as a float
inline constexpr IntRange seq_len{1, kInt32Max};            // text: time steps per batch
inline constexpr IntRange block_size{1, kInt32Max};         // text windows: characters per window
inline constexpr IntRange checkpoint_every{0, INT64_MAX};  // 0: at epoch ends only
inline constexpr IntRange seed{0, INT64_MAX};              // as a TOML integer; the --seed flag takes any uint64
}  // namespace ranges

// The options of one layer, as its own type's reader parsed them (layers/registry.h); the core
// never looks inside, so adding a layer type changes nothing here.
struct LayerOptions {
    virtual ~LayerOptions() = default;
};

// One layer of the model as the config describes it: its type, its parsed options, and where it
// sits in the model graph. parse_config resolves every name (blocks expanded, defaults filled in),
// so `name` and `inputs` are complete (layers/include/xylem/layers/net.h).
struct LayerSpec {
    std::string type;  // a registered layer type: linear, conv2d, relu, ...
    std::shared_ptr<const LayerOptions> options;
    std::string name;                 // "3" (its place in model.layers) or "layer2.0.conv1"
    std::vector<std::string> inputs;  // the layers it reads; "input" is the model's input
    std::string shares;               // a layer whose parameters it uses (a tied weight); "" for its own
};

// The keys every [[model.layers]] table (and every layer of a [model.blocks] block) may hold
// besides `type` and its type's own: how it is wired into the model graph (docs/training.md).
inline const std::vector<std::string>& layer_wiring_keys() {
    static const std::vector<std::string> keys{"name", "inputs", "shares", "enabled"};
    return keys;
}

// [solver.schedule]: the learning rate as a closed form of the epoch or step, computed on the host
// and passed to the update ops by value. t = epochs done (unit "epoch") or steps done ("step").
struct ScheduleSpec {
    std::string type = "none";   // none, step, multistep, exponential, cosine
    std::string unit = "epoch";  // what t counts
    int64_t step_size = 0;       // step: lr * gamma^floor(t / step_size)
    std::vector<int64_t> milestones;  // multistep: lr * gamma^(milestones <= t)
    double gamma = 0.1;          // step, multistep, exponential (lr * gamma^t)
    int64_t t_max = 0;           // cosine: eta_min + (lr - eta_min) * (1 + cos(pi * min(t, t_max) / t_max)) / 2
    double eta_min = 0;
    // Linear warm-up over the first warmup_steps steps, on top of any type: the rate is multiplied
    // by warmup_start + (1 - warmup_start) * s / warmup_steps after s steps (s < warmup_steps).
    int64_t warmup_steps = 0;
    double warmup_start = 0;
    bool active() const { return type != "none" || warmup_steps > 0; }
};

struct SolverSpec {
    std::string type = "sgd";  // sgd, adam, adamw, rmsprop
    float lr = 0.01f, momentum = 0.0f, dampening = 0.0f, weight_decay = 0.0f;  // adamw: weight_decay 0.01
    bool nesterov = false;
    float beta1 = 0.9f, beta2 = 0.999f, eps = 1e-8f;
    float alpha = 0.99f;        // rmsprop: smoothing constant of square_avg
    bool centered = false;      // rmsprop: divide by the centred second moment
    float clip_value = 0.0f;    // > 0: clamp every gradient element to [-clip_value, clip_value]
    float clip_norm = 0.0f;     // > 0: scale all gradients so their global L2 norm is at most clip_norm
    bool no_decay_bias = false; // no weight decay on parameters of rank <= 1 (biases, batch-norm weight/bias)
    ScheduleSpec schedule;
};

// [train] early_stopping = { metric = "val_loss", patience = 3, min_delta = 0 }: stop when the
// metric has not improved by more than min_delta for `patience` epochs. patience 0 = off.
struct EarlyStopping {
    std::string metric;  // as train.best_metric; "" = the same as train.best_metric
    int64_t patience = 0;
    double min_delta = 0;
};

struct RunConfig {
    std::string source;  // file the config came from
    std::string text;    // its TOML text (a training checkpoint keeps it, so a run resumes with it)
    std::vector<std::string> backend{"auto"};  // preference order; "auto" ranks the devices (Registry::auto_pick)
    std::vector<std::string> plugin_path;
    int threads = 0;     // CPUs the native backend uses (XYLEM_NUM_THREADS when unset there); 0 = every CPU it may run on

    std::string data_dir = "/usr/share/datasets/fashion-mnist";
    bool data_resident = false;  // data.resident: upload the whole dataset once, gather batches on the device
    // data.validation: held out of the training set (seeded), evaluated every epoch. A fraction in
    // (0, 1) or a count of images; 0 = none.
    double validation_fraction = 0;
    int64_t validation_count = 0;
    // data.text: text files and folders (each folder's files in sorted name order, not recursive,
    // less those whose name matches a data.text_exclude pattern) read as bytes and concatenated: a
    // character-level language-model corpus instead of data.dir's images (train/include/xylem/train/text_data.h).
    // data.validation then holds out the text's end (default 0.05 of it).
    std::vector<std::string> text_paths, text_exclude;
    int64_t seq_len = 50;  // data.seq_len: characters (time steps) per training sequence
    // data.sampling: "streams" (char-rnn's contiguous streams of seq_len, in order) or "windows"
    // (nanoGPT's: every offset of the text starts a window of data.block_size characters, drawn at
    // random without replacement each epoch). block_size: required with windows, refused otherwise.
    std::string sampling = "streams";
    int64_t block_size = 0;
    bool is_text() const { return !text_paths.empty(); }
    bool windows() const { return is_text() && sampling == "windows"; }

    std::vector<LayerSpec> layers;  // [model]: every layer, blocks expanded, in the order written
    // model.inputs: the model's input names, in the order they are fed (empty: one, "input"; an
    // imported ONNX graph of several inputs names them); model.outputs: the layers whose outputs
    // the model gives, in order (empty: the last layer).
    std::vector<std::string> model_inputs, model_outputs;
    // The most of either a model may name (configs, Net, the ONNX importer): a hostile file's
    // list stays small enough to check for repeats.
    static constexpr size_t kMaxModelInputs = 256;
    std::string loss = "cross_entropy";
    SolverSpec solver;

    int epochs = 1;
    int batch_size = 64;
    uint64_t seed = 1;
    int print_every = 100;   // steps between progress lines (the only loss reads)
    int64_t max_steps = 0;   // train.max_steps: steps over the whole run, then stop; 0 = no limit
    int64_t steps_per_epoch = 0;  // train.steps_per_epoch: end each epoch after this many steps; 0 = all
    bool test_every_epoch = false;  // train.test_every_epoch: evaluate the test set every epoch, not only at the end
    EarlyStopping early_stopping;
    std::string out_dir;     // default: runs/<config file stem>
    // train.init: a checkpoint (safetensors) whose tensors start a new run instead of the seeded
    // initialisation: fine-tuning an imported or earlier model. Every parameter and buffer of the
    // model must be in it with its shape; a resumed run ignores it (its checkpoint holds the state).
    std::string init;
    bool fusion = true;      // train.fusion: run chains of elementwise ops as fused programs (XYLEM_FUSION overrides)
    bool capture = false;    // train.capture: record one training step (ABI 1.2 capture), replay it per step
    int64_t checkpoint_every = 0;  // train.checkpoint_every: steps between resumable checkpoints; 0 = epoch ends only
    std::string on_nonfinite = "stop";  // train.on_nonfinite: "stop" or "continue" when the loss is NaN or inf
    // train.best_metric: "val_loss", "val_accuracy" or "train_loss"; "" = val_loss with a validation
    // set, else train_loss.
    std::string best_metric;
};

RunConfig load_config(const std::string& path);
RunConfig parse_config(const std::string& text, const std::string& source);

// How parse_config reads each [[model.layers]] table into a LayerSpec: every key of a layer
// belongs to its type, so the core hands the table to the layer registry, which installs itself
// here when xylem_layers is linked (layers/registry.cpp; the library is always linked whole, so
// every program that links it, tests and fuzz targets included, validates layers at config
// load). A program without it refuses any config that has layers, saying so.
using LayerTableParser = LayerSpec (*)(const ConfigSection& table);
void set_layer_table_parser(LayerTableParser parser);

}  // namespace xylem
