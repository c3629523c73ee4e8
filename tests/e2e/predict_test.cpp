// `xylem predict`: the top classes of each image with their probabilities, in a CSV with one row
// per image whose top-1 agrees with `xylem eval`; other IDX inputs; bad inputs named in one line.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <set>
#include <sstream>
#include <vector>

#include "support/files.h"
#include "xylem/train/predict.h"
#include "cli_run.h"
#include "xylem/io/idx.h"
#include "xylem/io/safetensors.h"

namespace fs = std::filesystem;
using xylem::test::read_file;
using xylem::test::read_csv;
using xylem::test::run_cli;

namespace {

const std::string kMlp = std::string(XYLEM_SOURCE_DIR) + "/examples/fashion_mlp.toml";
const std::string kData = "/usr/share/datasets/fashion-mnist";

// One short training run shared by the tests: a checkpoint that is better than chance.
class Predict : public ::testing::Test {
protected:
    static void SetUpTestSuite() {
        dir_ = fs::temp_directory_path() / ("xylem_predict_" + std::to_string(::getpid()));
        fs::create_directories(dir_);
        const auto r = run_cli("train --config " + kMlp + " --backend native --max-steps 300 --out " + dir_.string());
        ASSERT_EQ(r.code, 0) << r.out << r.err;
        ckpt_ = (dir_ / "model.safetensors").string();
    }
    static void TearDownTestSuite() { fs::remove_all(dir_); }
    std::string predict(const std::string& args) const {
        return "predict --config " + kMlp + " --checkpoint " + ckpt_ + " --backend native " + args;
    }
    // An uncompressed IDX image file: `count` images of rows x cols bytes taken from `pixels`.
    static std::string write_images(const std::string& name, uint32_t count, uint32_t rows, uint32_t cols,
                                    const std::vector<uint8_t>& pixels) {
        std::string bytes = {0, 0, 8, 3};
        for (uint32_t d : {count, rows, cols})
            for (int shift = 24; shift >= 0; shift -= 8) bytes.push_back(static_cast<char>(d >> shift));
        bytes.append(reinterpret_cast<const char*>(pixels.data()), pixels.size());
        std::ofstream(dir_ / name, std::ios::binary) << bytes;
        return (dir_ / name).string();
    }
    // Exactly one line on stderr, exit 1, with `needle` in it.
    static void expect_one_line_error(const xylem::test::CliResult& r, const std::string& needle) {
        EXPECT_EQ(r.code, 1) << r.out << r.err;
        EXPECT_EQ(r.err.rfind("xylem: error: ", 0), 0u) << r.err;
        EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
        EXPECT_NE(r.err.find(needle), std::string::npos) << r.err;
    }
    static fs::path dir_;
    static std::string ckpt_;
};
fs::path Predict::dir_;
std::string Predict::ckpt_;

}  // namespace

// Every test image gets a row; top-1 agrees with eval's accuracy to the image; probabilities are
// sorted, in [0, 1]; the terminal shows ten images and a count.
TEST_F(Predict, TestSetRowsAndTopOneMatchEval) {
    const fs::path csv = dir_ / "test.csv";
    const auto r = run_cli(predict("--out " + csv.string()));
    ASSERT_EQ(r.code, 0) << r.out << r.err;
    EXPECT_EQ(r.err, "");
    const auto rows = read_csv(csv);
    ASSERT_EQ(rows.size(), 10001u);
    EXPECT_EQ(rows[0], (std::vector<std::string>{"image", "label", "top1_class", "top1_name", "top1_prob", "top2_class",
                                                  "top2_name", "top2_prob", "top3_class", "top3_name", "top3_prob"}));
    const xylem::io::Dataset test = xylem::io::load_mnist_dir(kData, false);
    int64_t correct = 0;
    for (size_t i = 1; i < rows.size(); ++i) {
        ASSERT_EQ(rows[i].size(), 11u) << i;
        EXPECT_EQ(rows[i][0], std::to_string(i - 1));
        EXPECT_EQ(rows[i][1], std::to_string(test.labels[i - 1]));
        correct += rows[i][2] == rows[i][1];
        const double p1 = std::stod(rows[i][4]), p2 = std::stod(rows[i][7]), p3 = std::stod(rows[i][10]);
        EXPECT_TRUE(p1 >= p2 && p2 >= p3 && p3 >= 0 && p1 <= 1) << i;
    }
    const auto e = run_cli("eval --config " + kMlp + " --checkpoint " + ckpt_ + " --backend native");
    ASSERT_EQ(e.code, 0) << e.err;
    char acc[32];
    std::snprintf(acc, sizeof acc, "%.2f%%", 100.0 * static_cast<double>(correct) / 10000.0);
    EXPECT_EQ(e.out.rfind(std::string("test accuracy ") + acc + " ", 0), 0u) << acc << " vs " << e.out;
    EXPECT_GT(correct, 5000);  // trained: far better than chance
    EXPECT_NE(r.out.find(std::string("top-1 accuracy ") + acc), std::string::npos) << r.out;
    // Ten images and a count on the terminal, with Fashion-MNIST's names.
    EXPECT_NE(r.out.find("\n  9: "), std::string::npos) << r.out;
    EXPECT_EQ(r.out.find("\n  10: "), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("  ... 9990 more in the CSV\n"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("(label: Ankle boot"), std::string::npos) << r.out;  // test image 0
    EXPECT_NE(r.out.find("predictions: " + csv.string()), std::string::npos) << r.out;
}

TEST_F(Predict, TopKColumnsAndDefaultOutputBesideTheCheckpoint) {
    fs::remove(dir_ / "predictions.csv");
    const auto r = run_cli(predict("--top 10"));
    ASSERT_EQ(r.code, 0) << r.err;
    const auto rows = read_csv(dir_ / "predictions.csv");
    ASSERT_EQ(rows.size(), 10001u);
    ASSERT_EQ(rows[0].size(), 2u + 3 * 10);
    EXPECT_EQ(rows[0].back(), "top10_prob");
    for (size_t i = 1; i < rows.size(); i += 997) {
        double sum = 0;
        std::set<std::string> classes;
        for (size_t k = 0; k < 10; ++k) {
            sum += std::stod(rows[i][4 + 3 * k]);
            classes.insert(rows[i][2 + 3 * k]);
        }
        EXPECT_NEAR(sum, 1.0, 1e-4) << i;  // all ten classes: the whole distribution
        EXPECT_EQ(classes.size(), 10u) << i;
    }
    const auto one = run_cli(predict("--top 1 --out " + (dir_ / "one.csv").string()));
    ASSERT_EQ(one.code, 0) << one.err;
    EXPECT_EQ(read_csv(dir_ / "one.csv")[0], (std::vector<std::string>{"image", "label", "top1_class", "top1_name", "top1_prob"}));

    auto bad = run_cli(predict("--top 11"));
    EXPECT_EQ(bad.code, 2);
    EXPECT_EQ(bad.err.rfind("xylem: --top 11 asks for more classes than the model's 10\n", 0), 0u) << bad.err;
    bad = run_cli(predict("--top 0"));
    EXPECT_EQ(bad.code, 2);
    EXPECT_EQ(bad.err.rfind("xylem: --top must be in [1, 2147483647], got 0\n", 0), 0u) << bad.err;
}

// A model ending in softmax or log_softmax (same parameters, so the same checkpoint loads) gives
// the same probabilities: its outputs are not put through softmax a second time.
TEST_F(Predict, SoftmaxAndLogSoftmaxModelsGiveTheSameProbabilities) {
    const std::string base = read_file(kMlp);
    auto run_with_tail = [&](const std::string& tail, const std::string& name) {
        const std::string cfg = (dir_ / (name + ".toml")).string();
        std::ofstream(cfg) << base << (tail.empty() ? "" : "\n[[model.layers]]\ntype = \"" + tail + "\"\n");
        const auto r = run_cli("predict --config " + cfg + " --checkpoint " + ckpt_ + " --backend native --top 10 --out " +
                               (dir_ / (name + ".csv")).string());
        EXPECT_EQ(r.code, 0) << r.err;
        return read_csv(dir_ / (name + ".csv"));
    };
    const auto logits = run_with_tail("", "logits"), soft = run_with_tail("softmax", "soft"),
               logsoft = run_with_tail("log_softmax", "logsoft");
    ASSERT_EQ(logits.size(), 10001u);
    ASSERT_EQ(soft.size(), logits.size());
    ASSERT_EQ(logsoft.size(), logits.size());
    for (size_t i = 1; i < logits.size(); i += 101)
        for (size_t k = 0; k < 10; ++k) {
            EXPECT_NEAR(std::stod(soft[i][4 + 3 * k]), std::stod(logits[i][4 + 3 * k]), 2e-5) << i << " " << k;
            EXPECT_NEAR(std::stod(logsoft[i][4 + 3 * k]), std::stod(logits[i][4 + 3 * k]), 2e-5) << i << " " << k;
        }
}

TEST(PredictProbabilities, EachOutputKind) {
    const float logits[3] = {1000.0f, 999.0f, -5.0f};  // softmax shifted by the max: no overflow
    double p[3];
    xylem::train::probabilities(logits, 3, xylem::train::OutputKind::logits, p);
    const double z = 1 + std::exp(-1.0) + std::exp(-1005.0);
    EXPECT_NEAR(p[0], 1 / z, 1e-12);
    EXPECT_NEAR(p[1], std::exp(-1.0) / z, 1e-12);
    const float probs[3] = {0.5f, 0.25f, 0.25f};
    xylem::train::probabilities(probs, 3, xylem::train::OutputKind::probabilities, p);
    EXPECT_EQ(p[0], 0.5);
    EXPECT_EQ(p[2], 0.25);
    const float logp[2] = {std::log(0.75f), std::log(0.25f)};
    xylem::train::probabilities(logp, 2, xylem::train::OutputKind::log_probabilities, p);
    EXPECT_NEAR(p[0], 0.75, 1e-6);
    EXPECT_NEAR(p[1], 0.25, 1e-6);
}

// --input: a small IDX file (plain and gzipped) of the test set's first images gets the same
// predictions as those images in the test set run; no labels, so the label column is empty.
TEST_F(Predict, InputFileOfImages) {
    const xylem::io::IdxArray t10k = xylem::io::read_idx(kData + "/t10k-images-idx3-ubyte.gz");
    const std::vector<uint8_t> first(t10k.data.begin(), t10k.data.begin() + 3 * 28 * 28);
    const std::string plain = write_images("three", 3, 28, 28, first);
    ASSERT_EQ(std::system(("gzip -c " + plain + " > " + plain + ".gz").c_str()), 0);
    const auto full = run_cli(predict("--out " + (dir_ / "full.csv").string()));
    ASSERT_EQ(full.code, 0) << full.err;
    const auto expected = read_csv(dir_ / "full.csv");
    for (const std::string& input : {plain, plain + ".gz"}) {
        const fs::path csv = dir_ / "three.csv";
        const auto r = run_cli(predict("--input " + input + " --out " + csv.string()));
        ASSERT_EQ(r.code, 0) << r.err;
        EXPECT_NE(r.out.find("3 images of " + input + " (28x28 pixels)"), std::string::npos) << r.out;
        EXPECT_EQ(r.out.find("label"), std::string::npos) << r.out;
        EXPECT_EQ(r.out.find("accuracy"), std::string::npos) << r.out;
        const auto rows = read_csv(csv);
        ASSERT_EQ(rows.size(), 4u);
        for (size_t i = 1; i < 4; ++i) {
            EXPECT_EQ(rows[i][1], "") << i;
            for (size_t c : {0u, 2u, 3u, 5u, 6u, 8u, 9u}) EXPECT_EQ(rows[i][c], expected[i][c]) << i << " " << c;
        }
    }
}

// Class names: Fashion-MNIST's only for a fashion-mnist data dir; otherwise the class index.
TEST_F(Predict, ClassIndexWhenTheDataIsNotFashionMnist) {
    const fs::path link = dir_ / "digits";
    fs::create_directory_symlink(kData, link);
    std::string cfg = read_file(kMlp);
    cfg.replace(cfg.find(kData), kData.size(), link.string());
    std::ofstream(dir_ / "digits.toml") << cfg;
    const auto r = run_cli("predict --config " + (dir_ / "digits.toml").string() + " --checkpoint " + ckpt_ +
                           " --backend native --top 1 --out " + (dir_ / "digits.csv").string());
    ASSERT_EQ(r.code, 0) << r.err;
    const auto rows = read_csv(dir_ / "digits.csv");
    for (size_t i = 1; i < rows.size(); i += 500) EXPECT_EQ(rows[i][3], rows[i][2]) << i;
    EXPECT_NE(r.out.find("(label: 9"), std::string::npos) << r.out;
    EXPECT_EQ(xylem::train::class_names(xylem::load_config(kMlp), 10)[9], "Ankle boot");
    EXPECT_EQ(xylem::train::class_names(xylem::load_config(kMlp), 11)[9], "9");
}

TEST_F(Predict, BadInputsAreOneLineNamingTheFile) {
    // Images of the wrong size for the model.
    const std::string small = write_images("small", 2, 10, 10, std::vector<uint8_t>(200, 7));
    auto r = run_cli(predict("--input " + small));
    // The file and its shape, the config and checkpoint, the layer's own words, then the config's
    // key and the shape its data has.
    expect_one_line_error(r, small + ": images of [1, 10, 10] (channels, rows, cols) do not fit the model of " + kMlp +
                                 " and " + ckpt_ + ": ");
    EXPECT_NE(r.err.find("; " + kMlp + " (key 'data.dir' = " + kData + ") has images of [1, 28, 28] (channels, rows, cols)"),
              std::string::npos) << r.err;
    // A corrupt (truncated) IDX file.
    const std::string cut = write_images("cut", 5, 28, 28, std::vector<uint8_t>(100, 1));
    expect_one_line_error(run_cli(predict("--input " + cut)), cut + ": ");
    // A label file given as images.
    expect_one_line_error(run_cli(predict("--input " + kData + "/t10k-labels-idx1-ubyte.gz")),
                          kData + "/t10k-labels-idx1-ubyte.gz: not an IDX image file");
    expect_one_line_error(run_cli(predict("--input " + (dir_ / "absent").string())), (dir_ / "absent").string() + ": ");
    // A checkpoint with a NaN weight.
    xylem::io::Safetensors file = xylem::io::read_safetensors(ckpt_);
    const float nan = std::numeric_limits<float>::quiet_NaN();
    std::memcpy(file.tensors.at("1.weight").data.data(), &nan, sizeof nan);
    std::vector<xylem::io::TensorView> views;
    for (const auto& [name, t] : file.tensors) views.push_back({name, t.dtype, t.shape, t.data.data(), t.data.size()});
    const std::string bad = (dir_ / "nan.safetensors").string();
    xylem::io::write_safetensors(bad, views, file.metadata);
    expect_one_line_error(run_cli("predict --config " + kMlp + " --checkpoint " + bad + " --backend native"),
                          bad + ": tensor '1.weight' holds 1 non-finite values");
    // Missing flags are usage errors.
    r = run_cli("predict --config " + kMlp);
    EXPECT_EQ(r.code, 2);
    EXPECT_EQ(r.err.rfind("xylem: predict needs --checkpoint FILE\nusage: xylem predict ", 0), 0u) << r.err;
    // An unwritable CSV is named.
    expect_one_line_error(run_cli(predict("--out /nonexistent/dir/p.csv")), "/nonexistent/dir/p.csv: ");
    // Only regular files are images (/dev/zero was read without end).
    expect_one_line_error(run_cli(predict("--input /dev/zero")),
                          "/dev/zero: is a character device, not a regular file: xylem reads IDX data from regular files only");
}

// --out names a file: a folder is refused saying so (it was "cannot rename ...: Not a directory"),
// and any valid file name works, the longest too (its temporary name used to be 9 bytes too long).
TEST_F(Predict, OutIsAFileNameOfAnyValidLength) {
    const std::string folder = (dir_ / "csvs").string();
    fs::create_directories(folder);
    expect_one_line_error(run_cli(predict("--out " + folder + "/")),
                          folder + "/: ends with '/', so it names a folder; a file name is needed here (e.g. " + folder +
                              "/NAME)");
    expect_one_line_error(run_cli(predict("--out " + folder)),
                          folder + ": is a folder; a file name is needed here (e.g. " + folder + "/NAME)");
    EXPECT_TRUE(fs::is_empty(folder));
    const std::string longest = (fs::path(folder) / (std::string(251, 'p') + ".csv")).string();
    const auto r = run_cli(predict("--out " + longest));
    EXPECT_EQ(r.code, 0) << r.err;
    EXPECT_GT(fs::file_size(longest), 0u);
}
