// The ONNX exporter (onnx/export.h): small models of every layer type with random weights are
// exported and read back through the importer to the same outputs on the native backend (ONNX
// Runtime's side is tests/onnx/check_export.py); the file's structure (opset, batch axis, names,
// op types) is checked for every model, and a layer type without a mapping is refused before
// anything is written.
#include "xylem/onnx/export.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <set>
#include <sstream>
#include <string>

#include "onnx/onnx_pb.h"
#include "support/backends.h"
#include "support/generated_docs.h"
#include "xylem/error.h"
#include "xylem/layers/elementwise.h"
#include "xylem/layers/registry.h"
#include "xylem/onnx/importer.h"
#include "xylem/train/model_builder.h"

namespace xylem::test {
namespace {
namespace fs = std::filesystem;

std::shared_ptr<Backend> native() {
    auto b = backend_named("native");
    if (!b) ADD_FAILURE() << "no native backend in " XYLEM_TEST_PLUGIN_DIR;
    return b;
}

// The config's model built on `dev` as train::build_model builds it (the training library is not linked here).
std::unique_ptr<Net> build(const RunConfig& c, Device& dev, const Shape& sample, int64_t vocab = 0) {
    auto net = train::build_model(c, vocab);  // as every command builds a config's model
    net->build(dev, sample, c.seed);
    return net;
}

// Random parameters and buffers (variances positive), so that nothing rests on an init's zeros and ones.
void randomize(Net& net, Device& dev, std::mt19937_64& rng) {
    std::uniform_real_distribution<float> u(-0.5f, 0.5f), pos(0.5f, 1.5f);
    for (Param* p : net.state()) {
        const bool variance = p->name.find("running_var") != std::string::npos;
        std::vector<float> v(static_cast<size_t>(p->value.numel()));
        for (float& x : v) x = variance ? pos(rng) : u(rng);
        p->value.upload_from(dev, v.data());
    }
}

struct Exported {
    RunConfig config;
    std::unique_ptr<Net> net;
    std::string bytes;
    onnx::ModelProto proto;
};

Exported export_config(const std::string& text, const Shape& sample, Device& dev, int64_t vocab = 0) {
    Exported e;
    e.config = parse_config(text, "model.toml");
    e.net = build(e.config, dev, sample, vocab);
    std::mt19937_64 rng(test_seed());
    randomize(*e.net, dev, rng);
    onnx_export::Source src;
    src.model = e.net.get();
    src.layers = &e.config.layers;
    src.input_sample = sample;
    src.name = "model";
    e.bytes = onnx_export::export_bytes(src);
    EXPECT_TRUE(e.proto.ParseFromString(e.bytes));
    return e;
}

std::multiset<std::string> op_types(const onnx::ModelProto& m) {
    std::multiset<std::string> ops;
    for (const onnx::NodeProto& n : m.graph().node()) ops.insert(n.op_type());
    return ops;
}

// An initializer's float values (raw_data holds them little-endian; copied out: no alignment assumed).
std::vector<float> floats_of(const onnx::TensorProto& t) {
    std::vector<float> v(t.raw_data().size() / sizeof(float));
    std::memcpy(v.data(), t.raw_data().data(), v.size() * sizeof(float));
    return v;
}

std::set<std::string> initializer_names(const onnx::ModelProto& m) {
    std::set<std::string> names;
    for (const onnx::TensorProto& t : m.graph().initializer()) names.insert(t.name());
    return names;
}

double rel_err(const std::vector<float>& got, const std::vector<float>& want) {
    if (got.size() != want.size()) return INFINITY;
    double diff = 0, ref = 0;
    for (size_t k = 0; k < got.size(); ++k) {
        diff = std::max(diff, std::fabs(static_cast<double>(got[k]) - want[k]));
        ref = std::max(ref, std::fabs(static_cast<double>(want[k])));
    }
    return std::isfinite(diff) ? diff / std::max(ref, 1e-30) : INFINITY;
}

// What every export holds: opset 17, the input and output with a symbolic "batch" first axis,
// and every parameter of the model as an initializer under its xylem name unless `renamed`
// (recurrent layers' reordered gates) says otherwise.
void expect_structure(const Exported& e, const Shape& sample, bool tokens, const std::set<std::string>& renamed = {}) {
    const onnx::ModelProto& m = e.proto;
    ASSERT_EQ(m.opset_import_size(), 1);
    EXPECT_EQ(m.opset_import(0).version(), 17);
    ASSERT_EQ(m.graph().input_size(), 1);
    ASSERT_EQ(m.graph().output_size(), 1);
    const auto& in = m.graph().input(0).type().tensor_type();
    EXPECT_EQ(in.elem_type(), tokens ? onnx::TensorProto::INT64 : onnx::TensorProto::FLOAT);
    ASSERT_EQ(in.shape().dim_size(), static_cast<int>(sample.size() + 1));
    EXPECT_EQ(in.shape().dim(0).dim_param(), "batch");
    for (size_t k = 0; k < sample.size(); ++k)
        EXPECT_EQ(in.shape().dim(static_cast<int>(k + 1)).dim_value(), sample[k]);
    const auto& out = m.graph().output(0).type().tensor_type().shape();
    EXPECT_EQ(out.dim(0).dim_param(), "batch");
    const Shape& os = e.net->output_sample_shape();
    ASSERT_EQ(out.dim_size(), static_cast<int>(os.size() + 1));
    for (size_t k = 0; k < os.size(); ++k) EXPECT_EQ(out.dim(static_cast<int>(k + 1)).dim_value(), os[k]);
    const std::set<std::string> inits = initializer_names(m);
    for (Param* p : e.net->state()) {
        bool is_renamed = false;
        for (const std::string& r : renamed) is_renamed |= p->name.find(r) != std::string::npos;
        if (!is_renamed) {
            EXPECT_TRUE(inits.count(p->name)) << "no initializer '" << p->name << "'";
        }
    }
    std::set<std::string> node_names;
    for (const onnx::NodeProto& n : m.graph().node()) EXPECT_TRUE(node_names.insert(n.name()).second) << n.name();
}

// Exports, re-imports and runs both models on native on the same random batch of 3: the outputs
// must agree to 1e-5 of the largest (float rounding only: the same layers run either way).
// `vocab` > 0: the model reads token ids in [0, vocab).
void expect_round_trip(const Exported& e, const Shape& sample, Device& dev, int64_t vocab = 0) {
    const onnx_import::Imported im = onnx_import::import_bytes(e.bytes, "exported.onnx", "");
    const RunConfig rc = onnx_import::run_config(im);
    auto back = build(rc, dev, im.inputs[0].sample, vocab);
    onnx_import::load_parameters(*back, im);
    std::mt19937_64 rng(test_seed() + 1);
    const Shape shape = batched(3, sample);
    Tensor in;
    if (vocab > 0) {
        std::uniform_int_distribution<int32_t> u(0, static_cast<int32_t>(vocab - 1));
        std::vector<int32_t> x(static_cast<size_t>(numel(shape)));
        for (int32_t& v : x) v = u(rng);
        in = upload_i32(dev, shape, x);
    } else {
        std::uniform_real_distribution<float> u(-1.0f, 1.0f);
        std::vector<float> x(static_cast<size_t>(numel(shape)));
        for (float& v : x) v = u(rng);
        in = upload(dev, shape, x);
    }
    const std::vector<float> want = e.net->forward(dev, in, false).to_vector();
    const std::vector<float> got = back->forward(dev, in, false).to_vector();
    EXPECT_LE(rel_err(got, want), 1e-5) << im.layers_toml;
}

struct Case {
    const char* name;
    const char* layers;  // [model] layers = [...]
    Shape sample;
    std::vector<const char*> ops;        // op types the export must hold
    std::set<std::string> renamed = {};  // parameters stored under other names (recurrent gates reordered)
    int64_t vocab = 0;                   // > 0: a text model reading token ids
};

void PrintTo(const Case& c, std::ostream* os) {
    *os << c.name;
}

// One model per group of layer types (every one the table maps), read back through the importer.
const Case kRoundTrips[] = {
    {"mlp",
     R"([{ type = "flatten" }, { type = "linear", out = 12 }, { type = "relu" }, { type = "dropout", p = 0.5 },
         { type = "linear", out = 5, bias = false }, { type = "log_softmax" }])",
     {2, 3, 4},
     {"Flatten", "Gemm", "Relu", "LogSoftmax"}},
    {"cnn",
     R"([{ name = "c1", type = "conv2d", out = 4, kernel = 3, padding = 1, stride = 2 },
         { name = "bn", type = "batchnorm", eps = 1e-3, momentum = 0.2 }, { name = "r", type = "relu" },
         { name = "mp", type = "maxpool2d", kernel = 2 },
         { name = "ap", type = "avgpool2d", kernel = 3, stride = 1, padding = 1, count_include_pad = false },
         { name = "c2", type = "conv2d", out = 6, kernel = [1, 1], bias = false },
         { name = "flat", type = "flatten" }, { name = "fc", type = "linear", out = 3 }, { name = "sm", type = "softmax" }])",
     {2, 9, 9},
     {"Conv", "BatchNormalization", "Relu", "MaxPool", "AveragePool", "Flatten", "Gemm", "Softmax"}},
    {"residual",
     R"([{ name = "stem", type = "conv2d", out = 4, kernel = 3, padding = 1, bias = false },
         { name = "a", type = "conv2d", out = 8, kernel = 3, padding = 1, stride = 2 },
         { name = "bn", type = "batchnorm" },
         { name = "short", type = "conv2d", out = 8, kernel = 1, stride = 2, inputs = ["stem"] },
         { name = "sum", type = "add", inputs = ["bn", "short"] },
         { name = "gap", type = "global_avgpool" }, { name = "fc", type = "linear", out = 4 }])",
     {3, 8, 8},
     {"Conv", "BatchNormalization", "Add", "GlobalAveragePool", "Flatten", "Gemm"}},
    {"merge",
     R"([{ name = "fc", type = "linear", out = 6 }, { name = "s", type = "sigmoid" },
         { name = "t", type = "tanh", inputs = ["fc"] }, { name = "cat", type = "concat", inputs = ["s", "t"] },
         { name = "bn", type = "batchnorm" }, { name = "r", type = "reshape", shape = [3, 4] },
         { name = "flat", type = "flatten" }, { name = "out", type = "linear", out = 2 }])",
     {5},
     {"Gemm", "Sigmoid", "Tanh", "Concat", "BatchNormalization", "Reshape", "Flatten"}},
    {"gates",  // a squeeze-and-excitation gate [3, 1, 1] over a [3, 5, 5] map, then SiLU's x * sigmoid(x)
     R"([{ name = "map", type = "conv2d", out = 3, kernel = 3, padding = 1 },
         { name = "squeeze", type = "conv2d", out = 3, kernel = 5, inputs = ["input"] }, { name = "g", type = "sigmoid" },
         { name = "se", type = "mul", inputs = ["map", "g"] }, { name = "s", type = "sigmoid" },
         { name = "silu", type = "mul", inputs = ["se", "s"] }, { name = "flat", type = "flatten" },
         { name = "fc", type = "linear", out = 4 }])",
     {2, 5, 5},
     {"Conv", "Sigmoid", "Mul", "Flatten", "Gemm"}},
    {"sub",  // a - b of one shape, and a [2, 3] minus a [3]
     R"([{ name = "a", type = "linear", out = 6 }, { name = "b", type = "linear", out = 6, inputs = ["input"] },
         { name = "d", type = "sub", inputs = ["a", "b"] }, { name = "grid", type = "reshape", shape = [2, 3] },
         { name = "row", type = "linear", out = 3, inputs = ["input"] },
         { name = "centred", type = "sub", inputs = ["grid", "row"] }, { name = "flat", type = "flatten" },
         { name = "out", type = "linear", out = 2 }])",
     {4},
     {"Gemm", "Sub", "Reshape", "Unsqueeze", "Flatten"}},
    {"shuffle",  // ShuffleNet's channel shuffle: [6, 4, 4] as [2, 3, 4, 4], the groups' axes swapped
     R"([{ name = "c", type = "conv2d", out = 6, kernel = 3, padding = 1 },
         { name = "groups", type = "reshape", shape = [2, 3, 4, 4] }, { name = "swap", type = "transpose", perm = [1, 0, 2, 3] },
         { name = "back", type = "reshape", shape = [6, 4, 4] }, { name = "flat", type = "flatten" },
         { name = "fc", type = "linear", out = 3 }])",
     {2, 4, 4},
     {"Conv", "Reshape", "Transpose", "Flatten", "Gemm"}},
    {"lstm",
     R"([{ name = "rnn", type = "lstm", hidden = 4, layers = 2 }, { name = "fc", type = "linear", out = 3 },
         { name = "flat", type = "flatten" }, { name = "out", type = "linear", out = 2 }])",
     {5, 3},
     {"Transpose", "LSTM", "Squeeze", "MatMul", "Add", "Flatten", "Gemm"},
     {"rnn.", "fc.weight"}},
    {"clamp_slice",
     R"([{ name = "flat", type = "flatten" }, { name = "fc", type = "linear", out = 12 },
         { name = "clip", type = "clamp", lo = -0.2, hi = 0.3 }, { name = "r", type = "reshape", shape = [3, 4] },
         { name = "last", type = "slice", axis = 1, start = -2 }, { name = "low", type = "clamp", hi = 0.1 }])",
     {4, 5},
     {"Gemm", "Clip", "Reshape", "Slice"}},
    {"relu6_bias_scale",
     R"([{ name = "c", type = "conv2d", out = 3, kernel = 3, padding = 1 }, { name = "r6", type = "relu6" },
         { name = "flat", type = "flatten" }, { name = "fc", type = "linear", out = 6 },
         { name = "b", type = "bias", shape = [6] }, { name = "s", type = "scale", shape = [1] },
         { name = "r6b", type = "relu6" }])",
     {2, 5, 5},
     {"Conv", "Clip", "Gemm", "Add", "Mul"}},
    {"char_lstm",
     R"([{ name = "in", type = "one_hot", vocab = 7 }, { name = "rnn", type = "lstm", hidden = 4, layers = 2 },
         { name = "head", type = "linear", out = 7 }])",
     {5},
     {"Gather", "LSTM", "MatMul"},
     {"rnn.", "head.weight"},
     7},
    {"embed_gru",
     R"([{ name = "emb", type = "embedding", vocab = 7, dim = 3 }, { name = "rnn", type = "gru", hidden = 4, layers = 2 },
         { name = "head", type = "linear", out = 7, bias = false }])",
     {5},
     {"Gather", "GRU", "MatMul"},
     {"rnn.", "head.weight"},
     7},
    {"gpt",
     R"([{ name = "wte", type = "embedding", vocab = 9, dim = 8 }, { name = "wpe", type = "position_embedding", max_len = 6 },
         { name = "ln_1", type = "layer_norm" }, { name = "attn", type = "attention", heads = 2 },
         { name = "res_1", type = "add", inputs = ["wpe", "attn"] }, { name = "ln_2", type = "layer_norm" },
         { name = "fc", type = "linear", out = 16 }, { name = "gelu", type = "gelu" }, { name = "proj", type = "linear", out = 8 },
         { name = "res_2", type = "add", inputs = ["res_1", "proj"] }, { name = "ln_f", type = "layer_norm" },
         { name = "head", type = "linear", out = 9, bias = false, shares = "wte" }])",
     {4},
     {"Gather", "Slice", "LayerNormalization", "Split", "Softmax", "Erf", "MatMul"},
     {"attn.c_attn.weight", "attn.c_proj.weight", "fc.weight", "proj.weight"},
     9},
};

class ExportRoundTrip : public ::testing::TestWithParam<Case> {};

TEST_P(ExportRoundTrip, ImportsBackToTheSameOutputs) {
    auto backend = native();
    if (!backend) return;
    auto dev = backend->device(0);
    const Case& c = GetParam();
    const Exported e = export_config(std::string("[model]\nlayers = ") + c.layers + "\n", c.sample, *dev, c.vocab);
    expect_structure(e, c.sample, c.vocab > 0, c.renamed);
    const auto ops = op_types(e.proto);
    for (const char* op : c.ops) EXPECT_TRUE(ops.count(op)) << "no " << op;
    expect_round_trip(e, c.sample, *dev, c.vocab);
}

INSTANTIATE_TEST_SUITE_P(Models, ExportRoundTrip, ::testing::ValuesIn(kRoundTrips),
                         [](const ::testing::TestParamInfo<Case>& i) { return std::string(i.param.name); });

const onnx::NodeProto* first_node(const onnx::ModelProto& m, const std::string& op) {
    for (const onnx::NodeProto& n : m.graph().node())
        if (n.op_type() == op) return &n;
    return nullptr;
}

int64_t int_attr(const onnx::NodeProto& n, const std::string& name) {
    for (const onnx::AttributeProto& a : n.attribute())
        if (a.name() == name) return a.i();
    return -1;
}

// Text models (ONNX Runtime checks their numbers: tests/onnx/check_export.py). Here: int64 token
// input, the recurrent layers' nodes and gate layouts, the transformer's ops and names.
TEST(OnnxExport, RecurrentLayersBecomeOneNodePerLevelWithOnnxGateLayouts) {
    auto backend = native();
    if (!backend) return;
    auto dev = backend->device(0);
    for (const bool lstm : {true, false}) {
        const std::string type = lstm ? "lstm" : "gru";
        const Exported e = export_config(
            "[model]\nlayers = [{ name = \"emb\", type = \"embedding\", vocab = 7, dim = 5 },"
            " { name = \"rnn\", type = \"" +
                type +
                "\", hidden = 4, layers = 2 },"
                " { name = \"head\", type = \"linear\", out = 7 }]\n",
            {6}, *dev, 7);
        expect_structure(e, {6}, true, {"rnn."});
        const auto ops = op_types(e.proto);
        EXPECT_EQ(ops.count(lstm ? "LSTM" : "GRU"), 2u) << type;
        EXPECT_EQ(ops.count("Gather"), 1u);
        const onnx::NodeProto* n = first_node(e.proto, lstm ? "LSTM" : "GRU");
        ASSERT_TRUE(n);
        EXPECT_EQ(int_attr(*n, "hidden_size"), 4);
        if (!lstm) {
            EXPECT_EQ(int_attr(*n, "linear_before_reset"), 1);
        }
        // W_l0: [1, G*H, in] holding PyTorch's gate blocks in ONNX's order (LSTM i o f c <- i f g o;
        // GRU z r h <- r z n): ONNX block 1 is PyTorch's block 3 (lstm) or 0 (gru).
        std::vector<float> torch_w;
        for (Param* p : e.net->state())
            if (p->name == "rnn.weight_ih_l0") torch_w = p->value.to_vector();
        for (const onnx::TensorProto& t : e.proto.graph().initializer()) {
            if (t.name() != "rnn.W_l0") continue;
            ASSERT_EQ(t.dims_size(), 3);
            EXPECT_EQ(t.dims(1), (lstm ? 4 : 3) * 4);
            const std::vector<float> w = floats_of(t);
            const int64_t from = lstm ? 3 : 0, row = 5;
            for (int64_t k = 0; k < 4 * row; ++k)
                EXPECT_EQ(w[4 * row + k], torch_w[static_cast<size_t>(from * 4 * row + k)]);
        }
    }
}

TEST(OnnxExport, ATransformerBecomesLayerNormAttentionAndErfGelu) {
    auto backend = native();
    if (!backend) return;
    auto dev = backend->device(0);
    const Exported e = export_config(R"([model]
layers = [
  { name = "wte", type = "embedding", vocab = 9, dim = 8 },
  { name = "wpe", type = "position_embedding", max_len = 6 },
  { name = "ln", type = "layer_norm" },
  { name = "attn", type = "attention", heads = 2 },
  { name = "res", type = "add", inputs = ["wpe", "attn"] },
  { name = "fc", type = "linear", out = 16 },
  { name = "gelu", type = "gelu" },
  { name = "down", type = "linear", out = 8 },
  { name = "head", type = "linear", out = 9, bias = false, shares = "wte" },
]
)",
                                     {4}, *dev, 9);
    expect_structure(e, {4}, true);
    const auto ops = op_types(e.proto);
    for (const char* op : {"Gather", "Slice", "LayerNormalization", "Split", "Softmax", "Erf", "MatMul", "Shape"})
        EXPECT_TRUE(ops.count(op)) << "no " << op;
    // The tied head's MatMul reads the embedding's table transposed, under its own name (as PyTorch's
    // state_dict lists a tied weight under both names); the Gather reads the table as stored.
    const std::set<std::string> inits = initializer_names(e.proto);
    EXPECT_TRUE(inits.count("wte.weight"));
    EXPECT_TRUE(inits.count("causal_mask"));
    std::vector<float> table;
    for (Param* p : e.net->state())
        if (p->name == "wte.weight") table = p->value.to_vector();
    ASSERT_EQ(table.size(), 9u * 8u);
    bool head = false;
    for (const onnx::TensorProto& t : e.proto.graph().initializer()) {
        if (t.name() == "causal_mask") {
            EXPECT_EQ(t.dims(0), 6);  // [max_len, max_len]
        }
        if (t.name() != "head.weight") continue;
        head = true;
        ASSERT_EQ(t.dims_size(), 2);
        EXPECT_EQ(t.dims(0), 8);
        EXPECT_EQ(t.dims(1), 9);
        const std::vector<float> w = floats_of(t);
        for (int64_t c = 0; c < 8; ++c)
            for (int64_t r = 0; r < 9; ++r) EXPECT_EQ(w[c * 9 + r], table[static_cast<size_t>(r * 8 + c)]);
    }
    EXPECT_TRUE(head) << "no head.weight";
}

// A layer type the exporter has no mapping for: refused naming the layer and its type, and no file.
class Unexportable : public Activation {
public:
    Unexportable() : Activation(XYLEM_ACT_RELU) {}
    std::string kind() const override { return "test_unexportable"; }
};
const LayerRegistration<NoLayerOptions> kUnexportable{
    "test_unexportable", {}, nullptr, [](const NoLayerOptions&, LayerContext&) -> std::unique_ptr<Layer> {
        return std::make_unique<Unexportable>();
    }};

TEST(OnnxExport, ALayerWithoutAMappingIsRefusedNamingItBeforeAnythingIsWritten) {
    auto backend = native();
    if (!backend) return;
    auto dev = backend->device(0);
    const RunConfig c = parse_config(
        "[model]\nlayers = [{ type = \"linear\", out = 3 }, { name = \"odd\", type = "
        "\"test_unexportable\" }, { type = \"test_unexportable\" }]\n",
        "model.toml");
    auto net = build(c, *dev, {4});
    onnx_export::Source src;
    src.model = net.get();
    src.layers = &c.layers;
    src.input_sample = {4};
    const fs::path path = fs::temp_directory_path() / ("xylem_export_refused_" + std::to_string(::getpid()) + ".onnx");
    fs::remove(path);
    try {
        onnx_export::export_file(src, path.string());
        ADD_FAILURE() << "exported a model with an unmapped layer";
    } catch (const Error& e) {
        const std::string m = e.what();
        EXPECT_NE(m.find("'odd' (test_unexportable)"), std::string::npos) << m;
        EXPECT_NE(m.find("'2' (test_unexportable)"), std::string::npos) << m;
        EXPECT_NE(m.find("2 layers"), std::string::npos) << m;
    }
    EXPECT_FALSE(fs::exists(path));
}

TEST(OnnxExport, TheTableCoversEveryBuiltInLayerTypeButTheTestsOwn) {
    std::set<std::string> mapped;
    for (const onnx_export::LayerMapping& m : onnx_export::mapped_layers()) mapped.insert(m.layer);
    for (const std::string& type : layer_type_names())
        if (type != "test_unexportable") {
            EXPECT_TRUE(mapped.count(type)) << "layer type '" << type << "' has no ONNX mapping";
        }
}

// The mapping table of the docs (docs/onnx-export.md, or docs/onnx.md once merged there) is made
// from the exporter's own table, between two markers: this test fails when they differ, and
// XYLEM_WRITE_DOCS=1 rewrites the section from the table.
std::string markdown_table() {
    std::string t = "| xylem layer | ONNX nodes (opset 17) |\n|---|---|\n";
    for (const onnx_export::LayerMapping& m : onnx_export::mapped_layers())
        t += std::string("| `") + m.layer + "` | " + m.onnx + " |\n";
    return t;
}

TEST(OnnxExport, TheDocsTableIsTheExportersTable) {
    const std::string begin =
        "<!-- export-table: generated from onnx_export::mapped_layers() by tests/onnx/export_test.cpp -->\n";
    const std::string end = "<!-- /export-table -->";
    for (const char* doc : {"docs/onnx-export.md", "docs/onnx.md"})
        if (check_generated_section((fs::path(XYLEM_SOURCE_DIR) / doc).string(), begin, end, markdown_table(),
                                    "*TheDocsTableIsTheExportersTable*"))
            return;
    ADD_FAILURE() << "no export-table markers in docs/onnx-export.md or docs/onnx.md";
}

}  // namespace
}  // namespace xylem::test
