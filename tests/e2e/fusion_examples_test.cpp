// Every shipped example trains to the same parameters with step fusion on and off (the fusion
// pass, xylem/fusion.h, changes how ops are launched, never what they compute), and the char-rnn
// example, whose LSTM gate arithmetic the pass fuses, launches at least 3x fewer ops per step.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <regex>

#include "cli_run.h"
#include "xylem/io/safetensors.h"

using namespace xylem;
namespace fs = std::filesystem;

namespace {

struct TrainRun {
    test::CliResult cli;
    fs::path dir;
};

TrainRun train(const std::string& example, bool fusion, int steps, const std::string& extra = "") {
    TrainRun r;
    r.dir = fs::temp_directory_path() / ("xylem_fusion_" + std::to_string(::getpid()) + "_" + example + (fusion ? "_on" : "_off"));
    fs::remove_all(r.dir);
    r.cli = test::run_cli("train --config " + std::string(XYLEM_SOURCE_DIR) + "/examples/" + example +
                              ".toml --backend native --max-steps " + std::to_string(steps) + " --out " + r.dir.string() + " " + extra,
                          std::string("XYLEM_FUSION=") + (fusion ? "1" : "0") + " XYLEM_NUM_THREADS=1");
    return r;
}

uint64_t launches_per_step(const std::string& out) {
    std::smatch m;
    static const std::regex re("launches per training step: ([0-9]+)");
    return std::regex_search(out, m, re) ? std::stoull(m[1]) : 0;
}

// max|a - b| / max(1, max|b|) over every F32 tensor of two checkpoints holding the same tensors.
double checkpoint_difference(const fs::path& a, const fs::path& b) {
    const io::Safetensors ta = io::read_safetensors(a.string()), tb = io::read_safetensors(b.string());
    EXPECT_EQ(ta.tensors.size(), tb.tensors.size());
    double worst = 0;
    for (const auto& [name, x] : ta.tensors) {
        auto it = tb.tensors.find(name);
        if (it == tb.tensors.end()) {
            ADD_FAILURE() << "tensor " << name << " missing with fusion on";
            continue;
        }
        if (x.dtype != "F32" || x.data.size() != it->second.data.size()) continue;
        std::vector<float> va(x.data.size() / 4), vb(va.size());
        std::memcpy(va.data(), x.data.data(), x.data.size());
        std::memcpy(vb.data(), it->second.data.data(), x.data.size());
        double diff = 0, scale = 1;
        for (size_t i = 0; i < va.size(); ++i) {
            diff = std::max(diff, std::abs(double(va[i]) - vb[i]));
            scale = std::max(scale, std::abs(double(vb[i])));
        }
        worst = std::max(worst, diff / scale);
    }
    return worst;
}

class FusionExamples : public ::testing::TestWithParam<std::string> {};

}  // namespace

TEST_P(FusionExamples, TrainToTheSameParametersWithFusionOnAndOff) {
    const std::string example = GetParam();
    const int steps = example == "char_rnn" ? 8 : 12;
    const TrainRun off = train(example, false, steps), on = train(example, true, steps);
    ASSERT_EQ(off.cli.code, 0) << off.cli.err;
    ASSERT_EQ(on.cli.code, 0) << on.cli.err;
    const double diff = checkpoint_difference(on.dir / "model.safetensors", off.dir / "model.safetensors");
    EXPECT_LT(diff, 1e-5) << example << ": parameters differ with fusion on";
    fs::remove_all(off.dir);
    fs::remove_all(on.dir);
}

TEST(FusionExamples, CharRnnLaunchesAtLeastThreeTimesFewerOpsFused) {
    const TrainRun off = train("char_rnn", false, 3, "--profile"), on = train("char_rnn", true, 3, "--profile");
    ASSERT_EQ(off.cli.code, 0) << off.cli.err;
    ASSERT_EQ(on.cli.code, 0) << on.cli.err;
    const uint64_t l_off = launches_per_step(off.cli.out), l_on = launches_per_step(on.cli.out);
    ASSERT_GT(l_on, 0u) << on.cli.out;
    EXPECT_GE(l_off, 3 * l_on) << "fused " << l_on << " vs unfused " << l_off;
    fs::remove_all(off.dir);
    fs::remove_all(on.dir);
}

INSTANTIATE_TEST_SUITE_P(Examples, FusionExamples,
                         ::testing::Values("fashion_mlp", "leaf_mlp", "conv_mlp", "fashion_lenet", "fashion_vgg_small", "fashion_resnet",
                                           "char_rnn"));
