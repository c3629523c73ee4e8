// ONNX graphs of several inputs and outputs: imported into one Net with named model inputs and
// outputs, run on every backend against a float64 reference (both outputs, one of them also read
// inside the graph), written as a config ([model] inputs / outputs) that builds the same model,
// and through `xylem run --input a.npy --input b.npy` (one .npy per output). The graph-level
// mistakes (inputs of different batches, an output that is an input, two outputs of one tensor,
// the wrong number of --input files) are clear errors; the data-fed commands say they feed one
// input; `xylem export` refuses a model of two and exports one whose input and output are named.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>

#include "e2e/cli_run.h"
#include "onnx/onnx_pb.h"
#include "onnx_builders.h"
#include "support/backends.h"
#include "support/files.h"
#include "xylem/error.h"
#include "xylem/onnx/export.h"
#include "xylem/onnx/importer.h"
#include "xylem/onnx/npy.h"
#include "xylem/train/model_builder.h"

namespace xylem::test {
namespace {
namespace fs = std::filesystem;

constexpr int64_t kIn = 4, kHidden = 3;

// a, b [N, 4]:  h = a W^T + c (output "h", also read below);  y = relu(h + b V^T) (output "y").
// The outputs are listed y first: the graph's order, not the nodes'.
onnx::ModelProto two_in_two_out(int64_t batch_a = -1, int64_t batch_b = -1) {
    onnx::ModelProto m;
    m.set_ir_version(8);
    m.set_producer_name("xylem-test");
    auto* o = m.add_opset_import();
    o->set_domain("");
    o->set_version(17);
    auto* g = m.mutable_graph();
    value_info(g->add_input(), "a", {batch_a, kIn});
    value_info(g->add_input(), "b:0", {batch_b, kIn});  // a name a layer cannot have: cleaned to "b_0"
    value_info(g->add_output(), "y", {-1, kHidden});
    value_info(g->add_output(), "h", {-1, kHidden});
    std::mt19937 rng(5);
    *g->add_initializer() = random_floats("enc.weight", {kHidden, kIn}, rng, -1.f, 1.f);
    *g->add_initializer() = random_floats("enc.bias", {kHidden}, rng, -1.f, 1.f);
    *g->add_initializer() = random_floats("side.weight", {kHidden, kIn}, rng, -1.f, 1.f);
    int_attr(node(g, "Gemm", "/enc/Gemm", {"a", "enc.weight", "enc.bias"}, {"h"}), "transB", 1);
    int_attr(node(g, "Gemm", "/side/Gemm", {"b:0", "side.weight"}, {"hb"}), "transB", 1);
    node(g, "Add", "/Add", {"h", "hb"}, {"s"});
    node(g, "Relu", "/Relu", {"s"}, {"y"});
    return m;
}

// The float64 reference of both outputs for a, b [n, 4].
struct Reference {
    std::vector<double> y, h;
};
Reference reference(const onnx::ModelProto& m, const std::vector<float>& a, const std::vector<float>& b, int64_t n) {
    std::map<std::string, const onnx::TensorProto*> init;
    for (const auto& t : m.graph().initializer()) init[t.name()] = &t;
    const auto& w = *init.at("enc.weight");
    const auto& c = *init.at("enc.bias");
    const auto& v = *init.at("side.weight");
    Reference r;
    for (int64_t i = 0; i < n; ++i)
        for (int64_t j = 0; j < kHidden; ++j) {
            double h = c.float_data(static_cast<int>(j)), hb = 0;
            for (int64_t k = 0; k < kIn; ++k) {
                h += static_cast<double>(a[i * kIn + k]) * w.float_data(static_cast<int>(j * kIn + k));
                hb += static_cast<double>(b[i * kIn + k]) * v.float_data(static_cast<int>(j * kIn + k));
            }
            r.h.push_back(h);
            r.y.push_back(std::max(0.0, h + hb));
        }
    return r;
}

double max_error(const std::vector<float>& got, const std::vector<double>& want) {
    if (got.size() != want.size()) return INFINITY;
    double e = 0;
    for (size_t i = 0; i < got.size(); ++i) e = std::max(e, std::fabs(static_cast<double>(got[i]) - want[i]));
    return e;
}

std::vector<float> uniform(size_t n, uint32_t seed) {
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> u(-1.f, 1.f);
    std::vector<float> v(n);
    for (float& x : v) x = u(rng);
    return v;
}

TEST(OnnxSeveralInputs, ImportedAsNamedInputsAndOutputs) {
    const onnx_import::Imported m = onnx_import::import_bytes(bytes_of(two_in_two_out()), "two.onnx", "");
    ASSERT_EQ(m.inputs.size(), 2u);
    EXPECT_EQ(m.inputs[0].name, "a");
    EXPECT_EQ(m.inputs[0].node, "a");
    EXPECT_EQ(m.inputs[1].name, "b:0");
    EXPECT_EQ(m.inputs[1].node, "b_0");
    EXPECT_EQ(m.inputs[1].sample, (Shape{kIn}));
    ASSERT_EQ(m.outputs.size(), 2u);
    EXPECT_EQ(m.outputs[0].name, "y");
    EXPECT_EQ(m.outputs[1].name, "h");
    EXPECT_EQ(m.outputs[1].node, "enc");
    EXPECT_EQ(m.outputs[0].sample, (Shape{kHidden}));
    const RunConfig c = onnx_import::run_config(m);
    EXPECT_EQ(c.model_inputs, (std::vector<std::string>{"a", "b_0"}));
    EXPECT_EQ(c.model_outputs, (std::vector<std::string>{m.outputs[0].node, "enc"}));
    EXPECT_HAS(onnx_import::config_text(m), "inputs = [\"a\", \"b_0\"]");
}

class OnnxSeveralInputsOnBackends : public BackendTest {};
XYLEM_INSTANTIATE_OVER_BACKENDS(OnnxSeveralInputsOnBackends);

// Built from the imported config, as `xylem run` and `xylem import` build it: both outputs match
// float64 on every backend, and the output that is also read inside the graph is not fused away.
TEST_P(OnnxSeveralInputsOnBackends, BothOutputsMatchFloat64) {
    const onnx::ModelProto proto = two_in_two_out();
    const onnx_import::Imported m = onnx_import::import_bytes(bytes_of(proto), "two.onnx", "");
    const RunConfig c = onnx_import::run_config(m);
    constexpr int64_t n = 5;
    auto net = train::build_inference_model(c, dev(), m.input_samples(), n);
    onnx_import::load_parameters(*net, m);
    const std::vector<float> a = uniform(n * kIn, 1), b = uniform(n * kIn, 2);
    Tensor ta = upload(dev(), {n, kIn}, a), tb = upload(dev(), {n, kIn}, b);
    net->forward(dev(), {&ta, &tb}, false);
    const Reference want = reference(proto, a, b, n);
    ASSERT_EQ(net->output_count(), 2u);
    EXPECT_EQ(net->output(0).shape(), (Shape{n, kHidden}));
    EXPECT_LT(max_error(net->output(0).to_vector(), want.y), 1e-5);
    EXPECT_LT(max_error(net->output(1).to_vector(), want.h), 1e-5);
}

// A graph input no node reads (ONNX allows it; ONNX Runtime still wants it fed) is a model input
// no layer reads: fed, checked for shape, and ignored.
TEST_P(OnnxSeveralInputsOnBackends, AnUnreadInputIsFedAndIgnored) {
    onnx::ModelProto proto = two_in_two_out();
    value_info(proto.mutable_graph()->add_input(), "unused", {-1, 2, 2});
    const onnx_import::Imported m = onnx_import::import_bytes(bytes_of(proto), "three.onnx", "");
    ASSERT_EQ(m.inputs.size(), 3u);
    const RunConfig c = onnx_import::run_config(m);
    constexpr int64_t n = 3;
    auto net = train::build_inference_model(c, dev(), std::vector<Shape>{{kIn}, {kIn}, {2, 2}}, n);
    onnx_import::load_parameters(*net, m);
    const std::vector<float> a = uniform(n * kIn, 7), b = uniform(n * kIn, 8);
    Tensor ta = upload(dev(), {n, kIn}, a), tb = upload(dev(), {n, kIn}, b), tu = upload(dev(), {n, 2, 2}, uniform(n * 4, 9));
    net->forward(dev(), {&ta, &tb, &tu}, false);
    EXPECT_LT(max_error(net->output(0).to_vector(), reference(proto, a, b, n).y), 1e-5);
    Tensor wrong = upload(dev(), {n, 4}, uniform(n * 4, 10));
    EXPECT_THROW(net->forward(dev(), {&ta, &tb, &wrong}, false), Error);
}

// xylem export writes what xylem trains, one input and one output: a model of two is refused
// naming the counts; a model whose one input and output the config names exports and imports
// back to the same outputs.
TEST_P(OnnxSeveralInputsOnBackends, ExportTakesOneInputAndOneOutputByAnyName) {
    const onnx_import::Imported m = onnx_import::import_bytes(bytes_of(two_in_two_out()), "two.onnx", "");
    const RunConfig two = onnx_import::run_config(m);
    auto net = train::build_inference_model(two, dev(), std::vector<Shape>{{kIn}, {kIn}}, 2);
    onnx_export::Source src{net.get(), &two.layers, {kIn}, "two"};
    try {
        onnx_export::export_bytes(src);
        ADD_FAILURE() << "a model of two inputs was exported";
    } catch (const Error& e) {
        EXPECT_HAS(std::string(e.what()), "the model has 2 input(s) and 2 output(s); xylem export writes models of one of each");
    }
    const RunConfig one = parse_config(R"(
[model]
inputs = ["img"]
outputs = ["fc2"]
[[model.layers]]
type = "linear"
name = "fc1"
out = 5
[[model.layers]]
type = "tanh"
name = "t"
[[model.layers]]
type = "linear"
name = "fc2"
out = 3
)", "one.toml");
    auto model = train::build_model(one);
    model->build(dev(), Shape{kIn}, 3);
    onnx_export::Source s1{model.get(), &one.layers, {kIn}, "one"};
    const onnx_import::Imported back = onnx_import::import_bytes(onnx_export::export_bytes(s1), "one.onnx", "");
    ASSERT_EQ(back.inputs.size(), 1u);
    auto again = train::build_inference_model(onnx_import::run_config(back), dev(), Shape{kIn}, 4);
    onnx_import::load_parameters(*again, back);
    Tensor x = upload(dev(), {4, kIn}, uniform(4 * kIn, 9));
    const std::vector<float> want = model->forward(dev(), x, false).to_vector();
    const std::vector<float> got = again->forward(dev(), x, false).to_vector();
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-5) << i;
}

TEST(OnnxSeveralInputs, GraphMistakesAreClearErrors) {
    // Fixed batches that differ: the same samples go through every input.
    EXPECT_HAS(error_of(bytes_of(two_in_two_out(2, 3))),
               "input 'b:0' has batch 3, input 'a' 2 (xylem feeds every input the same batch)");
    // An output that is a graph input runs no layer.
    onnx::ModelProto passthrough = two_in_two_out();
    value_info(passthrough.mutable_graph()->add_output(), "a", {-1, kIn});
    EXPECT_HAS(error_of(bytes_of(passthrough)), "the graph's output 'a' is a graph input: there is no layer to run");
    // Two outputs of one tensor (an Identity between them).
    onnx::ModelProto twice = two_in_two_out();
    node(twice.mutable_graph(), "Identity", "/copy", {"y"}, {"y_copy"});
    value_info(twice.mutable_graph()->add_output(), "y_copy", {-1, kHidden});
    EXPECT_HAS(error_of(bytes_of(twice)), "the graph's outputs 'y' and 'y_copy' are one tensor in xylem's model");
    onnx::ModelProto listed_twice = two_in_two_out();
    value_info(listed_twice.mutable_graph()->add_output(), "h", {-1, kHidden});
    EXPECT_HAS(error_of(bytes_of(listed_twice)), "the graph lists output 'h' twice");
}

// `xylem run` with one --input per graph input: every output as <name>.npy; the wrong number
// of files or of samples is an error before anything runs; `xylem import` writes the config
// and says how to run it, and `xylem eval` on that config says it feeds one input.
TEST(OnnxSeveralInputs, RunTakesAnInputPerGraphInputAndWritesEveryOutput) {
    if (!backend_named("native")) GTEST_SKIP() << "no native plugin";
    const fs::path dir = fs::temp_directory_path() / ("xylem_onnx_multi_io_" + std::to_string(::getpid()));
    fs::remove_all(dir);
    fs::create_directories(dir);
    const onnx::ModelProto proto = two_in_two_out();
    std::ofstream(dir / "two.onnx", std::ios::binary) << bytes_of(proto);
    constexpr int64_t n = 6;
    const std::vector<float> a = uniform(n * kIn, 3), b = uniform(n * kIn, 4), b_short = uniform((n - 1) * kIn, 5);
    npy::write((dir / "a.npy").string(), {n, kIn}, a.data());
    npy::write((dir / "b.npy").string(), {n, kIn}, b.data());
    npy::write((dir / "b5.npy").string(), {n - 1, kIn}, b_short.data());
    const std::string model = (dir / "two.onnx").string();
    const std::string ins = " --input " + (dir / "a.npy").string() + " --input " + (dir / "b.npy").string();

    auto r = run_cli("run " + model + ins + " --backend native --out " + (dir / "out").string());
    ASSERT_EQ(r.code, 0) << r.out << r.err;
    EXPECT_HAS(r.out, "output 'y' [6, 3] -> ");
    EXPECT_HAS(r.out, "output 'h' [6, 3] -> ");
    const Reference want = reference(proto, a, b, n);
    const npy::Array y = npy::read((dir / "out" / "y.npy").string()), h = npy::read((dir / "out" / "h.npy").string());
    EXPECT_EQ(y.shape, (Shape{n, kHidden}));
    EXPECT_LT(max_error(y.values, want.y), 1e-5);
    EXPECT_LT(max_error(h.values, want.h), 1e-5);

    // By name, in any order: the same outputs.
    r = run_cli("run " + model + " --input b:0=" + (dir / "b.npy").string() + " --input a=" + (dir / "a.npy").string() +
                " --backend native --out " + (dir / "named").string());
    ASSERT_EQ(r.code, 0) << r.out << r.err;
    EXPECT_EQ(npy::read((dir / "named" / "y.npy").string()).values, y.values);
    r = run_cli("run " + model + " --input b:0=" + (dir / "b.npy").string() + " --input " + (dir / "a.npy").string());
    EXPECT_EQ(r.code, 2);
    EXPECT_HAS(r.err, "--input: give every file as NAME=FILE (the model's inputs: 'a', 'b:0') or none");
    r = run_cli("run " + model + " --input a=" + (dir / "a.npy").string() + " --input a=" + (dir / "b.npy").string());
    EXPECT_EQ(r.code, 2);
    EXPECT_HAS(r.err, "--input: 'a' is given twice");

    r = run_cli("run " + model + " --input " + (dir / "a.npy").string() + " --backend native");
    EXPECT_EQ(r.code, 2);
    EXPECT_HAS(r.err, "the model takes 2 input(s) ('a', 'b:0', in this order), 1 --input file(s) given");
    r = run_cli("run " + model + " --input " + (dir / "a.npy").string() + " --input " + (dir / "b5.npy").string() +
                " --backend native");
    EXPECT_EQ(r.code, 1);
    EXPECT_HAS(r.err, "b5.npy: 5 samples, ");
    EXPECT_HAS(r.err, "a.npy holds 6 (every input holds the same samples)");
    // Another command takes one --input.
    r = run_cli("predict --config c.toml --checkpoint k.safetensors --input x --input y");
    EXPECT_EQ(r.code, 2);
    EXPECT_HAS(r.err, "--input is given twice; predict reads one input file");

    r = run_cli("import " + model + " --out " + (dir / "imp").string());
    ASSERT_EQ(r.code, 0) << r.out << r.err;
    EXPECT_HAS(r.out, "the model takes 2 inputs: run it with xylem run");
    const std::string config = read_file(dir / "imp" / "two.toml");
    EXPECT_HAS(config, "[model]\ninputs = [\"a\", \"b_0\"]\noutputs = [");
    r = run_cli("eval --config " + (dir / "imp" / "two.toml").string() + " --checkpoint " +
                (dir / "imp" / "two.safetensors").string() + " --backend native");
    EXPECT_EQ(r.code, 1);
    EXPECT_HAS(r.err, "model takes 2 input(s) (a, b_0), given 1: xylem's datasets feed models of one input");
    fs::remove_all(dir);
}

// Token ids outside an embedding's vocabulary are refused before the model runs, naming the file,
// the id, its place and the layer (the op's own check said "native: gather_rows: index 10 at
// position 4 is out of range [0, 10)", naming neither), and no output is written.
TEST(OnnxSeveralInputs, RunRefusesTokenIdsOutsideTheVocabulary) {
    if (!backend_named("native")) GTEST_SKIP() << "no native plugin";
    const fs::path dir = fs::temp_directory_path() / ("xylem_onnx_token_ids_" + std::to_string(::getpid()));
    fs::remove_all(dir);
    fs::create_directories(dir);
    onnx::ModelProto e;
    e.set_ir_version(8);
    e.add_opset_import()->set_version(17);
    auto* g = e.mutable_graph();
    value_info(g->add_input(), "ids", {-1, 3});
    g->mutable_input(0)->mutable_type()->mutable_tensor_type()->set_elem_type(onnx::TensorProto::INT64);
    value_info(g->add_output(), "y", {-1, 3, 4});
    *g->add_initializer() = floats("wte.weight", {10, 4});
    node(g, "Gather", "/wte/Gather", {"wte.weight", "ids"}, {"y"});
    std::ofstream(dir / "emb.onnx", std::ios::binary) << bytes_of(e);
    auto write_ids = [&](const std::string& name, const std::vector<int64_t>& ids) {  // [2, 3] int64
        const std::string h = "{'descr': '<i8', 'fortran_order': False, 'shape': (2, 3), }\n";
        std::string b("\x93NUMPY\x01\x00", 8);
        b += static_cast<char>(h.size() & 0xff);
        b += static_cast<char>(h.size() >> 8);
        b += h;
        b.append(reinterpret_cast<const char*>(ids.data()), ids.size() * sizeof(int64_t));
        std::ofstream(dir / name, std::ios::binary) << b;
    };
    write_ids("ok.npy", {0, 1, 2, 9, 8, 7});
    write_ids("big.npy", {0, 1, 2, 9, 10, 7});
    write_ids("neg.npy", {0, -1, 2, 9, 8, 7});
    const std::string model = (dir / "emb.onnx").string();
    auto r = run_cli("run " + model + " --input " + (dir / "ok.npy").string() + " --backend native --out " + (dir / "ok").string());
    ASSERT_EQ(r.code, 0) << r.out << r.err;
    for (const auto& [file, what] : {std::pair{"big.npy", "token id 10 at flat index 4"}, {"neg.npy", "token id -1 at flat index 1"}}) {
        const fs::path out = dir / ("out_" + std::string(file));
        r = run_cli("run " + model + " --input " + (dir / file).string() + " --backend native --out " + out.string());
        EXPECT_EQ(r.code, 1) << r.out << r.err;
        EXPECT_HAS(r.err, (dir / file).string() + ": " + what + " is outside the vocabulary of model layer ");
        EXPECT_HAS(r.err, "(embedding), [0, 10)");
        EXPECT_FALSE(fs::exists(out)) << "an output was written";
    }
    fs::remove_all(dir);
}

}  // namespace
}  // namespace xylem::test
