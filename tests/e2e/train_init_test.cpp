// Fine-tuning: `xylem train --init FILE` (train.init) starts a new run from a checkpoint's tensors
// instead of the seeded initialisation. The run's weights are the file's (a learning rate too small
// to move a float leaves them bit for bit), every tensor is checked before any is set, and --init
// is refused with --resume.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "cli_run.h"
#include "support/backends.h"
#include "xylem/io/safetensors.h"

namespace fs = std::filesystem;

namespace {

const char* kData = "/usr/share/datasets/fashion-mnist";

// An MLP; `lr` 1e-30 leaves every weight where it started (w - 1e-30 * g rounds back to w).
std::string mlp(const std::string& lr, int hidden = 16) {
    return std::string("backend = \"native\"\n[data]\ndir = \"") + kData +
           "\"\n[[model.layers]]\ntype = \"flatten\"\n[[model.layers]]\ntype = \"linear\"\nout = " +
           std::to_string(hidden) +
           "\n[[model.layers]]\ntype = \"relu\"\n[[model.layers]]\ntype = \"linear\"\nout = 10\n"
           "[solver]\ntype = \"sgd\"\nlr = " +
           lr + "\n[train]\nbatch_size = 32\nmax_steps = 3\nprint_every = 1\n";
}

// The model's tensors of a checkpoint (not a training checkpoint's "xylem.*" state), as bytes.
std::map<std::string, std::vector<uint8_t>> tensors(const fs::path& file) {
    std::map<std::string, std::vector<uint8_t>> out;
    for (const auto& [name, t] : xylem::io::read_safetensors(file.string()).tensors)
        if (name.rfind("xylem.", 0) != 0) out[name] = t.data;
    return out;
}

class TrainInit : public ::testing::Test {
protected:
    void SetUp() override {
        if (!fs::exists(kData)) GTEST_SKIP() << "Fashion-MNIST not installed at " << kData;
        if (!xylem::test::backend_named("native")) GTEST_SKIP() << "no native plugin";
        dir_ = fs::temp_directory_path() / ("xylem_train_init_" + std::to_string(::getpid()));
        fs::remove_all(dir_);
        fs::create_directories(dir_);
    }
    void TearDown() override { fs::remove_all(dir_); }
    std::string write(const std::string& name, const std::string& text) {
        std::ofstream(dir_ / name) << text;
        return (dir_ / name).string();
    }
    fs::path dir_;
};

TEST_F(TrainInit, ANewRunStartsFromTheCheckpointsWeights) {
    // A trained checkpoint (seed 7), then runs that barely move their weights: from it, and from scratch.
    const std::string trained = write("trained.toml", mlp("0.05") + "seed = 7\n");
    ASSERT_EQ(xylem::test::run_cli("train --config " + trained + " --out " + (dir_ / "a").string()).code, 0);
    const fs::path init = dir_ / "a" / "model.safetensors";
    ASSERT_TRUE(fs::exists(init));
    const std::string still = write("still.toml", mlp("1e-30"));
    const auto from = xylem::test::run_cli("train --config " + still + " --init " + init.string() + " --out " +
                                           (dir_ / "b").string());
    ASSERT_EQ(from.code, 0) << from.err;
    EXPECT_NE(from.out.find("initial weights: " + init.string()), std::string::npos) << from.out;
    ASSERT_EQ(xylem::test::run_cli("train --config " + still + " --out " + (dir_ / "c").string()).code, 0);
    const auto want = tensors(init), got = tensors(dir_ / "b" / "model.safetensors"),
               scratch = tensors(dir_ / "c" / "model.safetensors");
    ASSERT_EQ(want.size(), 4u);
    for (const auto& [name, values] : want) {
        ASSERT_TRUE(got.count(name)) << name;
        EXPECT_EQ(got.at(name), values) << name << ": the run did not start from the checkpoint";
        EXPECT_NE(scratch.at(name), values) << name << ": a run without --init starts from its seed";
    }
    // The config key does the same as the flag.
    const std::string keyed = write("keyed.toml", mlp("1e-30") + "init = \"" + init.string() + "\"\n");
    ASSERT_EQ(xylem::test::run_cli("train --config " + keyed + " --out " + (dir_ / "d").string()).code, 0);
    EXPECT_EQ(tensors(dir_ / "d" / "model.safetensors"), want);
}

TEST_F(TrainInit, AWrongCheckpointIsRefusedNamingTheTensor) {
    const std::string small = write("small.toml", mlp("0.05", 8));
    ASSERT_EQ(xylem::test::run_cli("train --config " + small + " --out " + (dir_ / "a").string()).code, 0);
    const std::string wide = write("wide.toml", mlp("0.05", 16));
    const auto r = xylem::test::run_cli("train --config " + wide + " --init " + (dir_ / "a" / "model.safetensors").string() +
                                        " --out " + (dir_ / "b").string());
    EXPECT_EQ(r.code, 1);
    EXPECT_NE(r.err.find("1.weight"), std::string::npos) << r.err;
    EXPECT_FALSE(fs::exists(dir_ / "b" / "model.safetensors"));
    const auto missing = xylem::test::run_cli("train --config " + wide + " --init " + (dir_ / "none.safetensors").string() +
                                              " --out " + (dir_ / "c").string());
    EXPECT_EQ(missing.code, 1);
    EXPECT_NE(missing.err.find("none.safetensors"), std::string::npos) << missing.err;
    const auto resumed = xylem::test::run_cli("train --resume " + (dir_ / "a").string() + " --init " +
                                              (dir_ / "a" / "model.safetensors").string());
    EXPECT_EQ(resumed.code, 2) << resumed.err;
    EXPECT_NE(resumed.err.find("--init"), std::string::npos) << resumed.err;
}

}  // namespace
