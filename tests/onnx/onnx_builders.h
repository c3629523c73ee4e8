// Models built with ONNX's own protobuf classes, for the importer's and the exporter's C++ tests
// (importer_test.cpp, importer_ops_test.cpp, finetune_test.cpp, multichannel_cli_test.cpp):
// initializers, nodes, attributes, inputs and outputs, a few whole models, and the message of the
// Error an import throws.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "onnx/onnx_pb.h"
#include "xylem/error.h"
#include "xylem/onnx/importer.h"

namespace xylem::test {

// A float initializer of `dims`, element i value(i).
inline onnx::TensorProto float_tensor(const std::string& name, const std::vector<int64_t>& dims,
                                      const std::function<float(int64_t)>& value) {
    onnx::TensorProto t;
    t.set_name(name);
    t.set_data_type(onnx::TensorProto::FLOAT);
    int64_t n = 1;
    for (int64_t d : dims) {
        t.add_dims(d);
        n *= d;
    }
    for (int64_t i = 0; i < n; ++i) t.add_float_data(value(i));
    return t;
}

// start, start + 1, ... (distinct values: a test can tell which element went where).
inline onnx::TensorProto floats(const std::string& name, std::vector<int64_t> dims, float start = 0.f) {
    return float_tensor(name, dims, [start](int64_t i) { return start + static_cast<float>(i); });
}

// Uniform in [lo, hi) from rng.
inline onnx::TensorProto random_floats(const std::string& name, std::vector<int64_t> dims, std::mt19937& rng, float lo,
                                       float hi) {
    std::uniform_real_distribution<float> u(lo, hi);
    return float_tensor(name, dims, [&](int64_t) { return u(rng); });
}

inline onnx::NodeProto* node(onnx::GraphProto* g, const std::string& op, const std::string& name, std::vector<std::string> in,
                      std::vector<std::string> out) {
    onnx::NodeProto* n = g->add_node();
    n->set_op_type(op);
    n->set_name(name);
    for (const auto& i : in) n->add_input(i);
    for (const auto& o : out) n->add_output(o);
    return n;
}

inline void int_attr(onnx::NodeProto* n, const std::string& name, int64_t v) {
    auto* a = n->add_attribute();
    a->set_name(name);
    a->set_type(onnx::AttributeProto::INT);
    a->set_i(v);
}

inline void ints_attr(onnx::NodeProto* n, const std::string& name, std::vector<int64_t> v) {
    auto* a = n->add_attribute();
    a->set_name(name);
    a->set_type(onnx::AttributeProto::INTS);
    for (int64_t x : v) a->add_ints(x);
}

inline void value_info(onnx::ValueInfoProto* v, const std::string& name, std::vector<int64_t> dims) {
    v->set_name(name);
    auto* t = v->mutable_type()->mutable_tensor_type();
    t->set_elem_type(onnx::TensorProto::FLOAT);
    for (int64_t d : dims) {
        auto* dim = t->mutable_shape()->add_dim();
        if (d < 0) dim->set_dim_param("batch");
        else dim->set_dim_value(d);
    }
}

// x [N, 4] -> Gemm (W [3, 4], transB) -> Relu -> y [N, 3].
inline onnx::ModelProto mlp(int64_t opset = 13) {
    onnx::ModelProto m;
    m.set_ir_version(8);
    m.set_producer_name("xylem-test");
    auto* o = m.add_opset_import();
    o->set_domain("");
    o->set_version(opset);
    auto* g = m.mutable_graph();
    g->set_name("mlp");
    value_info(g->add_input(), "x", {-1, 4});
    value_info(g->add_output(), "y", {-1, 3});
    *g->add_initializer() = floats("fc.weight", {3, 4});
    *g->add_initializer() = floats("fc.bias", {3}, 100.f);
    int_attr(node(g, "Gemm", "/fc/Gemm", {"x", "fc.weight", "fc.bias"}, {"h"}), "transB", 1);
    node(g, "Relu", "/relu/Relu", {"h"}, {"y"});
    return m;
}

inline std::string bytes_of(const onnx::ModelProto& m) {
    std::string s;
    EXPECT_TRUE(m.SerializeToString(&s));
    return s;
}

// The Error's message (empty when none was thrown).
inline std::string error_of(const std::string& bytes, const std::string& dir = "") {
    try {
        onnx_import::import_bytes(bytes, "model.onnx", dir);
    } catch (const Error& e) {
        return e.what();
    }
    return "";
}

#define EXPECT_HAS(text, part) EXPECT_NE((text).find(part), std::string::npos) << "message: " << (text)

// A model of one node `op` reading the data x (its dims, -1 the batch) and the named constants
// after it, writing y: for the new ops' good and hostile forms.
inline onnx::ModelProto one_node(const std::string& op, std::vector<int64_t> x_dims, std::vector<onnx::TensorProto> constants,
                          int64_t opset = 17) {
    onnx::ModelProto m;
    m.set_ir_version(8);
    auto* o = m.add_opset_import();
    o->set_domain("");
    o->set_version(opset);
    auto* g = m.mutable_graph();
    value_info(g->add_input(), "x", x_dims);
    value_info(g->add_output(), "y", {});
    std::vector<std::string> in{"x"};
    for (auto& c : constants) {
        in.push_back(c.name());
        *g->add_initializer() = c;
    }
    node(g, op, "/" + op, in, {"y"});
    return m;
}

inline onnx::TensorProto scalar(const std::string& name, float v) {
    onnx::TensorProto t = floats(name, {}, v);
    return t;
}

inline onnx::TensorProto ints(const std::string& name, std::vector<int64_t> v, bool scalar = false) {
    onnx::TensorProto t;
    t.set_name(name);
    t.set_data_type(onnx::TensorProto::INT64);
    if (!scalar) t.add_dims(static_cast<int64_t>(v.size()));
    for (int64_t x : v) t.add_int64_data(x);
    return t;
}

// A model of x [N, 3, 4] and its first row s = x[:, :1] ([N, 1, 4]), for the nodes a test adds
// to the graph it returns (writing y).
inline onnx::GraphProto* first_row_model(onnx::ModelProto& m) {
    m.add_opset_import()->set_version(17);
    auto* g = m.mutable_graph();
    value_info(g->add_input(), "x", {-1, 3, 4});
    value_info(g->add_output(), "y", {});
    *g->add_initializer() = ints("start", {0});
    *g->add_initializer() = ints("end", {1});
    *g->add_initializer() = ints("axis", {1});
    node(g, "Slice", "/first", {"x", "start", "end", "axis"}, {"s"});
    return g;
}

}  // namespace xylem::test
