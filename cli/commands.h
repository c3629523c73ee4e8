// The `xylem` subcommands.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace xylem::cli {

struct Args {
    std::string command;
    std::string config, checkpoint, backend, out;
    std::vector<std::string> plugin_dirs;
    std::optional<int> epochs, batch_size;  // set: the flag was given (and is in its range)
    std::optional<int64_t> max_steps;
    std::optional<double> lr;
    std::optional<uint64_t> seed;
    bool profile = false;
    bool resume = false;     // --resume [RUN_DIR]
    std::string resume_dir;  // "" = the config's out dir
};

// Parses argv; throws UsageError on a bad flag.
Args parse_args(int argc, char** argv);
struct UsageError {
    std::string message;
};
const char* usage();

int run_backends(const Args& args);
int run_train(const Args& args);
int run_eval(const Args& args);

}  // namespace xylem::cli
