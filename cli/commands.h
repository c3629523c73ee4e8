// The `xylem` subcommands, their flags and their help texts.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "xylem/config.h"
#include "xylem/io/idx.h"
#include "xylem/layers/net.h"
#include "xylem/registry.h"

namespace xylem::cli {

struct Args {
    std::string command;
    std::vector<std::string> operands;  // words that are not flags: plot's RUN_DIR, help's COMMAND
    bool help = false;                  // COMMAND --help (or -h)
    std::string config, checkpoint, backend, out, input;
    std::vector<std::string> inputs;  // every --input, in order (`run` takes one per model input; `input` is the first)
    std::string init;  // train --init FILE: train.init
    std::vector<std::string> plugin_dirs;
    std::optional<int> epochs, batch_size, top;  // set: the flag was given (and is in its range)
    std::optional<int64_t> max_steps;
    std::optional<double> lr, temperature;
    std::optional<uint64_t> seed;
    std::optional<std::string> prime;  // sample's --prime TEXT
    std::optional<int64_t> length;     // sample's --length N
    std::optional<int64_t> top_k;      // sample's --top-k K
    bool profile = false;
    bool trust_config_plugins = false;  // --trust-config-plugins: search the config's plugin_path
    bool accept_changed_data = false;   // train --accept-changed-data: resume on data whose fingerprint changed
    bool resume = false;     // --resume [RUN_DIR]
    std::string resume_dir;  // "" = the config's out dir
};

// The backend eval, predict and sample run on (train::select_backend with the command's flags);
// the notes about the search (a config's plugin_path left out) go to stderr, as train's banner
// prints them.
BackendChoice choose_backend(Registry& registry, const RunConfig& config, const Args& args);

// eval's and predict's model (predict.cpp): built for the samples of `data` (io::Dataset::sample_shape,
// any channel count) to run in the batch train::run_batch picks for the device (set in `batch`),
// and the checkpoint loaded into it. When the images do not fit (a layer refuses the shape, or the
// checkpoint's tensors differ), the Error names `what` (the images' file or set), their sample
// shape and the config, then the layer's or the checkpoint's own message, which names the layer
// or tensor and its shapes.
std::unique_ptr<Net> load_image_model(const RunConfig& c, const std::string& checkpoint, Device& dev,
                                      const io::Dataset& data, const std::string& what, int64_t& batch);

// Parses argv against the command's own flags (help.cpp lists them); throws UsageError on an
// unknown command, a flag the command does not take, a missing value or one out of range.
Args parse_args(int argc, char** argv);
struct UsageError {
    UsageError(std::string message_, std::string command_ = "")
        : message(std::move(message_)), command(std::move(command_)) {}
    std::string message;
    std::string command;  // the command it concerns, if known: its usage line follows the message
};

// The command table (help.cpp): each command's usage line, summary, flags and notes, held once.
bool is_command(const std::string& name);
bool takes_flag(const std::string& command, const std::string& flag);
bool is_flag(const std::string& flag);  // some command takes it
int max_operands(const std::string& command);
std::string command_help(const std::string& command);  // `xylem help COMMAND`, `xylem COMMAND --help`
std::string usage_lines(const std::string& command);    // its usage line(s), after a usage error
std::string overview();                                  // `xylem help`
std::string version_text();                              // `xylem --version`

int run_help(const Args& args);
int run_version(const Args& args);
int run_backends(const Args& args);
int run_train(const Args& args);
int run_eval(const Args& args);
int run_predict(const Args& args);  // predict.cpp
int run_sample(const Args& args);   // sample.cpp
int run_plot(const Args& args);     // plot.cpp
int run_onnx_run(const Args& args);  // onnx.cpp: xylem run MODEL.onnx
int run_import(const Args& args);    // onnx.cpp: xylem import MODEL.onnx
int run_export(const Args& args);    // export.cpp: xylem export --config C --checkpoint K --out M.onnx

}  // namespace xylem::cli
