// The xylem program on bad input: one clear line on stderr, a non-zero exit, never an abort.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>

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
    fs::path dir_;
};

const std::string kMlp = std::string(XYLEM_SOURCE_DIR) + "/examples/fashion_mlp.toml";

}  // namespace

TEST_F(CliErrors, UnknownBackend) {
    expect_one_line_error(run("train --config " + kMlp + " --backend nosuch --out " + dir_.string()),
                          "unknown backend 'nosuch'");
}

TEST_F(CliErrors, UnknownBackendFromEnvironment) {
    expect_one_line_error(run("train --config " + kMlp + " --out " + dir_.string(), "XYLEM_BACKEND=envbackend"),
                          "unknown backend 'envbackend'");
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

TEST_F(CliErrors, ConvKernelLargerThanInputNamesLayerAndShapes) {
    std::string cfg = write("bigkernel.toml", "backend = \"native\"\n[[model.layers]]\ntype = \"conv2d\"\nout = 4\n"
                                              "kernel = 5\n[[model.layers]]\ntype = \"maxpool2d\"\nkernel = 2\n"
                                              "[[model.layers]]\ntype = \"conv2d\"\nout = 4\nkernel = 13\n");
    expect_one_line_error(run("train --config " + cfg + " --out " + dir_.string()),
                          "model layer 2 (conv2d): op conv2d_fwd: input [1, 4, 12, 12] (padding 0x0) is smaller than "
                          "the kernel [13, 13]");
}

TEST_F(CliErrors, ConvChannelMismatchNamesLayerAndShapes) {
    std::string cfg = write("groups.toml", "backend = \"native\"\n[[model.layers]]\ntype = \"conv2d\"\nout = 6\n"
                                           "kernel = 3\n[[model.layers]]\ntype = \"conv2d\"\nout = 4\nkernel = 3\n"
                                           "groups = 4\n");
    expect_one_line_error(run("train --config " + cfg + " --out " + dir_.string()),
                          "model layer 1 (conv2d): op conv2d_fwd: input channels 6 and output channels 4 must both "
                          "divide by groups 4");
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
