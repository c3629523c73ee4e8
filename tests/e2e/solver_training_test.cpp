// The new [solver] settings end to end: build_solver turns them into the right solver, and short
// runs with RMSprop + global-norm clipping and AdamW + value clipping + no_decay_bias learn.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <sstream>

#include "xylem/train/checkpoint.h"
#include "xylem/train/model_builder.h"
#include "xylem/train/run.h"
#include "support/backends.h"
#include "xylem/op_calls.h"
#include "xylem/error.h"

using namespace xylem;
namespace fs = std::filesystem;

namespace {

const char* kData = "/usr/share/datasets/fashion-mnist";

RunConfig with_solver(const std::string& solver_section) {
    return parse_config("[solver]\n" + solver_section, "solver.toml");
}

bool has(const std::vector<uint32_t>& ops, uint32_t op) { return std::find(ops.begin(), ops.end(), op) != ops.end(); }

TEST(BuildSolver, MapsTheSolverSection) {
    auto rms = train::build_solver(with_solver("type = \"rmsprop\"\nmomentum = 0.9\ncentered = true\nclip_norm = 1.0\n"));
    EXPECT_EQ(rms->kind(), "rmsprop");
    EXPECT_FLOAT_EQ(rms->lr(), 0.01f);
    EXPECT_FLOAT_EQ(rms->clipping().norm, 1.0f);
    EXPECT_TRUE(has(rms->ops_needed(), XYLEM_OP_RMSPROP_UPDATE));
    EXPECT_TRUE(has(rms->ops_needed(), XYLEM_OP_SUM_SQUARES));
    EXPECT_TRUE(has(rms->ops_needed(), XYLEM_OP_CLIP_BY_NORM));
    EXPECT_FALSE(rms->no_decay_bias());

    auto adamw = train::build_solver(with_solver("type = \"adamw\"\nclip_value = 0.5\nno_decay_bias = true\n"));
    EXPECT_EQ(adamw->kind(), "adamw");
    EXPECT_FLOAT_EQ(adamw->clipping().value, 0.5f);
    EXPECT_TRUE(adamw->no_decay_bias());
    EXPECT_TRUE(has(adamw->ops_needed(), XYLEM_OP_ADAMW_UPDATE));
    EXPECT_TRUE(has(adamw->ops_needed(), XYLEM_OP_CLAMP));
    EXPECT_FALSE(adamw->capture_blocker().empty());  // bias corrections change every step

    auto sgd = train::build_solver(with_solver("no_decay_bias = true\nweight_decay = 0.1\n"));
    EXPECT_EQ(sgd->kind(), "sgd");
    EXPECT_TRUE(sgd->no_decay_bias());
    EXPECT_FALSE(has(sgd->ops_needed(), XYLEM_OP_CLAMP));
}

// RMSprop's state (square_avg, momentum_buffer, grad_avg) and AdamW's survive a training
// checkpoint under torch's names, so a resumed run continues from the same state.
TEST(SolverCheckpoint, RmspropAndAdamwStateRoundTrips) {
    Device& dev = *test::backend_named("native")->device(0);
    const fs::path path = fs::temp_directory_path() / ("xylem_solver_ckpt_" + std::to_string(::getpid()) + ".safetensors");
    for (const std::string& section : {std::string("type = \"rmsprop\"\nmomentum = 0.9\ncentered = true\n"),
                                       std::string("type = \"adamw\"\n")}) {
        SCOPED_TRACE(section);
        RunConfig c = parse_config("[[model.layers]]\ntype = \"linear\"\nout = 3\n[solver]\n" + section, "s.toml");
        auto model = train::build_model(c);
        model->build(dev, {4}, c.seed);
        auto solver = train::build_solver(c);
        std::vector<Param*> params = model->params();
        for (int t = 0; t < 3; ++t) {
            for (Param* p : params) ops::fill(dev, p->grad, 0.1f * static_cast<float>(t + 1));
            solver->step(dev, params);
        }
        train::save_training_checkpoint(path.string(), *model, *solver, dev, train::TrainingState{}, {});
        auto model2 = train::build_model(c);
        model2->build(dev, {4}, c.seed + 1);
        auto solver2 = train::build_solver(c);
        train::load_training_checkpoint(path.string(), *model2, *solver2, dev);
        EXPECT_EQ(solver2->steps(), 3u);
        auto a = solver->state_slots(dev, params), b = solver2->state_slots(dev, model2->params());
        ASSERT_EQ(a.size(), b.size());
        EXPECT_EQ(a.size(), section.find("rmsprop") != std::string::npos ? 3u : 2u);
        for (size_t i = 0; i < a.size(); ++i)
            for (size_t j = 0; j < params.size(); ++j)
                EXPECT_EQ((*a[i].tensors)[j].to_vector(), (*b[i].tensors)[j].to_vector()) << a[i].name << " " << j;
    }
    fs::remove(path);
}

class SolverTraining : public ::testing::Test {
protected:
    void SetUp() override {
        if (!fs::exists(kData)) GTEST_SKIP() << "Fashion-MNIST not installed at " << kData;
        out_ = fs::temp_directory_path() / ("xylem_solver_e2e_" + std::to_string(::getpid()));
        fs::remove_all(out_);
    }
    void TearDown() override { fs::remove_all(out_); }
    // The example MLP on native for 300 steps with this solver section.
    train::RunResult train(const std::string& solver_section) {
        RunConfig c = load_config(std::string(XYLEM_SOURCE_DIR) + "/examples/fashion_mlp.toml");
        c.solver = with_solver(solver_section).solver;
        c.epochs = 1;
        c.max_steps = 300;
        c.out_dir = out_.string();
        std::ostringstream log;
        return train::run(c, *test::backend_named("native")->device(0), log, train::RunOptions::quiet());
    }
    fs::path out_;
};

TEST_F(SolverTraining, RmspropWithGlobalNormClippingLearns) {
    const train::RunResult r = train("type = \"rmsprop\"\nlr = 0.001\nmomentum = 0.5\ncentered = true\nclip_norm = 1.0\n");
    ASSERT_EQ(r.epochs.size(), 1u);
    EXPECT_GT(r.epochs[0].test_accuracy, 0.70);
    EXPECT_LT(r.epochs[0].train_loss, 1.0);
}

TEST_F(SolverTraining, AdamwWithValueClippingAndNoDecayBiasLearns) {
    const train::RunResult r = train("type = \"adamw\"\nlr = 0.002\nweight_decay = 0.05\nclip_value = 0.1\nno_decay_bias = true\n");
    ASSERT_EQ(r.epochs.size(), 1u);
    EXPECT_GT(r.epochs[0].test_accuracy, 0.70);
    EXPECT_LT(r.epochs[0].train_loss, 1.0);
}

}  // namespace
