// Argument parsing and the backends / train / eval subcommands.
#include "commands.h"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <iostream>

#include "app/backend_select.h"
#include "app/checkpoint.h"
#include "app/model_builder.h"
#include "app/trainer.h"
#include "xylem/error.h"
#include "xylem/io/idx.h"
#include "xylem/profiler.h"

namespace xylem::cli {
namespace {

int64_t parse_int(const std::string& flag, const std::string& v) {
    try {
        size_t used = 0;
        long long x = std::stoll(v, &used);
        if (used != v.size() || x < 0) throw 0;
        return x;
    } catch (...) {
        throw UsageError{flag + " needs a non-negative integer, got '" + v + "'"};
    }
}

double parse_float(const std::string& flag, const std::string& v) {
    try {
        size_t used = 0;
        double x = std::stod(v, &used);
        if (used != v.size() || !(x > 0)) throw 0;
        return x;
    } catch (...) {
        throw UsageError{flag + " needs a positive number, got '" + v + "'"};
    }
}

RunConfig config_with_flags(const Args& a) {
    if (a.config.empty()) throw UsageError{a.command + " needs --config FILE"};
    RunConfig c = load_config(a.config);
    if (a.epochs >= 0) c.epochs = a.epochs;
    if (a.batch_size > 0) c.batch_size = a.batch_size;
    if (a.batch_size == 0) throw UsageError{"--batch-size must be positive"};
    if (a.lr > 0) c.solver.lr = static_cast<float>(a.lr);
    if (a.seed >= 0) c.seed = static_cast<uint64_t>(a.seed);
    if (a.max_steps >= 0) c.max_steps = a.max_steps;
    if (!a.out.empty()) c.out_dir = a.out;
    return c;
}

}  // namespace

const char* usage() {
    return "usage:\n"
           "  xylem backends [--plugin-path DIR]\n"
           "  xylem train --config FILE [--backend NAME] [--epochs N] [--batch-size N] [--lr X] [--seed N]\n"
           "              [--max-steps N] [--out DIR] [--profile] [--plugin-path DIR]\n"
           "  xylem eval --config FILE --checkpoint FILE [--backend NAME] [--profile] [--plugin-path DIR]\n"
           "backend choice: --backend, else XYLEM_BACKEND, else the config's backend list.\n"
           "plugin folders: --plugin-path, XYLEM_PLUGIN_PATH, the config's plugin_path, the installed plugins.\n";
}

Args parse_args(int argc, char** argv) {
    Args a;
    if (argc < 2) throw UsageError{"missing command"};
    a.command = argv[1];
    if (a.command == "--help" || a.command == "-h") a.command = "help";
    for (int i = 2; i < argc; ++i) {
        std::string f = argv[i];
        auto value = [&]() -> std::string {
            if (i + 1 >= argc) throw UsageError{f + " needs a value"};
            return argv[++i];
        };
        if (f == "--config") a.config = value();
        else if (f == "--checkpoint") a.checkpoint = value();
        else if (f == "--backend") a.backend = value();
        else if (f == "--out") a.out = value();
        else if (f == "--plugin-path") a.plugin_dirs.push_back(value());
        else if (f == "--epochs") a.epochs = static_cast<int>(parse_int(f, value()));
        else if (f == "--batch-size") a.batch_size = static_cast<int>(parse_int(f, value()));
        else if (f == "--max-steps") a.max_steps = parse_int(f, value());
        else if (f == "--seed") a.seed = parse_int(f, value());
        else if (f == "--lr") a.lr = parse_float(f, value());
        else if (f == "--profile") a.profile = true;
        else throw UsageError{"unknown option '" + f + "'"};
    }
    return a;
}

int run_backends(const Args& a) {
    Registry registry;
    // Each file is loaded and probed in a child process: a plugin that crashes is listed, not fatal.
    registry.scan(Registry::search_path(a.plugin_dirs, {}), Isolation::child);
    if (registry.plugins().empty()) {
        std::cout << "no plugin files found in the search path\n";
        return 1;
    }
    std::printf("%-10s %-8s %-5s %-12s %s\n", "name", "version", "abi", "status", "path");
    for (const PluginRecord& r : registry.plugins()) {
        std::printf("%-10s %-8s %-5s %-12s %s\n", r.name.empty() ? "-" : r.name.c_str(),
                    r.version.empty() ? "-" : r.version.c_str(), r.abi.empty() ? "-" : r.abi.c_str(),
                    r.available ? "available" : "unavailable", r.path.c_str());
        if (!r.available) std::printf("    reason: %s\n", r.reason.c_str());
        if (r.loaded && r.probe.detail[0]) std::printf("    %s\n", r.probe.detail);
        for (uint32_t d = 0; d < r.probe.device_count; ++d) {
            const xylem_device_info& dev = r.probe.devices[d];
            std::printf("    device %u: %s, %u compute units, %.1f GiB%s%s\n", d, dev.name, dev.compute_units,
                        static_cast<double>(dev.memory_bytes) / (1024.0 * 1024 * 1024), dev.detail[0] ? ", " : "",
                        dev.detail);
        }
    }
    return 0;
}

int run_train(const Args& a) {
    RunConfig c = config_with_flags(a);
    Registry registry;
    auto backend = app::select_backend(registry, c, a.backend, a.plugin_dirs);
    auto dev = backend->device(0);
    app::TrainResult r = app::train(c, *dev, std::cout, {a.profile, true});
    const app::EpochMetrics& last = r.epochs.back();
    std::printf("test accuracy %.2f%% after %d epoch(s)\ncheckpoint: %s\nmetrics: %s\nlog: %s\n",
                100 * last.test_accuracy, last.epoch, r.checkpoint_path.c_str(), r.metrics_path.c_str(),
                r.log_path.c_str());
    return 0;
}

int run_eval(const Args& a) {
    if (a.checkpoint.empty()) throw UsageError{"eval needs --checkpoint FILE"};
    RunConfig c = config_with_flags(a);
    Registry registry;
    auto backend = app::select_backend(registry, c, a.backend, a.plugin_dirs);
    auto dev = backend->device(0);
    io::Dataset test = io::load_mnist_dir(c.data_dir, false);
    auto model = app::build_model(c);
    model->build(*dev, {1, test.rows, test.cols}, c.seed);
    app::load_checkpoint(a.checkpoint, *model);
    profiler::enable(a.profile);  // per op kind and per layer; syncs after every op while on
    const auto t0 = std::chrono::steady_clock::now();
    const double acc = app::evaluate(*model, *dev, test);  // ends with a device read: the time is complete
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    profiler::enable(false);
    std::printf("test accuracy %.2f%% (%lld images, backend %s, %.3f s, %.0f images/s at batch 1000)\n", 100 * acc,
                static_cast<long long>(test.count), backend->name().c_str(), seconds,
                static_cast<double>(test.count) / seconds);
    if (a.profile) profiler::print(std::cout);
    return 0;
}

}  // namespace xylem::cli
