// The xylem program on bad input: one clear line on stderr, a non-zero exit, never an abort.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include <array>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <new>
#include <stdexcept>
#include <vector>

#include <nlohmann/json.hpp>

#include "failure.h"
#include "xylem/error.h"
#include "xylem/io/safetensors.h"

namespace fs = std::filesystem;

namespace {

struct Result {
    int code;
    std::string output;
};

Result run(const std::string& args, const std::string& env = "") {
    const std::string cmd = "env " + env + " " + std::string(XYLEM_BINARY_DIR) + "/bin/xylem " + args + " 2>&1";
    FILE* p = popen(cmd.c_str(), "r");
    Result r{-1, ""};
    if (!p) return r;
    std::array<char, 4096> buf;
    while (size_t n = fread(buf.data(), 1, buf.size(), p)) r.output.append(buf.data(), n);
    int status = pclose(p);
    r.code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    return r;
}

class CliErrors : public ::testing::Test {
protected:
    void SetUp() override {
        dir_ = fs::temp_directory_path() / ("xylem_cli_" + std::to_string(::getpid()));
        fs::create_directories(dir_);
    }
    void TearDown() override { fs::remove_all(dir_); }
    std::string write(const std::string& name, const std::string& text) {
        std::ofstream(dir_ / name) << text;
        return (dir_ / name).string();
    }
    // Exactly one line, exit code 1, with `needle` in it.
    void expect_one_line_error(const Result& r, const std::string& needle) {
        EXPECT_EQ(r.code, 1) << r.output;
        EXPECT_EQ(r.output.rfind("xylem: error: ", 0), 0u) << r.output;
        EXPECT_EQ(std::count(r.output.begin(), r.output.end(), '\n'), 1) << r.output;
        EXPECT_NE(r.output.find(needle), std::string::npos) << r.output;
    }
    // Exit code 2 (a usage error), the message on the first line.
    void expect_usage_error(const Result& r, const std::string& message) {
        EXPECT_EQ(r.code, 2) << r.output;
        EXPECT_EQ(r.output.rfind("xylem: " + message + "\n", 0), 0u) << r.output;
    }
    // An uncompressed IDX file of unsigned bytes.
    void write_idx(const std::string& name, const std::vector<uint32_t>& dims, size_t payload_bytes) {
        std::string bytes = {0, 0, 8, static_cast<char>(dims.size())};
        for (uint32_t d : dims)
            for (int shift = 24; shift >= 0; shift -= 8) bytes.push_back(static_cast<char>(d >> shift));
        bytes.append(payload_bytes, '\x01');
        std::ofstream(dir_ / name, std::ios::binary) << bytes;
    }
    fs::path dir_;
};

const std::string kMlp = std::string(XYLEM_SOURCE_DIR) + "/examples/fashion_mlp.toml";

}  // namespace

// A named backend probes only its own file, so the error names the folders searched and the
// backends whose files are there (it said "(loaded backends: none)", though native was there).
TEST_F(CliErrors, UnknownBackend) {
    const Result r = run("train --config " + kMlp + " --backend nosuch --out " + dir_.string());
    expect_one_line_error(r, "unknown backend 'nosuch': no plugin file libxylem_nosuch.so in ");
    EXPECT_NE(r.output.find(" (backends there: "), std::string::npos) << r.output;
    EXPECT_NE(r.output.find("native"), std::string::npos) << r.output;
    EXPECT_EQ(r.output.find("loaded backends: none"), std::string::npos) << r.output;
}

TEST_F(CliErrors, UnknownBackendFromEnvironment) {
    const Result r = run("train --config " + kMlp + " --out " + dir_.string(),
                         "XYLEM_BACKEND=envbackend XYLEM_PLUGIN_PATH=/nonexistent-xylem-dir");
    expect_one_line_error(r, "unknown backend 'envbackend': no plugin file libxylem_envbackend.so in "
                             "/nonexistent-xylem-dir, ");
    EXPECT_NE(r.output.find(" (backends there: "), std::string::npos) << r.output;
}

TEST_F(CliErrors, FlagBeatsEnvironment) {
    Result r = run("train --config " + kMlp + " --backend native --epochs 1 --max-steps 1 --out " + dir_.string(),
                   "XYLEM_BACKEND=envbackend");
    EXPECT_EQ(r.code, 0) << r.output;
    EXPECT_NE(r.output.find("backend native"), std::string::npos) << r.output;
}

TEST_F(CliErrors, BadConfigKeyIsNamed) {
    std::string cfg = write("bad.toml", "[train]\nbatch_sise = 3\n");
    expect_one_line_error(run("train --config " + cfg), "unknown key 'train.batch_sise'");
}

TEST_F(CliErrors, WrongTypeIsNamed) {
    std::string cfg = write("bad.toml", "[solver]\nlr = \"big\"\n");
    expect_one_line_error(run("train --config " + cfg), "key 'solver.lr' must be a number");
}

TEST_F(CliErrors, MissingConfig) { expect_one_line_error(run("train --config /nonexistent.toml"), "/nonexistent.toml"); }

TEST_F(CliErrors, MissingDataDirectory) {
    std::string cfg = write("nodata.toml", "backend = \"native\"\n[data]\ndir = \"/nonexistent/data\"\n"
                                           "[[model.layers]]\ntype = \"flatten\"\n[[model.layers]]\ntype = \"linear\"\nout = 10\n");
    expect_one_line_error(run("train --config " + cfg + " --out " + dir_.string()), "/nonexistent/data");
}

// No silent eager fallback: a backend without capture entries is named with the key.
TEST_F(CliErrors, CaptureOnABackendWithoutCapture) {
    std::string cfg = write("capture.toml", "backend = \"native\"\n[train]\ncapture = true\n"
                                            "[[model.layers]]\ntype = \"flatten\"\n[[model.layers]]\ntype = \"linear\"\nout = 10\n");
    expect_one_line_error(run("train --config " + cfg + " --out " + dir_.string()),
                          "train.capture = true: backend 'native' cannot capture a training step");
}

TEST_F(CliErrors, ShapeMismatchNamesLayerAndShapes) {
    std::string cfg = write("noflat.toml", "backend = \"native\"\n[[model.layers]]\ntype = \"linear\"\nout = 10\n");
    expect_one_line_error(run("train --config " + cfg + " --out " + dir_.string()),
                          "model layer 0 (linear): expects a flat feature vector per sample (add a flatten layer): got "
                          "[1, 28, 28], expected [784]");
}

// A run that fails while preparing (here the model's shapes) leaves no folder behind where there
// was none: --out NEW/RUN makes both, and both go again. A folder that existed stays.
TEST_F(CliErrors, AFailedRunRemovesTheFoldersItMade) {
    std::string cfg = write("noflat2.toml", "backend = \"native\"\n[[model.layers]]\ntype = \"linear\"\nout = 10\n");
    const fs::path fresh = dir_ / "new" / "run";
    expect_one_line_error(run("train --config " + cfg + " --out " + fresh.string()), "expects a flat feature vector");
    EXPECT_FALSE(fs::exists(dir_ / "new")) << "the folders the failed run made are still there";
    EXPECT_TRUE(fs::exists(dir_)) << "a folder that was there before the run";
    fs::create_directories(dir_ / "kept");
    expect_one_line_error(run("train --config " + cfg + " --out " + (dir_ / "kept").string()), "expects a flat feature vector");
    EXPECT_TRUE(fs::exists(dir_ / "kept")) << "a folder that existed before the run is the user's";
    // A path through "..": the folder it made on the way goes too, the one it only passed stays.
    const std::string dotdot = (dir_ / "kept" / "new" / ".." / "run2").string();
    expect_one_line_error(run("train --config " + cfg + " --out " + dotdot), "expects a flat feature vector");
    EXPECT_FALSE(fs::exists(dir_ / "kept" / "new")) << "made on the way to " << dotdot;
    EXPECT_FALSE(fs::exists(dir_ / "kept" / "run2"));
    EXPECT_TRUE(fs::exists(dir_ / "kept"));
    // ".." back into a folder that existed: that folder stays, even empty.
    fs::create_directories(dir_ / "kept" / "mine");
    const std::string back = (dir_ / "kept" / "new" / ".." / "mine").string();
    expect_one_line_error(run("train --config " + cfg + " --out " + back), "expects a flat feature vector");
    EXPECT_TRUE(fs::exists(dir_ / "kept" / "mine")) << "the user's empty folder";
    EXPECT_FALSE(fs::exists(dir_ / "kept" / "new"));
}

// An --out through a dangling symbolic link names the link and its target (create_directories
// says only "File exists"), and leaves nothing behind.
TEST_F(CliErrors, AnOutDirThroughADanglingLinkNamesIt) {
    std::string cfg = write("noflat3.toml", "backend = \"native\"\n[[model.layers]]\ntype = \"linear\"\nout = 10\n");
    fs::create_symlink(dir_ / "nowhere", dir_ / "link1");
    expect_one_line_error(run("train --config " + cfg + " --out " + (dir_ / "link1" / "run").string()),
                          "link1 is a symbolic link to " + (dir_ / "nowhere").string() + ", which does not exist");
    EXPECT_TRUE(fs::is_symlink(dir_ / "link1"));
    EXPECT_FALSE(fs::exists(dir_ / "nowhere"));
}

// A model of several inputs or outputs ([model] inputs / outputs) cannot be trained from a data
// set of one input and a loss of one output: one line naming them, before any step.
TEST_F(CliErrors, SeveralInputsOrOutputsAreRefusedForTraining) {
    const std::string layers = "[[model.layers]]\ntype = \"flatten\"\nname = \"flat\"\n[[model.layers]]\ntype = \"linear\"\n"
                               "name = \"fc1\"\nout = 8\n[[model.layers]]\ntype = \"linear\"\nname = \"fc2\"\nout = 10\n";
    std::string cfg = write("two_out.toml", "backend = \"native\"\n[model]\noutputs = [\"fc2\", \"fc1\"]\n" + layers);
    expect_one_line_error(run("train --config " + cfg + " --out " + (dir_ / "a").string()),
                          "model has 2 outputs (fc2, fc1): training fits a model of one output");
    cfg = write("two_in.toml", "backend = \"native\"\n[model]\ninputs = [\"img\", \"extra\"]\n" + layers +
                                   "[[model.layers]]\ntype = \"flatten\"\nname = \"f2\"\ninputs = [\"extra\"]\n"
                                   "[[model.layers]]\ntype = \"add\"\nname = \"sum\"\ninputs = [\"fc2\", \"f2\"]\n");
    expect_one_line_error(run("train --config " + cfg + " --out " + (dir_ / "b").string()),
                          "model takes 2 input(s) (img, extra), given 1: xylem's datasets feed models of one input");
}

TEST_F(CliErrors, ConvKernelLargerThanInputNamesLayerAndShapes) {
    std::string cfg = write("bigkernel.toml", "backend = \"native\"\n[[model.layers]]\ntype = \"conv2d\"\nout = 4\n"
                                              "kernel = 5\n[[model.layers]]\ntype = \"maxpool2d\"\nkernel = 2\n"
                                              "[[model.layers]]\ntype = \"conv2d\"\nout = 4\nkernel = 13\n");
    expect_one_line_error(run("train --config " + cfg + " --out " + dir_.string()),
                          "model layer 2 (conv2d): op conv2d_fwd: X [1, 4, 12, 12] padded by 0x0 is smaller than the "
                          "kernel [13, 13] (dilated [13, 13])");
}

TEST_F(CliErrors, ConvChannelMismatchNamesLayerAndShapes) {
    std::string cfg = write("groups.toml", "backend = \"native\"\n[[model.layers]]\ntype = \"conv2d\"\nout = 6\n"
                                           "kernel = 3\n[[model.layers]]\ntype = \"conv2d\"\nout = 4\nkernel = 3\n"
                                           "groups = 4\n");
    expect_one_line_error(run("train --config " + cfg + " --out " + dir_.string()),
                          "model layer 1 (conv2d): op conv2d_fwd: X [1, 6, 26, 26] has 6 channels and W [4, 1, 3, 3] 4 "
                          "filters: both must divide by groups = 4");
}

TEST_F(CliErrors, CorruptCheckpointIsRejected) {
    std::string ckpt = write("bad.safetensors", "\x10\x00\x00\x00\x00\x00\x00\x00{\"a\": 1}");
    Result r = run("eval --config " + kMlp + " --backend native --checkpoint " + ckpt);
    expect_one_line_error(r, ckpt);
}

TEST_F(CliErrors, CheckpointOfAnotherModelIsRejected) {
    // Train one step of the MLP, then evaluate its checkpoint with a narrower model.
    Result t = run("train --config " + kMlp + " --backend native --epochs 1 --max-steps 1 --out " + dir_.string());
    ASSERT_EQ(t.code, 0) << t.output;
    std::string narrow = write("narrow.toml", "backend = \"native\"\n[[model.layers]]\ntype = \"flatten\"\n"
                                              "[[model.layers]]\ntype = \"linear\"\nout = 32\n");
    expect_one_line_error(run("eval --config " + narrow + " --checkpoint " + (dir_ / "model.safetensors").string()),
                          "tensor '1.weight' has shape [128, 784], the model expects [32, 784]");
}

TEST_F(CliErrors, UsageErrorsExitWithTwo) {
    Result r = run("train --epochs");
    EXPECT_EQ(r.code, 2) << r.output;
    EXPECT_NE(r.output.find("--epochs needs a value"), std::string::npos) << r.output;
    EXPECT_EQ(run("frobnicate").code, 2);
    EXPECT_EQ(run("train --config " + kMlp + " --lr -3").code, 2);
}

TEST_F(CliErrors, BackendsListsNative) {
    Result r = run("backends");
    EXPECT_EQ(r.code, 0) << r.output;
    EXPECT_NE(r.output.find("native"), std::string::npos);
    EXPECT_NE(r.output.find("available"), std::string::npos);
    EXPECT_NE(r.output.find("OpenBLAS"), std::string::npos);
}

// Integer flags are range-checked as parsed: --batch-size 4294967297 trained at 1, --epochs
// 4294967296 wrapped to 0 epochs and crashed after the run.
TEST_F(CliErrors, IntegerFlagsOutsideTheirRangeNameFlagAndRange) {
    const std::string train = "train --config " + kMlp + " --backend native --out " + dir_.string();
    expect_usage_error(run(train + " --batch-size 4294967297"),
                       "--batch-size must be in [1, 2147483647], got 4294967297");
    expect_usage_error(run(train + " --batch-size 0"), "--batch-size must be in [1, 2147483647], got 0");
    expect_usage_error(run(train + " --epochs 0"), "--epochs must be in [1, 2147483647], got 0");
    expect_usage_error(run(train + " --epochs 4294967296"), "--epochs must be in [1, 2147483647], got 4294967296");
    expect_usage_error(run(train + " --epochs -1"), "--epochs must be in [1, 2147483647], got -1");
    expect_usage_error(run(train + " --max-steps -1"), "--max-steps must be in [0, 9223372036854775807], got -1");
    expect_usage_error(run(train + " --max-steps 9223372036854775808"),
                       "--max-steps must be in [0, 9223372036854775807], got 9223372036854775808");
    expect_usage_error(run(train + " --seed -1"), "--seed must be in [0, 18446744073709551615], got -1");
    expect_usage_error(run(train + " --seed 18446744073709551616"),
                       "--seed must be in [0, 18446744073709551615], got 18446744073709551616");
    expect_usage_error(run(train + " --epochs 2x"), "--epochs needs an integer, got '2x'");
    expect_usage_error(run(train + " --epochs ''"), "--epochs needs an integer, got ''");
    // A number flag names its real range: the lr is a normal float (1e-320 is positive but no float).
    expect_usage_error(run(train + " --lr inf"), "--lr must be in [1.17549e-38, 3.40282e+38], got inf");
    expect_usage_error(run(train + " --lr 1e300"), "--lr must be in [1.17549e-38, 3.40282e+38], got 1e300");
    expect_usage_error(run(train + " --lr 1e-320"), "--lr must be in [1.17549e-38, 3.40282e+38], got 1e-320");
    expect_usage_error(run(train + " --lr 0"), "--lr must be in [1.17549e-38, 3.40282e+38], got 0");
    expect_usage_error(run(train + " --lr nan"), "--lr needs a number, got 'nan'");
    expect_usage_error(run(train + " --lr 0.1x"), "--lr needs a number, got '0.1x'");
    EXPECT_FALSE(fs::exists(dir_ / "model.safetensors"));  // nothing ran
}

// The config's own keys reach the program's one-line error the same way.
TEST_F(CliErrors, ConfigRangeErrorsAreOneLine) {
    std::string cfg = write("big.toml", "backend = \"native\"\n[train]\nbatch_size = 4294967360\n");
    expect_one_line_error(run("train --config " + cfg + " --out " + dir_.string()),
                          cfg + ": key 'train.batch_size' must be in [1, 2147483647], got 4294967360");
    cfg = write("zero.toml", "backend = \"native\"\n[train]\nepochs = 0\n");
    expect_one_line_error(run("train --config " + cfg + " --out " + dir_.string()),
                          cfg + ": key 'train.epochs' must be in [1, 2147483647], got 0");
    cfg = write("nan.toml", "backend = \"native\"\n[solver]\nlr = nan\n");
    expect_one_line_error(run("train --config " + cfg + " --out " + dir_.string()),
                          cfg + ": key 'solver.lr' must be a finite number, got nan");
}

// No training images: an error naming the file before training, not a NaN loss and an untrained
// checkpoint. No test images: the same, naming the test file.
TEST_F(CliErrors, EmptyDatasetNamesTheFile) {
    const fs::path data = dir_ / "data";
    fs::create_directories(data);
    write_idx("data/train-images-idx3-ubyte", {0, 28, 28}, 0);
    write_idx("data/train-labels-idx1-ubyte", {0}, 0);
    write_idx("data/t10k-images-idx3-ubyte", {2, 28, 28}, 2 * 28 * 28);
    write_idx("data/t10k-labels-idx1-ubyte", {2}, 2);
    const std::string cfg = write("empty.toml", "backend = \"native\"\n[data]\ndir = \"" + data.string() +
                                                    "\"\n[[model.layers]]\ntype = \"flatten\"\n"
                                                    "[[model.layers]]\ntype = \"linear\"\nout = 10\n");
    const std::string out = (dir_ / "run").string();
    expect_one_line_error(
        run("train --config " + cfg + " --out " + out),
        (data / "train-images-idx3-ubyte").string() + ": holds 0 images (a dataset needs at least one)");
    EXPECT_FALSE(fs::exists(fs::path(out) / "model.safetensors"));

    write_idx("data/train-images-idx3-ubyte", {2, 28, 28}, 2 * 28 * 28);
    write_idx("data/train-labels-idx1-ubyte", {2}, 2);
    write_idx("data/t10k-images-idx3-ubyte", {0, 28, 28}, 0);
    write_idx("data/t10k-labels-idx1-ubyte", {0}, 0);
    expect_one_line_error(
        run("train --config " + cfg + " --out " + out),
        (data / "t10k-images-idx3-ubyte").string() + ": holds 0 images (a dataset needs at least one)");
    EXPECT_FALSE(fs::exists(fs::path(out) / "model.safetensors"));
}

// A batch norm's running variance below 0 (an edited or corrupt checkpoint) is refused naming the
// tensor and the value: evaluated, it made every output NaN and the accuracy chance.
TEST_F(CliErrors, EvalOfANegativeRunningVarianceSaysSo) {
    const std::string cfg = write("bn.toml", "backend = \"native\"\n[[model.layers]]\ntype = \"conv2d\"\nout = 4\n"
                                             "kernel = 3\n[[model.layers]]\ntype = \"batchnorm\"\n[[model.layers]]\n"
                                             "type = \"relu\"\n[[model.layers]]\ntype = \"flatten\"\n[[model.layers]]\n"
                                             "type = \"linear\"\nout = 10\n[data]\ndir = \"/usr/share/datasets/fashion-mnist\"\n");
    Result t = run("train --config " + cfg + " --epochs 1 --max-steps 1 --out " + (dir_ / "bn").string());
    ASSERT_EQ(t.code, 0) << t.output;
    xylem::io::Safetensors file = xylem::io::read_safetensors((dir_ / "bn" / "model.safetensors").string());
    const float negative = -1.0f;
    std::memcpy(file.tensors.at("1.running_var").data.data() + 2 * sizeof(float), &negative, sizeof negative);
    std::vector<xylem::io::TensorView> views;
    for (const auto& [name, t] : file.tensors) views.push_back({name, t.dtype, t.shape, t.data.data(), t.data.size()});
    const std::string bad = (dir_ / "negvar.safetensors").string();
    xylem::io::write_safetensors(bad, views, file.metadata);
    expect_one_line_error(run("eval --config " + cfg + " --checkpoint " + bad),
                          bad + ": tensor '1.running_var' holds the negative variance -1 at index 2: a running "
                                "variance is never below 0");
    Result ok = run("eval --config " + cfg + " --checkpoint " + (dir_ / "bn" / "model.safetensors").string());
    EXPECT_EQ(ok.code, 0) << ok.output;
}

// A diverged run's checkpoint: eval names the file, the first tensor with NaN/inf and how many.
TEST_F(CliErrors, EvalOfANonFiniteCheckpointSaysSo) {
    Result t = run("train --config " + kMlp + " --backend native --epochs 1 --max-steps 1 --out " + dir_.string());
    ASSERT_EQ(t.code, 0) << t.output;
    xylem::io::Safetensors file = xylem::io::read_safetensors((dir_ / "model.safetensors").string());
    auto poison = [&](const std::string& name, std::vector<size_t> at, float value) {
        std::vector<uint8_t>& bytes = file.tensors.at(name).data;
        for (size_t i : at) std::memcpy(bytes.data() + i * sizeof(float), &value, sizeof value);
    };
    poison("3.weight", {5, 700, 701}, std::numeric_limits<float>::quiet_NaN());  // the second linear layer, [64, 128]
    poison("5.bias", {2}, std::numeric_limits<float>::infinity());
    std::vector<xylem::io::TensorView> views;
    for (const auto& [name, t] : file.tensors) views.push_back({name, t.dtype, t.shape, t.data.data(), t.data.size()});
    const std::string bad = (dir_ / "diverged.safetensors").string();
    xylem::io::write_safetensors(bad, views, file.metadata);

    const size_t n = file.tensors.at("3.weight").data.size() / sizeof(float), count = file.tensors.size();
    expect_one_line_error(run("eval --config " + kMlp + " --backend native --checkpoint " + bad),
                          bad + ": tensor '3.weight' holds 3 non-finite values (NaN or inf) of " + std::to_string(n) +
                              "; 2 of the checkpoint's " + std::to_string(count) +
                              " tensors have some, so its weights are unusable");
    // The untouched checkpoint still evaluates.
    Result ok =
        run("eval --config " + kMlp + " --backend native --checkpoint " + (dir_ / "model.safetensors").string());
    EXPECT_EQ(ok.code, 0) << ok.output;
}

// A damaged checkpoint (truncated, a flipped bit, a tensor missing) is the file's own error in eval
// and predict: the line starts with the file and says what is wrong with it. (It was wrapped in
// "the test set of DIR: images of [1, 28, 28] (channels, rows, cols) do not fit the model of
// CONFIG and FILE: ...", blaming the images.) A tensor of another shape still names the images.
TEST_F(CliErrors, EvalAndPredictOfADamagedCheckpointNameTheFileNotTheImages) {
    Result t = run("train --config " + kMlp + " --backend native --epochs 1 --max-steps 1 --out " + dir_.string());
    ASSERT_EQ(t.code, 0) << t.output;
    const std::string good = (dir_ / "model.safetensors").string();
    std::string bytes;
    {
        std::ifstream in(good, std::ios::binary);
        bytes.assign(std::istreambuf_iterator<char>(in), {});
    }
    ASSERT_GT(bytes.size(), 100u);
    const std::string cut = write("cut.safetensors", bytes.substr(0, bytes.size() / 2));
    std::string flipped_bytes = bytes;
    flipped_bytes[flipped_bytes.size() - 3] ^= 0x10;
    const std::string flipped = write("flipped.safetensors", flipped_bytes);
    xylem::io::Safetensors file = xylem::io::read_safetensors(good);
    std::vector<xylem::io::TensorView> views;
    for (const auto& [name, tensor] : file.tensors)
        if (name != "5.bias") views.push_back({name, tensor.dtype, tensor.shape, tensor.data.data(), tensor.data.size()});
    const std::string missing = (dir_ / "missing.safetensors").string();
    xylem::io::write_safetensors(missing, views, file.metadata);
    views.clear();
    std::vector<uint8_t> two(2 * sizeof(float), 0);
    for (const auto& [name, tensor] : file.tensors)
        if (name == "5.bias") views.push_back({name, "F32", {2}, two.data(), two.size()});
        else views.push_back({name, tensor.dtype, tensor.shape, tensor.data.data(), tensor.data.size()});
    const std::string reshaped = (dir_ / "reshaped.safetensors").string();
    xylem::io::write_safetensors(reshaped, views, file.metadata);

    for (const std::string command : {"eval", "predict"}) {
        auto of = [&](const std::string& checkpoint) {
            return run(command + " --config " + kMlp + " --backend native --checkpoint " + checkpoint +
                       (command == "predict" ? " --out " + (dir_ / "p.csv").string() : ""));
        };
        for (const auto& [checkpoint, what] : std::vector<std::pair<std::string, std::string>>{
                 {cut, "tensor '"},
                 {flipped, "tensor '5.bias' does not match its checksum"},
                 {missing, "checkpoint has no tensor '5.bias'"}}) {
            const Result r = of(checkpoint);
            expect_one_line_error(r, what);
            EXPECT_EQ(r.output.rfind("xylem: error: " + checkpoint + ": " + what, 0), 0u) << command << ": " << r.output;
        }
        expect_one_line_error(of(reshaped), "images of [1, 28, 28] (channels, rows, cols) do not fit the model of " + kMlp +
                                                " and " + reshaped + ": " + reshaped +
                                                ": tensor '5.bias' has shape [2], the model expects [10]");
    }
}

// Every reader takes regular files only, each fitting in memory (xylem/io/input_file.h): a device
// named as data (/dev/zero read 15 GB, then ended in a bare std::bad_alloc), a FIFO, a folder.
TEST_F(CliErrors, DataConfigAndCheckpointFilesMustBeRegularFiles) {
    const std::string text_model = "[[model.layers]]\ntype = \"one_hot\"\n[[model.layers]]\ntype = \"linear\"\nout = \"vocab\"\n";
    const std::string zero = write("zero.toml", "backend = \"native\"\n[data]\ntext = [\"/dev/zero\"]\n" + text_model);
    expect_one_line_error(run("train --config " + zero + " --out " + (dir_ / "run").string()),
                          zero + ": key 'data.text': /dev/zero: is a character device, not a regular file: xylem reads "
                                 "text data from regular files only");
    ASSERT_EQ(::mkfifo((dir_ / "fifo").c_str(), 0600), 0);
    const std::string fifo = write("fifo.toml", "backend = \"native\"\n[data]\ntext = [\"" + (dir_ / "fifo").string() + "\"]\n" + text_model);
    expect_one_line_error(run("train --config " + fifo + " --out " + (dir_ / "run").string()),
                          (dir_ / "fifo").string() + ": is a FIFO (named pipe), not a regular file");
    expect_one_line_error(run("train --config /dev/zero"),
                          "/dev/zero: is a character device, not a regular file: xylem reads configs from regular files only");
    expect_one_line_error(run("eval --config " + kMlp + " --checkpoint /dev/null"),
                          "/dev/null: is a character device, not a regular file: xylem reads safetensors files from regular files only");
    expect_one_line_error(run("train --config " + dir_.string()), dir_.string() + ": is a directory, not a regular file");
    EXPECT_FALSE(fs::exists(dir_ / "run" / "last.safetensors"));
}

// A config whose keys nest too deep is refused by every command before toml++ reads it (a
// 50,000-part dotted key crashed it: segfault), with the file and line.
TEST_F(CliErrors, DeepDottedKeysAreOneLineInEveryCommand) {
    std::string key = "x";
    for (int i = 0; i < 50000; ++i) key += ".y";
    const std::string deep = write("deep.toml", "backend = \"native\"\n" + key + " = 1\n");
    const std::string header = write("header.toml", "[" + key + "]\n");
    const std::string why = ": the config nests deeper than 256 levels";
    for (const std::string cmd : {"train --config ", "eval --checkpoint x.safetensors --config ",
                                  "predict --checkpoint x.safetensors --config ", "sample --checkpoint x.safetensors --config "}) {
        SCOPED_TRACE(cmd);
        expect_one_line_error(run(cmd + deep), deep + ":2" + why);
        expect_one_line_error(run(cmd + header), header + ":1" + why);
    }
    // The config a checkpoint carries goes through the same parser when a run resumes.
    const std::string out = (dir_ / "run").string();
    ASSERT_EQ(run("train --config " + kMlp + " --backend native --max-steps 1 --out " + out).code, 0);
    const std::string last = out + "/last.safetensors";
    xylem::io::Safetensors file = xylem::io::read_safetensors(last);
    nlohmann::json state = nlohmann::json::parse(file.metadata.at("xylem.training_state"));
    state["config_text"] = "backend = \"native\"\n" + key + " = 1\n";
    file.metadata["xylem.training_state"] = state.dump();
    std::vector<xylem::io::TensorView> views;
    for (const auto& [name, t] : file.tensors) views.push_back({name, t.dtype, t.shape, t.data.data(), t.data.size()});
    xylem::io::write_safetensors(last, views, file.metadata);
    expect_one_line_error(run("train --resume " + out), state["config_source"].get<std::string>() + ":2" + why);
}

// No failure is a bare exception name: whatever escapes a command is a sentence naming the command
// and what it worked on (std::bad_alloc was printed as "xylem: error: std::bad_alloc").
TEST(CliFailure, NoFailureIsABareExceptionName) {
    xylem::cli::Args a;
    a.command = "train";
    a.config = "big.toml";
    EXPECT_EQ(xylem::cli::failure_text(std::bad_alloc(), a),
              "out of memory in xylem train --config big.toml: the machine could not give it the memory it asked for "
              "(std::bad_alloc); smaller data, a smaller model or batch, or a machine with more memory");
    EXPECT_EQ(xylem::cli::failure_text(xylem::Error("a.toml: key 'x' is wrong"), a), "a.toml: key 'x' is wrong");
    const std::string other = xylem::cli::failure_text(std::out_of_range("vector::_M_range_check"), a);
    EXPECT_EQ(other.rfind("xylem train --config big.toml failed unexpectedly: vector::_M_range_check (", 0), 0u) << other;
    a = {};
    a.command = "plot";
    a.operands = {"runs/a"};
    EXPECT_EQ(xylem::cli::failure_text(std::bad_alloc(), a).rfind("out of memory in xylem plot runs/a: ", 0), 0u);
}
