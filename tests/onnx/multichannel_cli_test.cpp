// Multi-channel images through the command line: a 3-channel conv model (conv_bn_model.h) as
// `xylem import` writes it, then `xylem eval` and `xylem predict` on 3-channel IDX files
// ([N, 3, 8, 8], bytes and float32) agree with `xylem run` on the same values; `xylem export`
// takes its input sample from the 4-dim test file; `xylem train --init` fine-tunes it on them with
// the loss falling; files of the wrong shape are one-line errors naming both shapes.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "conv_bn_model.h"
#include "e2e/cli_run.h"
#include "support/files.h"
#include "support/backends.h"
#include "xylem/onnx/npy.h"

namespace fs = std::filesystem;
using xylem::test::read_file;
using xylem::test::read_csv;

namespace {

using xylem::test::run_cli;

constexpr int64_t kChannels = 3, kSide = 8, kClasses = 5, kTrain = 160, kTest = 40;

// An IDX file: magic 0 0 type ndim, big-endian dims, then the payload.
void write_idx(const fs::path& path, uint8_t type, const std::vector<uint32_t>& dims, const std::vector<uint8_t>& payload) {
    std::vector<uint8_t> out{0, 0, type, static_cast<uint8_t>(dims.size())};
    for (uint32_t d : dims)
        for (int shift = 24; shift >= 0; shift -= 8) out.push_back(static_cast<uint8_t>(d >> shift));
    out.insert(out.end(), payload.begin(), payload.end());
    std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(out.data()), static_cast<std::streamsize>(out.size()));
}

std::vector<uint8_t> big_endian(const std::vector<float>& values) {
    std::vector<uint8_t> out;
    for (float v : values) {
        uint32_t bits;
        std::memcpy(&bits, &v, 4);
        for (int shift = 24; shift >= 0; shift -= 8) out.push_back(static_cast<uint8_t>(bits >> shift));
    }
    return out;
}

// Images a conv can tell apart: class k brightens channel k (k < 3), all three (3) or none (4).
struct Set {
    std::vector<uint8_t> pixels, labels;
};
Set make_set(int64_t count, uint32_t seed) {
    std::mt19937 rng(seed);
    std::uniform_int_distribution<int> noise(0, 90);
    Set s;
    for (int64_t i = 0; i < count; ++i) {
        const int label = static_cast<int>((i * 7 + seed) % kClasses);
        s.labels.push_back(static_cast<uint8_t>(label));
        for (int64_t c = 0; c < kChannels; ++c)
            for (int64_t p = 0; p < kSide * kSide; ++p)
                s.pixels.push_back(static_cast<uint8_t>(noise(rng) + ((label == c || label == 3) ? 150 : 0)));
    }
    return s;
}

class MultiChannelCli : public ::testing::Test {
protected:
    void SetUp() override {
        if (!xylem::test::backend_named("native")) GTEST_SKIP() << "no native plugin";
        dir_ = fs::temp_directory_path() / ("xylem_multichannel_" + std::to_string(::getpid()));
        fs::remove_all(dir_);
        fs::create_directories(dir_ / "data");
        const Set train = make_set(kTrain, 1), test = make_set(kTest, 2);
        const std::vector<uint32_t> train_dims{kTrain, kChannels, kSide, kSide}, test_dims{kTest, kChannels, kSide, kSide};
        write_idx(dir_ / "data" / "train-images-idx3-ubyte", 0x08, train_dims, train.pixels);
        write_idx(dir_ / "data" / "train-labels-idx1-ubyte", 0x08, {kTrain}, train.labels);
        write_idx(dir_ / "data" / "t10k-images-idx3-ubyte", 0x08, test_dims, test.pixels);
        write_idx(dir_ / "data" / "t10k-labels-idx1-ubyte", 0x08, {kTest}, test.labels);
        labels_ = test.labels;
        // The same test images as float32 (as xylem scales bytes: v / 255), in an IDX file and an .npy.
        for (uint8_t v : test.pixels) values_.push_back(static_cast<float>(v) / 255.0f);
        write_idx(dir_ / "test-f32.idx", 0x0D, test_dims, big_endian(values_));
        xylem::npy::write((dir_ / "test.npy").string(), {kTest, kChannels, kSide, kSide}, values_.data());
        // One-channel images of the same size and count: the wrong shape for the model.
        write_idx(dir_ / "gray.idx", 0x08, {kTest, kSide, kSide}, std::vector<uint8_t>(kTest * kSide * kSide, 9));

        std::ofstream(dir_ / "model.onnx", std::ios::binary) << xylem::test::conv_bn_model();
        const auto r = run_cli("import " + (dir_ / "model.onnx").string() + " --out " + (dir_ / "imp").string());
        ASSERT_EQ(r.code, 0) << r.out << r.err;
        // The imported config's defaults, with its data where this test wrote it, and small batches.
        std::string cfg = read_file(dir_ / "imp" / "model.toml");
        const std::string fashion = "/usr/share/datasets/fashion-mnist", batch = "batch_size = 64";
        ASSERT_NE(cfg.find(fashion), std::string::npos) << cfg;
        cfg.replace(cfg.find(fashion), fashion.size(), (dir_ / "data").string());
        ASSERT_NE(cfg.find(batch), std::string::npos) << cfg;
        cfg.replace(cfg.find(batch), batch.size(), "batch_size = 16\nprint_every = 1");
        cfg.replace(cfg.find("backend = \"auto\""), 16, "backend = \"native\"");
        std::ofstream(dir_ / "imp" / "model.toml") << cfg;
        config_ = (dir_ / "imp" / "model.toml").string();
        checkpoint_ = (dir_ / "imp" / "model.safetensors").string();
    }
    void TearDown() override { fs::remove_all(dir_); }

    // `xylem run`'s logits for test.npy of `model` (the ONNX file): [kTest, kClasses], from <output>.npy.
    std::vector<float> run_logits(const fs::path& model, const std::string& out, const std::string& output) {
        const auto r = run_cli("run " + model.string() + " --input " + (dir_ / "test.npy").string() + " --backend native --out " +
                               (dir_ / out).string());
        EXPECT_EQ(r.code, 0) << r.out << r.err;
        const xylem::npy::Array y = xylem::npy::read((dir_ / out / (output + ".npy")).string());
        EXPECT_EQ(y.shape, (xylem::Shape{kTest, kClasses}));
        return y.values;
    }

    fs::path dir_;
    std::string config_, checkpoint_;
    std::vector<uint8_t> labels_;
    std::vector<float> values_;
};

TEST_F(MultiChannelCli, EvalAndPredictOnThreeChannelIdxAgreeWithRun) {
    const std::vector<float> logits = run_logits(dir_ / "model.onnx", "run", "y");
    ASSERT_EQ(logits.size(), static_cast<size_t>(kTest * kClasses));
    std::vector<int> top(kTest);
    std::vector<double> prob(kTest);
    int64_t correct = 0;
    for (int64_t i = 0; i < kTest; ++i) {
        const float* x = logits.data() + i * kClasses;
        top[i] = static_cast<int>(std::max_element(x, x + kClasses) - x);
        double sum = 0;
        for (int64_t k = 0; k < kClasses; ++k) sum += std::exp(static_cast<double>(x[k] - x[top[i]]));
        prob[i] = 1.0 / sum;
        correct += top[i] == labels_[static_cast<size_t>(i)];
    }

    // eval: the test set's accuracy is run's, to the image.
    auto r = run_cli("eval --config " + config_ + " --checkpoint " + checkpoint_);
    ASSERT_EQ(r.code, 0) << r.out << r.err;
    char want[64];
    std::snprintf(want, sizeof want, "test accuracy %.2f%% (%lld images", 100.0 * static_cast<double>(correct) / kTest,
                  static_cast<long long>(kTest));
    EXPECT_NE(r.out.find(want), std::string::npos) << want << "\n" << r.out;

    // predict: the byte and the float32 file give the same rows, and run's top class and probability.
    for (const std::string& input : {(dir_ / "data" / "t10k-images-idx3-ubyte").string(), (dir_ / "test-f32.idx").string()}) {
        const fs::path csv = dir_ / (fs::path(input).filename().string() + ".csv");
        r = run_cli("predict --config " + config_ + " --checkpoint " + checkpoint_ + " --input " + input + " --top 2 --out " +
                    csv.string());
        ASSERT_EQ(r.code, 0) << r.out << r.err;
        EXPECT_NE(r.out.find("40 images of " + input + " (3x8x8 pixels)"), std::string::npos) << r.out;
        const auto rows = read_csv(csv);
        ASSERT_EQ(rows.size(), static_cast<size_t>(kTest + 1));
        const auto& head = rows[0];
        const size_t cls = std::find(head.begin(), head.end(), "top1_class") - head.begin();
        const size_t p = std::find(head.begin(), head.end(), "top1_prob") - head.begin();
        ASSERT_LT(p, head.size());
        for (int64_t i = 0; i < kTest; ++i) {
            const auto& row = rows[static_cast<size_t>(i + 1)];
            EXPECT_EQ(std::stoi(row[cls]), top[i]) << "image " << i;
            EXPECT_NEAR(std::stod(row[p]), prob[i], 2e-5) << "image " << i;
        }
    }
    EXPECT_EQ(read_file(dir_ / "t10k-images-idx3-ubyte.csv"), read_file(dir_ / "test-f32.idx.csv"));

    // export: the input sample is the test file's [3, 8, 8]; the exported model runs as the original.
    r = run_cli("export --config " + config_ + " --checkpoint " + checkpoint_ + " --out " + (dir_ / "exported.onnx").string());
    ASSERT_EQ(r.code, 0) << r.out << r.err;
    const std::vector<float> again = run_logits(dir_ / "exported.onnx", "run2", "output");
    ASSERT_EQ(again.size(), logits.size());
    for (size_t i = 0; i < logits.size(); ++i) EXPECT_NEAR(again[i], logits[i], 1e-5) << i;
}

TEST_F(MultiChannelCli, ImagesOfTheWrongShapeNameBothShapes) {
    const std::string gray = (dir_ / "gray.idx").string();
    const auto r = run_cli("predict --config " + config_ + " --checkpoint " + checkpoint_ + " --input " + gray);
    EXPECT_EQ(r.code, 1) << r.out << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
    EXPECT_EQ(r.err.rfind("xylem: error: " + gray + ": images of [1, 8, 8] (channels, rows, cols) do not fit the model of " +
                              config_ + " and " + checkpoint_ + ": ", 0), 0u) << r.err;
    EXPECT_NE(r.err.find("[16, 1, 3, 3]"), std::string::npos) << r.err;  // the conv's weight for one channel ...
    EXPECT_NE(r.err.find("[16, 3, 3, 3]"), std::string::npos) << r.err;  // ... and the checkpoint's for three
    EXPECT_NE(r.err.find("(key 'data.dir' = " + (dir_ / "data").string() + ") has images of [3, 8, 8]"), std::string::npos)
        << r.err;

    // Training and test images of different shapes: refused before any step, naming the key.
    fs::copy_file(dir_ / "gray.idx", dir_ / "data" / "t10k-images-idx3-ubyte", fs::copy_options::overwrite_existing);
    const auto t = run_cli("train --config " + config_ + " --out " + (dir_ / "bad").string());
    EXPECT_EQ(t.code, 1) << t.out << t.err;
    EXPECT_NE(t.err.find(config_ + ": key 'data.dir' (" + (dir_ / "data").string() +
                         "): the training images are [3, 8, 8] (channels, rows, cols)"), std::string::npos) << t.err;
    EXPECT_NE(t.err.find("the test images [1, 8, 8]"), std::string::npos) << t.err;
}

TEST_F(MultiChannelCli, TrainInitFineTunesOnThreeChannelImages) {
    const fs::path out = dir_ / "tuned";
    const auto r = run_cli("train --config " + config_ + " --init " + checkpoint_ + " --epochs 3 --max-steps 30 --out " + out.string());
    ASSERT_EQ(r.code, 0) << r.out << r.err;
    EXPECT_NE(r.out.find("initial weights: " + checkpoint_), std::string::npos) << r.out;
    std::vector<double> losses;
    for (const auto& row : read_csv(out / "log.csv"))
        if (row.size() > 2 && row.back() == "interval") losses.push_back(std::stod(row[2]));
    ASSERT_GE(losses.size(), 20u) << read_file(out / "log.csv");
    auto mean = [](auto a, auto b) {
        double s = 0;
        for (auto i = a; i != b; ++i) s += *i;
        return s / static_cast<double>(b - a);
    };
    const double first = mean(losses.begin(), losses.begin() + 5), last = mean(losses.end() - 5, losses.end());
    std::cout << "fine-tuning on [N, 3, 8, 8]: loss " << first << " -> " << last << " over " << losses.size() << " steps\n";
    EXPECT_LT(last, 0.7 * first) << read_file(out / "log.csv");
    // The tuned checkpoint evaluates on the same 3-channel test set.
    const auto e = run_cli("eval --config " + config_ + " --checkpoint " + (out / "model.safetensors").string());
    ASSERT_EQ(e.code, 0) << e.out << e.err;
    EXPECT_NE(e.out.find("test accuracy "), std::string::npos) << e.out;
}

}  // namespace
