// `xylem plot RUN_DIR`: a PNG of a real run's curves when matplotlib is installed, and one clear
// line for each thing that is missing (the folder, the log, its rows, python, matplotlib).
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "cli_run.h"

namespace fs = std::filesystem;
using xylem::test::run_cli;

namespace {

const char* kPython = "/usr/bin/python3";

bool has_python() { return fs::exists(kPython); }
bool has_matplotlib() {
    return has_python() && std::system((std::string(kPython) + " -c 'import matplotlib' 2>/dev/null").c_str()) == 0;
}

class Plot : public ::testing::Test {
protected:
    void SetUp() override {
        dir_ = fs::temp_directory_path() / ("xylem_plot_" + std::to_string(::getpid()));
        fs::create_directories(dir_);
    }
    void TearDown() override { fs::remove_all(dir_); }
    static void expect_one_line_error(const xylem::test::CliResult& r, const std::string& needle) {
        EXPECT_EQ(r.code, 1) << r.out << r.err;
        EXPECT_EQ(r.err.rfind("xylem: error: ", 0), 0u) << r.err;
        EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
        EXPECT_NE(r.err.find(needle), std::string::npos) << r.err;
    }
    // A run dir holding only a log.csv with `text`.
    std::string run_with_log(const std::string& text) {
        fs::create_directories(dir_ / "run");
        std::ofstream(dir_ / "run" / "log.csv") << text;
        return (dir_ / "run").string();
    }
    fs::path dir_;
};

const char* kHeader = "epoch,step,loss,images_per_second,elapsed_seconds,lr,val_loss,val_accuracy,kind\n";

bool is_png(const fs::path& p, uintmax_t min_size) {
    std::ifstream f(p, std::ios::binary);
    char sig[8] = {};
    f.read(sig, 8);
    return f && std::string(sig, 8) == "\x89PNG\r\n\x1a\n" && fs::file_size(p) >= min_size;
}

}  // namespace

// Two short epochs with a validation set, a learning-rate schedule and the test set scored at the
// end: every curve the plot draws has data.
TEST_F(Plot, DrawsARealRunToAPng) {
    if (!has_matplotlib()) GTEST_SKIP() << kPython << " with matplotlib is not installed";
    const fs::path cfg = dir_ / "run.toml";
    std::ofstream(cfg) << "backend = \"native\"\n[data]\ndir = \"/usr/share/datasets/fashion-mnist\"\nvalidation = 0.1\n"
                          "[[model.layers]]\ntype = \"flatten\"\n[[model.layers]]\ntype = \"linear\"\nout = 32\n"
                          "[[model.layers]]\ntype = \"relu\"\n[[model.layers]]\ntype = \"linear\"\nout = 10\n"
                          "[solver]\nlr = 0.05\nmomentum = 0.9\n[solver.schedule]\ntype = \"cosine\"\nunit = \"step\"\n"
                          "t_max = 120\n[train]\nepochs = 2\nsteps_per_epoch = 60\nprint_every = 10\n";
    const fs::path run = dir_ / "run";
    auto r = run_cli("train --config " + cfg.string() + " --out " + run.string());
    ASSERT_EQ(r.code, 0) << r.out << r.err;

    r = run_cli("plot " + run.string());
    ASSERT_EQ(r.code, 0) << r.out << r.err;
    EXPECT_EQ(r.err, "");
    EXPECT_EQ(r.out, "curves: " + (run / "curves.png").string() + "\n");
    EXPECT_TRUE(is_png(run / "curves.png", 20000)) << fs::file_size(run / "curves.png");

    const fs::path other = dir_ / "other.png";
    r = run_cli("plot " + run.string() + " --out " + other.string());
    ASSERT_EQ(r.code, 0) << r.err;
    EXPECT_TRUE(is_png(other, 20000));
    for (const auto& e : fs::directory_iterator(dir_))  // written through a temp file that is gone
        EXPECT_EQ(e.path().string().find(".tmp."), std::string::npos) << e.path();
}

// A run without validation, stopped inside its first epoch (no epoch row yet), still plots.
TEST_F(Plot, IntervalRowsOnly) {
    if (!has_matplotlib()) GTEST_SKIP() << kPython << " with matplotlib is not installed";
    const std::string run = run_with_log(std::string(kHeader) + "1,10,2.1,900,0.1,0.01,,,interval\n"
                                                                 "1,20,1.7,900,0.2,0.01,,,interval\n");
    const auto r = run_cli("plot " + run);
    ASSERT_EQ(r.code, 0) << r.err;
    EXPECT_TRUE(is_png(fs::path(run) / "curves.png", 5000));
}

TEST_F(Plot, EmptyLogIsOneLine) {
    if (!has_python()) GTEST_SKIP() << "no " << kPython;
    std::string run = run_with_log(kHeader);
    expect_one_line_error(run_cli("plot " + run), run + "/log.csv: has no rows yet, only the header");
    run = run_with_log("");
    expect_one_line_error(run_cli("plot " + run), run + "/log.csv: is empty");
    run = run_with_log("a,b\n1,2\n");
    expect_one_line_error(run_cli("plot " + run), run + "/log.csv: not a xylem training log (no column epoch, step");
    EXPECT_FALSE(fs::exists(fs::path(run) / "curves.png"));
}

TEST_F(Plot, MissingFolderOrLogIsOneLine) {
    expect_one_line_error(run_cli("plot " + (dir_ / "absent").string()), (dir_ / "absent").string() + ": no such run folder");
    expect_one_line_error(run_cli("plot " + dir_.string()), (dir_ / "log.csv").string() + ": not found");
}

TEST_F(Plot, MissingPythonOrMatplotlibIsOneLine) {
    const std::string run = run_with_log(std::string(kHeader) + "1,10,2.1,900,0.1,0.01,,,interval\n");
    expect_one_line_error(run_cli("plot " + run, "XYLEM_PYTHON=/nonexistent/python3"),
                          "xylem plot needs /nonexistent/python3 with matplotlib, and /nonexistent/python3 is not there");
    if (!has_python()) GTEST_SKIP() << "no " << kPython;
    // The same Python without its site packages: the standard library only, no matplotlib.
    const fs::path bare = dir_ / "bare-python";
    std::ofstream(bare) << "#!/bin/sh\nexec " << kPython << " -S \"$@\"\n";
    fs::permissions(bare, fs::perms::owner_all);
    expect_one_line_error(run_cli("plot " + run, "XYLEM_PYTHON=" + bare.string()),
                          "xylem plot needs matplotlib for " + std::string(kPython));
    EXPECT_FALSE(fs::exists(fs::path(run) / "curves.png"));
}

// The interpreter is judged by what it did (issue 26): one that exits 0 without writing the picture,
// or fails saying nothing, or says something that is not the script's one line, is an error naming
// the interpreter with what it printed; a name without '/' is searched in PATH.
TEST_F(Plot, AnInterpreterThatDrawsNothingIsAnError) {
    const std::string run = run_with_log(std::string(kHeader) + "1,10,2.1,900,0.1,0.01,,,interval\n");
    auto r = run_cli("plot " + run, "XYLEM_PYTHON=/bin/true");
    expect_one_line_error(r, "/bin/true ");
    EXPECT_NE(r.err.find("xylem-plot.py exited 0 but wrote no picture to " + run + "/curves.png"), std::string::npos) << r.err;
    EXPECT_EQ(r.out, "");
    // A picture left by an earlier plot is not taken for a new one.
    std::ofstream(fs::path(run) / "curves.png") << "an older picture";
    expect_one_line_error(run_cli("plot " + run, "XYLEM_PYTHON=/bin/true"), "exited 0 but wrote no picture");
    expect_one_line_error(run_cli("plot " + run, "XYLEM_PYTHON=/bin/false"),
                          "xylem-plot.py failed (exit status 1), printing nothing on stderr");
    const fs::path noisy = dir_ / "noisy-python";
    std::ofstream(noisy) << "#!/bin/sh\necho 'Traceback (most recent call last):' >&2\necho 'SomeError: it broke' >&2\nexit 3\n";
    fs::permissions(noisy, fs::perms::owner_all);
    expect_one_line_error(run_cli("plot " + run, "XYLEM_PYTHON=" + noisy.string()),
                          "xylem-plot.py failed (exit status 3): Traceback (most recent call last):|SomeError: it broke");
    expect_one_line_error(run_cli("plot " + run, "XYLEM_PYTHON=no-such-python-xylem"),
                          "XYLEM_PYTHON=no-such-python-xylem: no such program in PATH");
    fs::remove(fs::path(run) / "log.csv");
    fs::create_directory(fs::path(run) / "log.csv");
    expect_one_line_error(run_cli("plot " + run), run + "/log.csv: is a directory, not a regular file");
    fs::remove(fs::path(run) / "log.csv");
    std::ofstream(fs::path(run) / "log.csv") << kHeader << "1,10,2.1,900,0.1,0.01,,,interval\n";
    ASSERT_EQ(::mkfifo((fs::path(run) / "metrics.json").c_str(), 0600), 0);  // would hang the script
    expect_one_line_error(run_cli("plot " + run), run + "/metrics.json: is a FIFO (named pipe), not a regular file");
}

// A log with bytes that are not UTF-8 (damage) is named by file, line and column, with python3
// found through PATH.
TEST_F(Plot, ANonUtf8LogNamesTheLine) {
    if (!has_python()) GTEST_SKIP() << "no " << kPython;
    const std::string run = run_with_log(std::string(kHeader) + "1,10,2.1,900,0.1,0.01,,,interval\n1,20,2\xff,9,0.1,0.01,,,interval\n");
    const auto r = run_cli("plot " + run, "PATH=/usr/bin:/bin XYLEM_PYTHON=python3 LC_ALL=C");
    expect_one_line_error(r, run + "/log.csv:3: not UTF-8 text (byte 0xff at column 7)");
    EXPECT_EQ(r.err.find("UnicodeDecodeError"), std::string::npos) << r.err;
}
