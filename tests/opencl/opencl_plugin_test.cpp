// The OpenCL plugin as a user meets it: `xylem backends` lists each OpenCL device, or says "no
// OpenCL platform" when the ICD loader finds none (and the other plugins keep working); and the
// same model trained with the same seed gives the native backend's losses and weights.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <sstream>

#include "xylem/train/run.h"
#include "support/backends.h"
#include "xylem/io/safetensors.h"

using namespace xylem;
namespace fs = std::filesystem;

namespace {

const char* kData = "/usr/share/datasets/fashion-mnist";

struct CliRun {
    int code;
    std::string output;
};

CliRun run_xylem(const std::string& args, const std::string& env = "") {
    const std::string cmd = "env " + env + " " + std::string(XYLEM_BINARY_DIR) + "/bin/xylem " + args + " 2>&1";
    CliRun r{-1, ""};
    FILE* p = popen(cmd.c_str(), "r");
    if (!p) return r;
    std::array<char, 4096> buf;
    while (size_t n = fread(buf.data(), 1, buf.size(), p)) r.output.append(buf.data(), n);
    const int status = pclose(p);
    r.code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    return r;
}

// The lines of `xylem backends` from the one starting with `name` up to the next backend.
std::string backend_block(const std::string& listing, const std::string& name) {
    std::istringstream in(listing);
    std::string line, block;
    bool inside = false;
    while (std::getline(in, line)) {
        const bool header = !line.empty() && line[0] != ' ';
        if (header) inside = line.rfind(name + " ", 0) == 0;
        if (inside) block += line + "\n";
    }
    return block;
}

bool has(const std::string& text, const std::string& needle) { return text.find(needle) != std::string::npos; }

bool opencl_available() {
    const auto names = test::available_backends();
    return std::find(names.begin(), names.end(), "opencl") != names.end();
}

class TempDir {
public:
    explicit TempDir(const std::string& tag)
        : path_(fs::temp_directory_path() / ("xylem_opencl_" + tag + "_" + std::to_string(::getpid()))) {
        fs::remove_all(path_);
        fs::create_directories(path_);
    }
    ~TempDir() { fs::remove_all(path_); }
    const fs::path& path() const { return path_; }

private:
    fs::path path_;
};

}  // namespace

// The unavailable path: an ICD loader with no vendor file. The plugin still loads, says why it
// cannot run, `xylem backends` exits 0 and native is unaffected.
TEST(OpenclPlugin, NoPlatformIsReportedAndTheOtherPluginsKeepWorking) {
    TempDir vendors("no_vendors");
    const CliRun r = run_xylem("backends", "OCL_ICD_VENDORS=" + vendors.path().string());
    EXPECT_EQ(r.code, 0) << r.output;
    const std::string opencl = backend_block(r.output, "opencl");
    ASSERT_FALSE(opencl.empty()) << "opencl missing from:\n" << r.output;
    EXPECT_TRUE(has(opencl, "unavailable")) << opencl;
    EXPECT_TRUE(has(opencl, "no OpenCL platform")) << opencl;
    EXPECT_TRUE(has(backend_block(r.output, "native"), "available")) << r.output;

    // Selecting it names the backend and the reason, in one line.
    const CliRun t = run_xylem("train --config " + std::string(XYLEM_SOURCE_DIR) + "/examples/fashion_mlp.toml " +
                                "--backend opencl --max-steps 1 --out " + (vendors.path() / "out").string(),
                            "OCL_ICD_VENDORS=" + vendors.path().string());
    EXPECT_EQ(t.code, 1) << t.output;
    EXPECT_TRUE(has(t.output, "opencl")) << t.output;
    EXPECT_TRUE(has(t.output, "no OpenCL platform")) << t.output;
    EXPECT_EQ(std::count(t.output.begin(), t.output.end(), '\n'), 1) << t.output;
}

TEST(OpenclPlugin, BackendsListsEachDeviceWithPlatformUnitsAndMemory) {
    if (!opencl_available()) GTEST_SKIP() << "no OpenCL platform on this machine";
    const CliRun r = run_xylem("backends");
    EXPECT_EQ(r.code, 0) << r.output;
    const std::string opencl = backend_block(r.output, "opencl");
    EXPECT_TRUE(has(opencl, "available")) << opencl;
    EXPECT_TRUE(has(opencl, "device 0: ")) << opencl;
    EXPECT_TRUE(has(opencl, "platform ")) << opencl;
    EXPECT_TRUE(has(opencl, "compute units")) << opencl;
    EXPECT_TRUE(has(opencl, "GiB")) << opencl;
    EXPECT_TRUE(has(opencl, "CLBlast")) << opencl;
}

// Same config, same seed: opencl and native agree on the epoch loss, the test accuracy and every
// trained weight within float rounding. The tolerances (docs/architecture.md) allow for CLBlast
// and OpenBLAS summing in different orders, and for PoCL's exp/tanh rounding.
class OpenclAgreesWithNative : public ::testing::TestWithParam<const char*> {};

TEST_P(OpenclAgreesWithNative, SameSeedSameLossesAndWeights) {
    if (!fs::exists(kData)) GTEST_SKIP() << "Fashion-MNIST not installed at " << kData;
    if (!opencl_available()) GTEST_SKIP() << "no OpenCL platform on this machine";
    const std::string example = GetParam();
    TempDir dir(example);
    std::map<std::string, train::RunResult> results;
    for (const std::string backend : {"native", "opencl"}) {
        RunConfig c = load_config(std::string(XYLEM_SOURCE_DIR) + "/examples/" + example + ".toml");
        c.epochs = 1;
        // Two trajectories that differ only in float summation order drift apart exponentially
        // (ReLU kinks and max pooling route by comparisons that rounding can flip; momentum carries
        // the difference). Measured on an AVX-512 machine: the MLP's weights differ by 4e-5 after
        // 50 steps and 8e-3 after 200; LeNet's by 1e-3 after 30 and 7e-3 after 60. So the weights
        // are compared where they must still agree, well before the drift.
        c.max_steps = example == "fashion_mlp" ? 50 : 30;
        c.out_dir = (dir.path() / backend).string();
        std::ostringstream log;
        results[backend] = train::run(c, *test::backend_named(backend)->device(0), log, train::RunOptions::quiet());
    }
    const train::EpochMetrics &n = results["native"].epochs.at(0), &o = results["opencl"].epochs.at(0);
    EXPECT_NEAR(o.train_loss, n.train_loss, 1e-3 * std::max(1.0, std::fabs(n.train_loss)));
    EXPECT_NEAR(o.test_accuracy, n.test_accuracy, 0.003);

    const io::Safetensors wn = io::read_safetensors(results["native"].checkpoint_path);
    const io::Safetensors wo = io::read_safetensors(results["opencl"].checkpoint_path);
    ASSERT_EQ(wn.tensors.size(), wo.tensors.size());
    for (const auto& [name, tn] : wn.tensors) {
        SCOPED_TRACE(name);
        const io::LoadedTensor& to = wo.tensors.at(name);
        ASSERT_EQ(tn.shape, to.shape);
        ASSERT_EQ(tn.dtype, "F32");
        const size_t count = tn.data.size() / 4;
        double worst = 0, scale = 1;
        for (size_t i = 0; i < count; ++i) {
            float a, b;
            std::memcpy(&a, tn.data.data() + 4 * i, 4);
            std::memcpy(&b, to.data.data() + 4 * i, 4);
            worst = std::max(worst, static_cast<double>(std::fabs(a - b)));
            scale = std::max(scale, static_cast<double>(std::fabs(a)));
        }
        EXPECT_LE(worst / scale, 1e-3) << "largest weight difference between native and opencl";
    }
}

INSTANTIATE_TEST_SUITE_P(Examples, OpenclAgreesWithNative, ::testing::Values("fashion_mlp", "fashion_lenet"),
                         [](const ::testing::TestParamInfo<const char*>& info) { return std::string(info.param); });

// An interrupted OpenCL run resumes where it stopped: 2 epochs + a resume to 3 agree with 3 epochs
// in one go within the conformance tolerance (1e-5 of the largest weight; the kernels have no
// atomics, so in practice they are identical).
TEST(OpenclPlugin, ResumedRunAgreesWithAnUninterruptedOne) {
    if (!fs::exists(kData)) GTEST_SKIP() << "Fashion-MNIST not installed at " << kData;
    if (!opencl_available()) GTEST_SKIP() << "no OpenCL platform on this machine";
    TempDir dir("resume");
    RunConfig c = load_config(std::string(XYLEM_SOURCE_DIR) + "/examples/fashion_mlp.toml");
    c.steps_per_epoch = 30;
    auto dev = test::backend_named("opencl")->device(0);
    std::ostringstream log;
    c.epochs = 3;
    c.out_dir = (dir.path() / "whole").string();
    const train::RunResult whole = train::run(c, *dev, log, train::RunOptions::quiet());
    c.epochs = 2;
    c.out_dir = (dir.path() / "split").string();
    train::run(c, *dev, log, train::RunOptions::quiet());
    c.epochs = 3;
    train::RunOptions resume = train::RunOptions::quiet();
    resume.resume_from = (dir.path() / "split" / "last.safetensors").string();
    const train::RunResult split = train::run(c, *dev, log, resume);
    const io::Safetensors a = io::read_safetensors(whole.checkpoint_path), b = io::read_safetensors(split.checkpoint_path);
    ASSERT_EQ(a.tensors.size(), b.tensors.size());
    for (const auto& [name, ta] : a.tensors) {
        const io::LoadedTensor& tb = b.tensors.at(name);
        ASSERT_EQ(ta.data.size(), tb.data.size()) << name;
        double worst = 0, scale = 1;
        for (size_t i = 0; i < ta.data.size() / 4; ++i) {
            float x, y;
            std::memcpy(&x, ta.data.data() + 4 * i, 4);
            std::memcpy(&y, tb.data.data() + 4 * i, 4);
            worst = std::max(worst, static_cast<double>(std::fabs(x - y)));
            scale = std::max(scale, static_cast<double>(std::fabs(x)));
        }
        EXPECT_LE(worst / scale, 1e-5) << name;
    }
    ASSERT_EQ(split.epochs.size(), 3u);
    EXPECT_NEAR(split.epochs.back().train_loss, whole.epochs.back().train_loss, 1e-5);
}

// A kernel build that fails is an error naming the kernel file and the options and carrying
// the compiler's build log (here the options turn `__kernel` into an unknown word).
TEST(OpenclPlugin, KernelBuildFailureCarriesTheBuildLog) {
    if (!opencl_available()) GTEST_SKIP() << "no OpenCL platform on this machine";
    TempDir dir("build_failure");
    const CliRun r = run_xylem("train --config " + std::string(XYLEM_SOURCE_DIR) + "/examples/fashion_mlp.toml " +
                                   "--backend opencl --max-steps 1 --out " + (dir.path() / "out").string(),
                               "XYLEM_OPENCL_BUILD_OPTIONS=-D__kernel=not_a_qualifier");
    EXPECT_EQ(r.code, 1) << r.output;
    EXPECT_TRUE(has(r.output, "building kernels/")) << r.output;
    EXPECT_TRUE(has(r.output, "-D__kernel=not_a_qualifier")) << r.output;
    EXPECT_TRUE(has(r.output, "build log:")) << r.output;
    EXPECT_TRUE(has(r.output, "error")) << r.output;
    EXPECT_FALSE(has(r.output, "Aborted")) << r.output;
}
