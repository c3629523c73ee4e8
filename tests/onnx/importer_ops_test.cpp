// The ONNX importer's op mappings (onnx/ops.cpp, sequence.cpp, patterns.cpp): each op or torch
// pattern becomes the xylem layers it should, and its hostile forms are refused naming the node.
// Models built with ONNX's own protobuf classes (onnx_builders.h); the file-level checks are
// importer_test.cpp.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>
#include <string>

#include "onnx/onnx_pb.h"
#include "onnx_builders.h"
#include "xylem/error.h"
#include "xylem/onnx/importer.h"

namespace xylem::test {
namespace {
using onnx_import::import_bytes;

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
    EXPECT_EQ(m.outputs[0].sample, (Shape{5, 4}));
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
    EXPECT_EQ(r0.outputs[0].sample, (Shape{12}));
    const onnx_import::Imported r1 = import_bytes(bytes_of(one_node("Reshape", {-1, 6, 2}, {ints("sh", {-1, 6, 0})})), "m", "");
    EXPECT_EQ(r1.outputs[0].sample, (Shape{6, 2}));  // the batch inferred, the 0 copying axis 2
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
    EXPECT_EQ(ok.outputs[0].sample, (Shape{1, 2}));
    EXPECT_HAS(error_of(bytes_of(one_node("Slice", {-1, 6, 2}, {ints("st", {0}), ints("en", {1}), ints("ax", {0})}))), "slices the batch axis");
    onnx::ModelProto gaps = one_node("Gather", {-1, 6, 2}, {ints("i", {0, 2})});
    int_attr(gaps.mutable_graph()->mutable_node(0), "axis", 1);
    EXPECT_HAS(error_of(bytes_of(gaps)), "not a run of consecutive");
    EXPECT_HAS(error_of(bytes_of(one_node("Gather", {-1, 6, 2}, {ints("i", {0, 1})}))), "gathers along the batch axis");
    onnx::ModelProto gather = one_node("Gather", {-1, 6, 2}, {ints("i", {-1}, true)});
    int_attr(gather.mutable_graph()->mutable_node(0), "axis", 1);
    const onnx_import::Imported last = import_bytes(bytes_of(gather), "m", "");
    EXPECT_EQ(last.outputs[0].sample, (Shape{2}));  // y[:, -1]: slice then reshape
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
    EXPECT_TRUE(m.inputs[0].tokens);
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
    EXPECT_EQ(ok.outputs[0].sample, (Shape{3, 4}));
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
    EXPECT_EQ(ok.outputs[0].sample, (Shape{3, 4}));
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
    EXPECT_EQ(silu.outputs[0].sample, (Shape{3, 4, 5}));
    for (bool first : {false, true}) {
        const onnx_import::Imported se = import_bytes(model("channel", first), "m", "");
        EXPECT_EQ(se.layers.back().type, "mul");
        EXPECT_EQ(se.layers.back().inputs.at(0), "input") << "the map goes first";
        EXPECT_EQ(se.outputs[0].sample, (Shape{3, 4, 5}));
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
    EXPECT_EQ(t.outputs[0].sample, (Shape{3, 2, 4, 4}));
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
    EXPECT_TRUE(m.inputs[0].tokens);
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
    // Heads of a size whose product with the head count overflows (the fuzzer's find): refused.
    onnx::ModelProto heads = gpt;
    *heads.mutable_graph()->add_initializer() = ints("huge_heads", {0, 0, int64_t{1} << 62, 4});
    onnx::NodeProto* reshape = nullptr;
    for (auto& n : *heads.mutable_graph()->mutable_node())
        if (n.op_type() == "Reshape" && n.name().find("attn") != std::string::npos && !reshape) reshape = &n;
    ASSERT_NE(reshape, nullptr);
    reshape->set_input(1, std::string("huge_heads"));
    EXPECT_HAS(error_of(bytes_of(heads)), "not [N, T, heads, head size]");
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
        EXPECT_EQ(ok.outputs[0].sample, (Shape{2, 54, 54})) << op;
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
    EXPECT_EQ(one.outputs[0].sample, (Shape{3, 4, 4}));
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
    EXPECT_EQ(flat.outputs[0].sample, (Shape{3}));
    const onnx_import::Imported kept = import_bytes(model({-1, -2}, 1, true), "mean.onnx", "");
    EXPECT_HAS(kept.layers_toml, "type = \"global_avgpool\"");
    EXPECT_EQ(kept.outputs[0].sample, (Shape{3, 1, 1}));
    const std::string e = error_of(model({1, 2}, 1, false));
    EXPECT_HAS(e, "ReduceMean node '/mean/ReduceMean'");
    EXPECT_HAS(e, "axes [2, 3]");
}

// torch exports AvgPool2d(padding=p) as Pad then AveragePool: a zero Pad of H and W folds into the
// padding of the Conv or AveragePool reading it; any other reader (MaxPool: -inf, not zeros) is refused.
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
    EXPECT_EQ(conv.outputs[0].sample, (Shape{1, 8, 8}));
    const onnx_import::Imported avg = import_bytes(model("AveragePool"), "pad.onnx", "");
    EXPECT_HAS(avg.layers_toml, "padding = 1\ncount_include_pad = true");
    const std::string e = error_of(model("MaxPool"));
    EXPECT_HAS(e, "MaxPool node '/pool/MaxPool'");
    EXPECT_HAS(e, "-inf");
    EXPECT_HAS(error_of(model("Relu")), "reads the output of a Pad node");
}

}  // namespace
}  // namespace xylem::test
