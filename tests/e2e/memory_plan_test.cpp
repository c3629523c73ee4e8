// The memory plan: before any work, a run counts what its model, gradients, solver state and a
// batch's activations need on the device and refuses, with both numbers, a model that fits each
// allocation but not all of them together (issue 26). fake_discrete reports 1 GiB of memory.
#include "xylem/train/memory_plan.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <sstream>

#include "xylem/config.h"
#include "xylem/error.h"
#include "xylem/registry.h"
#include "xylem/train/evaluate.h"
#include "xylem/train/model_builder.h"
#include "xylem/train/run.h"
#include "support/backends.h"
#include "support/fake_discrete.h"

using namespace xylem;
namespace fs = std::filesystem;

namespace {

const char* kData = "/usr/share/datasets/fashion-mnist";

using test::fake_discrete;

std::string mlp(int64_t hidden, const std::string& solver) {
    return std::string("[data]\ndir = \"") + kData +
           "\"\n[[model.layers]]\ntype = \"flatten\"\n[[model.layers]]\ntype = \"linear\"\nout = " +
           std::to_string(hidden) +
           "\n[[model.layers]]\ntype = \"relu\"\n[[model.layers]]\ntype = \"linear\"\nout = 10\n"
           "[loss]\ntype = \"cross_entropy\"\n[solver]\ntype = \"" +
           solver + "\"\nlr = 0.01\n[train]\nepochs = 1\nbatch_size = 64\n";
}

}  // namespace

TEST(MemoryPlan, CountsParametersGradientsSolverStateAndActivations) {
    RunConfig c = parse_config(mlp(128, "rmsprop"), "mlp.toml");
    c.solver.momentum = 0.9f;  // rmsprop: square_avg and momentum_buffer
    auto model = train::build_model(c);
    auto solver = train::build_solver(c);
    const uint64_t params = 4 * (784 * 128 + 128 + 128 * 10 + 10);
    const uint64_t before_alloc = fake_discrete().allocated_bytes();
    // Before build: counted from the shapes alone, nothing allocated. Outputs: flatten, linear,
    // relu, linear; gradients: those after the first learning layer (nothing before it learns).
    const train::MemoryPlan planned = train::training_memory(*model, {1, 28, 28}, *solver, 64, 1000);
    EXPECT_EQ(fake_discrete().allocated_bytes(), before_alloc);
    EXPECT_EQ(planned.parameters, params);
    EXPECT_EQ(planned.gradients, params);
    EXPECT_EQ(planned.solver_state, 2 * params);
    EXPECT_EQ(planned.activations, 64u * 4 * ((784 + 128 + 128 + 10) + (128 + 128 + 10)));
    EXPECT_EQ(planned.data, 1000u);
    EXPECT_EQ(planned.total(), 4 * params + planned.activations + 1000);
    // Built: the relu runs inside the linear before it and takes nothing of its own.
    model->build(fake_discrete(), {1, 28, 28}, 1);
    const train::MemoryPlan m = train::training_memory(*model, {1, 28, 28}, *solver, 64, 1000);
    EXPECT_EQ(m.parameters, params);
    EXPECT_EQ(m.activations, 64u * 4 * ((784 + 128 + 10) + (128 + 10)));
    const train::MemoryPlan inf = train::inference_memory(*model, {1, 28, 28}, 64, 0);
    EXPECT_EQ(inf.gradients + inf.solver_state, 0u);
    EXPECT_EQ(inf.activations, 64u * 4 * (784 + 128 + 10));
}

TEST(MemoryPlan, RunRefusesAModelThatFitsEachAllocationButNotAllTogether) {
    if (!fs::exists(kData)) GTEST_SKIP() << "Fashion-MNIST not installed at " << kData;
    // 79.5 M weights: 303 MiB each for the parameters and their gradients (both allocated at
    // build, fitting in 1 GiB), and Adam's two state tensors and a batch's outputs would take the total to 1.28 GiB.
    RunConfig c = parse_config(mlp(100000, "adam"), "big.toml");
    c.out_dir = (fs::temp_directory_path() / ("xylem_memplan_" + std::to_string(::getpid()))).string();
    std::ostringstream out;
    Device& dev = fake_discrete();
    const uint64_t before = dev.allocated_bytes();
    try {
        train::run(c, dev, out, train::RunOptions::quiet());
        FAIL() << "a run needing 1.28 GiB started on a 1 GiB device";
    } catch (const Error& e) {
        const std::string m = e.what();
        EXPECT_NE(m.find("big.toml: training this model does not fit on fake_discrete:0: it needs about 1.28 GiB"),
                  std::string::npos) << m;
        EXPECT_NE(m.find("parameters 303.27 MiB, their gradients 303.27 MiB, solver state (adam, 2 tensors per "
                         "parameter) 606.54 MiB"),
                  std::string::npos) << m;
        EXPECT_NE(m.find("and the device's memory is 1.00 GiB"), std::string::npos) << m;
    }
    EXPECT_EQ(dev.allocated_bytes(), before);  // the refused run gave everything back
    fs::remove_all(c.out_dir);

    // Twice as many weights would not even fit with their gradients: refused the same way, before
    // the build allocates any of them (Device::alloc would refuse the build, but only after it
    // had spent its time initialising what fits).
    c = parse_config(mlp(200000, "sgd"), "bigger.toml");
    c.out_dir = (fs::temp_directory_path() / ("xylem_memplan2_" + std::to_string(::getpid()))).string();
    try {
        train::run(c, dev, out, train::RunOptions::quiet());
        FAIL() << "a run needing 1.97 GiB started on a 1 GiB device";
    } catch (const Error& e) {
        const std::string m = e.what();
        EXPECT_NE(m.find("bigger.toml: training this model does not fit on fake_discrete:0: it needs about 1.97 GiB "
                         "(parameters 606.54 MiB, their gradients 606.54 MiB, solver state (sgd, 1 tensor per "
                         "parameter) 606.54 MiB, layer outputs and their gradients 195.51 MiB for a batch of 64"),
                  std::string::npos) << m;
    }
    EXPECT_EQ(dev.allocated_bytes(), before);
    fs::remove_all(c.out_dir);
}

TEST(MemoryPlan, InferenceCountsParametersAndOutputsOnly) {
    // 303 MiB of weights and a batch of 1000's outputs fit in 1 GiB: eval, predict and sample run
    // it (training would not: MemoryPlan.RunRefuses...).
    RunConfig c = parse_config(mlp(100000, "adam"), "big.toml");
    Device& dev = fake_discrete();
    const uint64_t before = dev.allocated_bytes();
    {
        auto model = train::build_inference_model(c, dev, {1, 28, 28}, 64);
        EXPECT_GT(dev.allocated_bytes(), before + 303 * 1024 * 1024);
    }
    // Twice the weights (607 MiB) and the outputs of a batch of 1000 (about 390 MiB as planned)
    // do not: refused before anything is allocated.
    c = parse_config(mlp(200000, "sgd"), "bigger.toml");
    try {
        train::build_inference_model(c, dev, {1, 28, 28}, 1000);
        FAIL() << "a model needing about 1.4 GiB was built on a 1 GiB device";
    } catch (const Error& e) {
        const std::string m = e.what();
        EXPECT_NE(m.find("bigger.toml: running this model does not fit on fake_discrete:0"), std::string::npos) << m;
        EXPECT_NE(m.find("parameters 606.54 MiB, layer outputs "), std::string::npos) << m;
        EXPECT_NE(m.find("for a batch of 1000"), std::string::npos) << m;
    }
    EXPECT_EQ(dev.allocated_bytes(), before);
}

TEST(MemoryPlan, InferenceCountsThePlansBuffersNotEveryLayerOutput) {
    // Twelve 3x3 convolutions of 32 channels, each with a ReLU, on 28x28 maps: every layer
    // output of a batch of 1000 together is 2.4 GB (1.2 GB once the ReLUs run inside the
    // convolutions), which no 1 GiB device holds; a model built to run holds a few maps at once
    // (the inference memory plan), about 300 MB here: the check before an inference run lets it
    // through (the check before training does not).
    std::string toml = std::string("[data]\ndir = \"") + kData + "\"\n";
    for (int i = 0; i < 12; ++i)
        toml += "[[model.layers]]\ntype = \"conv2d\"\nout = 32\nkernel = 3\npadding = 1\n[[model.layers]]\ntype = \"relu\"\n";
    toml += "[[model.layers]]\ntype = \"flatten\"\n[[model.layers]]\ntype = \"linear\"\nout = 10\n"
            "[loss]\ntype = \"cross_entropy\"\n[solver]\ntype = \"sgd\"\nlr = 0.01\n[train]\nepochs = 1\nbatch_size = 1000\n";
    const RunConfig c = parse_config(toml, "convs.toml");
    Device& dev = fake_discrete();
    const train::MemoryPlan all = train::training_memory(*train::build_model(c), {1, 28, 28}, *train::build_solver(c), 1000, 0);
    EXPECT_GT(all.activations, uint64_t{2} << 30) << all.breakdown();
    const train::MemoryPlan run = train::inference_memory(*train::build_model(c), {1, 28, 28}, 1000, 0);
    // Before build every node runs: a conv's output and its ReLU's at once, and the flatten's
    // output with the buffer it may view.
    EXPECT_LE(run.activations, 4u * 1000 * (3 * 32 * 784 + 32 * 784 + 10)) << run.breakdown();
    EXPECT_GE(run.activations, 4u * 1000 * (2 * 32 * 784)) << run.breakdown();
    EXPECT_NO_THROW(train::check_memory_fits(run, dev, c.source, "running this model"));
    EXPECT_THROW(train::check_memory_fits(all, dev, c.source, "training this model"), Error);
}

TEST(MemoryPlan, ACpuDeviceRunsInBatchesWhoseMapsStayInTheCache) {
    // eval and predict run a model built to run in batches whose plan (run_outputs_per_sample)
    // stays within kRunCacheBytes on a CPU device, kEvaluationBatch elsewhere; never fewer than
    // kMinRunBatch.
    std::string toml = std::string("[data]\ndir = \"") + kData + "\"\n";
    for (int i = 0; i < 4; ++i) toml += "[[model.layers]]\ntype = \"conv2d\"\nout = 32\nkernel = 3\npadding = 1\n";
    toml += "[[model.layers]]\ntype = \"flatten\"\n[[model.layers]]\ntype = \"linear\"\nout = 10\n"
            "[loss]\ntype = \"cross_entropy\"\n[solver]\ntype = \"sgd\"\nlr = 0.01\n[train]\nepochs = 1\nbatch_size = 64\n";
    const RunConfig c = parse_config(toml, "convs.toml");
    auto model = train::build_model(c);
    const int64_t per_sample = 4 * model->footprint(Shape{1, 28, 28}).run_outputs_per_sample;
    ASSERT_GT(per_sample, 0);
    EXPECT_EQ(train::run_batch(*model, Shape{1, 28, 28}, fake_discrete()), train::kEvaluationBatch);
    auto native = test::backend_named("native");
    if (!native) GTEST_SKIP() << "no native plugin";
    Device& cpu = *native->device(0);
    ASSERT_TRUE(cpu.on_host());
    EXPECT_EQ(train::run_batch(*model, Shape{1, 28, 28}, cpu),
              std::clamp<int64_t>(static_cast<int64_t>(train::kRunCacheBytes) / per_sample, train::kMinRunBatch,
                                  train::kEvaluationBatch));
    EXPECT_LT(train::run_batch(*model, Shape{1, 28, 28}, cpu), train::kEvaluationBatch);  // 200 KB a sample: ~180
    // A model of tiny maps keeps the most; one of huge maps the least.
    auto tiny = train::build_model(parse_config(mlp(16, "sgd"), "tiny.toml"));
    EXPECT_EQ(train::run_batch(*tiny, Shape{1, 28, 28}, cpu), train::kEvaluationBatch);
    EXPECT_EQ(train::run_batch(*train::build_model(c), Shape{1, 280, 280}, cpu), train::kMinRunBatch);
}
