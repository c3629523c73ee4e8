// A model that needs an op its backend does not have stops before any work, naming the layer (or
// the loss / solver / loop), the op and the backend: at build for the forward ops, at the start
// of training for the rest. The discrete test plugin offers everything but the convolution family.
#include <gtest/gtest.h>

#include <filesystem>
#include <sstream>

#include "xylem/train/model_builder.h"
#include "xylem/train/run.h"
#include "xylem/error.h"
#include "xylem/layers/conv.h"
#include "xylem/layers/net.h"
#include "xylem/registry.h"
#include "xylem/transfer.h"
#include "support/fake_discrete.h"

using namespace xylem;

namespace {

using test::fake_discrete;

std::string error_of(const std::function<void()>& fn) {
    try {
        fn();
    } catch (const Error& e) {
        return e.what();
    }
    return "<no error>";
}

}  // namespace

TEST(UnsupportedOps, ConvModelFailsAtBuildNamingLayerOpAndBackend) {
    Device& dev = fake_discrete();
    ASSERT_FALSE(dev.backend().supports(XYLEM_OP_CONV2D_FWD)) << "test bug: the fixture plugin gained conv";
    Net model;
    Conv2dOptions conv;
    conv.out_channels = 2;
    conv.kernel_h = conv.kernel_w = 1;
    model.add(std::make_unique<Conv2d>(conv));
    const TransferCounts before = transfer_counts();
    const std::string msg = error_of([&] { model.build(dev, {4, 3, 3}, 1); });
    EXPECT_EQ(msg, "model layer 0 (conv2d): op conv2d_fwd is not supported by backend 'fake_discrete'");
    EXPECT_EQ((transfer_counts() - before).count(), 0u) << "nothing may run before the check";
}

TEST(UnsupportedOps, TrainingLeNetStopsBeforeTheFirstStepAndWritesNothing) {
    Device& dev = fake_discrete();
    RunConfig c = load_config(std::string(XYLEM_SOURCE_DIR) + "/examples/fashion_lenet.toml");
    const std::string dir = (std::filesystem::temp_directory_path() / "xylem_unsupported_ops").string();
    c.out_dir = dir;
    std::ostringstream log;
    const std::string msg = error_of([&] { train::run(c, dev, log, train::RunOptions::quiet()); });
    EXPECT_EQ(msg, "model layer 0 (conv2d): op conv2d_fwd is not supported by backend 'fake_discrete'");
    EXPECT_FALSE(std::filesystem::exists(dir + "/model.safetensors"));
    std::filesystem::remove_all(dir);
}

// A backend without even `fill`: the first layer with parameters says it needs it.
TEST(UnsupportedOps, ABackendWithoutFillNamesTheLayerThatNeedsIt) {
    static Registry* reg = [] {
        auto* r = new Registry();
        r->load_file(std::string(XYLEM_BINARY_DIR) + "/test_plugins/libxylem_no_ops.so");
        return r;
    }();
    const PluginRecord& rec = reg->plugins().front();
    if (!rec.available) GTEST_SKIP() << "no_ops fixture: " << rec.reason;
    Device& dev = *rec.backend->device(0);
    RunConfig c = load_config(std::string(XYLEM_SOURCE_DIR) + "/examples/fashion_mlp.toml");
    auto model = train::build_model(c);
    const std::string msg = error_of([&] { model->build(dev, {1, 28, 28}, 1); });
    EXPECT_EQ(msg, "model layer 1 (linear): op fill is not supported by backend '" + rec.name + "'");
}
