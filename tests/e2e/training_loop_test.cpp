// The training loop's run-level features: learning-rate schedules reach the update ops, early
// stopping, train.max_steps over the whole run, the test set scored at the end, log.csv's rows.
#include <gtest/gtest.h>

#include <algorithm>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "xylem/train/checkpoint.h"
#include "xylem/train/run_data.h"
#include "xylem/train/run.h"
#include "support/backends.h"
#include "xylem/error.h"
#include "xylem/io/safetensors.h"
#include "xylem/solvers/schedule.h"

using namespace xylem;
namespace fs = std::filesystem;

namespace {

const char* kData = "/usr/share/datasets/fashion-mnist";

std::string config(const std::string& train, const std::string& more = "") {
    return std::string("backend = \"native\"\n[data]\ndir = \"") + kData + "\"\n" + more +
           "\n[[model.layers]]\ntype = \"flatten\"\n[[model.layers]]\ntype = \"linear\"\nout = 32\n"
           "[[model.layers]]\ntype = \"relu\"\n[[model.layers]]\ntype = \"linear\"\nout = 10\n"
           "[solver]\nlr = 0.05\nmomentum = 0.9\n[train]\nbatch_size = 50\nprint_every = 5\n" + train;
}

struct Row {
    int epoch;
    long long step;
    double loss, lr;
    std::string kind;
};

std::vector<Row> read_log(const std::string& path) {
    std::ifstream in(path);
    std::string line;
    std::getline(in, line);
    std::vector<Row> rows;
    while (std::getline(in, line)) {
        std::vector<std::string> f;
        std::stringstream ss(line);
        std::string x;
        while (std::getline(ss, x, ',')) f.push_back(x);
        if (f.size() == 8) f.push_back("");  // never: kind is always last and present
        rows.push_back({std::stoi(f[0]), std::stoll(f[1]), std::stod(f[2]), std::stod(f[5]), f[8]});
    }
    return rows;
}

class TrainingLoop : public ::testing::Test {
protected:
    void SetUp() override {
        if (!fs::exists(kData)) GTEST_SKIP() << "Fashion-MNIST not installed at " << kData;
        dir_ = fs::temp_directory_path() / ("xylem_loop_" + std::to_string(::getpid()));
        fs::remove_all(dir_);
    }
    void TearDown() override { fs::remove_all(dir_); }
    train::RunResult train(const std::string& text, const std::string& name) {
        RunConfig c = parse_config(text, (dir_ / (name + ".toml")).string());
        c.out_dir = (dir_ / name).string();
        std::ostringstream log;
        return train::run(c, *test::backend_named("native")->device(0), log, train::RunOptions::quiet());
    }
    fs::path dir_;
};

}  // namespace

// Each logged row's rate is the schedule's closed form at that row's step; a step schedule per
// epoch changes the rate at each epoch boundary.
TEST_F(TrainingLoop, ScheduleSetsEachStepsRate) {
    const std::string text = config("epochs = 3\nsteps_per_epoch = 20\n") +
                             "[solver.schedule]\ntype = \"step\"\nstep_size = 1\ngamma = 0.5\nwarmup_steps = 8\n";
    // (TOML: [solver.schedule] after [train] is still the solver's subtable.)
    const train::RunResult r = train(text, "sched");
    const RunConfig c = parse_config(text, "x.toml");
    int checked = 0;
    for (const Row& row : read_log(r.log_path)) {
        if (row.kind != "interval") continue;
        const int64_t steps_done = (row.epoch - 1) * 20 + row.step - 1;  // the row's last step ran with this rate
        EXPECT_NEAR(row.lr, scheduled_lr(0.05, c.solver.schedule, row.epoch - 1, steps_done), 1e-7)
            << "epoch " << row.epoch << " step " << row.step;
        ++checked;
    }
    EXPECT_EQ(checked, 12);
    ASSERT_EQ(r.epochs.size(), 3u);
    EXPECT_NEAR(r.epochs[2].lr, 0.05 * 0.25, 1e-9);
}

// The rate reaches the update ops: with SGD without momentum and a rate of 0.05 * 1e-30 from the
// second epoch on, the second epoch changes no weight, so 2 epochs == 1 epoch bit for bit.
TEST_F(TrainingLoop, ScheduledRateReachesTheUpdateOps) {
    std::string text = config("epochs = 2\nsteps_per_epoch = 10\n") +
                       "[solver.schedule]\ntype = \"exponential\"\ngamma = 1e-30\n";
    text.replace(text.find("momentum = 0.9"), 14, "momentum = 0.0");
    const train::RunResult two = train(text, "two");
    std::string one_epoch = text;
    one_epoch.replace(one_epoch.find("epochs = 2"), 10, "epochs = 1");
    const train::RunResult one = train(one_epoch, "one");
    const io::Safetensors a = io::read_safetensors(two.checkpoint_path), b = io::read_safetensors(one.checkpoint_path);
    for (const auto& [name, t] : a.tensors) EXPECT_TRUE(t.data == b.tensors.at(name).data) << name;
    // Without the schedule the second epoch does move them.
    std::string unscheduled = text.substr(0, text.find("[solver.schedule]"));
    const train::RunResult moved = train(unscheduled, "moved");
    const io::Safetensors c = io::read_safetensors(moved.checkpoint_path);
    EXPECT_FALSE(c.tensors.at("1.weight").data == b.tensors.at("1.weight").data);
}

TEST_F(TrainingLoop, EarlyStoppingEndsTheRunAndSaysWhy) {
    // A rate of zero after the first epoch: the validation loss cannot improve any more.
    const std::string text = config("epochs = 10\nsteps_per_epoch = 10\nearly_stopping = { patience = 2 }\n",
                                    "validation = 500") +
                             "[solver.schedule]\ntype = \"exponential\"\ngamma = 1e-30\n";
    const train::RunResult r = train(text, "early");
    ASSERT_EQ(r.epochs.size(), 3u);  // epoch 1 is the best; 2 and 3 do not improve; stop
    EXPECT_NE(r.finish_reason.find("early stopping: val_loss has not improved for 2 epoch(s)"), std::string::npos)
        << r.finish_reason;
    EXPECT_TRUE(r.epochs.back().has_test);  // the final evaluation still happens
    EXPECT_FALSE(r.epochs[0].has_test);
    const nlohmann::json m = nlohmann::json::parse(std::ifstream(r.metrics_path));
    EXPECT_TRUE(m.contains("finished_early"));
    // Resuming an early-stopped run trains nothing.
    RunConfig c = parse_config(text, "e.toml");
    c.out_dir = (dir_ / "early").string();
    train::RunOptions o = train::RunOptions::quiet();
    o.resume_from = r.last_checkpoint;
    std::ostringstream log;
    EXPECT_TRUE(train::run(c, *test::backend_named("native")->device(0), log, o).already_complete);
}

// The validation set is held out of the training images, not copied from them: training and
// validation together are the training file's images, each once (compared as multisets of the
// images' bytes with their labels), of the sizes asked for; the split depends on the seed alone,
// so a resumed run (and every backend) holds out the same images, and another seed others.
TEST_F(TrainingLoop, ValidationIsHeldOutOfTheTrainingImagesBySeed) {
    auto split = [&](const std::string& seed) {
        return train::load_run_data(parse_config(config("seed = " + seed + "\n", "validation = 700"), "v.toml"));
    };
    const train::RunData a = split("3"), again = split("3"), other = split("4");
    const io::Dataset all = io::load_mnist_dir(kData, true);
    ASSERT_EQ(a.validation.count, 700);
    ASSERT_EQ(a.train.count + a.validation.count, all.count);
    const int64_t pixels = all.rows * all.cols;
    auto keys = [&](const io::Dataset& d) {
        std::vector<std::string> k;
        for (int64_t i = 0; i < d.count; ++i) {
            std::string key(reinterpret_cast<const char*>(d.images.data() + i * pixels), pixels * sizeof(float));
            key += static_cast<char>(d.labels[static_cast<size_t>(i)]);
            k.push_back(std::move(key));
        }
        std::sort(k.begin(), k.end());
        return k;
    };
    std::vector<std::string> joined = keys(a.train), val = keys(a.validation);
    joined.insert(joined.end(), val.begin(), val.end());
    std::sort(joined.begin(), joined.end());
    EXPECT_TRUE(joined == keys(all)) << "training + validation is not the training file's images, each once";
    EXPECT_TRUE(keys(again.validation) == val) << "the same seed held out other images";
    EXPECT_FALSE(keys(other.validation) == val) << "another seed held out the same images";
}

// train.max_steps counts over the whole run: 25 steps of 10-step epochs end inside epoch 3.
TEST_F(TrainingLoop, MaxStepsIsATotalOverTheRun) {
    const train::RunResult r = train(config("epochs = 5\nsteps_per_epoch = 10\nmax_steps = 25\n"), "total");
    ASSERT_EQ(r.epochs.size(), 3u);
    EXPECT_EQ(r.epochs[2].steps, 5);
    EXPECT_FALSE(r.epochs[2].complete);
    EXPECT_TRUE(r.epochs[2].has_test);
    const train::TrainingState st = train::read_training_state(r.last_checkpoint);
    EXPECT_EQ(st.global_step, 25u);
    EXPECT_EQ(st.epoch, 3);
    EXPECT_EQ(st.step, 5);  // a resume with a larger limit continues inside epoch 3
}

TEST_F(TrainingLoop, TestSetIsScoredAtTheEndUnlessAskedEveryEpoch) {
    const train::RunResult end = train(config("epochs = 3\nsteps_per_epoch = 5\n"), "end");
    ASSERT_EQ(end.epochs.size(), 3u);
    EXPECT_FALSE(end.epochs[0].has_test);
    EXPECT_FALSE(end.epochs[1].has_test);
    EXPECT_TRUE(end.epochs[2].has_test);
    const train::RunResult every = train(config("epochs = 3\nsteps_per_epoch = 5\ntest_every_epoch = true\n"), "every");
    for (const train::EpochMetrics& m : every.epochs) EXPECT_TRUE(m.has_test);
    // Rows: one per print_every steps, and one per epoch.
    const std::vector<Row> rows = read_log(end.log_path);
    ASSERT_EQ(rows.size(), 6u);
    EXPECT_EQ(rows[1].kind, "epoch");
    EXPECT_NEAR(rows[1].loss, end.epochs[0].train_loss, 1e-5 * end.epochs[0].train_loss);
}
