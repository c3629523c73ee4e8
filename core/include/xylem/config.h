// Run configuration: the TOML file's schema, parsed strictly (an unknown key or a wrong type
// is an Error naming the key). Environment variables and CLI flags override it later.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "xylem/shape.h"

namespace xylem {

struct LayerSpec {
    std::string type;        // linear, conv2d, maxpool2d, avgpool2d, batchnorm, relu, sigmoid, tanh,
                             // softmax, log_softmax, flatten, reshape, dropout
    int64_t out = 0;         // linear, conv2d: output features / channels
    bool bias = true;        // linear, conv2d
    float p = 0.5f;          // dropout
    Shape shape;             // reshape (per sample, one -1 allowed)
    int32_t kernel_h = 0, kernel_w = 0;          // conv2d, pools (`kernel = 5` or `[5, 3]`)
    int32_t stride = 0, padding = 0, dilation = 1, groups = 1;  // stride 0: 1 for conv, the kernel for pools
    bool count_include_pad = true;               // avgpool2d
    float eps = 1e-5f, momentum = 0.1f;          // batchnorm
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
};

struct RunConfig {
    std::string source;  // file the config came from
    std::string text;    // its TOML text (a training checkpoint keeps it, so a run resumes with it)
    std::vector<std::string> backend{"cuda", "opencl", "native"};  // preference order
    std::vector<std::string> plugin_path;
    int threads = 0;     // native backend threads; 0 = one per core

    std::string data_dir = "/usr/share/datasets/fashion-mnist";
    bool data_resident = false;  // data.resident: upload the whole dataset once, gather batches on the device
    // data.validation: held out of the training set (seeded), evaluated every epoch. A fraction in
    // (0, 1) or a count of images; 0 = none.
    double validation_fraction = 0;
    int64_t validation_count = 0;

    std::vector<LayerSpec> layers;
    std::string loss = "cross_entropy";
    SolverSpec solver;

    int epochs = 1;
    int batch_size = 64;
    uint64_t seed = 1;
    int print_every = 100;   // steps between progress lines (the only loss reads)
    int64_t max_steps = 0;   // stop an epoch after this many steps; 0 = the whole epoch
    std::string out_dir;     // default: runs/<config file stem>
    bool capture = false;    // train.capture: record one training step (ABI 1.2 capture), replay it per step
    int64_t checkpoint_every = 0;  // train.checkpoint_every: steps between resumable checkpoints; 0 = epoch ends only
    std::string on_nonfinite = "stop";  // train.on_nonfinite: "stop" or "continue" when the loss is NaN or inf
    // train.best_metric: "val_loss", "val_accuracy" or "train_loss"; "" = val_loss with a validation
    // set, else train_loss.
    std::string best_metric;
};

RunConfig load_config(const std::string& path);
RunConfig parse_config(const std::string& text, const std::string& source);

}  // namespace xylem
