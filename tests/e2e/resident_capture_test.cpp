// data.resident and train.capture end to end: on the discrete test plugin (real transfers, real
// capture) and on native, each must give bit-identical losses and parameters to the plain run.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "xylem/train/checkpoint.h"
#include "xylem/train/model_builder.h"
#include "xylem/train/run.h"
#include "support/backends.h"
#include "xylem/error.h"
#include "xylem/registry.h"
#include "support/fake_discrete.h"

using namespace xylem;
namespace fs = std::filesystem;

namespace {

const char* kData = "/usr/share/datasets/fashion-mnist";

using test::fake_discrete;
Device& native() { return *test::backend_named("native")->device(0); }

// Writes `n` items of `d` as plain IDX files, so a run can have a tail batch and still be quick.
void write_subset(const io::Dataset& d, int64_t n, const fs::path& dir, const std::string& prefix) {
    auto be32 = [](std::ofstream& f, uint32_t v) {
        const unsigned char b[4] = {static_cast<unsigned char>(v >> 24), static_cast<unsigned char>(v >> 16),
                                    static_cast<unsigned char>(v >> 8), static_cast<unsigned char>(v)};
        f.write(reinterpret_cast<const char*>(b), 4);
    };
    std::ofstream img(dir / (prefix + "-images-idx3-ubyte"), std::ios::binary);
    be32(img, 0x803);
    be32(img, static_cast<uint32_t>(n));
    be32(img, static_cast<uint32_t>(d.rows));
    be32(img, static_cast<uint32_t>(d.cols));
    for (int64_t i = 0; i < n * d.rows * d.cols; ++i) img.put(static_cast<char>(std::lround(d.images[i] * 255.0f)));
    std::ofstream lab(dir / (prefix + "-labels-idx1-ubyte"), std::ios::binary);
    be32(lab, 0x801);
    be32(lab, static_cast<uint32_t>(n));
    for (int64_t i = 0; i < n; ++i) lab.put(static_cast<char>(d.labels[i]));
}

struct Outcome {
    train::RunResult result;
    std::vector<std::string> logged_losses;  // log.csv's loss column, one per progress line
    double train_loss = 0;
    std::vector<std::vector<float>> params;
};

class ResidentCapture : public ::testing::Test {
protected:
    void SetUp() override {
        if (!fs::exists(kData)) GTEST_SKIP() << "Fashion-MNIST not installed at " << kData;
        dir_ = fs::temp_directory_path() / ("xylem_resident_" + std::to_string(::getpid()));
        fs::create_directories(dir_ / "data");
        // 1000 training images: 15 full batches of 64 and a tail of 40; 300 test images.
        write_subset(io::load_mnist_dir(kData, true), 1000, dir_ / "data", "train");
        write_subset(io::load_mnist_dir(kData, false), 300, dir_ / "data", "t10k");
    }
    void TearDown() override { fs::remove_all(dir_); }

    RunConfig config(const std::string& name) {
        RunConfig c = load_config(std::string(XYLEM_SOURCE_DIR) + "/examples/fashion_mlp.toml");
        c.data_dir = (dir_ / "data").string();
        c.epochs = 2;
        c.print_every = 5;  // loss reads between replayed steps: the host copy must not go stale
        c.solver.lr = 0.05f;
        c.solver.dampening = 0.5f;  // SGD's first step differs from the rest: the capture must come after it
        c.out_dir = (dir_ / name).string();
        return c;
    }

    Outcome train(const RunConfig& c, Device& dev) {
        std::ostringstream log;
        Outcome r;
        r.result = train::run(c, dev, log, train::RunOptions::quiet());
        std::ifstream mf(r.result.metrics_path);
        r.train_loss = nlohmann::json::parse(mf)["epochs"][1]["train_loss"].get<double>();
        auto model = train::build_model(c);
        model->build(dev, {1, 28, 28}, c.seed + 7);
        train::load_checkpoint(r.result.checkpoint_path, *model);
        for (Param* p : model->params()) r.params.push_back(p->value.to_vector());
        std::ifstream lf(r.result.log_path);
        std::string line;
        std::getline(lf, line);  // header
        while (std::getline(lf, line)) {
            std::stringstream fields(line);
            std::string epoch, step, loss;
            std::getline(fields, epoch, ',');
            std::getline(fields, step, ',');
            std::getline(fields, loss, ',');
            if (line.substr(line.rfind(',') + 1) != "interval") continue;  // the epoch rows repeat the means
            r.logged_losses.push_back(epoch + "," + step + "," + loss);
        }
        return r;
    }

    static void expect_identical(const Outcome& a, const Outcome& b) {
        ASSERT_EQ(a.result.epochs.size(), b.result.epochs.size());
        for (size_t e = 0; e < a.result.epochs.size(); ++e) {
            EXPECT_EQ(a.result.epochs[e].train_loss, b.result.epochs[e].train_loss) << "epoch " << e + 1;
            EXPECT_EQ(a.result.epochs[e].test_accuracy, b.result.epochs[e].test_accuracy) << "epoch " << e + 1;
        }
        EXPECT_EQ(a.train_loss, b.train_loss);
        EXPECT_EQ(a.logged_losses, b.logged_losses);
        EXPECT_EQ(a.logged_losses.size(), 8u);  // steps 5, 10, 15 and the tail, twice
        EXPECT_EQ(a.params, b.params) << "parameters differ bitwise";
    }

    fs::path dir_;
};

}  // namespace

TEST_F(ResidentCapture, ResidentDataOnDiscreteMemoryMovesNothingPerStepAndMatches) {
    for (const char* loss : {"cross_entropy", "mse"}) {
        SCOPED_TRACE(loss);
        RunConfig plain = config(std::string("plain_") + loss), resident = config(std::string("resident_") + loss);
        plain.loss = resident.loss = loss;
        resident.data_resident = true;
        const Outcome a = train(plain, fake_discrete()), b = train(resident, fake_discrete());
        expect_identical(a, b);
        // The plain run uploads images and targets every step; the resident one nothing (its only
        // transfers are the loss reads for the progress line, device->host).
        const double target_bytes = std::string(loss) == "mse" ? 10 * 4 : 4;
        EXPECT_EQ(a.result.epochs[0].h2d_bytes_per_step, 1000 * (784 * 4 + target_bytes) / 16);
        for (const train::EpochMetrics& m : b.result.epochs) EXPECT_EQ(m.h2d_bytes_per_step, 0.0);
        EXPECT_GT(b.result.epochs[1].test_accuracy, 0.3);  // it learned something (chance is 0.1)
    }
}

TEST_F(ResidentCapture, ResidentDataOnNativeMatches) {
    RunConfig plain = config("plain"), resident = config("resident");
    resident.data_resident = true;
    const Outcome a = train(plain, native()), b = train(resident, native());
    expect_identical(a, b);
    EXPECT_EQ(b.result.epochs[0].transfers_per_step, 0.0);  // host memory: not even the loss reads copy
}

TEST_F(ResidentCapture, CapturedStepsMatchEagerOnDiscreteMemory) {
    RunConfig eager = config("eager"), captured = config("captured");
    captured.capture = true;
    const Outcome a = train(eager, fake_discrete()), b = train(captured, fake_discrete());
    expect_identical(a, b);
    // Replayed steps still copy their input batch, through the staging areas, and count it.
    for (size_t e = 0; e < 2; ++e) {
        EXPECT_EQ(b.result.epochs[e].h2d_bytes_per_step, a.result.epochs[e].h2d_bytes_per_step);
        EXPECT_EQ(b.result.epochs[e].transfers_per_step, a.result.epochs[e].transfers_per_step);
    }
}

TEST_F(ResidentCapture, CapturedStepsOverResidentDataMatchAndMoveNothing) {
    RunConfig eager = config("eager"), captured = config("captured");
    captured.capture = captured.data_resident = true;
    const Outcome a = train(eager, fake_discrete()), b = train(captured, fake_discrete());
    expect_identical(a, b);
    for (const train::EpochMetrics& m : b.result.epochs) EXPECT_EQ(m.h2d_bytes_per_step, 0.0);
}

TEST_F(ResidentCapture, CaptureRejectsWhatItCannotReplay) {
    auto message = [&](RunConfig c, Device& dev, bool profile = false) {
        std::ostringstream log;
        try {
            train::RunOptions options = train::RunOptions::quiet();
            options.profile = profile;
            train::run(c, dev, log, options);
        } catch (const Error& e) {
            return std::string(e.what());
        }
        return std::string("<no error>");
    };
    RunConfig c = config("rejected");
    c.capture = true;
    std::string msg = message(c, native());
    EXPECT_TRUE(test::contains(msg, "train.capture")) << msg;
    EXPECT_TRUE(test::contains(msg, "backend 'native'")) << msg;
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;

    RunConfig adam = c;
    adam.solver.type = "adam";
    msg = message(adam, fake_discrete());
    EXPECT_TRUE(test::contains(msg, "train.capture")) << msg;
    EXPECT_TRUE(test::contains(msg, "solver.type")) << msg;

    // A dropout layer is named as the model graph names it.
    RunConfig dropout = c;
    dropout.layers = parse_config("[data]\ndir = \"x\"\n[[model.layers]]\ntype = \"flatten\"\n[[model.layers]]\n"
                                  "type = \"linear\"\nout = 16\n[[model.layers]]\ntype = \"dropout\"\nname = \"drop\"\n"
                                  "[[model.layers]]\ntype = \"linear\"\nout = 10\n",
                                  "dropout.toml")
                         .layers;
    msg = message(dropout, fake_discrete());
    EXPECT_TRUE(test::contains(msg, "model layer 'drop' (dropout)")) << msg;

    // A layer that draws masks without being a dropout layer: a stacked lstm with dropout between
    // its levels (rows of the image as time steps).
    RunConfig stacked = parse_config("[data]\ndir = \"x\"\n[[model.layers]]\ntype = \"reshape\"\nshape = [28, 28]\n"
                                     "[[model.layers]]\ntype = \"lstm\"\nhidden = 4\nlayers = 2\ndropout = 0.5\n"
                                     "[[model.layers]]\ntype = \"flatten\"\n[[model.layers]]\ntype = \"linear\"\nout = 10\n",
                                     "stacked.toml");
    RunConfig lstm = c;
    lstm.layers = stacked.layers;
    msg = message(lstm, native());  // native has no capture: the backend is named first
    EXPECT_TRUE(test::contains(msg, "backend 'native'")) << msg;
    msg = message(lstm, fake_discrete());
    EXPECT_TRUE(test::contains(msg, "train.capture")) << msg;
    EXPECT_TRUE(test::contains(msg, "dropout mask")) << msg;

    msg = message(c, fake_discrete(), true);
    EXPECT_TRUE(test::contains(msg, "--profile")) << msg;

    RunConfig scheduled = c;  // a captured step would replay the rate it was recorded with
    scheduled.solver.schedule.warmup_steps = 10;
    msg = message(scheduled, fake_discrete());
    EXPECT_TRUE(test::contains(msg, "solver.schedule")) << msg;

    RunConfig adamw = c;
    adamw.solver.type = "adamw";
    msg = message(adamw, fake_discrete());
    EXPECT_TRUE(test::contains(msg, "solver.type = \"adamw\"")) << msg;
}
