// Text sampled as windows (data.sampling = "windows", nanoGPT's get_batch): the config keys, the
// windows at every offset with labels shifted by one, the non-overlapping validation windows, the
// batches from the host, through staging areas and from the device, the windows a run trains on
// (the order's, without replacement), a loss that falls, bit-identical resumes, resident and
// captured runs on discrete memory, and `xylem eval` of a window-trained checkpoint.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <nlohmann/json.hpp>
#include <numeric>
#include <random>
#include <set>
#include <sstream>

#include "cli_run.h"
#include "support/backends.h"
#include "support/fake_discrete.h"
#include "xylem/error.h"
#include "xylem/io/safetensors.h"
#include "xylem/layers/registry.h"
#include "xylem/train/batch_source.h"
#include "xylem/train/model_builder.h"
#include "xylem/train/run.h"
#include "xylem/train/run_data.h"
#include "xylem/train/text_data.h"

using namespace xylem;
using namespace xylem::train;
namespace fs = std::filesystem;

namespace {

// With recording on, the probe (after one_hot) keeps each training batch's tokens, [rows][steps]
// (the argmax of each one-hot step).
bool& record_windows() {
    static bool on = false;
    return on;
}
std::vector<std::vector<std::vector<int32_t>>>& recorded_windows() {
    static std::vector<std::vector<std::vector<int32_t>>> batches;
    return batches;
}

class WindowProbe : public Layer {
public:
    std::string kind() const override { return "test_window_probe"; }
    Shape output_shape(const Shape& input) const override { return input; }
    const Tensor& forward(Device&, const Tensor& x, bool train) override {
        if (train && record_windows()) {
            const std::vector<float> v = x.to_vector();
            const int64_t rows = x.dim(0), steps = x.dim(1), vocab = x.dim(2);
            std::vector<std::vector<int32_t>> batch(static_cast<size_t>(rows));
            for (int64_t r = 0; r < rows; ++r)
                for (int64_t t = 0; t < steps; ++t) {
                    const float* one = v.data() + (r * steps + t) * vocab;
                    batch[static_cast<size_t>(r)].push_back(static_cast<int32_t>(std::max_element(one, one + vocab) - one));
                }
            recorded_windows().push_back(batch);
        }
        return y_ = x;
    }
    const Tensor& backward(Device&, const Tensor& dy, bool) override { return dx_ = dy; }

private:
    Tensor y_, dx_;
};

const LayerRegistration<NoLayerOptions> kWindowProbe{
    "test_window_probe", {}, nullptr,
    [](const NoLayerOptions&, LayerContext&) -> std::unique_ptr<Layer> { return std::make_unique<WindowProbe>(); }};

std::string error_of(const std::function<void()>& f) {
    try {
        f();
    } catch (const Error& e) {
        return e.what();
    }
    return "(no error)";
}

std::vector<int32_t> iota_tokens(int n) {
    std::vector<int32_t> t(static_cast<size_t>(n));
    std::iota(t.begin(), t.end(), 0);
    return t;
}

// Words from a small alphabet: a bigram model learns well below the uniform log(vocab).
std::string words_text(size_t size, unsigned seed = 5) {
    std::string text;
    std::mt19937 rng(seed);
    const char* words[] = {"the ", "cat ", "sat ", "on ", "a ", "mat ", "and ", "dog ", "ran\n"};
    while (text.size() < size) text += words[rng() % 9];
    return text;
}

class WindowData : public ::testing::Test {
protected:
    void SetUp() override {
        dir_ = fs::temp_directory_path() / ("xylem_windows_" + std::to_string(::getpid()));
        fs::remove_all(dir_);
        fs::create_directories(dir_);
    }
    void TearDown() override { fs::remove_all(dir_); }
    std::string write(const std::string& name, const std::string& bytes) {
        std::ofstream(dir_ / name, std::ios::binary) << bytes;
        return (dir_ / name).string();
    }
    RunConfig config(const std::string& data_keys, const std::string& rest = "") {
        RunConfig c = parse_config("backend = \"native\"\n[data]\n" + data_keys + "\n" + rest, src());
        c.out_dir = (dir_ / "run").string();
        return c;
    }
    std::string src() const { return (dir_ / "t.toml").string(); }
    std::string quoted(const std::string& name) const { return "\"" + (dir_ / name).string() + "\""; }
    fs::path dir_;
};

TEST_F(WindowData, ConfigKeysAreCheckedWithTheirAllowedValues) {
    const std::string text = "text = " + quoted("t.txt") + "\n";
    const RunConfig streams = config(text);
    EXPECT_EQ(streams.sampling, "streams");  // the default: char-rnn's layout, as before
    EXPECT_FALSE(streams.windows());
    const RunConfig windows = config(text + "sampling = \"windows\"\nblock_size = 64");
    EXPECT_TRUE(windows.windows());
    EXPECT_EQ(windows.block_size, 64);
    EXPECT_EQ(error_of([&] { config(text + "sampling = \"random\""); }),
              src() + ": key 'data.sampling' must be \"streams\" or \"windows\" (got 'random')");
    EXPECT_EQ(error_of([&] { config(text + "sampling = \"windows\""); }),
              src() + ": key 'data.block_size' is required with data.sampling = \"windows\": the characters of each window");
    EXPECT_EQ(error_of([&] { config(text + "sampling = \"windows\"\nblock_size = 8\nseq_len = 8"); }),
              src() + ": key 'data.seq_len' applies to data.sampling = \"streams\"; windows are data.block_size characters long");
    EXPECT_EQ(error_of([&] { config(text + "block_size = 8"); }),
              src() + ": key 'data.block_size' applies to data.sampling = \"windows\"; streams read data.seq_len characters "
                      "per batch");
    EXPECT_EQ(error_of([&] { config(text + "sampling = \"streams\"\nblock_size = 8"); }),
              src() + ": key 'data.block_size' applies to data.sampling = \"windows\"; streams read data.seq_len characters "
                      "per batch");
    EXPECT_EQ(error_of([&] { config(text + "sampling = \"windows\"\nblock_size = 0"); }),
              src() + ": key 'data.block_size' must be in [1, 2147483647], got 0");
    EXPECT_EQ(error_of([&] { config(text + "sampling = 3"); }).rfind(src() + ": key 'data.sampling' ", 0), 0u);
    for (const char* key : {"sampling = \"windows\"", "block_size = 8"})
        EXPECT_EQ(error_of([&] { config(key); }),
                  src() + ": key 'data." + std::string(key).substr(0, std::string(key).find(' ')) +
                      "' applies to text data only (set data.text)");
}

// Sample i is the window at offset i, its labels the tokens one on; a window is the same whatever
// the order and the batch it comes in.
TEST_F(WindowData, WindowsStartAtEveryOffsetWithLabelsShiftedByOne) {
    train::TextWindows w;
    w.tokens = iota_tokens(40);
    w.block_size = 5;
    ASSERT_EQ(w.count(), 35);  // offsets 0..34: window 34's last label is token 39
    std::vector<int64_t> order(35);
    std::iota(order.begin(), order.end(), 0);
    std::mt19937_64 rng(3);
    std::shuffle(order.begin(), order.end(), rng);
    std::vector<int32_t> x(35 * 5), y(35 * 5);
    gather_windows(w, order, 0, 35, x.data(), y.data());
    for (int64_t i = 0; i < 35; ++i)
        for (int64_t t = 0; t < 5; ++t) {
            EXPECT_EQ(x[static_cast<size_t>(i * 5 + t)], order[static_cast<size_t>(i)] + t) << i << " " << t;
            EXPECT_EQ(y[static_cast<size_t>(i * 5 + t)], order[static_cast<size_t>(i)] + t + 1) << i << " " << t;
        }
    // Order-independence: window 17 alone, from another order and another place in a batch.
    const std::vector<int64_t> other{3, 17, 0};
    std::vector<int32_t> x2(15), y2(15), y_only(5);
    gather_windows(w, other, 0, 3, x2.data(), y2.data());
    const size_t at17 = static_cast<size_t>(std::find(order.begin(), order.end(), 17) - order.begin()) * 5;
    EXPECT_TRUE(std::equal(x2.begin() + 5, x2.begin() + 10, x.begin() + static_cast<std::ptrdiff_t>(at17)));
    EXPECT_TRUE(std::equal(y2.begin() + 5, y2.begin() + 10, y.begin() + static_cast<std::ptrdiff_t>(at17)));
    gather_windows(w, other, 1, 1, nullptr, y_only.data());  // labels only, from `first` on
    EXPECT_EQ(y_only, (std::vector<int32_t>{18, 19, 20, 21, 22}));
    // An order entry outside [0, count) is refused, not read past the tokens.
    const std::vector<int64_t> bad{35};
    EXPECT_THROW(gather_windows(w, bad, 0, 1, x.data(), y.data()), Error);
    // Too few tokens for a window and its next token: no samples.
    w.tokens = iota_tokens(5);
    EXPECT_EQ(w.count(), 0);
    w.tokens = iota_tokens(6);
    EXPECT_EQ(w.count(), 1);
}

TEST_F(WindowData, ValidationWindowsDoNotOverlap) {
    const io::Dataset d = window_layout(iota_tokens(23), 5);  // (23 - 1) / 5 = 4 windows
    EXPECT_EQ(d.steps, 5);
    ASSERT_EQ(d.count, 4);
    ASSERT_EQ(d.tokens.size(), 20u);
    for (size_t i = 0; i < 20; ++i) {
        EXPECT_EQ(d.tokens[i], static_cast<int32_t>(i));
        EXPECT_EQ(d.labels[i], static_cast<int32_t>(i + 1));
    }
    EXPECT_EQ(window_layout(iota_tokens(5), 5).count, 0);  // 4 inputs: not one window of 5
    EXPECT_EQ(window_layout(iota_tokens(6), 5).count, 1);
}

// The training text is every window of its characters; the held-out end is its non-overlapping
// windows; the vocabulary is the whole text's, as for streams.
TEST_F(WindowData, TheTextSplitsIntoTrainingWindowsAndValidationWindows) {
    std::string text;
    for (int i = 0; i < 400; ++i) text += static_cast<char>('a' + i % 7);
    text += "XYZ";  // the end, held out: in the vocabulary, never in the training text
    write("t.txt", text);
    const std::string keys = "text = " + quoted("t.txt") + "\nsampling = \"windows\"\nblock_size = 5\n";
    const TextData t = load_text_data(config(keys + "validation = 40", "[train]\nbatch_size = 4\n"));
    EXPECT_EQ(t.chars, 403);
    EXPECT_EQ(t.validation_chars, 40);
    EXPECT_EQ(t.vocabulary.size(), 10);
    EXPECT_EQ(t.windows.block_size, 5);
    ASSERT_EQ(t.windows.tokens.size(), 363u);
    EXPECT_EQ(t.windows.count(), 358);
    EXPECT_EQ(t.train.count, 0);  // nothing materialised; only the samples' shape
    EXPECT_EQ(input_sample_shape(t.train), Shape{5});
    for (size_t i = 0; i < 363; ++i) ASSERT_EQ(t.windows.tokens[i], t.vocabulary.token(static_cast<uint8_t>(text[i])));
    ASSERT_EQ(t.validation.count, 39 / 5);
    EXPECT_EQ(t.validation.steps, 5);
    for (size_t i = 0; i < 35; ++i) {
        EXPECT_EQ(t.validation.tokens[i], t.vocabulary.token(static_cast<uint8_t>(text[363 + i])));
        EXPECT_EQ(t.validation.labels[i], t.vocabulary.token(static_cast<uint8_t>(text[364 + i])));
    }
    // load_run_data: a shuffled training set of every window, a description that says so.
    const RunData d = load_run_data(config(keys + "validation = 40", "[train]\nbatch_size = 4\n"));
    EXPECT_TRUE(d.is_text());
    EXPECT_TRUE(d.windowed());
    EXPECT_TRUE(d.shuffled());
    EXPECT_EQ(d.train_count(), 358);
    EXPECT_EQ(d.eval_batch(4), 4);
    EXPECT_EQ(d.description, "403 characters of text from 1 file(s), a vocabulary of 10; 358 windows of 5 characters, one "
                             "at every offset of the training text, drawn at random each epoch, the last 40 characters "
                             "held out for validation (7 non-overlapping windows)");
    // Streams are as they were: in order, not shuffled.
    const RunData streams = load_run_data(config("text = " + quoted("t.txt") + "\nseq_len = 5\nvalidation = 40", "[train]\nbatch_size = 4\n"));
    EXPECT_FALSE(streams.windowed());
    EXPECT_FALSE(streams.shuffled());
    EXPECT_EQ(streams.train_count(), streams.train.count);

    // Too short: the training text and the held-out end each need a window and one more character.
    EXPECT_EQ(error_of([&] { load_text_data(config("text = " + quoted("t.txt") + "\nsampling = \"windows\"\nblock_size = 383\n")); }),
              src() + ": the training text (data.text less data.validation) has 383 characters, too few for one window of "
                      "data.block_size = 383 characters and the one after it (it needs 384): lower data.block_size, or "
                      "give more text");
    EXPECT_EQ(load_text_data(config("text = " + quoted("t.txt") + "\nsampling = \"windows\"\nblock_size = 382\nvalidation = 0"))
                  .windows.count(),
              21);
    EXPECT_EQ(error_of([&] { load_text_data(config(keys + "validation = 5")); }),
              src() + ": key 'data.validation': the held-out text has 5 characters, too few for one window of "
                      "data.block_size = 5 characters and the one after it (it needs 6): lower data.block_size, or hold "
                      "out more (data.validation = 0 holds out none)");
    EXPECT_EQ(load_text_data(config(keys + "validation = 6")).validation.count, 1);
    EXPECT_EQ(load_text_data(config(keys + "validation = 0")).validation.count, 0);
}

// Every way a batch of windows reaches a device gives the same tensors: gathered on the host and
// uploaded, through staging areas (train.capture), and gathered on the device from the resident
// token array, plain or staged; on host memory (native) and on discrete memory; the tail batch too.
TEST_F(WindowData, BatchesFromTheHostStagedAndResidentAgree) {
    train::TextWindows w;
    w.tokens = iota_tokens(50);
    w.block_size = 6;
    std::vector<int64_t> order(static_cast<size_t>(w.count()));  // 44 windows: 5 batches of 8 and a tail of 4
    std::iota(order.begin(), order.end(), 0);
    std::mt19937_64 rng(9);
    std::shuffle(order.begin(), order.end(), rng);
    auto native = test::backend_named("native")->device(0);
    for (Device* dev : {&*native, &test::fake_discrete()}) {
        SCOPED_TRACE(dev->backend().name());
        WindowBatches host(w, *dev, false), staged(w, *dev, true);
        ResidentWindowBatches resident(w, *dev, false), resident_staged(w, *dev, true);
        for (BatchSource* s : std::vector<BatchSource*>{&host, &staged, &resident, &resident_staged}) {
            EXPECT_EQ(s->size(), 44);
            s->begin_epoch(order);
            for (int64_t first = 0; first < 44; first += 8) {
                const int64_t n = std::min<int64_t>(8, 44 - first);
                s->stage(first, n);
                auto [x, y] = s->enqueue(first, n);
                ASSERT_EQ(x.shape(), (Shape{n, 6}));
                ASSERT_EQ(y.shape(), (Shape{n, 6}));
                ASSERT_EQ(x.dtype(), DType::I32);
                ASSERT_EQ(y.dtype(), DType::I32);
                const int32_t* xs = x.host_read<int32_t>();
                const int32_t* ys = y.host_read<int32_t>();
                for (int64_t i = 0; i < n; ++i)
                    for (int64_t t = 0; t < 6; ++t) {
                        const int64_t o = order[static_cast<size_t>(first + i)];
                        ASSERT_EQ(xs[i * 6 + t], o + t) << "batch at " << first << ", row " << i;
                        ASSERT_EQ(ys[i * 6 + t], o + t + 1) << "batch at " << first << ", row " << i;
                    }
            }
        }
    }
}

// A recurrent layer would carry its state from one random window into an unrelated one.
TEST_F(WindowData, RecurrentModelsAreRefused) {
    write("t.txt", words_text(2000));
    auto dev = test::backend_named("native")->device(0);
    const RunConfig c = config("text = " + quoted("t.txt") + "\nsampling = \"windows\"\nblock_size = 8",
                               "[[model.layers]]\ntype = \"one_hot\"\n[[model.layers]]\ntype = \"lstm\"\nhidden = 8\n"
                               "[[model.layers]]\ntype = \"linear\"\nout = \"vocab\"\n");
    const RunData d = load_run_data(c);
    auto model = build_model(c, d.vocabulary.size());
    model->build(*dev, input_sample_shape(d.train), c.seed);
    const std::string e = error_of([&] { check_model_fits_data(c, *model, d); });
    EXPECT_EQ(e, src() + ": " + model->layer(1).label() + " carries its state from one batch to the next, but "
                 "data.sampling = \"windows\" draws unrelated windows at random: use data.sampling = \"streams\" for a "
                 "recurrent model");
    EXPECT_NE(e.find("lstm"), std::string::npos) << e;
}

class WindowTraining : public ::testing::Test {
protected:
    void SetUp() override {
        dir_ = fs::temp_directory_path() / ("xylem_window_train_" + std::to_string(::getpid()));
        fs::remove_all(dir_);
        fs::create_directories(dir_);
        std::ofstream(dir_ / "corpus.txt", std::ios::binary) << words_text(6000);
    }
    void TearDown() override { fs::remove_all(dir_); }
    // one_hot -> probe -> linear out = "vocab": a bigram model over [B, T, V] scores, with
    // cross-entropy per character. 6003 characters less 600 held out: 5395 windows of 8.
    std::string config_text(const std::string& extra_train = "", const std::string& solver = "") const {
        return "backend = \"native\"\n[data]\ntext = \"" + (dir_ / "corpus.txt").string() +
               "\"\nsampling = \"windows\"\nblock_size = 8\nvalidation = 0.1\n"
               "[[model.layers]]\ntype = \"one_hot\"\n[[model.layers]]\ntype = \"test_window_probe\"\n"
               "[[model.layers]]\ntype = \"linear\"\nout = \"vocab\"\n" +
               (solver.empty() ? "[solver]\ntype = \"adam\"\nlr = 0.1\n" : solver) +
               "[train]\nbatch_size = 16\nepochs = 3\nsteps_per_epoch = 20\nprint_every = 5\nseed = 11\n" + extra_train;
    }
    RunConfig config(const std::string& out, const std::string& extra_train = "", const std::string& solver = "") const {
        RunConfig c = parse_config(config_text(extra_train, solver), (dir_ / "w.toml").string());
        c.out_dir = (dir_ / out).string();
        return c;
    }
    static std::map<std::string, std::vector<uint8_t>> tensors(const std::string& file) {
        std::map<std::string, std::vector<uint8_t>> m;
        for (const auto& [name, t] : io::read_safetensors(file).tensors) m[name] = t.data;
        return m;
    }
    static std::vector<int32_t> order_of(const std::string& checkpoint) {
        const io::Safetensors f = io::read_safetensors(checkpoint);
        const auto& t = f.tensors.at("xylem.train.order");
        std::vector<int32_t> v(t.data.size() / 4);
        std::memcpy(v.data(), t.data.data(), t.data.size());
        return v;
    }
    fs::path dir_;
};

// A short run of a bigram model on random windows: the batches are the windows the epoch's order
// names (a permutation of every offset: without replacement), the loss falls, and validation
// scores the held-out windows.
TEST_F(WindowTraining, TrainsOnTheOrdersWindowsAndTheLossFalls) {
    auto dev = test::backend_named("native")->device(0);
    RunConfig c = config("run");
    c.epochs = 1;
    const RunData data = load_run_data(c);
    ASSERT_EQ(data.train_count(), 5395);
    recorded_windows().clear();
    record_windows() = true;
    const RunResult r = run(c, *dev, std::cout, RunOptions::quiet());
    record_windows() = false;
    ASSERT_EQ(r.epochs.size(), 1u);
    EXPECT_TRUE(r.text);
    EXPECT_EQ(r.epochs[0].steps, 20);  // train.steps_per_epoch bounds the epoch of 338 steps
    const std::vector<int32_t> order = order_of(r.last_checkpoint);
    ASSERT_EQ(order.size(), 5395u);
    std::vector<int32_t> sorted = order;
    std::sort(sorted.begin(), sorted.end());
    for (size_t i = 0; i < sorted.size(); ++i) ASSERT_EQ(sorted[i], static_cast<int32_t>(i)) << "not a permutation";
    std::vector<int32_t> first_batch(order.begin(), order.begin() + 16);
    std::sort(first_batch.begin(), first_batch.end());
    EXPECT_NE(first_batch.back() - first_batch.front(), 15) << "the order looks unshuffled";
    ASSERT_EQ(recorded_windows().size(), 20u);
    for (size_t step = 0; step < 20; ++step)
        for (size_t row = 0; row < 16; ++row) {
            const int64_t o = order[step * 16 + row];
            const std::vector<int32_t> want(data.windows.tokens.begin() + o, data.windows.tokens.begin() + o + 8);
            ASSERT_EQ(recorded_windows()[step][row], want) << "step " << step + 1 << ", row " << row << ": not window " << o;
        }
    // The loss: nats per character, from log(14) (uniform over the 14 characters) to a bigram's.
    const double uniform = std::log(14.0);
    EXPECT_TRUE(r.epochs[0].has_validation);
    EXPECT_LT(r.epochs[0].val_loss, 0.5 * uniform);
    std::ifstream log(dir_ / "run" / "log.csv");
    std::string line;
    std::vector<double> losses;
    std::getline(log, line);
    while (std::getline(log, line)) {
        if (line.find(",interval,") == std::string::npos) continue;
        std::istringstream cells(line);
        std::string cell;
        for (int i = 0; i < 3; ++i) std::getline(cells, cell, ',');
        losses.push_back(std::stod(cell));
    }
    ASSERT_EQ(losses.size(), 4u);  // every 5 steps
    EXPECT_GT(losses.front(), 0.85 * uniform);
    EXPECT_LT(losses.back(), 0.5 * uniform);
    EXPECT_LT(losses.back(), losses.front());
    nlohmann::json metrics;
    std::ifstream(dir_ / "run" / "metrics.json") >> metrics;
    EXPECT_EQ(metrics["loss_unit"], "nats per character");
}

// An epoch is a fresh permutation; max_steps stops a run mid-epoch; a run stopped there (or at an
// epoch's end) and resumed ends bit-identical to one that never stopped, in its parameters, its
// solver state, its order and its losses.
TEST_F(WindowTraining, ResumesBitIdentically) {
    auto dev = test::backend_named("native")->device(0);
    const RunResult whole = run(config("whole", "max_steps = 50\n"), *dev, std::cout, RunOptions::quiet());
    ASSERT_EQ(whole.epochs.size(), 3u);
    EXPECT_EQ(whole.epochs[2].steps, 10);  // 20 + 20 + 10: max_steps ends the third epoch part-way
    for (int64_t cut : {27, 40}) {  // mid-epoch (epoch 2, step 7), and an epoch's end
        SCOPED_TRACE("cut at step " + std::to_string(cut));
        const std::string name = "cut" + std::to_string(cut);
        const RunResult first = run(config(name, "max_steps = " + std::to_string(cut) + "\n"), *dev, std::cout,
                                    RunOptions::quiet());
        RunOptions o = RunOptions::quiet();
        o.resume_from = first.last_checkpoint;
        const RunResult rest = run(config(name, "max_steps = 50\n"), *dev, std::cout, o);
        EXPECT_EQ(tensors((dir_ / name / "last.safetensors").string()), tensors((dir_ / "whole" / "last.safetensors").string()));
        EXPECT_EQ(tensors(rest.checkpoint_path), tensors(whole.checkpoint_path));
        ASSERT_EQ(rest.epochs.size(), whole.epochs.size());
        for (size_t e = 0; e < whole.epochs.size(); ++e) {
            EXPECT_EQ(rest.epochs[e].train_loss, whole.epochs[e].train_loss) << "epoch " << e + 1;
            EXPECT_EQ(rest.epochs[e].val_loss, whole.epochs[e].val_loss) << "epoch " << e + 1;
        }
    }
    // Each epoch draws its own permutation.
    const RunResult one = run(config("one", "max_steps = 5\n"), *dev, std::cout, RunOptions::quiet());
    EXPECT_NE(order_of(one.last_checkpoint), order_of(whole.last_checkpoint));
}

// A small GPT with dropout in its attention and after its embedding: stopped mid-epoch and resumed,
// it ends bit-identical to a run that never stopped (the layers' dropout streams are restored).
TEST_F(WindowTraining, AGptWithDropoutResumesBitIdentically) {
    auto native = test::backend_named("native");
    for (uint32_t op : {XYLEM_OP_LAYER_NORM_BWD, XYLEM_OP_ATTENTION_BWD, XYLEM_OP_PERMUTE})
        if (!native->supports(op)) GTEST_SKIP() << "op " << xylem_op_name(op) << " is not supported by backend 'native'";
    auto dev = native->device(0);
    const std::string gpt =
        "backend = \"native\"\n[data]\ntext = \"" + (dir_ / "corpus.txt").string() +
        "\"\nsampling = \"windows\"\nblock_size = 8\nvalidation = 0.1\n"
        "[model]\nlayers = [\n"
        "  { name = \"wte\", type = \"embedding\", dim = 8, init_std = 0.02 },\n"
        "  { name = \"wpe\", type = \"position_embedding\", max_len = 8 },\n"
        "  { name = \"drop\", type = \"dropout\", p = 0.1 },\n"
        "  { name = \"ln_1\", type = \"layer_norm\" },\n"
        "  { name = \"attn\", type = \"attention\", heads = 2, dropout = 0.2 },\n"
        "  { name = \"res\", type = \"add\", inputs = [\"drop\", \"attn\"] },\n"
        "  { name = \"ln_f\", type = \"layer_norm\" },\n"
        "  { name = \"lm_head\", type = \"linear\", out = \"vocab\", bias = false, shares = \"wte\" },\n]\n"
        "[solver]\ntype = \"adamw\"\nlr = 0.01\n"
        "[train]\nbatch_size = 8\nepochs = 2\nsteps_per_epoch = 10\nprint_every = 5\nseed = 3\n";
    auto config = [&](const std::string& out, int64_t max_steps) {
        RunConfig c = parse_config(gpt + "max_steps = " + std::to_string(max_steps) + "\n", (dir_ / "g.toml").string());
        c.out_dir = (dir_ / out).string();
        return c;
    };
    const RunResult whole = run(config("whole", 20), *dev, std::cout, RunOptions::quiet());
    const RunResult first = run(config("cut", 13), *dev, std::cout, RunOptions::quiet());
    RunOptions o = RunOptions::quiet();
    o.resume_from = first.last_checkpoint;
    const RunResult rest = run(config("cut", 20), *dev, std::cout, o);
    EXPECT_EQ(tensors(rest.checkpoint_path), tensors(whole.checkpoint_path));
    ASSERT_EQ(rest.epochs.size(), whole.epochs.size());
    for (size_t e = 0; e < whole.epochs.size(); ++e) EXPECT_EQ(rest.epochs[e].val_loss, whole.epochs[e].val_loss);
}

// data.resident and train.capture on discrete memory (real copies, real capture) give the plain
// run's losses and parameters bit for bit; the resident run uploads half the bytes per step (the
// windows' token positions instead of their inputs and labels).
TEST_F(WindowTraining, ResidentAndCapturedMatchThePlainRunOnDiscreteMemory) {
    const std::string sgd = "[solver]\ntype = \"sgd\"\nlr = 0.5\nmomentum = 0.9\n";  // capture: not with Adam
    auto outcome = [&](const std::string& name, bool resident, bool capture) {
        RunConfig c = config(name, "max_steps = 30\n", sgd);
        c.data_resident = resident;
        c.capture = capture;
        const RunResult r = run(c, test::fake_discrete(), std::cout, RunOptions::quiet());
        return std::make_pair(r, tensors(r.checkpoint_path));
    };
    const auto plain = outcome("plain", false, false);
    for (const auto& [name, resident, capture] : {std::make_tuple("resident", true, false),
                                                  std::make_tuple("captured", false, true),
                                                  std::make_tuple("both", true, true)}) {
        SCOPED_TRACE(name);
        const auto other = outcome(name, resident, capture);
        EXPECT_EQ(other.second, plain.second) << "parameters differ bitwise";
        ASSERT_EQ(other.first.epochs.size(), plain.first.epochs.size());
        for (size_t e = 0; e < plain.first.epochs.size(); ++e) {
            EXPECT_EQ(other.first.epochs[e].train_loss, plain.first.epochs[e].train_loss);
            EXPECT_EQ(other.first.epochs[e].val_loss, plain.first.epochs[e].val_loss);
            // Per step: 16 windows of 8 int32 inputs and labels, or their 16*8 int32 positions.
            EXPECT_EQ(other.first.epochs[e].h2d_bytes_per_step, resident ? 16 * 8 * 4 : 2 * 16 * 8 * 4);
        }
    }
    EXPECT_EQ(plain.first.epochs[0].h2d_bytes_per_step, 2 * 16 * 8 * 4);
}

// `xylem eval` of a window-trained checkpoint scores the held-out windows, the same windows and
// loss as the run's last validation; a resume may not change the sampling or the window size.
TEST_F(WindowTraining, EvalScoresTheValidationWindowsAndResumeKeepsTheLayout) {
    // The xylem program does not know the test's probe layer: one_hot -> linear.
    auto without_probe = [](std::string text) {
        const std::string probe = "[[model.layers]]\ntype = \"test_window_probe\"\n";
        return text.replace(text.find(probe), probe.size(), "");
    };
    const std::string cfg = (dir_ / "w.toml").string();
    std::ofstream(cfg) << without_probe(config_text("max_steps = 20\n"));
    auto dev = test::backend_named("native")->device(0);
    RunConfig c = load_config(cfg);
    c.out_dir = (dir_ / "run").string();
    const RunData data = load_run_data(c);
    const RunResult r = run(c, *dev, std::cout, RunOptions::quiet());
    ASSERT_FALSE(r.epochs.empty());
    const test::CliResult e = test::run_cli("eval --config " + cfg + " --checkpoint " + r.checkpoint_path);
    ASSERT_EQ(e.code, 0) << e.out << e.err;
    char want[64];
    std::snprintf(want, sizeof want, "validation loss %.4f nats/char", r.epochs.back().val_loss);
    EXPECT_EQ(e.out.rfind(want, 0), 0u) << e.out;
    // 600 held-out characters: 74 windows of 8.
    ASSERT_EQ(data.validation.count, 74);
    EXPECT_NE(e.out.find("(592 characters, backend native"), std::string::npos) << e.out;

    const std::string other = (dir_ / "other.toml").string();
    std::string text = without_probe(config_text("max_steps = 40\n"));
    text.replace(text.find("block_size = 8"), 14, "block_size = 9");
    std::ofstream(other) << text;
    const test::CliResult bad = test::run_cli("train --resume " + c.out_dir + " --config " + other);
    EXPECT_NE(bad.code, 0);
    EXPECT_NE(bad.err.find("key 'data.block_size' was 8 in the run being resumed and is 9 now"), std::string::npos) << bad.err;
}

}  // namespace
