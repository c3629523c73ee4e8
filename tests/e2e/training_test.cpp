// End to end on every available backend: a short run learns, and a checkpoint reloads exactly.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <numeric>

#include "xylem/train/checkpoint.h"
#include "xylem/train/evaluate.h"
#include "xylem/train/model_builder.h"
#include "xylem/train/run.h"
#include "xylem/op_calls.h"
#include "support/backends.h"
#include "xylem/registry.h"

using namespace xylem;
namespace fs = std::filesystem;

namespace {

const char* kData = "/usr/share/datasets/fashion-mnist";

using test::available_backends;

std::shared_ptr<Device> device_of(const std::string& name) { return test::backend_named(name)->device(0); }

RunConfig mlp_config(const std::string& out_dir) {
    RunConfig c = load_config(std::string(XYLEM_SOURCE_DIR) + "/examples/fashion_mlp.toml");
    c.epochs = 1;
    c.max_steps = 300;
    c.out_dir = out_dir;
    return c;
}

// Mean cross-entropy of `model` on a fixed batch, read back once.
double batch_loss(Net& model, Device& dev, const Tensor& x, const Tensor& y) {
    Tensor loss({1}, DType::F32, dev);
    ops::xent_fwd(dev, model.forward(dev, x, false), y, loss, 1.0f / static_cast<float>(x.dim(0)), false);
    return loss.to_vector()[0];
}

class Training : public ::testing::TestWithParam<std::string> {
protected:
    void SetUp() override {
        if (!fs::exists(kData)) GTEST_SKIP() << "Fashion-MNIST not installed at " << kData;
        out_ = fs::temp_directory_path() / ("xylem_e2e_" + GetParam() + "_" + std::to_string(::getpid()));
        fs::remove_all(out_);
    }
    void TearDown() override { fs::remove_all(out_); }
    fs::path out_;
};

}  // namespace

TEST(TrainingSetup, NativeBackendIsPresent) {
    const auto names = available_backends();
    EXPECT_NE(std::find(names.begin(), names.end(), "native"), names.end());
}

TEST_P(Training, ShortRunLearnsAndCheckpointReloadsExactly) {
    Device& dev = *device_of(GetParam());
    RunConfig c = mlp_config(out_.string());
    const io::Dataset test = io::load_mnist_dir(kData, false);

    // The loss a fresh model (same seed) has on a fixed test batch, before any training.
    auto fresh = train::build_model(c);
    fresh->build(dev, {1, 28, 28}, c.seed);
    std::vector<int64_t> order(256);
    std::iota(order.begin(), order.end(), 0);
    Tensor x({256, 1, 28, 28}, DType::F32, dev), y({256}, DType::I32, dev);
    train::fill_batch(test, order, 0, x, y);
    const double start = batch_loss(*fresh, dev, x, y);
    EXPECT_GT(start, 2.0);  // about ln(10) for an untrained 10-way classifier

    std::ostringstream log;
    train::RunResult r = train::run(c, dev, log, train::RunOptions::quiet());
    ASSERT_EQ(r.epochs.size(), 1u);
    EXPECT_EQ(r.epochs[0].steps, 300);
    EXPECT_GT(r.epochs[0].test_accuracy, 0.70);
    EXPECT_LT(r.epochs[0].train_loss, 1.2);

    // metrics.json and the CSV log are complete.
    std::ifstream mf(r.metrics_path);
    nlohmann::json m = nlohmann::json::parse(mf);
    EXPECT_EQ(m["backend"], GetParam());
    EXPECT_NEAR(m["epochs"][0]["test_accuracy"].get<double>(), r.epochs[0].test_accuracy, 1e-12);
    EXPECT_TRUE(m["epochs"][0].contains("transfers_per_step"));
    std::ifstream lf(r.log_path);
    std::string header, line, last;
    std::getline(lf, header);
    EXPECT_EQ(header, "epoch,step,loss,images_per_second,elapsed_seconds,lr,val_loss,val_accuracy,kind");
    while (std::getline(lf, line)) last = line;
    EXPECT_EQ(last.rfind("1,300,", 0), 0u) << last;

    // Reloaded into a fresh model, the checkpoint gives identical predictions and a loss
    // well below the start.
    auto reloaded = train::build_model(c);
    reloaded->build(dev, {1, 28, 28}, c.seed + 1);  // other init: the checkpoint must overwrite it
    train::load_checkpoint(r.checkpoint_path, *reloaded);
    const double after = batch_loss(*reloaded, dev, x, y);
    EXPECT_LT(after, 0.5 * start);
    auto trained = train::build_model(c);
    trained->build(dev, {1, 28, 28}, c.seed);
    train::load_checkpoint(r.checkpoint_path, *trained);
    std::vector<float> a = trained->forward(dev, x, false).to_vector();
    std::vector<float> b = reloaded->forward(dev, x, false).to_vector();
    EXPECT_EQ(a, b);
    EXPECT_NEAR(train::evaluate(*reloaded, dev, test), r.epochs[0].test_accuracy, 1e-12);
}

TEST_P(Training, TrainingStepMovesNoDataOnHostMemoryBackends) {
    Device& dev = *device_of(GetParam());
    RunConfig c = mlp_config(out_.string());
    c.max_steps = 20;
    std::ostringstream log;
    train::RunResult r = train::run(c, dev, log, train::RunOptions::quiet());
    // The only host->device traffic a step may have is its input batch (images + labels); the
    // host reads the loss scalar back only when it prints (here once, at the end of the run).
    const double batch_bytes = static_cast<double>(c.batch_size) * (28 * 28 + 1) * 4;
    EXPECT_LE(r.epochs[0].h2d_bytes_per_step, batch_bytes);
    EXPECT_LE(r.epochs[0].transfers_per_step, 2.0 + 1.0 / static_cast<double>(c.max_steps));
    if (dev.host_memory()) {
        EXPECT_EQ(r.epochs[0].transfers_per_step, 0.0);
    }
}

INSTANTIATE_TEST_SUITE_P(Backends, Training, ::testing::ValuesIn(available_backends()), test::backend_param_name);
