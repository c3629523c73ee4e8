// ONNX's own node tests (Debian's libonnx-testdata, /usr/share/libonnx-testdata/data/node) run
// through the importer on every available backend. A test directory holds model.onnx (usually one
// node), test_data_set_*/input_*.pb and output_*.pb. Every test whose ops are all ones the
// importer claims (supported_ops()) is imported, built, run and compared with ONNX's outputs:
//   passed          max |xylem - ONNX| <= 1e-4 * max |ONNX| (1e-6 absolute for an all-zero output)
//   not applicable  the importer refused the model, before building anything, with an Error
//                   (the message is printed: several outputs, integer data, an attribute
//                   combination xylem has no layer for, ...)
//   failed          anything else: a wrong value or shape, a model that does not build or run
// Each test runs first with every input as a model input (each one's first axis the batch: an
// Add or Concat of two data tensors) and every output compared; where the importer refuses that,
// again with the inputs after the first made initializers (a Conv's W, a Gemm's B), as a real
// model's weights are. Skipped where the package is not installed.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <set>
#include <sstream>

#include "onnx/onnx_pb.h"
#include "support/backends.h"
#include "tensors.h"
#include "xylem/error.h"
#include "xylem/layers/registry.h"
#include "xylem/onnx/importer.h"
#include "xylem/train/model_builder.h"

namespace xylem {
namespace {
namespace fs = std::filesystem;

fs::path node_test_dir() {
    const char* env = std::getenv("XYLEM_ONNX_NODE_TESTS");
    return env && *env ? fs::path(env) : fs::path("/usr/share/libonnx-testdata/data/node");
}

std::string read_bytes(const fs::path& p) {
    std::ifstream f(p, std::ios::binary);
    std::ostringstream s;
    s << f.rdbuf();
    return s.str();
}

onnx::TensorProto read_tensor(const fs::path& p) {
    onnx::TensorProto t;
    const std::string b = read_bytes(p);
    if (!t.ParseFromString(b)) throw Error(p.string() + ": not a TensorProto");
    return t;
}

// The op types of a test's model, when it parses.
bool claimed(const onnx::ModelProto& m) {
    std::set<std::string> ops;
    for (const auto& op : onnx_import::supported_ops()) ops.insert(op.op);
    if (m.graph().node_size() == 0) return false;
    for (const auto& n : m.graph().node())
        if (!(n.domain().empty() || n.domain() == "ai.onnx") || !ops.count(n.op_type())) return false;
    return true;
}

enum class Outcome { passed, not_applicable, failed };

struct Result {
    Outcome outcome;
    std::string why;
};

// max |got - want| within 1e-4 of max |want| (1e-6 absolute for all zeros); "" or why not.
std::string compare(const Tensor& y, const onnx_import::HostTensor& want, const std::string& what) {
    if (!want.is_float) return what + ": ONNX's output is not float";
    if (y.shape() != Shape(want.dims.begin(), want.dims.end()))
        return what + " shape " + to_string(y.shape()) + ", ONNX's " + to_string(Shape(want.dims.begin(), want.dims.end()));
    const std::vector<float> got = y.to_vector();
    double err = 0, scale = 0;
    for (size_t i = 0; i < got.size(); ++i) {
        if (!std::isfinite(got[i]) && !(std::isinf(want.f[i]) && got[i] == want.f[i]))
            err = INFINITY;
        else if (std::isfinite(want.f[i]))
            err = std::max(err, std::fabs(static_cast<double>(got[i]) - want.f[i]));
        if (std::isfinite(want.f[i])) scale = std::max(scale, std::fabs(static_cast<double>(want.f[i])));
    }
    if (scale > 0 ? err <= 1e-4 * scale : err <= 1e-6) return "";
    std::ostringstream s;
    s << what << ": max |xylem - ONNX| = " << err << ", max |ONNX| = " << scale;
    return s.str();
}

// One test directory on one backend, its first `data` inputs fed as model inputs and the rest
// made initializers.
Result run_one(const fs::path& dir, onnx::ModelProto model, Backend& backend, size_t data) {
    const fs::path set = dir / "test_data_set_0";
    std::vector<fs::path> inputs, outputs;
    for (int k = 0; fs::exists(set / ("input_" + std::to_string(k) + ".pb")); ++k)
        inputs.push_back(set / ("input_" + std::to_string(k) + ".pb"));
    for (int k = 0; fs::exists(set / ("output_" + std::to_string(k) + ".pb")); ++k)
        outputs.push_back(set / ("output_" + std::to_string(k) + ".pb"));
    if (inputs.empty() || outputs.empty()) return {Outcome::not_applicable, "no input_0.pb or output_0.pb"};
    auto* g = model.mutable_graph();
    if (g->input_size() != static_cast<int>(inputs.size()) || g->output_size() != static_cast<int>(outputs.size()))
        return {Outcome::failed, "the model has " + std::to_string(g->input_size()) + " inputs and " +
                                     std::to_string(g->output_size()) + " outputs, the data " +
                                     std::to_string(inputs.size()) + " and " + std::to_string(outputs.size())};
    for (size_t k = data; k < inputs.size(); ++k) {
        onnx::TensorProto t = read_tensor(inputs[k]);
        t.set_name(g->input(static_cast<int>(k)).name());
        *g->add_initializer() = t;
    }
    onnx_import::Imported m;
    try {
        m = onnx_import::import_bytes(model.SerializeAsString(), dir.filename().string(), "");
    } catch (const Error& e) {
        return {Outcome::not_applicable, e.what()};
    }
    try {
        auto dev = backend.device(0);
        // The model as `xylem run` builds it: from the imported config (its inputs and outputs).
        std::unique_ptr<Net> model = train::build_model(onnx_import::run_config(m));
        Net& net = *model;
        net.build(*dev, m.input_samples(), 1);
        onnx_import::load_parameters(net, m);
        std::vector<onnx_import::HostTensor> host;  // alive until the uploads are done (they may be asynchronous)
        std::vector<Tensor> xs;
        std::vector<const Tensor*> ptrs;
        for (size_t k = 0; k < m.inputs.size(); ++k) {
            host.push_back(onnx_import::decode_tensor(read_tensor(inputs[k]), "", "input_" + std::to_string(k)));
            const onnx_import::HostTensor& x = host.back();
            if (!x.is_float) return {Outcome::failed, "imported, but input " + std::to_string(k) + " is not float"};
            xs.emplace_back(Shape(x.dims.begin(), x.dims.end()), DType::F32, *dev);
            xs.back().upload_from(*dev, x.f.data());
        }
        dev->sync();
        for (const Tensor& t : xs) ptrs.push_back(&t);
        net.forward(*dev, ptrs, false);
        for (size_t k = 0; k < outputs.size(); ++k) {
            const std::string why =
                compare(net.output(k),
                        onnx_import::decode_tensor(read_tensor(outputs[k]), "", "output_" + std::to_string(k)),
                        "output " + std::to_string(k));
            if (!why.empty()) return {Outcome::failed, why};
        }
        return {Outcome::passed, ""};
    } catch (const std::exception& e) {
        return {Outcome::failed, std::string("imported, then: ") + e.what()};
    }
}

// Every input a model input first; where the importer refuses that, the data input alone.
Result run_one(const fs::path& dir, const onnx::ModelProto& model, Backend& backend, int* as_data) {
    const int inputs = model.graph().input_size();
    Result r = run_one(dir, model, backend, static_cast<size_t>(std::max(inputs, 1)));
    if (r.outcome == Outcome::not_applicable && inputs > 1) {
        Result one = run_one(dir, model, backend, 1);
        if (one.outcome != Outcome::not_applicable) return one;
        one.why = r.why + "; with its later inputs as initializers: " + one.why;
        return one;
    }
    if (r.outcome == Outcome::passed && inputs > 1) ++*as_data;
    return r;
}

class OnnxNodeTests : public ::testing::TestWithParam<std::string> {};

TEST_P(OnnxNodeTests, EveryTestOfAClaimedOpPassesOrIsRefusedBeforeBuilding) {
    const fs::path root = node_test_dir();
    if (!fs::is_directory(root))
        GTEST_SKIP() << root << " not found (Debian's libonnx-testdata: scripts/install-deps.sh)";
    auto backend = test::backend_named(GetParam());
    // OpenCL (PoCL) compiles each kernel once per machine; XYLEM_ONNX_NODE_TEST_FILTER limits the
    // tests to names containing it when that is too slow.
    const char* filter = std::getenv("XYLEM_ONNX_NODE_TEST_FILTER");
    std::vector<fs::path> dirs;
    for (const auto& e : fs::directory_iterator(root))
        if (e.is_directory() && (!filter || e.path().filename().string().find(filter) != std::string::npos))
            dirs.push_back(e.path());
    std::sort(dirs.begin(), dirs.end());
    int passed = 0, not_applicable = 0, failed = 0, unclaimed = 0, several = 0;
    for (const fs::path& dir : dirs) {
        onnx::ModelProto model;
        if (!model.ParseFromString(read_bytes(dir / "model.onnx")) || !claimed(model)) {
            ++unclaimed;
            continue;
        }
        const Result r = run_one(dir, model, *backend, &several);
        const std::string name = dir.filename().string();
        if (r.outcome == Outcome::passed) {
            ++passed;
        } else if (r.outcome == Outcome::not_applicable) {
            ++not_applicable;
            std::cout << "  n/a    " << name << ": " << r.why << "\n";
        } else {
            ++failed;
            std::cout << "  FAILED " << name << ": " << r.why << "\n";
            ADD_FAILURE() << name << ": " << r.why;
        }
    }
    std::cout << "ONNX node tests on " << GetParam() << ": " << passed << " passed, " << failed << " failed, "
              << not_applicable << " not applicable (of " << passed + failed + not_applicable
              << " whose ops the importer claims; " << unclaimed << " others); " << several
              << " of the passed fed several model inputs\n";
    EXPECT_EQ(failed, 0);
}

INSTANTIATE_TEST_SUITE_P(Backends, OnnxNodeTests, ::testing::ValuesIn(test::available_backends()),
                         test::backend_param_name);
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(OnnxNodeTests);

}  // namespace
}  // namespace xylem
