// xylem-conformance: the plugin conformance kit. Loads the plugin files given with --plugin, runs
// every op case against the float64 reference, the layer gradient checks and the lifecycle
// checks over each, prints the per-op table and exits 0 only when no case failed (1 when one
// did, 2 when a plugin cannot be loaded or the command line is wrong), so a plugin's CI can
// run it as is. Any --gtest_* flag passes through (e.g. --gtest_filter='*Gemm*'). It says how many
// ops each plugin implements, fails a plugin that implements none, and with --require fails one
// that lacks an op of a named set.
#include <gtest/gtest.h>

#include <cstring>
#include <iostream>
#include <sstream>

#include "report.h"
#include "support/backends.h"

namespace {

const char* kUsage =
    "usage: xylem-conformance --plugin FILE [--plugin FILE ...] [--markdown] [--verbose] [--gtest_* ...]\n"
    "  --plugin FILE  a plugin (libxylem_<name>.so) to check; give several for one table\n"
    "  --markdown     print only the op x plugin support table in Markdown (docs/ops.md)\n"
    "  --verbose      also print gtest's own per-case output\n"
    "  --skip-unavailable  exit 77 (ctest's skip) when a plugin loads but finds no device\n"
    "  --require OPS  fail unless each plugin implements these ops: 'mlp' (what a Linear + ReLU MLP\n"
    "                 trains with: xent loss, SGD, accuracy) or op names separated by commas\n"
    "exit status: 0 every case passed or was skipped as unsupported, 1 a case failed, 2 usage or load error\n";

// The ops of xylem's MLP examples (fashion_mlp: linear, relu, softmax cross-entropy, SGD with
// momentum, accuracy), what the smallest useful plugin implements.
const uint32_t kMlpOps[] = {XYLEM_OP_FILL,        XYLEM_OP_COPY,        XYLEM_OP_AXPBY,       XYLEM_OP_MUL,
                            XYLEM_OP_GEMM,        XYLEM_OP_LINEAR_FWD,  XYLEM_OP_BIAS_GRAD,   XYLEM_OP_ACT_FWD,
                            XYLEM_OP_ACT_BWD,     XYLEM_OP_SOFTMAX_FWD, XYLEM_OP_SOFTMAX_BWD, XYLEM_OP_XENT_FWD,
                            XYLEM_OP_XENT_BWD,    XYLEM_OP_SGD_UPDATE,  XYLEM_OP_ACCURACY};

// --require's argument as op numbers; false (with the message) on an unknown name.
bool parse_require(const std::string& arg, std::vector<uint32_t>& ops, std::string& error) {
    if (arg == "mlp") {
        ops.assign(std::begin(kMlpOps), std::end(kMlpOps));
        return true;
    }
    std::stringstream in(arg);
    for (std::string name; std::getline(in, name, ',');) {
        uint32_t op = 0;
        while (op < XYLEM_OP_COUNT_ && name != xylem_op_name(op)) ++op;
        if (op == XYLEM_OP_COUNT_) {
            error = "--require: '" + name + "' is neither 'mlp' nor an op name (e.g. gemm, linear_fwd)";
            return false;
        }
        ops.push_back(op);
    }
    return true;
}

}  // namespace

int main(int argc, char** argv) {
    using namespace xylem;
    bool markdown = false, verbose = false, skip_unavailable = false;
    std::vector<uint32_t> required;
    std::vector<char*> gtest_args = {argv[0]};
    for (int i = 1; i < argc; ++i) {
        if (!std::strcmp(argv[i], "--plugin") && i + 1 < argc) test::plugin_files().push_back(argv[++i]);
        else if (!std::strcmp(argv[i], "--markdown")) markdown = true;
        else if (!std::strcmp(argv[i], "--verbose")) verbose = true;
        else if (!std::strcmp(argv[i], "--skip-unavailable")) skip_unavailable = true;
        else if (!std::strcmp(argv[i], "--require") && i + 1 < argc) {
            std::string error;
            if (!parse_require(argv[++i], required, error)) {
                std::cerr << "xylem-conformance: " << error << "\n" << kUsage;
                return 2;
            }
        }
        else if (!std::strncmp(argv[i], "--gtest_", 8)) gtest_args.push_back(argv[i]);
        else {
            std::cerr << (std::strcmp(argv[i], "--help") ? "xylem-conformance: unknown argument '" + std::string(argv[i]) + "'\n" : "") << kUsage;
            return std::strcmp(argv[i], "--help") ? 2 : 0;
        }
    }
    if (test::plugin_files().empty()) {
        std::cerr << "xylem-conformance: no --plugin FILE given\n" << kUsage;
        return 2;
    }

    // Every plugin must load and find a device: a kit that skips what it cannot load would pass vacuously.
    std::vector<kit::Column> columns;
    std::string missing_ops;  // lines naming a plugin that implements no op or lacks a required one
    std::vector<std::string> names;
    for (const PluginRecord& p : test::test_registry().plugins()) {
        if (!p.available) {
            std::cerr << "xylem-conformance: " << p.path << ": " << (p.loaded ? "unavailable: " : "") << p.reason << "\n";
            return p.loaded && skip_unavailable ? 77 : 2;
        }
        kit::Column col{p.name, std::vector<bool>(XYLEM_OP_COUNT_)};
        int implemented = 0;
        for (uint32_t op = 0; op < XYLEM_OP_COUNT_; ++op) implemented += col.supported[op] = p.backend->supports(op);
        columns.push_back(col);
        names.push_back(p.name);
        if (!markdown)
            std::cout << "plugin " << p.name << " " << p.version << " (ABI " << p.abi << ", this kit " << XYLEM_ABI_MAJOR
                      << "." << XYLEM_ABI_MINOR << "): " << p.path << "\n  implements " << implemented << " of "
                      << XYLEM_OP_COUNT_ << " ops\n";
        std::string missing;
        for (uint32_t op : required)
            if (!col.supported[op]) missing += std::string(missing.empty() ? "" : ", ") + xylem_op_name(op);
        if (!implemented) missing_ops += p.name + ": implements no op\n";
        if (!missing.empty()) missing_ops += p.name + ": lacks required ops: " + missing + "\n";
    }

    int gargc = static_cast<int>(gtest_args.size());
    gtest_args.push_back(nullptr);  // argv[argc] is NULL: gtest moves the entries after a flag it takes, that one too
    ::testing::InitGoogleTest(&gargc, gtest_args.data());
    auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
    if (!verbose) delete listeners.Release(listeners.default_result_printer());
    auto* recorder = new kit::Recorder(names);
    listeners.Append(recorder);  // gtest owns it
    if (markdown) std::cout.setstate(std::ios::failbit);  // the cases' own prints would spoil the table
    // The exit code comes from the recorder's table (it also counts cases gtest skips), so
    // RUN_ALL_TESTS's own result is not needed.
    if (RUN_ALL_TESTS() != 0 && verbose) std::cerr << "xylem-conformance: some cases failed (table below)\n";
    std::cout.clear();
    const int failed = markdown ? kit::print_markdown(std::cout, columns, recorder->results())
                                : kit::print_text(std::cout, columns, recorder->results(), missing_ops);
    return failed || !missing_ops.empty() ? 1 : 0;
}
