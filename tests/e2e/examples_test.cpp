// Every shipped example config parses, builds on the native backend, and runs one step.
#include <gtest/gtest.h>

#include <filesystem>

#include "xylem/train/model_builder.h"
#include "support/backends.h"

using namespace xylem;
namespace fs = std::filesystem;

// Image configs take 28x28 images to 10 classes; text configs take token sequences.
TEST(Examples, EveryConfigBuildsAndRunsAForwardPass) {
    auto dev = test::backend_named("native")->device(0);
    int seen = 0;
    for (const auto& entry : fs::directory_iterator(std::string(XYLEM_SOURCE_DIR) + "/examples")) {
        if (entry.path().extension() != ".toml") continue;
        SCOPED_TRACE(entry.path().string());
        ++seen;
        RunConfig c = load_config(entry.path().string());
        if (c.is_text()) {  // a character model (char_rnn.toml, gpt_char.toml): tokens in, a score per character per step out
            const int64_t vocab = 96, steps = c.windows() ? c.block_size : c.seq_len;
            auto model = train::build_model(c, vocab);
            model->build(*dev, {steps}, c.seed);
            EXPECT_EQ(model->output_sample_shape(), (Shape{steps, vocab}));
            Tensor x({2, steps}, DType::I32, *dev);
            int32_t* t = x.host_write<int32_t>();
            for (int64_t i = 0; i < 2 * steps; ++i) t[i] = static_cast<int32_t>(i % vocab);
            EXPECT_EQ(model->forward(*dev, x, true).shape(), (Shape{2, steps, vocab}));
            EXPECT_NO_THROW(train::build_solver(c));
            continue;
        }
        auto model = train::build_model(c);
        model->build(*dev, {1, 28, 28}, c.seed);
        EXPECT_EQ(model->output_sample_shape(), Shape{10});
        Tensor x({2, 1, 28, 28}, DType::F32, *dev);
        float* p = x.host_write<float>();
        for (int i = 0; i < 2 * 784; ++i) p[i] = static_cast<float>(i % 17) / 17.0f;
        EXPECT_EQ(model->forward(*dev, x, true).shape(), (Shape{2, 10}));
        EXPECT_NO_THROW(train::build_solver(c));
    }
    EXPECT_GE(seen, 5);
}
