// A small 3-channel conv model built with ONNX's protobuf classes, for the tests that import one
// (finetune_test.cpp, multichannel_cli_test.cpp): x [N, 3, 8, 8] -> Conv (16 channels, 3x3,
// padding 1) -> BatchNormalization (kept apart) -> Relu -> GlobalAveragePool -> Flatten -> Gemm
// (5 classes), every weight random from a fixed seed.
#pragma once

#include <random>
#include <string>
#include <vector>

#include "onnx/onnx_pb.h"
#include "onnx_builders.h"

namespace xylem::test {

// x [N, 3, 8, 8] -> conv (16 channels, 3x3, padding 1) -> bn -> relu -> global average -> fc (5 classes).
inline std::string conv_bn_model() {
    std::mt19937 rng(7);
    onnx::ModelProto m;
    m.set_ir_version(8);
    m.add_opset_import()->set_version(17);
    auto* g = m.mutable_graph();
    value_info(g->add_input(), "x", {-1, 3, 8, 8});
    value_info(g->add_output(), "y", {-1, 5});
    *g->add_initializer() = random_floats("conv.weight", {16, 3, 3, 3}, rng, -0.3f, 0.3f);
    *g->add_initializer() = random_floats("bn.weight", {16}, rng, 0.5f, 1.5f);
    *g->add_initializer() = random_floats("bn.bias", {16}, rng, -0.1f, 0.1f);
    *g->add_initializer() = random_floats("bn.running_mean", {16}, rng, -0.1f, 0.1f);
    *g->add_initializer() = random_floats("bn.running_var", {16}, rng, 0.5f, 1.5f);
    *g->add_initializer() = random_floats("fc.weight", {5, 16}, rng, -0.5f, 0.5f);
    *g->add_initializer() = random_floats("fc.bias", {5}, rng, -0.1f, 0.1f);
    ints_attr(node(g, "Conv", "/conv/Conv", {"x", "conv.weight"}, {"c"}), "pads", {1, 1, 1, 1});
    node(g, "BatchNormalization", "/bn/BatchNormalization", {"c", "bn.weight", "bn.bias", "bn.running_mean", "bn.running_var"},
         {"b"});
    node(g, "Relu", "/relu/Relu", {"b"}, {"r"});
    node(g, "GlobalAveragePool", "/pool/GlobalAveragePool", {"r"}, {"p"});
    node(g, "Flatten", "/flatten/Flatten", {"p"}, {"f"});
    int_attr(node(g, "Gemm", "/fc/Gemm", {"f", "fc.weight", "fc.bias"}, {"y"}), "transB", 1);
    return m.SerializeAsString();
}

}  // namespace xylem::test
