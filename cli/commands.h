// The `xylem` subcommands.
#pragma once

#include <string>
#include <vector>

namespace xylem::cli {

struct Args {
    std::string command;
    std::string config, checkpoint, backend, out;
    std::vector<std::string> plugin_dirs;
    int epochs = -1, batch_size = -1;
    int64_t max_steps = -1;
    double lr = -1;
    int64_t seed = -1;
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
