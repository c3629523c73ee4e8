// The ONNX importer's checks (onnx/importer.cpp): models built here with ONNX's own protobuf
// classes, then broken on purpose. Every bad file is an xylem::Error that says what is wrong,
// never a crash and never a half-imported model. The agreement with ONNX Runtime on real
// exports is tests/onnx/check_models.py.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <limits>
#include <fstream>
#include <random>
#include <sstream>
#include <string>

#include "onnx/onnx_pb.h"
#include "support/generated_docs.h"
#include "xylem/error.h"
#include "xylem/onnx/importer.h"
#include "xylem/onnx/npy.h"

namespace xylem {
namespace {
namespace fs = std::filesystem;
using onnx_import::import_bytes;

onnx::TensorProto floats(const std::string& name, std::vector<int64_t> dims, float start = 0.f) {
    onnx::TensorProto t;
    t.set_name(name);
    t.set_data_type(onnx::TensorProto::FLOAT);
    int64_t n = 1;
    for (int64_t d : dims) {
        t.add_dims(d);
        n *= d;
    }
    for (int64_t i = 0; i < n; ++i) t.add_float_data(start + static_cast<float>(i));
    return t;
}

onnx::NodeProto* node(onnx::GraphProto* g, const std::string& op, const std::string& name, std::vector<std::string> in,
                      std::vector<std::string> out) {
    onnx::NodeProto* n = g->add_node();
    n->set_op_type(op);
    n->set_name(name);
    for (const auto& i : in) n->add_input(i);
    for (const auto& o : out) n->add_output(o);
    return n;
}

void int_attr(onnx::NodeProto* n, const std::string& name, int64_t v) {
    auto* a = n->add_attribute();
    a->set_name(name);
    a->set_type(onnx::AttributeProto::INT);
    a->set_i(v);
}

void ints_attr(onnx::NodeProto* n, const std::string& name, std::vector<int64_t> v) {
    auto* a = n->add_attribute();
    a->set_name(name);
    a->set_type(onnx::AttributeProto::INTS);
    for (int64_t x : v) a->add_ints(x);
}

void value_info(onnx::ValueInfoProto* v, const std::string& name, std::vector<int64_t> dims) {
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
onnx::ModelProto mlp(int64_t opset = 13) {
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

std::string bytes_of(const onnx::ModelProto& m) {
    std::string s;
    EXPECT_TRUE(m.SerializeToString(&s));
    return s;
}

// The Error's message (empty when none was thrown).
std::string error_of(const std::string& bytes, const std::string& dir = "") {
    try {
        import_bytes(bytes, "model.onnx", dir);
    } catch (const Error& e) {
        return e.what();
    }
    return "";
}

#define EXPECT_HAS(text, part) EXPECT_NE((text).find(part), std::string::npos) << "message: " << (text)

TEST(OnnxImport, AGemmModelBecomesLayersWiredByNameWithItsWeights) {
    const onnx_import::Imported m = import_bytes(bytes_of(mlp()), "model.onnx", "");
    ASSERT_EQ(m.layers.size(), 2u);
    EXPECT_EQ(m.layers[0].type, "linear");
    EXPECT_EQ(m.layers[0].name, "fc");  // torch's module path, from "fc.weight"
    EXPECT_EQ(m.layers[0].inputs, std::vector<std::string>{"input"});
    EXPECT_EQ(m.layers[1].type, "relu");
    EXPECT_EQ(m.layers[1].inputs, std::vector<std::string>{"fc"});
    EXPECT_EQ(m.input_sample, (Shape{4}));
    EXPECT_EQ(m.output_sample, (Shape{3}));
    EXPECT_EQ(m.batch, 0);  // symbolic
    ASSERT_TRUE(m.params.count("fc.weight"));
    EXPECT_EQ(m.params.at("fc.weight").shape, (Shape{3, 4}));
    EXPECT_EQ(m.params.at("fc.weight").values[5], 5.f);  // transB = 1: B is [out, in] already
    EXPECT_EQ(m.params.at("fc.bias").values[2], 102.f);
}

TEST(OnnxImport, GemmWithoutTransBTransposesAndAlphaBetaScale) {
    onnx::ModelProto model = mlp();
    auto* g = model.mutable_graph();
    *g->mutable_initializer(0) = floats("fc.weight", {4, 3});  // [in, out]
    auto* gemm = g->mutable_node(0);
    gemm->clear_attribute();
    auto* a = gemm->add_attribute();
    a->set_name("alpha");
    a->set_type(onnx::AttributeProto::FLOAT);
    a->set_f(2.f);
    const onnx_import::Imported m = import_bytes(bytes_of(model), "model.onnx", "");
    EXPECT_EQ(m.params.at("fc.weight").shape, (Shape{3, 4}));
    EXPECT_EQ(m.params.at("fc.weight").values[1], 2.f * 3.f);  // W[0][1] = alpha * B[1][0] = 2 * 3
}

TEST(OnnxImport, BatchNormMapsToXylemNamesAndPyTorchMomentum) {
    onnx::ModelProto m;
    m.add_opset_import()->set_version(17);
    auto* g = m.mutable_graph();
    value_info(g->add_input(), "x", {1, 2, 4, 4});
    value_info(g->add_output(), "y", {1, 2, 4, 4});
    *g->add_initializer() = floats("bn1.weight", {2}, 1.f);
    *g->add_initializer() = floats("bn1.bias", {2});
    *g->add_initializer() = floats("bn1.running_mean", {2});
    *g->add_initializer() = floats("bn1.running_var", {2}, 1.f);
    auto* bn = node(g, "BatchNormalization", "/bn1/BatchNormalization",
                    {"x", "bn1.weight", "bn1.bias", "bn1.running_mean", "bn1.running_var"}, {"y"});
    auto* mom = bn->add_attribute();
    mom->set_name("momentum");
    mom->set_type(onnx::AttributeProto::FLOAT);
    mom->set_f(0.9f);
    const onnx_import::Imported im = import_bytes(bytes_of(m), "bn.onnx", "");
    ASSERT_EQ(im.layers.size(), 1u);
    EXPECT_EQ(im.layers[0].type, "batchnorm");
    for (const char* p : {"bn1.weight", "bn1.bias", "bn1.running_mean", "bn1.running_var"}) EXPECT_TRUE(im.params.count(p)) << p;
    EXPECT_HAS(im.layers_toml, "momentum = 0.1");  // ONNX's 0.9 is PyTorch's (and xylem's) 0.1
}

TEST(OnnxImport, TruncatedFilesAreErrorsAtEveryLength) {
    const std::string whole = bytes_of(mlp());
    for (size_t n = 0; n < whole.size(); ++n) {
        const std::string e = error_of(whole.substr(0, n));
        EXPECT_FALSE(e.empty()) << "a file cut to " << n << " of " << whole.size() << " bytes imported";
    }
    EXPECT_EQ(error_of(whole), "");
}

TEST(OnnxImport, GarbageBytesAreAClearError) {
    std::mt19937_64 rng(5);
    for (int trial = 0; trial < 200; ++trial) {
        std::string junk(static_cast<size_t>(rng() % 4096), '\0');
        for (char& c : junk) c = static_cast<char>(rng());
        EXPECT_FALSE(error_of(junk).empty());
    }
    EXPECT_HAS(error_of("this is not a protobuf at all \xff\xff\xff\xff"), "model.onnx");
    EXPECT_HAS(error_of(""), "empty");
    // Flipped bytes of a real model: an error or a model, never a crash.
    const std::string whole = bytes_of(mlp());
    for (int trial = 0; trial < 500; ++trial) {
        std::string b = whole;
        b[rng() % b.size()] = static_cast<char>(rng());
        (void)error_of(b);
    }
}

TEST(OnnxImport, UnsupportedOpsAreAllListedWithTheirNodesAndOpset) {
    onnx::ModelProto m = mlp(14);
    auto* g = m.mutable_graph();
    node(g, "Einsum", "einsum_a", {"y"}, {"e1"});
    node(g, "Einsum", "einsum_b", {"e1"}, {"e2"});
    node(g, "TopK", "topk", {"e2"}, {"l"});
    auto* custom = node(g, "FancyOp", "fancy", {"l"}, {"f"});
    custom->set_domain("com.example");
    const std::string e = error_of(bytes_of(m));
    EXPECT_HAS(e, "3 op types");
    EXPECT_HAS(e, "opset 14");
    EXPECT_HAS(e, "Einsum (2 nodes: einsum_a, einsum_b)");
    EXPECT_HAS(e, "TopK (1 node: topk)");
    EXPECT_HAS(e, "com.example.FancyOp (1 node: fancy)");
    EXPECT_EQ(e.find("Relu"), std::string::npos) << e;
}

TEST(OnnxImport, OpsetsOutside13To17AreRefused) {
    EXPECT_HAS(error_of(bytes_of(mlp(11))), "opset 11 is not supported");
    EXPECT_HAS(error_of(bytes_of(mlp(18))), "opset 18 is not supported");
    EXPECT_EQ(error_of(bytes_of(mlp(17))), "");
}

TEST(OnnxImport, AMissingInitializerNamesTheNodeAndTheTensor) {
    onnx::ModelProto m = mlp();
    m.mutable_graph()->mutable_initializer()->RemoveLast();  // fc.bias
    const std::string e = error_of(bytes_of(m));
    EXPECT_HAS(e, "Gemm node '/fc/Gemm'");
    EXPECT_HAS(e, "'fc.bias'");
    EXPECT_HAS(e, "missing initializer");
}

TEST(OnnxImport, ACycleIsAnError) {
    onnx::ModelProto m = mlp();
    auto* g = m.mutable_graph();
    g->mutable_node(1)->set_input(0, std::string("z"));  // Relu reads z ...
    node(g, "Relu", "back", {"y"}, {"z"});  // ... which Relu's own output makes
    const std::string e = error_of(bytes_of(m));
    EXPECT_HAS(e, "cycle");
    EXPECT_HAS(e, "Relu node '/relu/Relu'");
}

TEST(OnnxImport, HugeDimsAndShortDataAreErrorsNotAllocations) {
    onnx::ModelProto m = mlp();
    auto* w = m.mutable_graph()->mutable_initializer(0);
    w->clear_float_data();
    w->clear_dims();
    w->add_dims(int64_t{1} << 40);
    EXPECT_HAS(error_of(bytes_of(m)), "out of range");
    w->clear_dims();
    w->add_dims(65536);
    w->add_dims(65536);
    EXPECT_HAS(error_of(bytes_of(m)), "more than 2^31 - 1 elements");
    w->clear_dims();
    w->add_dims(3);
    w->add_dims(4);
    w->set_raw_data(std::string(20, '\0'));  // 5 floats of 12
    EXPECT_HAS(error_of(bytes_of(m)), "truncated");
    w->clear_raw_data();
    w->set_data_type(onnx::TensorProto::STRING);
    EXPECT_HAS(error_of(bytes_of(m)), "data type string");
}

TEST(OnnxImport, WrongAttributeTypesAndAsymmetricPadsNameTheNode) {
    onnx::ModelProto m = mlp();
    auto* gemm = m.mutable_graph()->mutable_node(0);
    gemm->mutable_attribute(0)->set_type(onnx::AttributeProto::FLOAT);  // transB as a float
    EXPECT_HAS(error_of(bytes_of(m)), "attribute 'transB' has the wrong type");

    onnx::ModelProto c;
    c.add_opset_import()->set_version(13);
    auto* g = c.mutable_graph();
    value_info(g->add_input(), "x", {1, 1, 8, 8});
    value_info(g->add_output(), "y", {1, 2, 8, 8});
    *g->add_initializer() = floats("conv.weight", {2, 1, 3, 3});
    ints_attr(node(g, "Conv", "/conv/Conv", {"x", "conv.weight"}, {"y"}), "pads", {0, 0, 1, 1});
    const std::string e = error_of(bytes_of(c));
    EXPECT_HAS(e, "Conv node '/conv/Conv'");
    EXPECT_HAS(e, "asymmetric");
}

// A model of one node `op` reading the data x (its dims, -1 the batch) and the named constants
// after it, writing y: for the new ops' good and hostile forms.
onnx::ModelProto one_node(const std::string& op, std::vector<int64_t> x_dims, std::vector<onnx::TensorProto> constants,
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

onnx::TensorProto scalar(const std::string& name, float v) {
    onnx::TensorProto t = floats(name, {}, v);
    return t;
}

TEST(OnnxImport, ClipBecomesClampAndItsHostileFormsNameTheNode) {
    const onnx_import::Imported m = import_bytes(bytes_of(one_node("Clip", {-1, 5}, {scalar("lo", -1.f), scalar("hi", 6.f)})), "m", "");
    ASSERT_EQ(m.layers.size(), 1u);
    EXPECT_EQ(m.layers[0].type, "clamp");
    EXPECT_HAS(m.layers_toml, "lo = -1.0");
    EXPECT_HAS(m.layers_toml, "hi = 6.0");
    const onnx_import::Imported relu6 = import_bytes(bytes_of(one_node("Clip", {-1, 5}, {scalar("lo", 0.f), scalar("hi", 6.f)})), "m", "");
    EXPECT_EQ(relu6.layers[0].type, "relu6");  // torch's ReLU6: an activation a conv runs as its epilogue
    // Only min: no "hi" key (unbounded).
    const onnx_import::Imported lower = import_bytes(bytes_of(one_node("Clip", {-1, 5}, {scalar("lo", -1.f)})), "m", "");
    EXPECT_EQ(lower.layers_toml.find("hi ="), std::string::npos);
    EXPECT_HAS(error_of(bytes_of(one_node("Clip", {-1, 5}, {floats("lo", {2})}))), "its min must be a float scalar");
    EXPECT_HAS(error_of(bytes_of(one_node("Clip", {-1, 5}, {scalar("lo", 2.f), scalar("hi", 1.f)}))), "is above max");
    EXPECT_HAS(error_of(bytes_of(one_node("Clip", {-1, 5}, {scalar("lo", INFINITY)}))), "its min is inf");
    onnx::ModelProto attr = one_node("Clip", {-1, 5}, {});
    int_attr(attr.mutable_graph()->mutable_node(0), "min", 0);  // opset 6's attribute form
    EXPECT_HAS(error_of(bytes_of(attr)), "Clip node '/Clip': attribute 'min' is not one this op has");
}

onnx::TensorProto ints(const std::string& name, std::vector<int64_t> v, bool scalar = false) {
    onnx::TensorProto t;
    t.set_name(name);
    t.set_data_type(onnx::TensorProto::INT64);
    if (!scalar) t.add_dims(static_cast<int64_t>(v.size()));
    for (int64_t x : v) t.add_int64_data(x);
    return t;
}

// x [N, 5, 3] -> Transpose [1, 0, 2] -> LSTM (hidden 4, W/R/B initializers) -> Squeeze 1 ->
// Transpose back -> y [N, 5, 4]: torch's export of a batch-first nn.LSTM.
onnx::ModelProto lstm_model() {
    onnx::ModelProto m;
    m.set_ir_version(8);
    m.add_opset_import()->set_version(14);
    auto* g = m.mutable_graph();
    value_info(g->add_input(), "x", {-1, 5, 3});
    value_info(g->add_output(), "y", {});
    *g->add_initializer() = floats("W", {1, 16, 3});
    *g->add_initializer() = floats("R", {1, 16, 4});
    *g->add_initializer() = floats("B", {1, 32});
    *g->add_initializer() = ints("one", {1});
    ints_attr(node(g, "Transpose", "/t0", {"x"}, {"xt"}), "perm", {1, 0, 2});
    int_attr(node(g, "LSTM", "/lstm/LSTM", {"xt", "W", "R", "B"}, {"Y"}), "hidden_size", 4);
    node(g, "Squeeze", "/sq", {"Y", "one"}, {"ys"});
    ints_attr(node(g, "Transpose", "/t1", {"ys"}, {"y"}), "perm", {1, 0, 2});
    return m;
}

TEST(OnnxImport, AnLstmBecomesXylemsWithItsGatesReordered) {
    const onnx_import::Imported m = import_bytes(bytes_of(lstm_model()), "m", "");
    ASSERT_EQ(m.layers.size(), 1u);
    EXPECT_EQ(m.layers[0].type, "lstm");
    EXPECT_EQ(m.output_sample, (Shape{5, 4}));
    // W's ONNX blocks i, o, f, c (rows 0-3, 4-7, 8-11, 12-15 of 3 values) -> xylem's i, f, g, o.
    const auto& w = m.params.at("lstm_LSTM.weight_ih_l0").values;
    EXPECT_EQ(w[0], 0.f);        // i: ONNX row 0
    EXPECT_EQ(w[4 * 3], 8 * 3);  // f: ONNX row 8
    EXPECT_EQ(w[8 * 3], 12 * 3); // g: ONNX row 12 (c)
    EXPECT_EQ(w[12 * 3], 4 * 3); // o: ONNX row 4
    EXPECT_EQ(m.params.at("lstm_LSTM.bias_hh_l0").values[0], 16.f);  // Rb, B's second half
}

TEST(OnnxImport, HostileLstmsAndSequenceOpsNameTheNode) {
    auto lstm_error = [](const std::function<void(onnx::GraphProto*)>& bend) {
        onnx::ModelProto m = lstm_model();
        bend(m.mutable_graph());
        return error_of(bytes_of(m));
    };
    EXPECT_HAS(lstm_error([](onnx::GraphProto* g) { *g->mutable_initializer(0) = floats("W", {1, 12, 3}); }),
               "LSTM node '/lstm/LSTM': W [1, 12, 3] is not [1, 16, 3]");
    EXPECT_HAS(lstm_error([](onnx::GraphProto* g) {
                   auto* a = g->mutable_node(1)->add_attribute();
                   a->set_name("direction");
                   a->set_type(onnx::AttributeProto::STRING);
                   a->set_s("bidirectional");
               }),
               "direction bidirectional");
    EXPECT_HAS(lstm_error([](onnx::GraphProto* g) { g->mutable_node(1)->mutable_attribute(0)->set_type(onnx::AttributeProto::FLOAT); }),
               "attribute 'hidden_size' has the wrong type");
    EXPECT_HAS(lstm_error([](onnx::GraphProto* g) { g->mutable_node(1)->mutable_attribute(0)->set_i(-3); }),
               "hidden_size -3 is missing or out of range");
    EXPECT_HAS(lstm_error([](onnx::GraphProto* g) {  // a non-zero initial state
                   *g->add_initializer() = floats("h0", {1, 1, 4}, 1.f);
                   auto* n = g->mutable_node(1);
                   n->add_input("");
                   n->add_input("h0");
               }),
               "initial_h is not zeros");
    EXPECT_HAS(lstm_error([](onnx::GraphProto* g) { g->mutable_node(0)->mutable_attribute(0)->set_ints(0, 2); }),
               "Transpose node '/t0': perm [2, 0, 2]");
    EXPECT_HAS(lstm_error([](onnx::GraphProto* g) { g->mutable_node(1)->set_input(0, std::string("x")); }),
               "its X must be the model's [batch, time, features] data transposed");
    EXPECT_HAS(lstm_error([](onnx::GraphProto* g) { g->mutable_node(3)->set_op_type("Relu"); g->mutable_node(3)->clear_attribute(); }),
               "reads 'ys', a time-major sequence");

    // A GRU: PyTorch's cell (linear_before_reset = 1) only; gates z, r, h reordered to r, z, n.
    onnx::ModelProto gru = lstm_model();
    auto* cell = gru.mutable_graph()->mutable_node(1);
    cell->set_op_type("GRU");
    *gru.mutable_graph()->mutable_initializer(0) = floats("W", {1, 12, 3});
    *gru.mutable_graph()->mutable_initializer(1) = floats("R", {1, 12, 4});
    *gru.mutable_graph()->mutable_initializer(2) = floats("B", {1, 24});
    EXPECT_HAS(error_of(bytes_of(gru)), "GRU node '/lstm/LSTM': linear_before_reset = 0");
    int_attr(cell, "linear_before_reset", 1);
    const onnx_import::Imported imported = import_bytes(bytes_of(gru), "m", "");
    ASSERT_EQ(imported.layers.size(), 1u);
    EXPECT_EQ(imported.layers[0].type, "gru");
    EXPECT_EQ(imported.params.at("lstm_LSTM.weight_ih_l0").values[0], 4 * 3);  // r: ONNX block 1
    EXPECT_EQ(imported.params.at("lstm_LSTM.weight_ih_l0").values[4 * 3], 0.f); // z: ONNX block 0
    int_attr(cell, "input_forget", 0);
    EXPECT_HAS(error_of(bytes_of(gru)), "attribute 'input_forget' is not one this op has");

    // Reshape of the data (Importer::reshape_dims after the batch rule): 0 copies, one -1 inferred,
    // the batch kept or inferred, every refusal named.
    const onnx_import::Imported r0 = import_bytes(bytes_of(one_node("Reshape", {-1, 6, 2}, {ints("sh", {0, -1})})), "m", "");
    EXPECT_EQ(r0.output_sample, (Shape{12}));
    const onnx_import::Imported r1 = import_bytes(bytes_of(one_node("Reshape", {-1, 6, 2}, {ints("sh", {-1, 6, 0})})), "m", "");
    EXPECT_EQ(r1.output_sample, (Shape{6, 2}));  // the batch inferred, the 0 copying axis 2
    EXPECT_HAS(error_of(bytes_of(one_node("Reshape", {-1, 6, 2}, {ints("sh", {0, 5, -1})}))), "cannot infer the -1 of shape [0, 5, -1]");
    EXPECT_HAS(error_of(bytes_of(one_node("Reshape", {-1, 6, 2}, {ints("sh", {0, -1, -1})}))), "has two -1");
    EXPECT_HAS(error_of(bytes_of(one_node("Reshape", {-1, 6, 2}, {ints("sh", {-1, 4, -1})}))), "has two -1");
    EXPECT_HAS(error_of(bytes_of(one_node("Reshape", {-1, 6, 2}, {ints("sh", {-1, 5})}))), "does not hold the input's 12 elements");
    EXPECT_HAS(error_of(bytes_of(one_node("Reshape", {-1, 6, 2}, {ints("sh", {3, 4})}))), "changes the batch axis");
    EXPECT_HAS(error_of(bytes_of(one_node("Reshape", {-1, 6, 2}, {ints("sh", {0, 0, 0, 0})}))), "copies an axis the input lacks");
    EXPECT_HAS(error_of(bytes_of(one_node("Reshape", {-1, 6, 2}, {ints("sh", {0, -7})}))), "shape entry -7 is out of range");

    // Slice and Gather of the data: one axis, step 1, a run of indices; ConstantOfShape bounded.
    onnx::ModelProto s = one_node("Slice", {-1, 6, 2}, {ints("st", {1}), ints("en", {4}), ints("ax", {1}), ints("sp", {2})});
    EXPECT_HAS(error_of(bytes_of(s)), "Slice node '/Slice': step 2");
    const onnx_import::Imported ok = import_bytes(bytes_of(one_node("Slice", {-1, 6, 2}, {ints("st", {-1}), ints("en", {INT64_MAX}), ints("ax", {1})})), "m", "");
    EXPECT_HAS(ok.layers_toml, "type = \"slice\"");
    EXPECT_EQ(ok.output_sample, (Shape{1, 2}));
    EXPECT_HAS(error_of(bytes_of(one_node("Slice", {-1, 6, 2}, {ints("st", {0}), ints("en", {1}), ints("ax", {0})}))), "slices the batch axis");
    onnx::ModelProto gaps = one_node("Gather", {-1, 6, 2}, {ints("i", {0, 2})});
    int_attr(gaps.mutable_graph()->mutable_node(0), "axis", 1);
    EXPECT_HAS(error_of(bytes_of(gaps)), "not a run of consecutive");
    EXPECT_HAS(error_of(bytes_of(one_node("Gather", {-1, 6, 2}, {ints("i", {0, 1})}))), "gathers along the batch axis");
    onnx::ModelProto gather = one_node("Gather", {-1, 6, 2}, {ints("i", {-1}, true)});
    int_attr(gather.mutable_graph()->mutable_node(0), "axis", 1);
    const onnx_import::Imported last = import_bytes(bytes_of(gather), "m", "");
    EXPECT_EQ(last.output_sample, (Shape{2}));  // y[:, -1]: slice then reshape
    onnx::ModelProto huge;
    huge.add_opset_import()->set_version(17);
    auto* g = huge.mutable_graph();
    value_info(g->add_input(), "x", {-1, 4});
    value_info(g->add_output(), "y", {});
    *g->add_initializer() = ints("shape", {1 << 20, 1 << 20});
    node(g, "ConstantOfShape", "/cos", {"shape"}, {"z"});
    node(g, "Add", "/add", {"x", "z"}, {"y"});
    EXPECT_HAS(error_of(bytes_of(huge)), "ConstantOfShape node '/cos': shape [1048576, 1048576] is out of range");
}

// x [N, 4, 8] -> GELU's erf form (Div sqrt 2, Erf, Add 1, Mul x, Mul 0.5) -> y, with `half` for 0.5.
onnx::ModelProto gelu_model(float half = 0.5f, float root2 = 1.41421356f) {
    onnx::ModelProto m;
    m.add_opset_import()->set_version(13);
    auto* g = m.mutable_graph();
    value_info(g->add_input(), "x", {-1, 4, 8});
    value_info(g->add_output(), "y", {});
    *g->add_initializer() = scalar("root2", root2);
    *g->add_initializer() = scalar("one", 1.f);
    *g->add_initializer() = scalar("half", half);
    node(g, "Div", "/gelu/Div", {"x", "root2"}, {"d"});
    node(g, "Erf", "/gelu/Erf", {"d"}, {"e"});
    node(g, "Add", "/gelu/Add", {"e", "one"}, {"a"});
    node(g, "Mul", "/gelu/Mul", {"x", "a"}, {"m"});
    node(g, "Mul", "/gelu/Mul_1", {"m", "half"}, {"y"});
    return m;
}

TEST(OnnxImport, GelusErfFormBecomesOneGeluAndABrokenOneIsRefusedNamingTheNode) {
    const onnx_import::Imported m = import_bytes(bytes_of(gelu_model()), "m", "");
    ASSERT_EQ(m.layers.size(), 1u);
    EXPECT_EQ(m.layers[0].type, "gelu");
    EXPECT_HAS(error_of(bytes_of(gelu_model(0.4f))), "Mul node '/gelu/Mul_1': breaks GELU's erf or tanh form");
    // x / 2 is a scale layer, so the Erf after it is outside GELU.
    EXPECT_HAS(error_of(bytes_of(gelu_model(0.5f, 2.f))), "Erf node '/gelu/Erf': xylem imports Erf only inside GELU");
    onnx::ModelProto leak = gelu_model();  // a step read by something outside the pattern
    node(leak.mutable_graph(), "Relu", "/leak", {"e"}, {"r"});
    node(leak.mutable_graph(), "Add", "/join", {"y", "r"}, {"y2"});
    leak.mutable_graph()->mutable_output(0)->set_name("y2");
    EXPECT_HAS(error_of(bytes_of(leak)), "Relu node '/leak': reads 'e', a step inside a gelu pattern");
    EXPECT_HAS(error_of(bytes_of(one_node("Erf", {-1, 4}, {}))), "xylem imports Erf only inside GELU");
}

TEST(OnnxImport, LayerNormsBothFormsAndTheirHostileCases) {
    onnx::ModelProto ln = one_node("LayerNormalization", {-1, 3, 8}, {floats("ln.weight", {8}), floats("ln.bias", {8})});
    const onnx_import::Imported m = import_bytes(bytes_of(ln), "m", "");
    ASSERT_EQ(m.layers.size(), 1u);
    EXPECT_EQ(m.layers[0].type, "layer_norm");
    EXPECT_EQ(m.layers[0].name, "ln");
    EXPECT_EQ(m.params.at("ln.bias").values[3], 3.f);
    onnx::ModelProto wrong = one_node("LayerNormalization", {-1, 3, 8}, {floats("ln.weight", {3})});
    EXPECT_HAS(error_of(bytes_of(wrong)), "its scale or bias [3] is not [8]");
    onnx::ModelProto axis = one_node("LayerNormalization", {-1, 3, 8}, {floats("ln.weight", {8})});
    int_attr(axis.mutable_graph()->mutable_node(0), "axis", 1);
    EXPECT_HAS(error_of(bytes_of(axis)), "axis 1: xylem's layer_norm normalises the last axis only");
    onnx::ModelProto eps = one_node("LayerNormalization", {-1, 3, 8}, {floats("ln.weight", {8})});
    int_attr(eps.mutable_graph()->mutable_node(0), "epsilon", 1);  // an int where a float belongs
    EXPECT_HAS(error_of(bytes_of(eps)), "attribute 'epsilon' has the wrong type");
    // The opset 13 decomposition, then broken: the variance over another axis.
    onnx::ModelProto d;
    d.add_opset_import()->set_version(13);
    auto* g = d.mutable_graph();
    value_info(g->add_input(), "x", {-1, 3, 8});
    value_info(g->add_output(), "y", {});
    *g->add_initializer() = scalar("two", 2.f);
    *g->add_initializer() = scalar("eps", 1e-5f);
    *g->add_initializer() = floats("w", {8});
    *g->add_initializer() = floats("b", {8});
    ints_attr(node(g, "ReduceMean", "/ln/mean", {"x"}, {"mu"}), "axes", {-1});
    node(g, "Sub", "/ln/sub", {"x", "mu"}, {"c"});
    node(g, "Pow", "/ln/pow", {"c", "two"}, {"sq"});
    ints_attr(node(g, "ReduceMean", "/ln/var", {"sq"}, {"v"}), "axes", {-1});
    node(g, "Add", "/ln/eps", {"v", "eps"}, {"ve"});
    node(g, "Sqrt", "/ln/sqrt", {"ve"}, {"sd"});
    node(g, "Div", "/ln/div", {"c", "sd"}, {"n"});
    node(g, "Mul", "/ln/mul", {"n", "w"}, {"nw"});
    node(g, "Add", "/ln/add", {"nw", "b"}, {"y"});
    const onnx_import::Imported dm = import_bytes(bytes_of(d), "m", "");
    ASSERT_EQ(dm.layers.size(), 1u);
    EXPECT_EQ(dm.layers[0].type, "layer_norm");
    EXPECT_HAS(dm.layers_toml, "eps = 9.99999975e-06");
    EXPECT_EQ(dm.params.at(dm.layers[0].name + ".weight").values[7], 7.f);
    EXPECT_EQ(dm.params.at(dm.layers[0].name + ".bias").values[2], 2.f);
    g->mutable_node(3)->mutable_attribute(0)->set_ints(0, 1);
    EXPECT_HAS(error_of(bytes_of(d)), "ReduceMean node '/ln/var': xylem imports ReduceMean only as a layer norm's mean");
    g->mutable_node(3)->mutable_attribute(0)->set_ints(0, -1);
    g->mutable_node(2)->set_input(1, std::string("eps"));  // x - mean to the power 1e-5
    EXPECT_HAS(error_of(bytes_of(d)), "Pow node '/ln/pow': xylem imports Pow only as a layer norm's square");
}

TEST(OnnxImport, EmbeddingsAndHostileSplitsAndMasks) {
    // Gather of a table by integer ids: an embedding; by float data or another axis: refused.
    onnx::ModelProto e;
    e.add_opset_import()->set_version(17);
    auto* g = e.mutable_graph();
    value_info(g->add_input(), "ids", {-1, 6});
    g->mutable_input(0)->mutable_type()->mutable_tensor_type()->set_elem_type(onnx::TensorProto::INT64);
    value_info(g->add_output(), "y", {});
    *g->add_initializer() = floats("wte.weight", {10, 4});
    *g->add_initializer() = floats("pos", {6, 4});
    node(g, "Gather", "/wte/Gather", {"wte.weight", "ids"}, {"t"});
    node(g, "Add", "/Add", {"t", "pos"}, {"y"});
    const onnx_import::Imported m = import_bytes(bytes_of(e), "m", "");
    ASSERT_EQ(m.layers.size(), 2u);
    EXPECT_EQ(m.layers[0].type, "embedding");
    EXPECT_EQ(m.layers[1].type, "position_embedding");
    EXPECT_TRUE(m.input_tokens);
    *g->mutable_initializer(1) = floats("pos", {5, 4});  // not [T, C]
    EXPECT_HAS(error_of(bytes_of(e)), "Add node '/Add': adds a constant [5, 4] that is not one value or the trailing axes");
    onnx::ModelProto f = one_node("Gather", {-1, 6}, {});
    f.mutable_graph()->mutable_node(0)->set_input(0, std::string("table"));
    f.mutable_graph()->mutable_node(0)->add_input("x");
    *f.mutable_graph()->add_initializer() = floats("table", {10, 4});
    EXPECT_HAS(error_of(bytes_of(f)), "looks up rows by indices the model computes");
    // Split of anything but a linear's [N, T, 3C]; a Where that is not a causal mask.
    onnx::ModelProto split = one_node("Split", {-1, 6, 9}, {});
    EXPECT_HAS(error_of(bytes_of(split)), "xylem imports Split only as the q, k, v of attention");
}

// Add, Sub, Mul and Div of a constant on the model's data: bias and scale layers holding the
// constant (negated for Sub, inverted for Div); the forms they cannot hold are refused.
TEST(OnnxImport, ArithmeticWithAConstantBecomesBiasOrScale) {
    const onnx_import::Imported sub = import_bytes(bytes_of(one_node("Sub", {-1, 3, 4}, {floats("mean", {4}, 1.f)})), "m", "");
    ASSERT_EQ(sub.layers.size(), 1u);
    EXPECT_EQ(sub.layers[0].type, "bias");
    EXPECT_HAS(sub.layers_toml, "shape = [4]");
    EXPECT_EQ(sub.params.at(sub.layers[0].name + ".weight").values[2], -3.f);
    const onnx_import::Imported div = import_bytes(bytes_of(one_node("Div", {-1, 3, 4}, {scalar("two", 2.f)})), "m", "");
    EXPECT_EQ(div.layers[0].type, "scale");
    EXPECT_EQ(div.params.at(div.layers[0].name + ".weight").values[0], 0.5f);
    const onnx_import::Imported mul = import_bytes(bytes_of(one_node("Mul", {-1, 3, 4}, {floats("w", {1, 3, 4})})), "m", "");
    EXPECT_HAS(mul.layers_toml, "shape = [3, 4]");
    onnx::ModelProto first = one_node("Sub", {-1, 4}, {floats("c", {4})});
    first.mutable_graph()->mutable_node(0)->set_input(0, std::string("c"));
    first.mutable_graph()->mutable_node(0)->set_input(1, std::string("x"));
    EXPECT_HAS(error_of(bytes_of(first)), "Sub node '/Sub': subtracts the model's data from a constant");
    EXPECT_HAS(error_of(bytes_of(one_node("Mul", {-1, 3, 4}, {floats("w", {3, 3, 4})}))), "Mul node '/Mul': multiplies by a constant [3, 3, 4] that is not");
    EXPECT_HAS(error_of(bytes_of(one_node("Add", {-1, 3, 4}, {floats("w", {3, 1})}))), "adds a constant [3, 1] that is not");
}

// A model of x [N, 3, 4] and its first row s = x[:, :1] ([N, 1, 4]), for the nodes a test adds
// to the graph it returns (writing y).
onnx::GraphProto* first_row_model(onnx::ModelProto& m) {
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

// Add of two computed tensors: one shape, or the second [N, 1, F] over the first [N, T, F] (xylem's
// add broadcasts a trailing part, after a reshape dropping the 1s); other broadcasts are refused.
TEST(OnnxImport, AddOfTwoComputedTensorsBroadcastsOnlyATrailingPart) {
    auto model = [](std::vector<int64_t> b_shape) {
        onnx::ModelProto m;
        auto* g = first_row_model(m);
        *g->add_initializer() = ints("shape", b_shape);
        node(g, "Reshape", "/reshape", {"s", "shape"}, {"b"});
        node(g, "Add", "/add", {"x", "b"}, {"y"});
        return m;
    };
    const onnx_import::Imported ok = import_bytes(bytes_of(model({0, 1, 4})), "m", "");
    EXPECT_HAS(ok.layers_toml, "shape = [4]");  // the reshape dropping the 1
    EXPECT_EQ(ok.layers.back().type, "add");
    EXPECT_EQ(ok.output_sample, (Shape{3, 4}));
    EXPECT_HAS(error_of(bytes_of(model({0, 4}))), "Add node '/add': adds [N, 3, 4] and [N, 4]");
}

// Sub of two computed tensors: x - x[:, :1] (the second broadcast, its leading 1 dropped) becomes
// sub; the smaller tensor minus the bigger is refused naming the node (xylem's sub broadcasts its
// second input only).
TEST(OnnxImport, SubOfTwoComputedTensorsBecomesSub) {
    auto model = [](bool small_first) {
        onnx::ModelProto m;
        auto* g = first_row_model(m);
        node(g, "Sub", "/sub", small_first ? std::vector<std::string>{"s", "x"} : std::vector<std::string>{"x", "s"},
             {"y"});
        return bytes_of(m);
    };
    const onnx_import::Imported ok = import_bytes(model(false), "m", "");
    EXPECT_EQ(ok.layers.back().type, "sub");
    EXPECT_EQ(ok.layers.back().inputs.at(0), "input");
    EXPECT_EQ(ok.output_sample, (Shape{3, 4}));
    EXPECT_HAS(error_of(model(true)), "Sub node '/sub': subtracts [N, 3, 4] from the smaller [N, 1, 4]");
}

// Mul of two computed tensors: SiLU's x * sigmoid(x) (one shape), a squeeze-and-excitation gate
// [N, C, 1, 1] times [N, C, H, W] (either order: the bigger goes first); a [N, C, 1, W] second
// operand (neither the first's trailing axes nor its leading ones) is refused naming the node and
// both shapes.
TEST(OnnxImport, MulOfTwoComputedTensorsBecomesMul) {
    auto model = [](const std::string& second, bool gate_first) {
        onnx::ModelProto m;
        m.add_opset_import()->set_version(17);
        auto* g = m.mutable_graph();
        value_info(g->add_input(), "x", {-1, 3, 4, 5});
        value_info(g->add_output(), "y", {});
        if (second == "same") {
            node(g, "Sigmoid", "/sig", {"x"}, {"b"});
        } else if (second == "channel") {
            ints_attr(node(g, "ReduceMean", "/mean", {"x"}, {"r"}), "axes", {2, 3});  // [N, 3, 1, 1]
            node(g, "Sigmoid", "/sig", {"r"}, {"b"});
        } else {
            *g->add_initializer() = ints("start", {0});
            *g->add_initializer() = ints("end", {1});
            *g->add_initializer() = ints("axis", {2});
            node(g, "Slice", "/row", {"x", "start", "end", "axis"}, {"b"});  // [N, 3, 1, 5]
        }
        node(g, "Mul", "/mul", gate_first ? std::vector<std::string>{"b", "x"} : std::vector<std::string>{"x", "b"},
             {"y"});
        return bytes_of(m);
    };
    const onnx_import::Imported silu = import_bytes(model("same", false), "m", "");
    EXPECT_EQ(silu.layers.back().type, "mul");
    EXPECT_EQ(silu.output_sample, (Shape{3, 4, 5}));
    for (bool first : {false, true}) {
        const onnx_import::Imported se = import_bytes(model("channel", first), "m", "");
        EXPECT_EQ(se.layers.back().type, "mul");
        EXPECT_EQ(se.layers.back().inputs.at(0), "input") << "the map goes first";
        EXPECT_EQ(se.output_sample, (Shape{3, 4, 5}));
    }
    const std::string e = error_of(model("row", false));
    EXPECT_HAS(e, "Mul node '/mul': multiplies [N, 3, 4, 5] by [N, 3, 1, 5]");
}

// HardSigmoid becomes scale (alpha), bias (beta) and clamp [0, 1] with the node's alpha and beta;
// HardSwish the same with 1/6 and 1/2, then mul by x; a non-finite alpha is refused naming the node.
TEST(OnnxImport, HardSigmoidAndHardSwishBecomeScaleBiasClampAndMul) {
    auto model = [](const std::string& op, float alpha) {
        onnx::ModelProto m;
        m.add_opset_import()->set_version(17);
        auto* g = m.mutable_graph();
        value_info(g->add_input(), "x", {-1, 6});
        value_info(g->add_output(), "y", {});
        auto* h = node(g, op, "/act", {"x"}, {"y"});
        if (op == "HardSigmoid") {
            auto* a = h->add_attribute();
            a->set_name("alpha");
            a->set_type(onnx::AttributeProto::FLOAT);
            a->set_f(alpha);
        }
        return bytes_of(m);
    };
    const onnx_import::Imported hs = import_bytes(model("HardSigmoid", 0.25f), "m", "");
    ASSERT_EQ(hs.layers.size(), 3u);
    EXPECT_EQ(hs.layers[0].type, "scale");
    EXPECT_EQ(hs.layers[1].type, "bias");
    EXPECT_EQ(hs.layers[2].type, "clamp");
    EXPECT_EQ(hs.params.at(hs.layers[0].name + ".weight").values, (std::vector<float>{0.25f}));
    EXPECT_EQ(hs.params.at(hs.layers[1].name + ".weight").values, (std::vector<float>{0.5f}));
    const onnx_import::Imported sw = import_bytes(model("HardSwish", 0), "m", "");
    ASSERT_EQ(sw.layers.size(), 4u);
    EXPECT_EQ(sw.layers.back().type, "mul");
    EXPECT_EQ(sw.layers.back().inputs, (std::vector<std::string>{"input", sw.layers[2].name}));
    EXPECT_EQ(sw.params.at(sw.layers[0].name + ".weight").values, (std::vector<float>{1.0f / 6.0f}));
    EXPECT_HAS(error_of(model("HardSigmoid", std::numeric_limits<float>::infinity())),
               "HardSigmoid node '/act': alpha inf and beta 0.5 must be finite");
}

// A Transpose that keeps the batch first is xylem's transpose over the sample's axes (ShuffleNet's
// channel shuffle: [N, 2, 3, 4, 4] with perm [0, 2, 1, 3, 4]); one that moves the batch (outside an
// LSTM's sequence) is refused naming the node.
TEST(OnnxImport, ATransposeKeepingTheBatchFirstBecomesTranspose) {
    auto model = [](std::vector<int64_t> perm) {
        onnx::ModelProto m;
        m.add_opset_import()->set_version(17);
        auto* g = m.mutable_graph();
        value_info(g->add_input(), "x", {-1, 2, 3, 4, 4});
        value_info(g->add_output(), "y", {});
        ints_attr(node(g, "Transpose", "/shuffle/Transpose", {"x"}, {"y"}), "perm", perm);
        return bytes_of(m);
    };
    const onnx_import::Imported t = import_bytes(model({0, 2, 1, 3, 4}), "m", "");
    ASSERT_EQ(t.layers.size(), 1u);
    EXPECT_EQ(t.layers[0].type, "transpose");
    EXPECT_HAS(t.layers_toml, "perm = [1, 0, 2, 3]");
    EXPECT_EQ(t.output_sample, (Shape{3, 2, 4, 4}));
    EXPECT_HAS(error_of(model({1, 0, 2, 3, 4})), "Transpose node '/shuffle/Transpose': perm [1, 0, 2, 3, 4]");
    EXPECT_HAS(error_of(model({0, 2, 2, 3, 4})), "is not a permutation of the axes of [N, 2, 3, 4, 4]");
}

// The tiny GPT the fuzz seeds hold (fuzz/seeds/make_onnx_seeds.py: torch's export of bench/torch_gpt.py,
// context 4, 2 heads, 8 channels) imports as xylem's attention; bent, each part of the pattern is
// refused naming the node.
TEST(OnnxImport, TorchsAttentionBecomesOneLayerAndBentFormsAreRefused) {
    std::ifstream f(std::string(XYLEM_SOURCE_DIR) + "/fuzz/seeds/onnx/gpt_op17.onnx", std::ios::binary);
    std::stringstream bytes;
    bytes << f.rdbuf();
    onnx::ModelProto gpt;
    ASSERT_TRUE(gpt.ParseFromString(bytes.str()));
    const onnx_import::Imported m = import_bytes(bytes_of(gpt), "gpt.onnx", "");
    int attention = 0;
    for (const auto& l : m.layers) attention += l.type == "attention";
    EXPECT_EQ(attention, 1);
    EXPECT_TRUE(m.input_tokens);
    auto find = [](onnx::ModelProto& model, const std::string& op) -> onnx::NodeProto* {
        for (auto& n : *model.mutable_graph()->mutable_node())
            if (n.op_type() == op && n.name().find("attn") != std::string::npos) return &n;
        return nullptr;
    };
    onnx::ModelProto scale = gpt;  // scores times 0.3, not 1/sqrt(4)
    *scale.mutable_graph()->add_initializer() = scalar("bad_scale", 0.3f);
    onnx::NodeProto* mul = find(scale, "Mul");
    ASSERT_NE(mul, nullptr);
    mul->set_input(1, std::string("bad_scale"));
    EXPECT_HAS(error_of(bytes_of(scale)), "xylem's attention scales by 1/sqrt(head size)");
    onnx::ModelProto mask = gpt;  // a mask that hides the diagonal too
    onnx::TensorProto anti;
    anti.set_name("anti_causal");
    anti.set_data_type(onnx::TensorProto::BOOL);
    anti.add_dims(4);
    anti.add_dims(4);
    for (int i = 0; i < 4; ++i)
        for (int j = 0; j < 4; ++j) anti.add_int32_data(j >= i);
    *mask.mutable_graph()->add_initializer() = anti;
    onnx::NodeProto* where = find(mask, "Where");
    ASSERT_NE(where, nullptr);
    where->set_input(0, std::string("anti_causal"));
    EXPECT_HAS(error_of(bytes_of(mask)), "masks attention's scores, but not causally (row 0, column 0)");
    onnx::ModelProto axis = gpt;
    onnx::NodeProto* softmax = find(axis, "Softmax");
    ASSERT_NE(softmax, nullptr);
    softmax->mutable_attribute(0)->set_i(2);
    EXPECT_HAS(error_of(bytes_of(axis)), "normalises attention's scores over an axis other than the last");
    // MatMul of two computed tensors outside attention; a Range too long to fold.
    onnx::ModelProto mm = one_node("MatMul", {-1, 4, 4}, {});
    mm.mutable_graph()->mutable_node(0)->add_input("x");
    EXPECT_HAS(error_of(bytes_of(mm)), "MatMul node '/MatMul': its B 'x' is computed by the model");
    onnx::ModelProto range = one_node("Range", {-1, 4}, {ints("a", {0}, true), ints("b", {int64_t{1} << 40}, true), ints("d", {1}, true)});
    range.mutable_graph()->mutable_node(0)->set_input(0, std::string("a"));
    range.mutable_graph()->mutable_node(0)->set_input(1, std::string("b"));
    range.mutable_graph()->mutable_node(0)->set_input(2, std::string("d"));
    node(range.mutable_graph(), "Add", "/add", {"x", "y"}, {"z"});
    range.mutable_graph()->mutable_output(0)->set_name("z");
    EXPECT_HAS(error_of(bytes_of(range)), "Range node '/Range': would fold to more than 2^24 elements");
}

// docs/onnx.md's table of imported ops is the importer's table (one list, two views): generated
// from supported_ops() between its markers; XYLEM_WRITE_DOCS=1 rewrites it.
TEST(OnnxImport, TheDocsTableIsTheImportersTable) {
    const std::string begin =
        "<!-- import-table: generated from onnx_import::supported_ops() by tests/onnx/importer_test.cpp -->\n";
    const std::string end = "<!-- /import-table -->";
    std::string want = "| ONNX op | xylem |\n|---|---|\n";
    for (const auto& op : onnx_import::supported_ops()) want += std::string("| ") + op.op + " | " + op.becomes + " |\n";
    const std::string path = std::string(XYLEM_SOURCE_DIR) + "/docs/onnx.md";
    EXPECT_TRUE(test::check_generated_section(path, begin, end, want, "*TheDocsTableIsTheImportersTable*"))
        << "no import-table markers in " << path;
}

TEST(OnnxImport, ExternalDataMustStayInsideTheModelsFolder) {
    const fs::path dir = fs::path(testing::TempDir()) / "xylem_onnx_external";
    fs::create_directories(dir / "model");
    {
        std::ofstream(dir / "secret.bin", std::ios::binary) << std::string(48, '\0');
        std::ofstream(dir / "model" / "weights.bin", std::ios::binary) << std::string(48, '\0');
    }
    auto with_location = [&](const std::string& location, const std::string& length = "48") {
        onnx::ModelProto m = mlp();
        auto* w = m.mutable_graph()->mutable_initializer(0);
        w->clear_float_data();
        w->set_data_location(onnx::TensorProto::EXTERNAL);
        auto* kv = w->add_external_data();
        kv->set_key("location");
        kv->set_value(location);
        auto* len = w->add_external_data();
        len->set_key("length");
        len->set_value(length);
        return error_of(bytes_of(m), (dir / "model").string());
    };
    EXPECT_EQ(with_location("weights.bin"), "");
    EXPECT_HAS(with_location("../secret.bin"), "leaves the model's folder");
    EXPECT_HAS(with_location((dir / "secret.bin").string()), "absolute path");
    EXPECT_HAS(with_location("missing.bin"), "missing");
    EXPECT_HAS(with_location("weights.bin", "4800"), "truncated");
    fs::create_symlink(dir / "secret.bin", dir / "model" / "link.bin");
    EXPECT_HAS(with_location("link.bin"), "outside the model's folder");
    fs::remove_all(dir);
}

TEST(OnnxImport, ShapeSubgraphsFoldIntoAReshape) {
    // torch's x.view(x.size(0), -1): Shape -> Gather(0) -> Unsqueeze -> Concat([.., -1]) -> Reshape.
    onnx::ModelProto m;
    m.add_opset_import()->set_version(13);
    auto* g = m.mutable_graph();
    value_info(g->add_input(), "x", {-1, 2, 3, 4});
    value_info(g->add_output(), "y", {-1, 24});
    onnx::TensorProto zero, minus_one, axes;
    for (auto* t : {&zero, &minus_one, &axes}) t->set_data_type(onnx::TensorProto::INT64);
    zero.set_name("zero");
    zero.add_int64_data(0);
    axes.set_name("axes");
    axes.add_dims(1);
    axes.add_int64_data(0);
    minus_one.set_name("minus_one");
    minus_one.add_dims(1);
    minus_one.add_int64_data(-1);
    *g->add_initializer() = zero;
    *g->add_initializer() = axes;
    *g->add_initializer() = minus_one;
    node(g, "Relu", "r", {"x"}, {"rx"});
    node(g, "Shape", "s", {"rx"}, {"shape"});
    node(g, "Gather", "g", {"shape", "zero"}, {"n"});
    node(g, "Unsqueeze", "u", {"n", "axes"}, {"n1"});
    int_attr(node(g, "Concat", "c", {"n1", "minus_one"}, {"target"}), "axis", 0);
    node(g, "Reshape", "reshape", {"rx", "target"}, {"y"});
    const onnx_import::Imported im = import_bytes(bytes_of(m), "view.onnx", "");
    ASSERT_EQ(im.layers.size(), 2u);
    EXPECT_EQ(im.layers[1].type, "reshape");
    EXPECT_HAS(im.layers_toml, "shape = [24]");
    EXPECT_EQ(im.output_sample, (Shape{24}));
}

// Structural damage a byte flip rarely makes: nodes losing inputs or outputs, inputs renamed,
// op types swapped among the supported ones, attributes emptied. An Error or a model each time.
TEST(OnnxImport, DamagedGraphsAreErrorsNeverCrashes) {
    const char* ops[] = {"Conv", "Gemm", "MatMul", "Add", "BatchNormalization", "Relu", "MaxPool", "AveragePool",
                         "GlobalAveragePool", "Flatten", "Reshape", "Concat", "Softmax", "LogSoftmax", "Identity",
                         "Dropout", "Constant", "Shape", "Gather", "Unsqueeze", "Squeeze", "Cast"};
    std::mt19937_64 rng(11);
    onnx::ModelProto base = mlp();
    int errors = 0;
    for (int trial = 0; trial < 3000; ++trial) {
        onnx::ModelProto m = base;
        auto* g = m.mutable_graph();
        auto* n = g->mutable_node(static_cast<int>(rng() % 2));
        switch (rng() % 6) {
        case 0: n->clear_input(); break;
        case 1: n->clear_output(); break;
        case 2: n->set_op_type(ops[rng() % std::size(ops)]); break;
        case 3:
            if (n->input_size()) {
                const std::string renamed(rng() % 2 ? 0 : 1, 'y');  // "" or "y"
                *n->mutable_input(static_cast<int>(rng() % n->input_size())) = renamed;
            }
            break;
        case 4: n->clear_attribute(); n->set_op_type(ops[rng() % std::size(ops)]); break;
        default: {
            auto* a = n->add_attribute();
            a->set_name(rng() % 2 ? "axis" : "axes");
            a->set_type(onnx::AttributeProto::INTS);
            for (int k = 0; k < 3; ++k) a->add_ints(static_cast<int64_t>(rng() % 7) - 3);
            n->set_op_type(ops[rng() % std::size(ops)]);
        }
        }
        errors += !error_of(bytes_of(m)).empty();
    }
    EXPECT_GT(errors, 1000);
}

// torch exports AvgPool2d(padding=p) as Pad then AveragePool: a zero Pad of H and W folds into the
// padding of the Conv or AveragePool reading it; any other reader (MaxPool: -inf, not zeros) is refused.
// ceil_mode = 1 is floor mode where the windows tile the padded input exactly (SqueezeNet's 3x3
// stride-2 pools on 109x109): imported; where it would add a partial window, refused with both sizes.
TEST(OnnxImport, CeilModePoolingImportsWhereItIsFloorModeAndIsRefusedElsewhere) {
    auto model = [](int64_t size, const std::string& op) {
        onnx::ModelProto m;
        m.add_opset_import()->set_version(13);
        auto* g = m.mutable_graph();
        value_info(g->add_input(), "x", {1, 2, size, size});
        value_info(g->add_output(), "y", {});
        auto* p = node(g, op, "/pool/" + op, {"x"}, {"y"});
        ints_attr(p, "kernel_shape", {3, 3});
        ints_attr(p, "strides", {2, 2});
        int_attr(p, "ceil_mode", 1);
        return bytes_of(m);
    };
    for (const std::string op : {"MaxPool", "AveragePool"}) {
        const onnx_import::Imported ok = import_bytes(model(109, op), "ceil.onnx", "");
        EXPECT_EQ(ok.output_sample, (Shape{2, 54, 54})) << op;
        const std::string e = error_of(model(112, op));
        EXPECT_HAS(e, op + " node '/pool/" + op + "'");
        EXPECT_HAS(e, "ceil_mode = 1 gives a 56x56 output for input [1, 2, 112, 112]");
        EXPECT_HAS(e, "round down to 55x55");
    }
}

// torch.cat([x], 1) (DenseNet's first layer of each block) exports a Concat of one input: the
// tensor itself, no layer.
TEST(OnnxImport, AConcatOfOneTensorIsThatTensor) {
    onnx::ModelProto m;
    m.add_opset_import()->set_version(13);
    auto* g = m.mutable_graph();
    value_info(g->add_input(), "x", {-1, 3, 4, 4});
    value_info(g->add_output(), "y", {});
    int_attr(node(g, "Concat", "/cat/Concat", {"x"}, {"c"}), "axis", 1);
    node(g, "Relu", "/relu/Relu", {"c"}, {"y"});
    const onnx_import::Imported one = import_bytes(bytes_of(m), "cat.onnx", "");
    EXPECT_EQ(one.layers_toml.find("concat"), std::string::npos) << one.layers_toml;
    EXPECT_HAS(one.layers_toml, "type = \"relu\"");
    EXPECT_EQ(one.output_sample, (Shape{3, 4, 4}));
    g->mutable_node(0)->mutable_attribute(0)->set_i(0);  // the batch axis is refused, one input or several
    EXPECT_HAS(error_of(bytes_of(m)), "joins along the batch axis");
}

// x.mean([2, 3]) (MNASNet's head): ReduceMean over H and W is a global average pool, [N, C]
// without keepdims and [N, C, 1, 1] with it; over other axes of a map it is refused.
TEST(OnnxImport, ReduceMeanOverTheMapIsAGlobalAveragePool) {
    auto model = [](std::vector<int64_t> axes, int64_t keepdims, bool relu) {
        onnx::ModelProto m;
        m.add_opset_import()->set_version(13);
        auto* g = m.mutable_graph();
        value_info(g->add_input(), "x", {-1, 3, 5, 4});
        value_info(g->add_output(), "y", {});
        auto* r = node(g, "ReduceMean", "/mean/ReduceMean", {"x"}, {relu ? "m" : "y"});
        ints_attr(r, "axes", axes);
        int_attr(r, "keepdims", keepdims);
        if (relu) node(g, "Relu", "/relu/Relu", {"m"}, {"y"});
        return bytes_of(m);
    };
    const onnx_import::Imported flat = import_bytes(model({2, 3}, 0, false), "mean.onnx", "");
    EXPECT_HAS(flat.layers_toml, "type = \"global_avgpool\"");
    EXPECT_EQ(flat.output_sample, (Shape{3}));
    const onnx_import::Imported kept = import_bytes(model({-1, -2}, 1, true), "mean.onnx", "");
    EXPECT_HAS(kept.layers_toml, "type = \"global_avgpool\"");
    EXPECT_EQ(kept.output_sample, (Shape{3, 1, 1}));
    const std::string e = error_of(model({1, 2}, 1, false));
    EXPECT_HAS(e, "ReduceMean node '/mean/ReduceMean'");
    EXPECT_HAS(e, "axes [2, 3]");
}

TEST(OnnxImport, AZeroPadFoldsIntoTheConvOrAveragePoolReadingIt) {
    auto model = [](const std::string& reader) {
        onnx::ModelProto m;
        m.add_opset_import()->set_version(13);
        auto* g = m.mutable_graph();
        value_info(g->add_input(), "x", {1, 1, 8, 8});
        value_info(g->add_output(), "y", {1, 1, 8, 8});
        onnx::TensorProto pads;
        pads.set_name("pads");
        pads.set_data_type(onnx::TensorProto::INT64);
        pads.add_dims(8);
        for (int64_t v : {0, 0, 1, 1, 0, 0, 1, 1}) pads.add_int64_data(v);
        *g->add_initializer() = pads;
        node(g, "Pad", "/pool/Pad", {"x", "pads"}, {"padded"});
        if (reader == "Conv") {
            *g->add_initializer() = floats("conv.weight", {1, 1, 3, 3});
            node(g, "Conv", "/conv/Conv", {"padded", "conv.weight"}, {"y"});
        } else {
            auto* p = node(g, reader, std::string("/pool/").append(reader), {"padded"}, {"y"});
            if (reader != "Relu") ints_attr(p, "kernel_shape", {3, 3});
        }
        return bytes_of(m);
    };
    const onnx_import::Imported conv = import_bytes(model("Conv"), "pad.onnx", "");
    EXPECT_HAS(conv.layers_toml, "padding = 1");
    EXPECT_EQ(conv.output_sample, (Shape{1, 8, 8}));
    const onnx_import::Imported avg = import_bytes(model("AveragePool"), "pad.onnx", "");
    EXPECT_HAS(avg.layers_toml, "padding = 1\ncount_include_pad = true");
    const std::string e = error_of(model("MaxPool"));
    EXPECT_HAS(e, "MaxPool node '/pool/MaxPool'");
    EXPECT_HAS(e, "-inf");
    EXPECT_HAS(error_of(model("Relu")), "reads the output of a Pad node");
}

TEST(Npy, RoundTripsAndRefusesWhatItCannotRead) {
    const std::string path = (fs::path(testing::TempDir()) / "xylem_npy_test.npy").string();
    const std::vector<float> v{1, 2, 3, 4, 5, 6};
    npy::write(path, {2, 3}, v.data());
    const npy::Array a = npy::read(path);
    EXPECT_EQ(a.shape, (Shape{2, 3}));
    EXPECT_EQ(a.values, v);
    std::ifstream in(path, std::ios::binary);
    const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    EXPECT_EQ(bytes.size() % 64, 24u);  // header padded to 64 bytes, then 6 floats
    EXPECT_THROW(npy::parse(bytes.substr(0, bytes.size() - 1), "x.npy"), Error);  // truncated data
    EXPECT_THROW(npy::parse(bytes + "x", "x.npy"), Error);                         // trailing bytes
    std::string f8 = bytes;
    f8.replace(f8.find("<f4"), 3, "<f8");
    EXPECT_THROW(npy::parse(f8, "x.npy"), Error);
    // int32 token ids: the same 24 bytes are 6 int32s (the float bits); as int64 they are 3, of
    // which the first (2.0f's bits over 1.0f's) is outside int32's range.
    std::string i4 = bytes;
    i4.replace(i4.find("<f4"), 3, "<i4");
    const npy::Array ids = npy::parse(i4, "x.npy");
    EXPECT_TRUE(ids.integer);
    ASSERT_EQ(ids.tokens.size(), 6u);
    EXPECT_EQ(ids.tokens[0], 0x3F800000);  // 1.0f's bits
    std::string i8 = bytes;
    i8.replace(i8.find("<i4") == std::string::npos ? i8.find("<f4") : i8.find("<i4"), 3, "<i8");
    i8.replace(i8.find("(2,3)"), 5, "(1,3)");
    EXPECT_THROW(npy::parse(i8, "x.npy"), Error);
    std::string fortran = bytes;
    fortran.replace(fortran.find("False"), 5, "True ");
    EXPECT_THROW(npy::parse(fortran, "x.npy"), Error);
    EXPECT_THROW(npy::parse("garbage", "x.npy"), Error);
    fs::remove(path);
}

}  // namespace
}  // namespace xylem
