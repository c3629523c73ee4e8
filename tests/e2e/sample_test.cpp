// `xylem sample`: text from a character model's checkpoint. A fixed seed gives a fixed text, the
// one an independent reading of the checkpoint (a bigram model's weights, softmax in double, the
// documented draw) gives; every backend gives it; bad input is one line naming what is wrong.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <vector>

#include "cli_run.h"
#include "support/backends.h"
#include "xylem/io/safetensors.h"

namespace fs = std::filesystem;
using xylem::test::run_cli;

namespace {

// One_hot then linear: a bigram model, whose next-character scores are column `token` of the
// weight plus the bias, so the test can compute them without xylem.
const char* kBigram =
    "[[model.layers]]\ntype = \"one_hot\"\n[[model.layers]]\ntype = \"linear\"\nout = \"vocab\"\n";

class Sample : public ::testing::Test {
protected:
    static void SetUpTestSuite() {
        dir_ = fs::temp_directory_path() / ("xylem_sample_" + std::to_string(::getpid()));
        fs::create_directories(dir_);
        std::string text;
        std::mt19937 rng(3);
        const char* words[] = {"the ", "cat ", "sat ", "on ", "a ", "mat.\n", "dog ", "ran "};
        while (text.size() < 8000) text += words[rng() % 8];
        std::ofstream(dir_ / "corpus.txt", std::ios::binary) << text;
        config_ = write("bigram.toml", data_section() + kBigram + train_section());
        const auto r = run_cli("train --config " + config_ + " --backend native --out " + (dir_ / "run").string());
        ASSERT_EQ(r.code, 0) << r.out << r.err;
        ckpt_ = (dir_ / "run" / "model.safetensors").string();
    }
    static void TearDownTestSuite() { fs::remove_all(dir_); }
    static std::string data_section() {
        return "backend = \"native\"\n[data]\ntext = \"" + (dir_ / "corpus.txt").string() + "\"\nseq_len = 20\n";
    }
    static std::string train_section() {
        return "[solver]\ntype = \"rmsprop\"\nlr = 0.02\nalpha = 0.95\n[train]\nbatch_size = 10\nepochs = 2\n";
    }
    static std::string write(const std::string& name, const std::string& text) {
        std::ofstream(dir_ / name) << text;
        return (dir_ / name).string();
    }
    static std::string sample(const std::string& args, const std::string& backend = "native") {
        return "sample --config " + config_ + " --checkpoint " + ckpt_ + " --backend " + backend + " " + args;
    }
    static fs::path dir_;
    static std::string config_, ckpt_;
};
fs::path Sample::dir_;
std::string Sample::config_, Sample::ckpt_;

// The text the checkpoint gives for `prime`, `length`, `temperature` and `seed`, from its weights
// and vocabulary alone: softmax in double, u = (draw >> 11) * 2^-53 from std::mt19937_64(seed)
// against the running sum, the first character uniform when there is no prime.
std::string reference_sample(const std::string& ckpt, const std::string& prime, int length, double temperature,
                             uint64_t seed, size_t top_k = 0) {
    const xylem::io::Safetensors f = xylem::io::read_safetensors(ckpt);
    std::vector<uint8_t> vocab;
    {
        std::string v = f.metadata.at("xylem.vocabulary");  // "[10,32,...]"
        std::replace(v.begin(), v.end(), ',', ' ');
        std::istringstream in(v.substr(1, v.size() - 2));
        int b;
        while (in >> b) vocab.push_back(static_cast<uint8_t>(b));
    }
    const size_t n = vocab.size();
    auto floats = [&](const std::string& name) {
        const auto& t = f.tensors.at(name);
        std::vector<float> v(t.data.size() / 4);
        std::memcpy(v.data(), t.data.data(), t.data.size());
        return v;
    };
    const std::vector<float> w = floats("1.weight"), b = floats("1.bias");  // [n, n] (out, in), [n]
    std::vector<double> p(n, 1.0 / static_cast<double>(n));
    auto next = [&](size_t token) {
        double top = -INFINITY;
        for (size_t j = 0; j < n; ++j) {
            p[j] = (static_cast<double>(w[j * n + token]) + b[j]) / temperature;
            top = std::max(top, p[j]);
        }
        double sum = 0;
        for (double& v : p) sum += v = std::exp(v - top);
        for (double& v : p) v /= sum;
        if (top_k && top_k < n) {  // the k largest kept (ties at the k-th too), renormalised
            std::vector<double> sorted = p;
            std::sort(sorted.begin(), sorted.end(), std::greater<double>());
            double kept = 0;
            for (double& v : p) kept += v = v < sorted[top_k - 1] ? 0.0 : v;
            for (double& v : p) v /= kept;
        }
    };
    auto token_of = [&](char ch) {
        return static_cast<size_t>(std::find(vocab.begin(), vocab.end(), static_cast<uint8_t>(ch)) - vocab.begin());
    };
    for (char ch : prime) next(token_of(ch));
    std::mt19937_64 rng(seed);
    std::string text = prime;
    for (int i = 0; i < length; ++i) {
        const double u = static_cast<double>(rng() >> 11) * 0x1.0p-53;
        double acc = 0;
        size_t pick = 0;
        for (size_t j = 0; j < n; ++j) {
            if (p[j] <= 0) continue;
            pick = j;
            acc += p[j];
            if (u < acc) break;
        }
        text += static_cast<char>(vocab[pick]);
        next(pick);
    }
    return text;
}

TEST_F(Sample, AFixedSeedGivesTheTextTheCheckpointImplies) {
    const auto a = run_cli(sample("--prime \"the \" --length 80 --seed 7"));
    ASSERT_EQ(a.code, 0) << a.err;
    EXPECT_EQ(a.err, "");
    EXPECT_EQ(a.out, reference_sample(ckpt_, "the ", 80, 1.0, 7) + "\n");
    EXPECT_EQ(run_cli(sample("--prime \"the \" --length 80 --seed 7")).out, a.out);  // the same again
    EXPECT_NE(run_cli(sample("--prime \"the \" --length 80 --seed 8")).out, a.out);
    // No prime: the first character is drawn uniformly; a temperature sharpens the rest.
    const auto b = run_cli(sample("--length 60 --seed 3 --temperature 0.5"));
    ASSERT_EQ(b.code, 0) << b.err;
    EXPECT_EQ(b.out, reference_sample(ckpt_, "", 60, 0.5, 3) + "\n");
    // The default length, and the config's train.seed (1) as the default seed.
    const auto c = run_cli(sample("--prime a"));
    EXPECT_EQ(c.out, reference_sample(ckpt_, "a", 500, 1.0, 1) + "\n");
}

// --top-k keeps the k most likely characters; k = 1 is the greedy text whatever the seed.
TEST_F(Sample, TopKDrawsAmongTheMostLikely) {
    const auto a = run_cli(sample("--prime \"the \" --length 80 --seed 7 --top-k 3"));
    ASSERT_EQ(a.code, 0) << a.err;
    EXPECT_EQ(a.out, reference_sample(ckpt_, "the ", 80, 1.0, 7, 3) + "\n");
    const std::string greedy = run_cli(sample("--prime \"the \" --length 40 --seed 1 --top-k 1")).out;
    EXPECT_EQ(greedy, reference_sample(ckpt_, "the ", 40, 1.0, 99, 1) + "\n");
    EXPECT_EQ(run_cli(sample("--prime \"the \" --length 40 --seed 2 --top-k 1")).out, greedy);
    const auto zero = run_cli(sample("--top-k 0"));
    EXPECT_EQ(zero.code, 2) << zero.err;  // a usage error: the flag's range is 1 and up
    EXPECT_NE(zero.err.find("--top-k"), std::string::npos) << zero.err;
}

TEST_F(Sample, EveryBackendGivesTheSameText) {
    const std::string args = "--prime \"the cat \" --length 60 --seed 11";
    const std::string want = run_cli(sample(args)).out;
    for (const std::string& backend : xylem::test::available_backends()) {
        const auto r = run_cli(sample(args, backend), "POCL_CACHE_DIR=" + std::string(getenv("HOME") ? getenv("HOME") : "/tmp") + "/.cache/xylem/pocl");
        EXPECT_EQ(r.code, 0) << backend << ": " << r.err;
        EXPECT_EQ(r.out, want) << backend;
    }
}

TEST_F(Sample, BadInputIsOneLineNamingIt) {
    auto one_line = [](const xylem::test::CliResult& r, int code, const std::string& needle) {
        EXPECT_EQ(r.code, code) << r.err;
        EXPECT_NE(r.err.find(needle), std::string::npos) << r.err;
        if (code == 1) {
            EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
        }
        EXPECT_EQ(r.out, "");
    };
    const std::string missing = (dir_ / "nope.safetensors").string();
    one_line(run_cli("sample --config " + config_ + " --checkpoint " + missing), 1, "xylem: error: " + missing);
    one_line(run_cli("sample --config " + config_), 2, "xylem: sample needs --checkpoint FILE");
    one_line(run_cli(sample("--temperature 0")), 2, "xylem: --temperature must be in [1e-06, 1e+06], got 0");
    one_line(run_cli(sample("--temperature -1")), 2, "xylem: --temperature must be in [1e-06, 1e+06], got -1");
    // Positive, but so small that the outputs divided by it overflow: the range says so.
    one_line(run_cli(sample("--temperature 1e-320")), 2, "xylem: --temperature must be in [1e-06, 1e+06], got 1e-320");
    one_line(run_cli(sample("--temperature hot")), 2, "xylem: --temperature needs a number, got 'hot'");
    one_line(run_cli(sample("--prime Quiet")), 1, "xylem: error: --prime: 'Q' (0x51) at offset 0 is not in the vocabulary of");
    // The config's sizes must fit the checkpoint's vocabulary.
    const std::string small = write("small.toml", data_section() + "[[model.layers]]\ntype = \"one_hot\"\nvocab = 3\n"
                                                   "[[model.layers]]\ntype = \"linear\"\nout = \"vocab\"\n");
    one_line(run_cli("sample --config " + small + " --checkpoint " + ckpt_), 1,
             "small.toml: key 'model.layers[0].vocab' is 3 but " + ckpt_ + " has a vocabulary of");
    const std::string wide = write("wide.toml", data_section() + "[[model.layers]]\ntype = \"one_hot\"\n"
                                                 "[[model.layers]]\ntype = \"linear\"\nout = 200\n");
    one_line(run_cli("sample --config " + wide + " --checkpoint " + ckpt_), 1,
             "wide.toml: the model outputs [1, 200] per sequence, but a character model of " + ckpt_ + " outputs [steps, ");
    // A checkpoint of a model that was not trained on text has no vocabulary.
    const float zero = 0;
    const std::string image_ckpt = (dir_ / "image.safetensors").string();
    xylem::io::write_safetensors(image_ckpt, {{"1.bias", "F32", {1}, &zero, sizeof zero}});
    one_line(run_cli("sample --config " + config_ + " --checkpoint " + image_ckpt), 1,
             image_ckpt + ": has no vocabulary (metadata 'xylem.vocabulary'): it was not trained on text data");
}

// An embedding input instead of one_hot (its training needs op scatter_add_rows).
TEST_F(Sample, EmbeddingModelsSampleDeterministically) {
    if (!xylem::test::backend_named("native")->supports(XYLEM_OP_SCATTER_ADD_ROWS))
        GTEST_SKIP() << "op scatter_add_rows is not supported by backend 'native'";
    const std::string cfg = write("embedding.toml", data_section() +
                                                        "[[model.layers]]\ntype = \"embedding\"\ndim = 8\n"
                                                        "[[model.layers]]\ntype = \"linear\"\nout = \"vocab\"\n" +
                                                        train_section());
    const std::string out = (dir_ / "embedding_run").string();
    const auto t = run_cli("train --config " + cfg + " --backend native --out " + out);
    ASSERT_EQ(t.code, 0) << t.out << t.err;
    const std::string args = "sample --config " + cfg + " --checkpoint " + out + "/model.safetensors --backend native "
                             "--prime \"the \" --length 50 --seed 5";
    const auto a = run_cli(args), b = run_cli(args);
    ASSERT_EQ(a.code, 0) << a.err;
    EXPECT_EQ(a.out.size(), 4u + 50u + 1u);
    EXPECT_EQ(a.out.rfind("the ", 0), 0u);
    EXPECT_EQ(a.out, b.out);
}

// A character GPT decodes with its key/value cache: the prime in one forward, then one position per
// character, the cache restarting from the last half of the context when full. The same seed gives
// the same text; a prime longer than the context is one line naming both lengths.
TEST_F(Sample, TransformersDecodeWithTheirCache) {
    auto native = xylem::test::backend_named("native");
    for (uint32_t op : {XYLEM_OP_LAYER_NORM_FWD, XYLEM_OP_ATTENTION_FWD, XYLEM_OP_PERMUTE})
        if (!native->supports(op)) GTEST_SKIP() << "op " << xylem_op_name(op) << " is not supported by backend 'native'";
    const std::string gpt =
        "[model.blocks.block]\nlayers = [\n"
        "  { name = \"ln_1\", type = \"layer_norm\" },\n"
        "  { name = \"attn\", type = \"attention\", heads = 2, init_std = 0.02 },\n"
        "  { name = \"res_1\", type = \"add\", inputs = [\"input\", \"attn\"] },\n"
        "  { name = \"ln_2\", type = \"layer_norm\" },\n"
        "  { name = \"fc\", type = \"linear\", out = 32 },\n"
        "  { name = \"gelu\", type = \"gelu\" },\n"
        "  { name = \"proj\", type = \"linear\", out = 16 },\n"
        "  { name = \"res_2\", type = \"add\", inputs = [\"res_1\", \"proj\"] },\n]\n"
        "[model]\nlayers = [\n"
        "  { name = \"wte\", type = \"embedding\", dim = 16, init_std = 0.02 },\n"
        "  { name = \"wpe\", type = \"position_embedding\", max_len = 16 },\n"
        "  { name = \"h\", type = \"block\", block = \"block\", count = 2 },\n"
        "  { name = \"ln_f\", type = \"layer_norm\" },\n"
        "  { name = \"lm_head\", type = \"linear\", out = \"vocab\", bias = false, shares = \"wte\" },\n]\n";
    const std::string cfg =
        write("gpt.toml", "backend = \"native\"\n[data]\ntext = \"" + (dir_ / "corpus.txt").string() +
                              "\"\nsampling = \"windows\"\nblock_size = 16\n" + gpt +
                              "[solver]\ntype = \"adamw\"\nlr = 0.01\n[train]\nbatch_size = 8\nmax_steps = 30\n");
    const std::string out = (dir_ / "gpt_run").string();
    const auto t = run_cli("train --config " + cfg + " --backend native --out " + out);
    ASSERT_EQ(t.code, 0) << t.out << t.err;
    const std::string ckpt = out + "/model.safetensors";
    const std::string args = "sample --config " + cfg + " --checkpoint " + ckpt + " --backend native --prime \"the cat \" "
                             "--length 100 --seed 5 --top-k 5";  // 108 characters: several cache restarts
    const auto a = run_cli(args), b = run_cli(args);
    ASSERT_EQ(a.code, 0) << a.err;
    EXPECT_EQ(a.out.size(), 8u + 100u + 1u);
    EXPECT_EQ(a.out.rfind("the cat ", 0), 0u);
    EXPECT_EQ(a.out, b.out);
    const auto too_long = run_cli("sample --config " + cfg + " --checkpoint " + ckpt +
                                  " --backend native --prime \"the cat sat on the mat\"");
    EXPECT_EQ(too_long.code, 1);
    EXPECT_NE(too_long.err.find("the prime is 22 characters, longer than the model's context of 16"),
              std::string::npos)
        << too_long.err;
}

}  // namespace
