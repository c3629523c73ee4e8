// A small 3-channel conv model built with ONNX's protobuf classes, for the tests that import one
// (finetune_test.cpp, multichannel_cli_test.cpp): x [N, 3, 8, 8] -> Conv (16 channels, 3x3,
// padding 1) -> BatchNormalization (kept apart) -> Relu -> GlobalAveragePool -> Flatten -> Gemm
// (5 classes), every weight random from a fixed seed.
#pragma once

#include <random>
#include <string>
#include <vector>

#include "onnx/onnx_pb.h"

namespace xylem::test {

inline onnx::TensorProto random_floats(const std::string& name, std::vector<int64_t> dims, std::mt19937& rng, float lo,
                                      float hi) {
    onnx::TensorProto t;
    t.set_name(name);
    t.set_data_type(onnx::TensorProto::FLOAT);
    int64_t n = 1;
    for (int64_t d : dims) {
        t.add_dims(d);
        n *= d;
    }
    std::uniform_real_distribution<float> u(lo, hi);
    for (int64_t i = 0; i < n; ++i) t.add_float_data(u(rng));
    return t;
}

inline onnx::NodeProto* add_node(onnx::GraphProto* g, const std::string& op, const std::string& name,
                          std::vector<std::string> in, std::string out) {
    onnx::NodeProto* n = g->add_node();
    n->set_op_type(op);
    n->set_name(name);
    for (const auto& i : in) n->add_input(i);
    n->add_output(out);
    return n;
}

// x [N, 3, 8, 8] -> conv (16 channels, 3x3, padding 1) -> bn -> relu -> global average -> fc (5 classes).
inline std::string conv_bn_model() {
    std::mt19937 rng(7);
    onnx::ModelProto m;
    m.set_ir_version(8);
    m.add_opset_import()->set_version(17);
    auto* g = m.mutable_graph();
    auto io = [](onnx::ValueInfoProto* v, const std::string& name, std::vector<int64_t> dims) {
        v->set_name(name);
        auto* t = v->mutable_type()->mutable_tensor_type();
        t->set_elem_type(onnx::TensorProto::FLOAT);
        for (int64_t d : dims) {
            auto* dim = t->mutable_shape()->add_dim();
            if (d < 0)
                dim->set_dim_param("batch");
            else
                dim->set_dim_value(d);
        }
    };
    io(g->add_input(), "x", {-1, 3, 8, 8});
    io(g->add_output(), "y", {-1, 5});
    *g->add_initializer() = random_floats("conv.weight", {16, 3, 3, 3}, rng, -0.3f, 0.3f);
    *g->add_initializer() = random_floats("bn.weight", {16}, rng, 0.5f, 1.5f);
    *g->add_initializer() = random_floats("bn.bias", {16}, rng, -0.1f, 0.1f);
    *g->add_initializer() = random_floats("bn.running_mean", {16}, rng, -0.1f, 0.1f);
    *g->add_initializer() = random_floats("bn.running_var", {16}, rng, 0.5f, 1.5f);
    *g->add_initializer() = random_floats("fc.weight", {5, 16}, rng, -0.5f, 0.5f);
    *g->add_initializer() = random_floats("fc.bias", {5}, rng, -0.1f, 0.1f);
    auto* conv = add_node(g, "Conv", "/conv/Conv", {"x", "conv.weight"}, "c");
    auto* pads = conv->add_attribute();
    pads->set_name("pads");
    pads->set_type(onnx::AttributeProto::INTS);
    for (int k = 0; k < 4; ++k) pads->add_ints(1);
    add_node(g, "BatchNormalization", "/bn/BatchNormalization",
             {"c", "bn.weight", "bn.bias", "bn.running_mean", "bn.running_var"}, "b");
    add_node(g, "Relu", "/relu/Relu", {"b"}, "r");
    add_node(g, "GlobalAveragePool", "/pool/GlobalAveragePool", {"r"}, "p");
    add_node(g, "Flatten", "/flatten/Flatten", {"p"}, "f");
    auto* gemm = add_node(g, "Gemm", "/fc/Gemm", {"f", "fc.weight", "fc.bias"}, "y");
    auto* trans = gemm->add_attribute();
    trans->set_name("transB");
    trans->set_type(onnx::AttributeProto::INT);
    trans->set_i(1);
    return m.SerializeAsString();
}

}  // namespace xylem::test
