// The ONNX importer's checks (onnx/importer.cpp) of whole files and graphs: models built with
// ONNX's own protobuf classes (onnx_builders.h), then broken on purpose. Every bad file is an
// xylem::Error that says what is wrong, never a crash and never a half-imported model; the op
// mappings are importer_ops_test.cpp. The agreement with ONNX Runtime on real exports is
// tests/onnx/check_models.py.
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
#include "support/generated_docs.h"
#include "xylem/error.h"
#include "xylem/onnx/importer.h"
#include "xylem/onnx/npy.h"

namespace xylem::test {
namespace {
namespace fs = std::filesystem;
using onnx_import::import_bytes;

TEST(OnnxImport, AGemmModelBecomesLayersWiredByNameWithItsWeights) {
    const onnx_import::Imported m = import_bytes(bytes_of(mlp()), "model.onnx", "");
    ASSERT_EQ(m.layers.size(), 2u);
    EXPECT_EQ(m.layers[0].type, "linear");
    EXPECT_EQ(m.layers[0].name, "fc");  // torch's module path, from "fc.weight"
    EXPECT_EQ(m.layers[0].inputs, std::vector<std::string>{"input"});
    EXPECT_EQ(m.layers[1].type, "relu");
    EXPECT_EQ(m.layers[1].inputs, std::vector<std::string>{"fc"});
    EXPECT_EQ(m.inputs[0].sample, (Shape{4}));
    EXPECT_EQ(m.outputs[0].sample, (Shape{3}));
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
    EXPECT_EQ(im.outputs[0].sample, (Shape{24}));
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
    std::string no_descr = bytes;  // "'descr': ," (was front() of an empty string)
    no_descr.replace(no_descr.find("'<f4'"), 5, "     ");
    try {
        npy::parse(no_descr, "x.npy");
        ADD_FAILURE() << "an empty descr was read";
    } catch (const Error& e) {
        EXPECT_HAS(std::string(e.what()), "x.npy: .npy dtype (empty) is not supported");
    }
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
}  // namespace xylem::test
