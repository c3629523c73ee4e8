// An imported model trains: Conv -> BatchNormalization (kept apart, as torch exports it for
// fine-tuning) -> Relu -> GlobalAveragePool -> Flatten -> Gemm, built with ONNX's protobuf classes,
// imported, loaded with its initializers and trained with SGD on one fixed batch on every backend:
// the loss falls, every imported parameter moves, and batch norm's running statistics update.
// (`xylem train` itself starts from its own initialisation: docs/onnx.md, "Not yet".)
#include <gtest/gtest.h>

#include <cmath>
#include <iostream>
#include <map>
#include <random>

#include "conv_bn_model.h"
#include "onnx/onnx_pb.h"
#include "support/backends.h"
#include "xylem/layers/loss.h"
#include "xylem/layers/registry.h"
#include "xylem/onnx/importer.h"
#include "xylem/train/model_builder.h"
#include "xylem/op_calls.h"
#include "xylem/solvers/solver.h"

namespace xylem {
namespace {

using test::conv_bn_model;

class OnnxFineTune : public ::testing::TestWithParam<std::string> {};

TEST_P(OnnxFineTune, AnImportedConvBatchNormModelTrainsFromItsInitializers) {
    auto backend = test::backend_named(GetParam());
    auto dev = backend->device(0);
    const onnx_import::Imported m = onnx_import::import_bytes(conv_bn_model(), "conv_bn.onnx", "");
    ASSERT_EQ(m.layers.size(), 5u);  // conv2d, batchnorm, relu, global_avgpool, linear (Flatten: nothing)
    EXPECT_EQ(m.layers[1].type, "batchnorm");
    std::unique_ptr<Net> model = train::build_model(onnx_import::run_config(m));
    Net& net = *model;
    net.build(*dev, m.inputs[0].sample, 1);
    onnx_import::load_parameters(net, m);
    std::map<std::string, std::vector<float>> before;
    for (Param* p : net.state()) before[p->name] = p->value.to_vector();

    const int64_t batch = 10;
    test::Rng rng(11);
    const Tensor x = test::upload(*dev, {batch, 3, 8, 8}, rng.uniform(batch * 3 * 64));
    std::vector<int32_t> labels;
    for (int64_t i = 0; i < batch; ++i) labels.push_back(static_cast<int32_t>(i % 5));
    const Tensor y = test::upload_i32(*dev, {batch}, labels);
    CrossEntropyLoss loss;
    Sgd sgd(SgdOptions{0.1f, 0.9f});
    auto loss_of = [&](const Tensor& logits) {
        Tensor sum({1}, DType::F32, *dev);
        ops::fill(*dev, sum, 0.0f);
        loss.forward(*dev, logits, y, sum);
        return sum.to_vector()[0] / batch;
    };
    float first = 0, last = 0;
    for (int step = 0; step < 100; ++step) {
        const Tensor& logits = net.forward(*dev, x, true);
        const float l = loss_of(logits);
        if (step == 0) first = l;
        last = l;
        net.backward(*dev, loss.backward(*dev, logits, y));
        sgd.step(*dev, net.params());
    }
    std::cout << GetParam() << ": cross-entropy " << first << " -> " << last << " in 100 steps\n";
    EXPECT_TRUE(std::isfinite(last));
    EXPECT_LT(last, 0.5f * first) << "loss " << first << " -> " << last;
    for (Param* p : net.state()) {  // every weight trained, and the running statistics followed the batches
        const std::vector<float> now = p->value.to_vector();
        double moved = 0;
        for (size_t i = 0; i < now.size(); ++i)
            moved = std::max(moved, std::fabs(static_cast<double>(now[i]) - before[p->name][i]));
        EXPECT_GT(moved, 1e-4) << p->name << " did not change";
    }
}

INSTANTIATE_TEST_SUITE_P(Backends, OnnxFineTune, ::testing::ValuesIn(test::available_backends()),
                         test::backend_param_name);
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(OnnxFineTune);

}  // namespace
}  // namespace xylem
