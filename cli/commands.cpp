// Argument parsing and the backends / train / eval subcommands.
#include "commands.h"

#include <signal.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cfloat>
#include <cmath>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <utility>

#include "xylem/train/backend_select.h"
#include "xylem/train/checkpoint.h"
#include "xylem/train/data_parallel.h"
#include "xylem/train/distributed.h"
#include "xylem/train/interrupt.h"
#include "xylem/train/run_folder.h"
#include "xylem/train/evaluate.h"
#include "xylem/train/model_builder.h"
#include "xylem/train/run_data.h"
#include "xylem/train/run.h"
#include "xylem/error.h"
#include "xylem/io/idx.h"
#include "xylem/profiler.h"
#include "failure.h"

namespace xylem::cli {
namespace {
namespace fs = std::filesystem;

// The one rule for integer flags: a whole decimal number within the flag's range, else a usage
// error naming the flag and the range (never a value that wraps: --epochs 4294967296 ran 0 epochs).
template <class T> T parse_int(const std::string& flag, const std::string& v, T lo, T hi) {
    const char *first = v.data(), *last = v.data() + v.size();
    bool parsed = false, fits = false;
    T x{};
    if (!v.empty() && v[0] == '-') {  // through int64, so "-1" is out of an unsigned range, not 2^64 - 1
        int64_t n = 0;
        const auto [end, ec] = std::from_chars(first, last, n);
        parsed = end == last && (ec == std::errc{} || ec == std::errc::result_out_of_range);
        fits = ec == std::errc{} && std::in_range<T>(n) && std::cmp_greater_equal(n, lo) && std::cmp_less_equal(n, hi);
        x = static_cast<T>(n);
    } else {
        uint64_t n = 0;
        const auto [end, ec] = std::from_chars(first, last, n);
        parsed = !v.empty() && end == last && (ec == std::errc{} || ec == std::errc::result_out_of_range);
        fits = ec == std::errc{} && std::in_range<T>(n) && std::cmp_greater_equal(n, lo) && std::cmp_less_equal(n, hi);
        x = static_cast<T>(n);
    }
    if (!parsed) throw UsageError{flag + " needs an integer, got '" + v + "'"};
    if (!fits)
        throw UsageError{flag + " must be in [" + std::to_string(lo) + ", " + std::to_string(hi) + "], got " + v};
    return x;
}

template <class T> T parse_int(const std::string& flag, const std::string& v, IntRange range) {
    return parse_int<T>(flag, v, static_cast<T>(range.lo), static_cast<T>(range.hi));
}

// The one rule for number flags: a decimal number within [lo, hi], else a usage error naming the
// flag and the range (1e-320 is positive, but no float: "not positive" did not say why).
double parse_float(const std::string& flag, const std::string& v, double lo, double hi) {
    char* end = nullptr;
    const double x = v.empty() || std::isspace(static_cast<unsigned char>(v[0])) ? NAN : std::strtod(v.c_str(), &end);
    if (std::isnan(x) || !end || *end) throw UsageError{flag + " needs a number, got '" + v + "'"};
    if (!(x >= lo && x <= hi)) {
        char range[96];
        std::snprintf(range, sizeof range, "[%g, %g]", lo, hi);
        throw UsageError{flag + " must be in " + range + ", got " + v};
    }
    return x;
}

// The config keys the command line set, by key: what a run applies over its config, and what its
// checkpoints keep so that a resume applies them again.
nlohmann::json flag_overrides(const Args& a) {
    nlohmann::json o = nlohmann::json::object();
    if (a.epochs) o["train.epochs"] = *a.epochs;  // each flag was range-checked by parse_args
    if (a.batch_size) o["train.batch_size"] = *a.batch_size;
    if (a.lr) o["solver.lr"] = *a.lr;
    if (a.seed) o["train.seed"] = *a.seed;
    if (a.max_steps) o["train.max_steps"] = *a.max_steps;
    return o;
}

// Flags come range-checked from parse_args; overrides read back from a checkpoint are checked
// here again, against the same ranges, since the file may have been edited.
void apply_overrides(RunConfig& c, const nlohmann::json& o) {
    auto integer = [&](const std::string& key, const nlohmann::json& v, IntRange r) {
        if (!v.is_number_integer() || v.get<int64_t>() < r.lo || v.get<int64_t>() > r.hi)
            throw Error("override '" + key + "' must be an integer in [" + std::to_string(r.lo) + ", " +
                        std::to_string(r.hi) + "], got " + v.dump());
        return v.get<int64_t>();
    };
    for (const auto& [key, v] : o.items()) {
        if (key == "train.epochs") c.epochs = static_cast<int>(integer(key, v, ranges::epochs));
        else if (key == "train.batch_size") c.batch_size = static_cast<int>(integer(key, v, ranges::batch_size));
        else if (key == "train.max_steps") c.max_steps = integer(key, v, ranges::max_steps);
        else if (key == "train.seed" && v.is_number_unsigned()) c.seed = v.get<uint64_t>();
        else if (key == "solver.lr" && v.is_number() && std::isfinite(v.get<double>()) && v.get<double>() > 0)
            c.solver.lr = v.get<float>();
        else throw Error("override '" + key + "' is unknown or has a bad value " + v.dump());
    }
}

RunConfig config_with_flags(const Args& a) {
    if (a.config.empty()) throw UsageError{a.command + " needs --config FILE"};
    RunConfig c = load_config(a.config);
    apply_overrides(c, flag_overrides(a));
    if (!a.out.empty()) c.out_dir = a.out;
    if (!a.init.empty()) c.init = a.init;
    return c;
}

// "conv2d 'layer1.0.conv1' <- [stem.relu]", plus " sharing 'x'" for a tied weight.
std::string layer_wiring(const LayerSpec& l) {
    std::string s = l.type + " '" + l.name + "' <- [";
    for (size_t i = 0; i < l.inputs.size(); ++i) s += (i ? ", " : "") + l.inputs[i];
    s += "]";
    if (!l.shares.empty()) s += " sharing '" + l.shares + "'";
    return s;
}

// What a resumed run may not change, since its checkpoint's order, solver state and position
// depend on it: "" when `now` can continue `was`, else the first key that differs. (The epoch
// count and train.max_steps are totals: a resume may raise them.)
std::string resume_conflict(const RunConfig& was, const RunConfig& now) {
    auto differs = [](const std::string& key, const auto& a, const auto& b) {
        std::ostringstream s;
        if (a != b) s << "key '" << key << "' was " << a << " in the run being resumed and is " << b << " now";
        return s.str();
    };
    std::string why;
    auto check = [&](const std::string& key, const auto& a, const auto& b) {
        if (why.empty()) why = differs(key, a, b);
    };
    check("train.batch_size", was.batch_size, now.batch_size);
    check("train.seed", was.seed, now.seed);
    check("train.steps_per_epoch", was.steps_per_epoch, now.steps_per_epoch);
    check("data.seq_len", was.seq_len, now.seq_len);  // text: the stream layout
    check("data.sampling", was.sampling, now.sampling);  // text: streams or windows, and the windows' size
    check("data.block_size", was.block_size, now.block_size);
    check("data.validation", was.validation_fraction + static_cast<double>(was.validation_count),
          now.validation_fraction + static_cast<double>(now.validation_count));
    check("loss.type", was.loss, now.loss);
    check("solver.type", was.solver.type, now.solver.type);
    // The graph: each layer's type, name (its parameters' names in the checkpoint), inputs and tied weight.
    for (size_t i = 0; why.empty() && i < std::max(was.layers.size(), now.layers.size()); ++i) {
        const std::string a = i < was.layers.size() ? layer_wiring(was.layers[i]) : "no layer",
                          b = i < now.layers.size() ? layer_wiring(now.layers[i]) : "no layer";
        if (a != b)
            why = "key 'model.layers' differs at layer " + std::to_string(i) + ": it was " + a +
                  " in the run being resumed and is " + b + " now";
    }
    return why;
}

std::string shell_quoted(const std::string& s) {
    if (s.find_first_of(" \t'\"$\\") == std::string::npos && !s.empty()) return s;
    std::string q = "'";
    for (char ch : s) q += ch == '\'' ? std::string("'\\''") : std::string(1, ch);
    return q + "'";
}

void parse_flags(Args& a, int argc, char** argv) {
    for (int i = 2; i < argc; ++i) {
        std::string f = argv[i];
        if (f.empty() || f[0] != '-') {
            if (static_cast<int>(a.operands.size()) >= max_operands(a.command))
                throw UsageError{"unexpected argument '" + f + "'", a.command};
            a.operands.push_back(f);
            continue;
        }
        if (!takes_flag(a.command, f))
            throw UsageError{is_flag(f) ? a.command + " does not take " + f : "unknown option '" + f + "'", a.command};
        auto value = [&]() -> std::string {
            if (i + 1 >= argc) throw UsageError{f + " needs a value", a.command};
            return argv[++i];
        };
        if (f == "--config") a.config = value();
        else if (f == "--checkpoint") a.checkpoint = value();
        else if (f == "--backend") a.backend = value();
        else if (f == "--out") a.out = value();
        else if (f == "--init") a.init = value();
        else if (f == "--input") {
            a.inputs.push_back(value());
            if (a.inputs.size() > 1 && a.command != "run")
                throw UsageError{"--input is given twice; " + a.command + " reads one input file", a.command};
            a.input = a.inputs[0];
        }
        else if (f == "--plugin-path") a.plugin_dirs.push_back(value());
        else if (f == "--epochs") a.epochs = parse_int<int>(f, value(), ranges::epochs);
        else if (f == "--batch-size") a.batch_size = parse_int<int>(f, value(), ranges::batch_size);
        else if (f == "--max-steps") a.max_steps = parse_int<int64_t>(f, value(), ranges::max_steps);
        else if (f == "--seed") a.seed = parse_int<uint64_t>(f, value(), 0, UINT64_MAX);
        else if (f == "--top") a.top = parse_int<int>(f, value(), IntRange{1, ranges::kInt32Max});
        else if (f == "--lr") a.lr = parse_float(f, value(), FLT_MIN, FLT_MAX);  // a normal float: the solver's lr
        else if (f == "--temperature") a.temperature = parse_float(f, value(), 1e-6, 1e6);  // at 1e-6 sampling is argmax
        else if (f == "--prime") a.prime = value();
        else if (f == "--length") a.length = parse_int<int64_t>(f, value(), IntRange{0, ranges::kInt32Max});
        else if (f == "--top-k") a.top_k = parse_int<int64_t>(f, value(), IntRange{1, ranges::kInt32Max});
        else if (f == "--profile") a.profile = true;
        else if (f == "--trust-config-plugins") a.trust_config_plugins = true;
        else if (f == "--accept-changed-data") a.accept_changed_data = true;
        else if (f == "--resume") {
            a.resume = true;
            if (i + 1 < argc && argv[i + 1][0] != '-') a.resume_dir = argv[++i];
        }
        else throw UsageError{"unknown option '" + f + "'", a.command};  // in the table, not parsed here: a bug
    }
}

}  // namespace

Args parse_args(int argc, char** argv) {
    Args a;
    if (argc < 2) throw UsageError{"missing command", ""};
    a.command = argv[1];
    if (a.command == "--help" || a.command == "-h") a.command = "help";
    if (a.command == "--version") a.command = "version";
    if (!is_command(a.command)) throw UsageError{"unknown command '" + a.command + "'", ""};
    // COMMAND --help wins over everything else on the line, even a bad flag.
    for (int i = 2; i < argc; ++i)
        if (std::string(argv[i]) == "--help" || std::string(argv[i]) == "-h") {
            a.help = true;
            return a;
        }
    try {
        parse_flags(a, argc, argv);
    } catch (UsageError& e) {  // the value checks do not know the command; its usage line follows
        if (e.command.empty()) e.command = a.command;
        throw;
    }
    if (a.command == "help" && !a.operands.empty() && !is_command(a.operands[0]))
        throw UsageError{"unknown command '" + a.operands[0] + "'"};  // no command's usage: the list of them
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
    const AutoPick pick = registry.auto_pick();
    std::printf("%-10s %-8s %-5s %-12s %s\n", "name", "version", "abi", "status", "path");
    for (const PluginRecord& r : registry.plugins()) {
        std::printf("%-10s %-8s %-5s %-12s %s\n", r.name.empty() ? "-" : r.name.c_str(),
                    r.version.empty() ? "-" : r.version.c_str(), r.abi.empty() ? "-" : r.abi.c_str(),
                    r.available ? "available" : "unavailable", r.path.c_str());
        if (!r.available) std::printf("    reason: %s\n", r.reason.c_str());
        if (r.loaded && r.probe.detail[0]) std::printf("    %s\n", r.probe.detail);
        for (uint32_t d = 0; d < r.probe.device_count; ++d) {
            const xylem_device_info& dev = r.probe.devices[d];
            std::printf("    device %u: %s (%s), %u compute units, %.1f GiB%s%s%s\n", d, dev.name,
                        device_kind_name(r.device_kind(d)),
                        dev.compute_units, static_cast<double>(dev.memory_bytes) / (1024.0 * 1024 * 1024),
                        dev.detail[0] ? ", " : "", dev.detail,
                        pick.record == &r && pick.device == d ? "  <- auto picks this device" : "");
        }
    }
    // What `backend = "auto"` would run on, and why each other available backend lost (the
    // unavailable ones show their reasons above).
    if (!pick.record) {
        std::printf("\nauto: no available device\n");
        return 0;
    }
    std::printf("\n%s\n", pick.why.c_str());
    for (const Skipped& k : pick.skipped)
        if (k.available) std::printf("  passed over %s\n", k.text().c_str());
    return 0;
}

namespace {

// `xylem train`, alone or as one rank of `mpirun -np N xylem train` (`launch`). A rank joins the
// others (`ranks`) once its backend is chosen: plugins are probed in forked children, which must
// happen before MPI starts. Only rank 0 prints and writes files.
int train_run(const Args& a, const train::Launch& launch, std::unique_ptr<train::Collectives>& ranks) {
    RunConfig c;
    train::RunOptions options;
    options.profile = a.profile;
    options.overrides = flag_overrides(a);
    options.accept_changed_data = a.accept_changed_data;
    if (a.accept_changed_data && !a.resume) throw UsageError{"--accept-changed-data applies to --resume"};
    if (!a.init.empty() && a.resume)
        throw UsageError{"--init starts a new run from a checkpoint's weights; a resumed run continues from its own"};
    if (a.trust_config_plugins && a.config.empty())  // a checkpoint's embedded config never names plugin folders
        throw UsageError{"--trust-config-plugins applies to a --config file you trust, not to a checkpoint's config"};
    if (a.resume) {
        if (a.resume_dir.empty() && a.config.empty())
            throw UsageError{"--resume needs a run folder (--resume RUN_DIR), or --config FILE whose out dir holds the run"};
        if (!a.resume_dir.empty() && !a.out.empty() && fs::path(a.resume_dir) != fs::path(a.out))
            throw UsageError{"--resume " + a.resume_dir + " and --out " + a.out + " name different folders"};
        const std::string dir = !a.resume_dir.empty() ? a.resume_dir : !a.out.empty() ? a.out : load_config(a.config).out_dir;
        options.resume_from = (fs::path(dir) / "last.safetensors").string();
        if (!fs::exists(options.resume_from))
            throw Error(dir + ": no run to resume here (" + options.resume_from + " does not exist)");
        const train::TrainingState saved = train::read_training_state(options.resume_from);
        // The run continues with the config it started with (or the one given now, if it fits),
        // the command-line overrides it started with, and those given now on top.
        // The text is the checkpoint's, not the file it was first read from: a damaged one says so.
        auto parse_saved = [&] {
            try {
                return parse_config(saved.config_text, saved.config_source);
            } catch (const Error& e) {
                throw Error(options.resume_from + ": the config saved in it (first read from " + saved.config_source +
                            ") is damaged: " + e.what());
            }
        };
        RunConfig was = parse_saved();
        apply_overrides(was, saved.overrides);
        c = a.config.empty() ? parse_saved() : load_config(a.config);
        nlohmann::json merged = saved.overrides;
        merged.update(options.overrides);
        apply_overrides(c, merged);
        options.overrides = merged;
        c.out_dir = dir;
        if (std::string why = resume_conflict(was, c); !why.empty()) throw Error("cannot resume " + dir + ": " + why);
    } else {
        c = config_with_flags(a);
    }
    train::share_cores(launch, c.threads);  // a distributed run's ranks on one machine split its cores
    Registry registry;
    const BackendChoice choice = train::select_backend(registry, c, a.backend, a.plugin_dirs, a.trust_config_plugins);
    options.backend_choice = train::describe_choice(choice);  // the banner says which device runs, what was skipped and why
    uint32_t device = choice.device;
    if (launch.distributed()) {
        ranks = train::join_ranks(launch);
        device = train::device_for_rank(registry, choice, launch.local_rank);  // one GPU per rank on a node
        options.progress = launch.rank == 0;
    }
    auto dev = choice.backend->device(device);
    std::unique_ptr<train::DataParallel> data_parallel;
    if (ranks) {
        data_parallel = std::make_unique<train::DataParallel>(*ranks, *dev);
        options.data_parallel = data_parallel.get();
    }
    train::RunResult r;
    // The folders --out NEW/RUN makes, from the first that is missing: a run that fails before
    // writing anything (a model or data error found while preparing) removes them again.
    const std::vector<std::string> made = train::folders_to_make(c.out_dir);
    try {
        train::InterruptGuard interrupts;  // Ctrl-C / SIGTERM: finish the step, checkpoint, exit 130 / 143
        options.callbacks.push_back(&interrupts);
        r = train::run(c, *dev, std::cout, options);
    } catch (...) {
        if (!data_parallel || data_parallel->root()) train::remove_made_folders(made);
        throw;
    }
    if (data_parallel && !data_parallel->root())  // rank 0 reports for the run
        return r.stopped_by_signal ? 128 + r.stopped_by_signal : 0;
    if (r.already_complete) {
        std::printf("%s: nothing to train: %s\n", c.out_dir.c_str(), r.finish_reason.c_str());
        return 0;
    }
    if (r.stopped_by_signal) {
        std::string cmd = (launch.distributed() ? "mpirun -np " + std::to_string(launch.size) + " " : std::string()) +
                          "xylem train --resume " + shell_quoted(c.out_dir);
        if (!a.backend.empty()) cmd += " --backend " + shell_quoted(a.backend);
        for (const std::string& d : a.plugin_dirs) cmd += " --plugin-path " + shell_quoted(d);
        std::printf("stopped by %s at epoch %d step %lld; checkpoint: %s\nresume with: %s\n",
                    r.stopped_by_signal == SIGINT ? "SIGINT" : "SIGTERM", r.next_epoch, static_cast<long long>(r.next_step),
                    r.last_checkpoint.c_str(), cmd.c_str());
        std::fflush(stdout);
        return 128 + r.stopped_by_signal;
    }
    const train::EpochMetrics& last = r.epochs.back();  // the run's last epoch always scores the test set (images)
    const std::string why = r.finish_reason.empty() ? "" : " (" + r.finish_reason + ")";
    if (!r.text)
        std::printf("test accuracy %.2f%% after %d epoch(s)%s\n", 100 * last.test_accuracy, last.epoch, why.c_str());
    else if (last.has_validation)  // text: no test set; the held-out end of the text
        std::printf("validation loss %.4f nats/char (%.4f bits/char), accuracy %.2f%% after %d epoch(s)%s\n",
                    last.val_loss, train::bits_per_char(last.val_loss), 100 * last.val_accuracy, last.epoch, why.c_str());
    else
        std::printf("train loss %.4f nats/char (%.4f bits/char) after %d epoch(s)%s\n", last.train_loss,
                    train::bits_per_char(last.train_loss), last.epoch, why.c_str());
    std::printf("checkpoint: %s\nlast (resumable): %s\n", r.checkpoint_path.c_str(), r.last_checkpoint.c_str());
    if (const fs::path best = fs::path(c.out_dir) / "best.safetensors"; fs::exists(best))
        std::printf("best (by %s): %s\n", c.best_metric.c_str(), best.string().c_str());
    std::printf("metrics: %s\nlog: %s\n", r.metrics_path.c_str(), r.log_path.c_str());
    if (data_parallel) std::printf("%s", data_parallel->summary().c_str());
    return 0;
}

}  // namespace

int run_train(const Args& a) {
    const train::Launch launch = train::launch_from_environment();
    std::unique_ptr<train::Collectives> ranks;  // outlives train_run's data-parallel state
    if (!launch.distributed()) return train_run(a, launch, ranks);
    train::require_mpi(launch);  // a build without MPI says so before any work (every rank alike)
    try {
        return train_run(a, launch, ranks);
    } catch (const train::RanksAgreeError& e) {
        // Every rank raised it at the same point: rank 0 says why, and all of them end normally.
        std::fflush(stdout);
        if (launch.rank == 0) std::cerr << "xylem: error: " << e.what() << "\n";
        return 1;
    } catch (const UsageError&) {
        if (ranks) ranks->abort(2);
        throw;  // before joining, as in a single process; mpirun ends the other ranks
    } catch (const std::exception& e) {
        std::fflush(stdout);
        std::cerr << "xylem: error: rank " << launch.rank << " of " << launch.size << ": " << failure_text(e, a) << std::endl;
        // The others may be waiting in a collective for this rank: end them all now. Before
        // joining, exiting non-zero is enough: mpirun ends the job.
        if (ranks) ranks->abort(1);
        return 1;
    }
}

namespace {

// Text data has no test set: eval scores the held-out end of the text, in the training layout.
int run_eval_text(const Args& a, const RunConfig& c, Backend& backend, Device& dev) {
    const train::RunData data = train::load_run_data(c);
    if (!data.validation.count)
        throw Error(c.source + ": key 'data.validation' holds out no text: there is nothing to evaluate");
    train::check_resumed_vocabulary(a.checkpoint, data);
    auto model = train::build_inference_model(c, dev, train::input_sample_shape(data.validation),
                                              data.eval_batch(c.batch_size), data.vocabulary.size());
    train::check_model_fits_data(c, *model, data);
    train::load_checkpoint(a.checkpoint, *model);
    auto loss = make_loss(c.loss);
    const int64_t classes = model->output_sample_shape().back();
    profiler::enable(a.profile);
    const auto t0 = std::chrono::steady_clock::now();
    model->reset_state();
    const train::Scores s = train::score(*model, *loss, dev, data.validation, classes, data.eval_batch(c.batch_size));
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    profiler::enable(false);
    const double chars = static_cast<double>(data.validation.labels.size());
    std::printf("validation loss %.4f nats/char (%.4f bits/char), accuracy %.2f%% (%.0f characters, backend %s, %.3f s, "
                "%.0f char/s)\n", s.loss, train::bits_per_char(s.loss), 100 * s.accuracy, chars, backend.name().c_str(),
                seconds, chars / seconds);
    if (a.profile) profiler::print(std::cout);
    return 0;
}

}  // namespace

BackendChoice choose_backend(Registry& registry, const RunConfig& c, const Args& a) {
    BackendChoice choice = train::select_backend(registry, c, a.backend, a.plugin_dirs, a.trust_config_plugins);
    for (const std::string& note : choice.notes) std::fprintf(stderr, "%s\n", note.c_str());
    return choice;
}

int run_eval(const Args& a) {
    if (a.checkpoint.empty()) throw UsageError{"eval needs --checkpoint FILE"};
    RunConfig c = config_with_flags(a);
    Registry registry;
    const BackendChoice choice = choose_backend(registry, c, a);
    auto backend = choice.backend;
    auto dev = backend->device(choice.device);
    if (c.is_text()) return run_eval_text(a, c, *backend, *dev);
    io::Dataset test = io::load_mnist_dir(c.data_dir, false);
    int64_t batch = 0;
    auto model = load_image_model(c, a.checkpoint, *dev, test, "the test set of " + c.data_dir, batch);
    profiler::enable(a.profile);  // per op kind and per layer; syncs after every op while on
    const auto t0 = std::chrono::steady_clock::now();
    const double acc = train::evaluate(*model, *dev, test, batch);  // ends with a device read: the time is complete
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    profiler::enable(false);
    std::printf("test accuracy %.2f%% (%lld images, backend %s, %.3f s, %.0f images/s at batch %lld)\n", 100 * acc,
                static_cast<long long>(test.count), backend->name().c_str(), seconds,
                static_cast<double>(test.count) / seconds, static_cast<long long>(batch));
    if (a.profile) profiler::print(std::cout);
    return 0;
}

}  // namespace xylem::cli
