// xylem-conformance: the plugin conformance kit. Loads the plugin files given with --plugin, runs
// every op case against the float64 reference, the layer gradient checks and the lifecycle
// checks over each, prints the per-op table and exits 0 only when no case failed (1 when one
// did, 2 when a plugin cannot be loaded or the command line is wrong), so a plugin's CI can
// run it as is. Any --gtest_* flag passes through (e.g. --gtest_filter='*Gemm*').
#include <gtest/gtest.h>

#include <cstring>
#include <iostream>

#include "report.h"
#include "support/backends.h"

namespace {

const char* kUsage =
    "usage: xylem-conformance --plugin FILE [--plugin FILE ...] [--markdown] [--verbose] [--gtest_* ...]\n"
    "  --plugin FILE  a plugin (libxylem_<name>.so) to check; give several for one table\n"
    "  --markdown     print only the op x plugin support table in Markdown (docs/ops.md)\n"
    "  --verbose      also print gtest's own per-case output\n"
    "  --skip-unavailable  exit 77 (ctest's skip) when a plugin loads but finds no device\n"
    "exit status: 0 every case passed or was skipped as unsupported, 1 a case failed, 2 usage or load error\n";

}  // namespace

int main(int argc, char** argv) {
    using namespace xylem;
    bool markdown = false, verbose = false, skip_unavailable = false;
    std::vector<char*> gtest_args = {argv[0]};
    for (int i = 1; i < argc; ++i) {
        if (!std::strcmp(argv[i], "--plugin") && i + 1 < argc) test::plugin_files().push_back(argv[++i]);
        else if (!std::strcmp(argv[i], "--markdown")) markdown = true;
        else if (!std::strcmp(argv[i], "--verbose")) verbose = true;
        else if (!std::strcmp(argv[i], "--skip-unavailable")) skip_unavailable = true;
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
    std::vector<std::string> names;
    for (const PluginRecord& p : test::test_registry().plugins()) {
        if (!p.available) {
            std::cerr << "xylem-conformance: " << p.path << ": " << (p.loaded ? "unavailable: " : "") << p.reason << "\n";
            return p.loaded && skip_unavailable ? 77 : 2;
        }
        kit::Column col{p.name, std::vector<bool>(XYLEM_OP_COUNT_)};
        for (uint32_t op = 0; op < XYLEM_OP_COUNT_; ++op) col.supported[op] = p.backend->supports(op);
        columns.push_back(col);
        names.push_back(p.name);
        if (!markdown)
            std::cout << "plugin " << p.name << " " << p.version << " (ABI " << p.abi << ", this kit " << XYLEM_ABI_MAJOR
                      << "." << XYLEM_ABI_MINOR << "): " << p.path << "\n";
    }

    int gargc = static_cast<int>(gtest_args.size());
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
                                : kit::print_text(std::cout, columns, recorder->results());
    return failed ? 1 : 0;
}
