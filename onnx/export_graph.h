// The exporter's internals, shared by its files: export.cpp (the walk over the model, the checks
// before any work, the ModelProto around the graph), export_layers.cpp (the mapping table: one
// function per layer type) and export_recurrent.cpp (lstm and gru). Internal to xylem_onnx.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "onnx/onnx_pb.h"  // defines ONNX_API, then includes onnx-ml.pb.h (ONNX_ML)
#include "xylem/config.h"
#include "xylem/layers/net.h"

namespace xylem::onnx_export::detail {

// Builds one GraphProto: nodes named after the layer that makes them ("layer1.0.conv1/Conv"),
// initializers under xylem's parameter names, constants under the layer's name.
class GraphWriter {
public:
    explicit GraphWriter(onnx::GraphProto& g) : g_(g) {}

    struct Attr {
        std::string name;
        enum { Int, Float, Ints, String } kind;
        int64_t i = 0;
        float f = 0;
        std::vector<int64_t> ints;
        std::string s;
    };
    static Attr i(const char* n, int64_t v) { return {n, Attr::Int, v, 0, {}, {}}; }
    static Attr f(const char* n, float v) { return {n, Attr::Float, 0, v, {}, {}}; }
    static Attr ints(const char* n, std::vector<int64_t> v) { return {n, Attr::Ints, 0, 0, std::move(v), {}}; }
    static Attr s(const char* n, std::string v) { return {n, Attr::String, 0, 0, {}, std::move(v)}; }

    // A node of `op` reading `inputs` ("" for an optional input left out); its one output is a
    // fresh tensor "<layer>/<op>[_k]" (the node's name too), returned.
    std::string node(const std::string& layer, const std::string& op, std::vector<std::string> inputs,
                     std::vector<Attr> attrs = {});
    // The same with the output tensor named by the caller (a layer's last node writes the layer's tensor).
    void node_to(const std::string& output, const std::string& layer, const std::string& op,
                 std::vector<std::string> inputs, std::vector<Attr> attrs = {});

    // A node of several outputs (Split), named by the caller; the names are taken as they are.
    void node_outputs(const std::vector<std::string>& outputs, const std::string& layer, const std::string& op,
                      std::vector<std::string> inputs, std::vector<Attr> attrs = {});
    // A tensor name no other tensor or node has: `base`, else base_1, base_2, ...
    std::string fresh(const std::string& base);

    // Initializers (each name once; a second add of the same name is the shared tensor).
    const std::string& floats(const std::string& name, const Shape& dims, const std::vector<float>& values);
    const std::string& int64s(const std::string& name, const Shape& dims, const std::vector<int64_t>& values);
    bool has_initializer(const std::string& name) const { return initializers_.count(name) != 0; }

    onnx::GraphProto& graph() { return g_; }

private:
    onnx::GraphProto& g_;
    std::set<std::string> used_;  // node and tensor names given
    std::map<std::string, bool> initializers_;
};

// One layer as the exporter sees it: its node, its spec (options), shapes and parameters.
struct LayerView {
    std::string name;                 // the Net's node name: "3", "layer2.0.conv1"
    const LayerSpec* spec = nullptr;  // the config's layer (its options)
    Layer* layer = nullptr;
    std::vector<std::string> inputs;   // ONNX tensor names of its inputs
    std::vector<Shape> input_samples;  // their per-sample shapes
    Shape output_sample;
    std::string output;         // the ONNX tensor the layer must write
    int64_t max_positions = 0;  // the model's (Net::max_positions), for attention's mask

    // Parameter `suffix` ("weight", "bias_ih_l0", "running_mean") of this layer, or of the layer it
    // shares parameters with, as host values; an Error naming the layer when it has none.
    std::vector<float> param(const std::string& suffix, Shape* shape = nullptr) const;
    // The initializer name of that parameter: "<owner>.<suffix>".
    std::string param_name(const std::string& suffix) const;
    bool has_param(const std::string& suffix) const;
    [[noreturn]] void refuse(const std::string& why) const;
    const std::map<std::string, Param*>* state = nullptr;  // every parameter and buffer by name
};

// A layer type's function: writes the nodes that compute `v.output` from `v.inputs`. When it
// returns "" it wrote nothing and the layer's output is its input (dropout: inference passes it).
using Emit = std::function<std::string(GraphWriter&, const LayerView& v)>;

struct Mapping {
    const char* layer;
    const char* onnx;  // what it becomes, for the docs
    Emit emit;
};
// The one table (export_layers.cpp), recurrent layers included (export_recurrent.cpp).
const std::vector<Mapping>& mappings();
std::vector<Mapping> recurrent_mappings();

// Shared pieces of several mappings.
// x W^T + b over the last axis, W the [out, in] weight `suffix` of layer v ("weight", "c_attn.weight"),
// initializer "<v.name>.<suffix>" (its own name even when the weight is shared: PyTorch's state_dict
// lists a tied weight under both). [N, in]: Gemm (transB = 1) with W as stored. [N, ..., in]:
// MatMul with W stored transposed, [in, out], as MatMul takes it and as the importer reads a
// MatMul's weight, then Add of the bias.
void emit_linear(GraphWriter& w, const LayerView& v, const std::string& suffix, const std::string& x,
                 size_t sample_rank, const std::string& bias, const std::string& output);
// Shape(x)[axis] as a one-element int64 tensor (a folded constant for the importer).
std::string extent_of(GraphWriter& w, const std::string& layer, const std::string& x, int64_t axis);

}  // namespace xylem::onnx_export::detail
