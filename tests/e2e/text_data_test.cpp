// Text data end to end: the files data.text names, the corpus and its byte vocabulary, char-rnn's
// stream layout, the batches fed to the model, and training a character model on every available
// backend (recurrent state reset at each epoch and before validation; losses per character).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <nlohmann/json.hpp>
#include <numeric>
#include <random>
#include <sstream>

#include "xylem/train/batch_source.h"
#include "xylem/train/model_builder.h"
#include "xylem/train/run_data.h"
#include "xylem/train/text_data.h"
#include "xylem/train/run.h"
#include "support/backends.h"
#include "xylem/io/safetensors.h"
#include "xylem/error.h"
#include "xylem/layers/registry.h"

using namespace xylem;
using namespace xylem::train;
namespace fs = std::filesystem;

namespace {

// A pass-through layer that logs what the trainer does to a model's recurrent state: "R" for each
// reset_state(), "T" for a training forward, "E" for an inference one.
std::string& state_log() {
    static std::string log;
    return log;
}

// With recording on, the probe (after one_hot) also keeps each training batch's tokens, [rows][steps]
// (the argmax of each one-hot step).
bool& record_tokens() {
    static bool on = false;
    return on;
}
std::vector<std::vector<std::vector<int32_t>>>& recorded_batches() {
    static std::vector<std::vector<std::vector<int32_t>>> batches;
    return batches;
}

class StateProbe : public Layer {
public:
    std::string kind() const override { return "test_state_probe"; }
    Shape output_shape(const Shape& input) const override { return input; }
    const Tensor& forward(Device&, const Tensor& x, bool train) override {
        state_log() += train ? 'T' : 'E';
        if (train && record_tokens()) {
            const std::vector<float> v = x.to_vector();
            const int64_t rows = x.dim(0), steps = x.dim(1), vocab = x.dim(2);
            std::vector<std::vector<int32_t>> batch(static_cast<size_t>(rows));
            for (int64_t r = 0; r < rows; ++r)
                for (int64_t t = 0; t < steps; ++t) {
                    const float* one = v.data() + (r * steps + t) * vocab;
                    batch[static_cast<size_t>(r)].push_back(static_cast<int32_t>(std::max_element(one, one + vocab) - one));
                }
            recorded_batches().push_back(batch);
        }
        return y_ = x;
    }
    const Tensor& backward(Device&, const Tensor& dy, bool) override { return dx_ = dy; }
    void reset_state() override { state_log() += 'R'; }

private:
    Tensor y_, dx_;
};

const LayerRegistration<NoLayerOptions> kStateProbe{
    "test_state_probe", {}, nullptr,
    [](const NoLayerOptions&, LayerContext&) -> std::unique_ptr<Layer> { return std::make_unique<StateProbe>(); }};

std::string error_of(const std::function<void()>& f) {
    try {
        f();
    } catch (const Error& e) {
        return e.what();
    }
    return "(no error)";
}

class TextDataTest : public ::testing::Test {
protected:
    void SetUp() override {
        dir_ = fs::temp_directory_path() / ("xylem_text_" + std::to_string(::getpid()));
        fs::remove_all(dir_);
        fs::create_directories(dir_ / "corpus" / "sub");
    }
    void TearDown() override { fs::remove_all(dir_); }
    std::string write(const std::string& name, const std::string& bytes) {
        std::ofstream(dir_ / name, std::ios::binary) << bytes;
        return (dir_ / name).string();
    }
    // A config over `paths` with the keys in `extra` ([data] keys first, then whole tables).
    RunConfig config(const std::string& data_keys, const std::string& rest = "") {
        const std::string text = "backend = \"native\"\n[data]\n" + data_keys + "\n" + rest;
        RunConfig c = parse_config(text, (dir_ / "t.toml").string());
        c.out_dir = (dir_ / "run").string();
        return c;
    }
    std::string quoted(const std::string& name) const { return "\"" + (dir_ / name).string() + "\""; }
    fs::path dir_;
};

TEST_F(TextDataTest, FilesOfAFolderInNameOrderLessTheExcluded) {
    write("corpus/b.txt", "bb");
    write("corpus/a.txt", "aa");
    write("corpus/a.txt.dat", "index");
    write("corpus/c.u8", "link");
    write("corpus/sub/deep.txt", "not read: sub-folders are not");
    write("single.txt", "s");
    const RunConfig c = config("text = [" + quoted("single.txt") + ", " + quoted("corpus") +
                               "]\ntext_exclude = [\"*.dat\", \"*.u8\"]");
    const std::vector<std::string> files = text_files(c);
    ASSERT_EQ(files.size(), 3u);
    EXPECT_EQ(files[0], (dir_ / "single.txt").string());
    EXPECT_EQ(files[1], (dir_ / "corpus" / "a.txt").string());
    EXPECT_EQ(files[2], (dir_ / "corpus" / "b.txt").string());
    EXPECT_EQ(read_corpus(c, files), "saabb");
    EXPECT_EQ(text_files(config("text = " + quoted("corpus"))).size(), 4u);  // no exclusions
}

TEST_F(TextDataTest, MissingFilesAndEmptyTextAreErrorsNamingTheKey) {
    write("empty.txt", "");
    const std::string src = (dir_ / "t.toml").string();
    EXPECT_EQ(error_of([&] { text_files(config("text = " + quoted("nope.txt"))); }),
              src + ": key 'data.text': " + (dir_ / "nope.txt").string() + ": no such file or folder");
    EXPECT_EQ(error_of([&] { text_files(config("text = " + quoted("corpus/sub"))); }),
              src + ": key 'data.text': " + (dir_ / "corpus/sub").string() + ": the folder has no files");
    write("corpus/x.dat", "x");
    EXPECT_EQ(error_of([&] { text_files(config("text = " + quoted("corpus") + "\ntext_exclude = [\"*.dat\"]")); }),
              src + ": key 'data.text': " + (dir_ / "corpus").string() + ": the folder has no files that data.text_exclude leaves");
    EXPECT_EQ(error_of([&] { load_text_data(config("text = " + quoted("empty.txt"))); }),
              src + ": key 'data.text': the text is empty (1 file(s), 0 bytes)");
}

TEST_F(TextDataTest, VocabularyIsTheSortedBytesAndRoundTripsThroughMetadata) {
    const std::string text = std::string("hello, world\n") + '\0' + "\xff";
    const Vocabulary v = Vocabulary::of_text(text);
    EXPECT_EQ(v.bytes(), (std::vector<uint8_t>{0, '\n', ' ', ',', 'd', 'e', 'h', 'l', 'o', 'r', 'w', 0xff}));
    EXPECT_EQ(v.token('h'), 6);
    EXPECT_EQ(v.token('z'), -1);
    EXPECT_EQ(v.byte(11), '\xff');
    EXPECT_EQ(v.encode("old", "x"), (std::vector<int32_t>{8, 7, 4}));
    EXPECT_EQ(error_of([&] { v.encode("hey", "--prime"); }),
              "--prime: 'y' (0x79) at offset 2 is not in the vocabulary of 12 characters");
    EXPECT_EQ(vocabulary_metadata(v), "[0,10,32,44,100,101,104,108,111,114,119,255]");
    EXPECT_THROW(Vocabulary::of_bytes({3, 2}), Error);
}

// A text of one distinct character trains to loss 0 and learns nothing (issue 26): the one rule
// where every vocabulary is built (the data's and a checkpoint's) wants at least two.
TEST_F(TextDataTest, ATextOfOneCharacterIsRefused) {
    write("a.txt", std::string(5000, 'a'));
    const std::string src = (dir_ / "t.toml").string();
    EXPECT_EQ(error_of([&] { load_text_data(config("text = " + quoted("a.txt"))); }),
              src + ": key 'data.text': the text of 5000 characters cannot be learnt: it has one distinct character, 'a' "
                    "(0x61), and a character model needs at least two to predict one from the others");
    EXPECT_THROW(Vocabulary::of_bytes({'a'}), Error);
    EXPECT_EQ(Vocabulary::of_bytes({'a', 'b'}).size(), 2);
    const float w = 1;
    const std::string ckpt = (dir_ / "one.safetensors").string();
    io::write_safetensors(ckpt, {{"w", "F32", {1}, &w, 4}}, {{kVocabularyKey, "[97]"}});
    EXPECT_EQ(error_of([&] { read_vocabulary(ckpt); }),
              ckpt + ": corrupt vocabulary (metadata '" + kVocabularyKey + "'): it has one distinct character, 'a' (0x61), "
                     "and a character model needs at least two to predict one from the others");
}

// Sample k*streams + b is chunk k of stream b; its labels are the next tokens; the streams are
// contiguous and each one's last label is the next one's first input.
TEST_F(TextDataTest, StreamLayoutIsCharRnns) {
    std::vector<int32_t> tokens(40);
    std::iota(tokens.begin(), tokens.end(), 0);
    const int64_t streams = 3, seq_len = 4;
    const io::Dataset d = stream_layout(tokens, streams, seq_len);  // (40 - 1) / 12 = 3 chunks
    EXPECT_EQ(d.steps, seq_len);
    ASSERT_EQ(d.count, 9);
    const int64_t stream_len = 12;
    for (int64_t k = 0; k < 3; ++k)
        for (int64_t b = 0; b < streams; ++b)
            for (int64_t t = 0; t < seq_len; ++t) {
                const size_t at = static_cast<size_t>((k * streams + b) * seq_len + t);
                EXPECT_EQ(d.tokens[at], b * stream_len + k * seq_len + t) << k << " " << b << " " << t;
                EXPECT_EQ(d.labels[at], d.tokens[at] + 1);
            }
    EXPECT_EQ(stream_layout(std::vector<int32_t>(12), 3, 4).count, 0);  // 11 inputs: not one chunk of 12
    EXPECT_EQ(stream_layout(std::vector<int32_t>(13), 3, 4).count, 3);
}

TEST_F(TextDataTest, ValidationIsTheEndOfTheTextAndShortTextsAreErrorsNamingTheKeys) {
    std::string text;
    for (int i = 0; i < 400; ++i) text += static_cast<char>('a' + i % 7);
    text += "XYZ";  // the end, held out: in the vocabulary, never in the training text
    const std::string f = quoted(fs::path(write("t.txt", text)).filename().string());
    RunConfig c = config("text = " + f + "\nseq_len = 5\nvalidation = 40", "[train]\nbatch_size = 4\n");
    train::TextData t = load_text_data(c);
    EXPECT_EQ(t.chars, 403);
    EXPECT_EQ(t.validation_chars, 40);
    EXPECT_EQ(t.vocabulary.size(), 10);
    EXPECT_EQ(t.train.count, (363 - 1) / 20 * 4);
    EXPECT_EQ(t.validation.count, (40 - 1) / 20 * 4);
    // Training stops before the held-out end; validation starts there (and, laid out, uses the
    // first 4 * 5 + 1 of its 40 characters: "XYZ" at the very end is in the vocabulary only).
    const int32_t x = t.vocabulary.token('X');
    EXPECT_EQ(std::count(t.train.labels.begin(), t.train.labels.end(), x), 0);
    EXPECT_EQ(t.validation.tokens[0], t.vocabulary.token(static_cast<uint8_t>(text[363])));
    EXPECT_EQ(t.validation.labels[0], t.vocabulary.token(static_cast<uint8_t>(text[364])));
    EXPECT_EQ(t.train.labels.back(), t.vocabulary.token(static_cast<uint8_t>(text[t.train.count * 5])));
    // The default share: the last 5%.
    EXPECT_EQ(load_text_data(config("text = " + f + "\nseq_len = 2", "[train]\nbatch_size = 4\n")).validation_chars, 20);

    const std::string src = (dir_ / "t.toml").string();
    EXPECT_EQ(error_of([&] { load_text_data(config("text = " + f + "\nseq_len = 100", "[train]\nbatch_size = 4\n")); }),
              src + ": the training text (data.text less data.validation) has 383 characters, too few for one batch of "
                    "train.batch_size = 4 streams of data.seq_len = 100 steps (it needs 401): lower data.seq_len or "
                    "train.batch_size, or give more text");
    EXPECT_EQ(error_of([&] { load_text_data(config("text = " + f + "\nseq_len = 5\nvalidation = 10", "[train]\nbatch_size = 4\n")); }),
              src + ": key 'data.validation': the held-out text has 10 characters, too few for one batch of "
                    "train.batch_size = 4 streams of data.seq_len = 5 steps (it needs 21): lower data.seq_len or "
                    "train.batch_size, or hold out more (data.validation = 0 holds out none)");
    EXPECT_EQ(error_of([&] { load_text_data(config("text = " + f + "\nvalidation = 403")); }),
              src + ": key 'data.validation' holds out 403 of the text's 403 characters, leaving none to train on");
}

// Token batches: [n, steps] int32 inputs and labels, the same from the host and from a resident set.
TEST_F(TextDataTest, BatchesOfTokensFromTheHostAndFromTheDevice) {
    std::vector<int32_t> tokens(61);
    std::iota(tokens.begin(), tokens.end(), 0);
    const io::Dataset d = stream_layout(tokens, 2, 5);  // 6 chunks of 2 streams
    EXPECT_EQ(input_sample_shape(d), Shape{5});
    EXPECT_EQ(input_dtype(d), DType::I32);
    EXPECT_EQ(target_sample_shape(d), Shape{5});
    auto dev = test::backend_named("native")->device(0);
    std::vector<int64_t> order(static_cast<size_t>(d.count));
    std::iota(order.begin(), order.end(), 0);
    HostBatches host(d, *dev, DType::I32, 0, false);
    ResidentBatches resident(d, *dev, DType::I32, 0, false);
    host.begin_epoch(order);
    resident.begin_epoch(order);
    for (int64_t first = 0; first < d.count; first += 2) {
        host.stage(first, 2);
        resident.stage(first, 2);
        auto [x, y] = host.enqueue(first, 2);
        auto [rx, ry] = resident.enqueue(first, 2);
        ASSERT_EQ(x.shape(), (Shape{2, 5}));
        ASSERT_EQ(x.dtype(), DType::I32);
        ASSERT_EQ(y.shape(), (Shape{2, 5}));
        const int32_t* xs = x.host_read<int32_t>();
        const int32_t* ys = y.host_read<int32_t>();
        for (int64_t i = 0; i < 10; ++i) {
            const int64_t b = i / 5, t = i % 5, k = first / 2;
            EXPECT_EQ(xs[i], b * 30 + k * 5 + t);
            EXPECT_EQ(ys[i], xs[i] + 1);
            EXPECT_EQ(rx.host_read<int32_t>()[i], xs[i]);
            EXPECT_EQ(ry.host_read<int32_t>()[i], ys[i]);
        }
    }
}

// The model must take the data: a text model starts with a token layer and outputs one score per
// vocabulary entry per step; a token layer on images is refused.
TEST_F(TextDataTest, ModelsThatDoNotFitTheDataAreErrorsNamingTheKey) {
    std::string text;
    for (int i = 0; i < 200; ++i) text += static_cast<char>('a' + i % 5);
    const std::string f = quoted(fs::path(write("t.txt", text)).filename().string());
    const std::string data = "text = " + f + "\nseq_len = 4\nvalidation = 0";
    const std::string train = "[train]\nbatch_size = 2\n";
    auto dev = test::backend_named("native")->device(0);
    auto check = [&](const RunConfig& c) {
        const RunData d = load_run_data(c);
        auto model = build_model(c, d.vocabulary.size());
        model->build(*dev, input_sample_shape(d.train), c.seed);
        check_model_fits_data(c, *model, d);
    };
    const std::string src = (dir_ / "t.toml").string();
    EXPECT_EQ(error_of([&] { check(config(data, train + "[[model.layers]]\ntype = \"linear\"\nout = 5\n")); }),
              src + ": a text model starts with an embedding or one_hot layer (token indices in), but model.layers[0] "
                    "(linear) takes float32 inputs");
    EXPECT_EQ(error_of([&] {
                  check(config(data, train + "[[model.layers]]\ntype = \"one_hot\"\nvocab = 3\n[[model.layers]]\n"
                                             "type = \"linear\"\nout = 5\n"));
              }),
              src + ": key 'model.layers[0].vocab' is 3 but the text has a vocabulary of 5 characters (leave vocab out "
                    "to take it from the data)");
    EXPECT_EQ(error_of([&] {
                  check(config(data, train + "[[model.layers]]\ntype = \"one_hot\"\n[[model.layers]]\ntype = \"linear\"\n"
                                             "out = 7\n"));
              }),
              src + ": the model outputs [4, 7] per sequence, but a character model of the text outputs [steps, 5]: one "
                    "score per vocabulary entry per step (the last layer's out = \"vocab\" sizes it to the data)");
    EXPECT_EQ(error_of([&] {
                  check(config(data, train + "[[model.layers]]\ntype = \"one_hot\"\n[[model.layers]]\ntype = \"linear\"\n"
                                             "out = \"vocab\"\n"));
              }),
              "(no error)");
    // A token layer without text data: the data gives no vocabulary to size it.
    const RunConfig images = parse_config("[[model.layers]]\ntype = \"one_hot\"\nvocab = 4\n", src);
    RunData d;  // images: what load_run_data gives for data.dir (float inputs, no vocabulary)
    d.train.count = 1;
    d.train.rows = d.train.cols = 2;
    auto model = build_model(images);
    model->build(*dev, input_sample_shape(d.train), 1);
    EXPECT_EQ(error_of([&] { check_model_fits_data(images, *model, d); }),
              src + ": model.layers[0] (one_hot) takes token indices, which only text data gives: set [data] text");
}

class TextTraining : public ::testing::TestWithParam<std::string> {
protected:
    void SetUp() override {
        dir_ = fs::temp_directory_path() / ("xylem_text_train_" + GetParam() + "_" + std::to_string(::getpid()));
        fs::remove_all(dir_);
        fs::create_directories(dir_);
        // Words from a small alphabet: a bigram model learns well below the uniform log(vocab).
        std::string text;
        std::mt19937 rng(5);
        const char* words[] = {"the ", "cat ", "sat ", "on ", "a ", "mat ", "and ", "dog ", "ran\n"};
        while (text.size() < 6000) text += words[rng() % 9];
        std::ofstream(dir_ / "corpus.txt", std::ios::binary) << text;
    }
    void TearDown() override { fs::remove_all(dir_); }
    RunConfig config(const std::string& extra_train = "") {
        RunConfig c = parse_config("[data]\ntext = \"" + (dir_ / "corpus.txt").string() +
                                       "\"\nseq_len = 10\nvalidation = 0.1\n"
                                       "[[model.layers]]\ntype = \"one_hot\"\n[[model.layers]]\ntype = \"test_state_probe\"\n"
                                       "[[model.layers]]\ntype = \"linear\"\nout = \"vocab\"\n"
                                       "[solver]\ntype = \"rmsprop\"\nlr = 0.01\nalpha = 0.95\nclip_value = 5.0\n"
                                       "[train]\nbatch_size = 8\nepochs = 2\nprint_every = 10\n" + extra_train,
                                   (dir_ / "t.toml").string());
        c.out_dir = (dir_ / "run").string();
        return c;
    }
    fs::path dir_;
};

INSTANTIATE_TEST_SUITE_P(Backends, TextTraining, ::testing::ValuesIn(test::available_backends()),
                         test::backend_param_name);

TEST_P(TextTraining, LearnsPerCharacterAndResetsStateAtEpochsAndValidation) {
    auto dev = test::backend_named(GetParam())->device(0);
    const RunConfig c = config();
    state_log().clear();
    const RunResult r = run(c, *dev, std::cout, RunOptions::quiet());
    ASSERT_EQ(r.epochs.size(), 2u);
    EXPECT_TRUE(r.text);
    const double uniform = std::log(14.0);  // 14 distinct characters
    for (const EpochMetrics& m : r.epochs) {
        EXPECT_TRUE(m.has_validation);
        EXPECT_FALSE(m.has_test);  // text has no test set
        EXPECT_LT(m.val_loss, 0.8 * uniform) << "epoch " << m.epoch;
    }
    EXPECT_LT(r.epochs[1].train_loss, r.epochs[0].train_loss);
    // 5400 training characters: (5400 - 1) / 80 = 67 steps of 8 streams; 600 held out: 7 batches.
    EXPECT_EQ(r.epochs[0].steps, 67);
    const std::string epoch = "R" + std::string(67, 'T') + "R" + std::string(7, 'E');
    EXPECT_EQ(state_log(), epoch + epoch);

    // log.csv and metrics.json carry bits per character.
    std::ifstream log(dir_ / "run" / "log.csv");
    std::string header;
    std::getline(log, header);
    EXPECT_EQ(header, "epoch,step,loss,images_per_second,elapsed_seconds,lr,val_loss,val_accuracy,kind,loss_bpc,val_loss_bpc");
    nlohmann::json metrics;
    std::ifstream(dir_ / "run" / "metrics.json") >> metrics;
    EXPECT_NEAR(metrics["epochs"][1]["val_bpc"].get<double>(), r.epochs[1].val_loss / std::log(2.0), 1e-9);
    EXPECT_EQ(metrics["loss_unit"], "nats per character");
}

// The trainer feeds the text streams in order: row b of step k is chunk k of stream b, so it
// continues row b of step k - 1 (what the carried state assumes), in every epoch. Shuffled
// chunks still train, and a resume restores their (wrong) order, so only this check sees it.
TEST_P(TextTraining, BatchesFollowTheStreamsInOrder) {
    auto dev = test::backend_named(GetParam())->device(0);
    const RunConfig c = config();
    const RunData data = load_run_data(c);
    recorded_batches().clear();
    record_tokens() = true;
    const RunResult r = run(c, *dev, std::cout, RunOptions::quiet());
    record_tokens() = false;
    ASSERT_EQ(r.epochs.size(), 2u);
    const int64_t rows = c.batch_size, steps = data.train.steps, per_epoch = data.train.count / rows;
    ASSERT_EQ(static_cast<int64_t>(recorded_batches().size()), 2 * per_epoch);
    for (int64_t i = 0; i < 2 * per_epoch; ++i) {
        const int64_t k = i % per_epoch;  // the step within its epoch
        for (int64_t b = 0; b < rows; ++b) {
            const auto first = data.train.tokens.begin() + (k * rows + b) * steps;
            const std::vector<int32_t> want(first, first + steps);
            ASSERT_EQ(recorded_batches()[static_cast<size_t>(i)][static_cast<size_t>(b)], want)
                << "epoch " << i / per_epoch + 1 << ", step " << k + 1 << ", row " << b << ": not chunk " << k
                << " of stream " << b;
        }
    }
}

// Every backend trains the same model to the same losses (the native run is the reference).
TEST_P(TextTraining, AgreesWithNative) {
    if (GetParam() == "native") GTEST_SKIP() << "the reference";
    auto run = [&](const std::string& backend, const std::string& out) {
        RunConfig c = config("max_steps = 50\n");
        c.out_dir = (dir_ / out).string();
        auto dev = test::backend_named(backend)->device(0);
        return train::run(c, *dev, std::cout, RunOptions::quiet());
    };
    const RunResult a = run("native", "native"), b = run(GetParam(), "other");
    ASSERT_EQ(a.epochs.size(), b.epochs.size());
    for (size_t i = 0; i < a.epochs.size(); ++i) {
        EXPECT_NEAR(b.epochs[i].train_loss, a.epochs[i].train_loss, 1e-3 * a.epochs[i].train_loss);
        EXPECT_NEAR(b.epochs[i].val_loss, a.epochs[i].val_loss, 1e-3 * a.epochs[i].val_loss);
    }
    // Step by step: the loss of every 10 steps (log.csv's interval rows) within 1e-3 relative.
    auto losses = [&](const std::string& out) {
        std::ifstream log(dir_ / out / "log.csv");
        std::string line;
        std::vector<double> v;
        std::getline(log, line);
        while (std::getline(log, line)) {
            if (line.find(",interval,") == std::string::npos) continue;
            std::istringstream cells(line);
            std::string cell;
            for (int i = 0; i < 3; ++i) std::getline(cells, cell, ',');  // epoch, step, loss
            v.push_back(std::stod(cell));
        }
        return v;
    };
    const std::vector<double> la = losses("native"), lb = losses("other");
    ASSERT_EQ(la.size(), 5u);
    ASSERT_EQ(lb.size(), la.size());
    for (size_t i = 0; i < la.size(); ++i) EXPECT_NEAR(lb[i], la[i], 1e-3 * la[i]) << "steps " << 10 * i + 1 << "-" << 10 * (i + 1);
}

// A run that max_steps (or a signal, or checkpoint_every) stops mid-epoch keeps its LSTM's carried
// state in last.safetensors; resumed, it trains to the parameters of the run that never stopped.
// Without the state (the resumed streams starting from zero) they differ by far more.
TEST_P(TextTraining, ResumedMidEpochContinuesTheStreams) {
    if (GetParam() != "native") GTEST_SKIP() << "backend-independent";
    auto dev = test::backend_named("native")->device(0);
    auto lstm = [&](const std::string& out, int64_t max_steps) {
        RunConfig c = parse_config("[data]\ntext = \"" + (dir_ / "corpus.txt").string() +
                                       "\"\nseq_len = 10\nvalidation = 0.1\n"
                                       "[[model.layers]]\ntype = \"one_hot\"\n[[model.layers]]\ntype = \"lstm\"\n"
                                       "hidden = 16\nlayers = 2\n[[model.layers]]\ntype = \"linear\"\nout = \"vocab\"\n"
                                       "[solver]\ntype = \"rmsprop\"\nlr = 0.01\nalpha = 0.95\n"
                                       "[train]\nbatch_size = 8\nepochs = 1\nseed = 3\n",
                                   (dir_ / "lstm.toml").string());
        c.out_dir = (dir_ / out).string();
        c.max_steps = max_steps;
        return c;
    };
    run(lstm("whole", 30), *dev, std::cout, RunOptions::quiet());
    const RunResult cut = run(lstm("cut", 12), *dev, std::cout, RunOptions::quiet());
    const io::Safetensors ckpt = io::read_safetensors(cut.last_checkpoint);
    for (const char* name : {"h_l0", "c_l0", "h_l1", "c_l1"}) {
        auto it = ckpt.tensors.find(std::string("xylem.carried.1.") + name);
        ASSERT_NE(it, ckpt.tensors.end()) << name;
        EXPECT_EQ(it->second.shape, (Shape{16, 8})) << name;
    }
    RunOptions o = RunOptions::quiet();
    o.resume_from = cut.last_checkpoint;
    run(lstm("cut", 30), *dev, std::cout, o);
    auto max_diff = [&](const std::string& a, const std::string& b) {
        const io::Safetensors x = io::read_safetensors(a), y = io::read_safetensors(b);
        double d = 0;
        for (const auto& [name, t] : x.tensors) {
            const auto& u = t.data;
            const auto& v = y.tensors.at(name).data;
            for (size_t i = 0; i + 4 <= u.size(); i += 4) {
                float p, q;
                std::memcpy(&p, u.data() + i, 4);
                std::memcpy(&q, v.data() + i, 4);
                d = std::max(d, static_cast<double>(std::fabs(p - q)));
            }
        }
        return d;
    };
    const double resumed = max_diff((dir_ / "whole" / "model.safetensors").string(), (dir_ / "cut" / "model.safetensors").string());
    EXPECT_LT(resumed, 1e-6);
    // The same resume with the carried state dropped from the checkpoint: the streams restart.
    run(lstm("cut0", 12), *dev, std::cout, RunOptions::quiet());
    {
        io::Safetensors f = io::read_safetensors((dir_ / "cut0" / "last.safetensors").string());
        std::vector<io::TensorView> views;
        for (const auto& [name, t] : f.tensors)
            if (name.rfind("xylem.carried.", 0) != 0) views.push_back({name, t.dtype, t.shape, t.data.data(), t.data.size()});
        io::write_safetensors((dir_ / "cut0" / "last.safetensors").string(), views, f.metadata);
    }
    o.resume_from = (dir_ / "cut0" / "last.safetensors").string();
    run(lstm("cut0", 30), *dev, std::cout, o);
    const double from_zero = max_diff((dir_ / "whole" / "model.safetensors").string(), (dir_ / "cut0" / "model.safetensors").string());
    EXPECT_GT(from_zero, 100 * std::max(resumed, 1e-7));
}

// A training checkpoint whose carried state is damaged is refused, naming the file, the layer
// and the tensor; nothing trains.
TEST_P(TextTraining, ResumeRefusesDamagedCarriedState) {
    if (GetParam() != "native") GTEST_SKIP() << "backend-independent";
    auto dev = test::backend_named("native")->device(0);
    RunConfig c = parse_config("[data]\ntext = \"" + (dir_ / "corpus.txt").string() +
                                   "\"\nseq_len = 10\nvalidation = 0.1\n"
                                   "[[model.layers]]\ntype = \"one_hot\"\n[[model.layers]]\ntype = \"gru\"\nhidden = 8\n"
                                   "[[model.layers]]\ntype = \"linear\"\nout = \"vocab\"\n"
                                   "[solver]\ntype = \"sgd\"\nlr = 0.1\n[train]\nbatch_size = 4\nepochs = 1\nmax_steps = 3\n",
                               (dir_ / "gru.toml").string());
    c.out_dir = (dir_ / "run").string();
    const std::string ckpt = run(c, *dev, std::cout, RunOptions::quiet()).last_checkpoint;
    const io::Safetensors good = io::read_safetensors(ckpt);
    ASSERT_TRUE(good.tensors.count("xylem.carried.1.h_l0"));
    // rewrite(name, dtype, shape, values): the checkpoint with one carried tensor replaced (or added).
    auto rewrite = [&](const std::string& name, const std::string& dtype, const Shape& shape, const std::vector<float>& v) {
        std::vector<io::TensorView> views;
        for (const auto& [n, t] : good.tensors)
            if (n != name) views.push_back({n, t.dtype, t.shape, t.data.data(), t.data.size()});
        views.push_back({name, dtype, shape, v.data(), v.size() * sizeof(float)});
        io::write_safetensors(ckpt, views, good.metadata);
    };
    c.max_steps = 6;
    RunOptions o = RunOptions::quiet();
    o.resume_from = ckpt;
    const std::string layer = ckpt + ": model layer 1 (gru): ";
    rewrite("xylem.carried.1.h_l0", "F32", {7, 4}, std::vector<float>(28, 0.0f));
    EXPECT_EQ(error_of([&] { run(c, *dev, std::cout, o); }),
              layer + "carried state 'h_l0' is [7, 4], expected [8, batch]");
    rewrite("xylem.carried.1.h_l0", "F32", {8, 3}, std::vector<float>(24, 0.0f));  // another batch size
    EXPECT_EQ(error_of([&] { run(c, *dev, std::cout, o); }),
              "model layer 1 (gru): the checkpoint's carried state is for batches of 3, the resumed run's first batch has 4");
    std::vector<float> nan(32, 0.0f);
    nan[5] = std::nanf("");
    rewrite("xylem.carried.1.h_l0", "F32", {8, 4}, nan);
    EXPECT_EQ(error_of([&] { run(c, *dev, std::cout, o); }), layer + "carried state 'h_l0' holds non-finite values (NaN or inf)");
    rewrite("xylem.carried.0.h_l0", "F32", {8, 4}, std::vector<float>(32, 0.0f));
    EXPECT_EQ(error_of([&] { run(c, *dev, std::cout, o); }),
              ckpt + ": model layer 0 (one_hot): carries no state between batches, but the checkpoint holds 'h_l0' for it");
}

// A resumed run must see the vocabulary it trained with.
TEST_P(TextTraining, ResumeRefusesAChangedVocabulary) {
    if (GetParam() != "native") GTEST_SKIP() << "backend-independent";
    auto dev = test::backend_named("native")->device(0);
    RunConfig c = config("max_steps = 5\n");
    const RunResult r = run(c, *dev, std::cout, RunOptions::quiet());
    std::ofstream(dir_ / "corpus.txt", std::ios::app | std::ios::binary) << "QQQ";
    c.max_steps = 10;
    RunOptions o = RunOptions::quiet();
    o.resume_from = r.last_checkpoint;
    EXPECT_EQ(error_of([&] { run(c, *dev, std::cout, o); }),
              r.last_checkpoint + ": the run trained with a vocabulary of 14 characters, the data now gives a vocabulary "
                                  "of 15 characters; new in the data: 'Q' (0x51) (data.text changed?)");
    // A change that keeps the size is named by its characters: 'c' became 'Q'.
    std::string text;
    {
        std::ifstream in(dir_ / "corpus.txt", std::ios::binary);
        text.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    }
    text.resize(text.size() - 3);
    std::replace(text.begin(), text.end(), 'c', 'Q');
    std::ofstream(dir_ / "corpus.txt", std::ios::binary | std::ios::trunc) << text;
    EXPECT_EQ(error_of([&] { run(c, *dev, std::cout, o); }),
              r.last_checkpoint + ": the run trained with a vocabulary of 14 characters, the data now gives a vocabulary "
                                  "of 14 characters; new in the data: 'Q' (0x51); no longer in the data: 'c' (0x63) "
                                  "(data.text changed?)");
}

// A shortened text (with --accept-changed-data past its fingerprint) is named as text: the error
// said "images" and "data.dir" for a character model.
TEST_P(TextTraining, ResumeOnAShortenedTextSaysText) {
    if (GetParam() != "native") GTEST_SKIP() << "backend-independent";
    auto dev = test::backend_named("native")->device(0);
    RunConfig c = config("max_steps = 5\n");
    const RunResult r = run(c, *dev, std::cout, RunOptions::quiet());
    std::string text;
    {
        std::ifstream in(dir_ / "corpus.txt", std::ios::binary);
        text.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    }
    const Vocabulary before = Vocabulary::of_text(text);
    text.resize(text.size() / 2);
    ASSERT_EQ(Vocabulary::of_text(text), before);  // the same characters, fewer of them
    std::ofstream(dir_ / "corpus.txt", std::ios::binary | std::ios::trunc) << text;
    c.max_steps = 10;
    RunOptions o = RunOptions::quiet();
    o.resume_from = r.last_checkpoint;
    o.accept_changed_data = true;
    const std::string e = error_of([&] { run(c, *dev, std::cout, o); });
    EXPECT_EQ(e.rfind(r.last_checkpoint + ": the run trained on ", 0), 0u) << e;
    EXPECT_NE(e.find(" sequences of data.seq_len characters, the text now gives "), std::string::npos) << e;
    EXPECT_NE(e.find("(data.text or data.validation changed?)"), std::string::npos) << e;
    EXPECT_EQ(e.find("images"), std::string::npos) << e;
}

}  // namespace
