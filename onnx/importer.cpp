// The ONNX importer: ModelProto -> [[model.layers]] + named parameters (importer.h).
//
// Order of work: parse; refuse an opset outside 13-17 and every op type xylem lacks (all listed
// at once, before anything else); check the graph's structure (every tensor read exists, one
// producer per tensor, no cycle); decode every initializer; then walk the nodes the output needs
// in topological order, folding constants (shape subgraphs) and emitting one layer per node that
// computes on the model's data. Nothing is allocated on a device here.
#include "xylem/onnx/importer.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <limits>
#include <map>
#include <set>
#include <sstream>

#include "tensors.h"
#include "xylem/error.h"
#include "xylem/io/input_file.h"

namespace xylem::onnx_import {
namespace {

// Stands for the batch size in folded shape values when the file leaves it symbolic: Shape(x)[0].
constexpr int64_t kBatchMark = 0x5EB0000001LL;

const std::vector<OpMapping> kOps = {
    {"Gemm", "linear (B an initializer; transB either way; alpha and beta folded into the weights; transA = 0)"},
    {"MatMul", "linear without bias (B a 2-D initializer); MatMul then Add of a constant vector: linear with bias"},
    {"Add", "add (two tensors of one shape); the bias of the MatMul before it; folded on constants"},
    {"Conv", "conv2d (2-D, symmetric equal padding, equal strides and dilations, groups; bias optional)"},
    {"BatchNormalization", "batchnorm (inference form: scale, B, mean, var -> weight, bias, running_mean, running_var; "
                           "epsilon; momentum m -> 1 - m)"},
    {"Relu", "relu"},
    {"Sigmoid", "sigmoid"},
    {"Tanh", "tanh"},
    {"MaxPool", "maxpool2d (square kernel, equal strides, symmetric equal padding, no dilation, floor mode)"},
    {"AveragePool", "avgpool2d (as MaxPool; count_include_pad kept)"},
    {"GlobalAveragePool", "global_avgpool"},
    {"Flatten", "flatten (axis 1)"},
    {"Reshape", "reshape (a constant or folded shape that keeps the batch axis); folded on constants"},
    {"Concat", "concat (axis 1 or later); folded on constants"},
    {"Softmax", "softmax (over the last axis)"},
    {"LogSoftmax", "log_softmax (over the last axis)"},
    {"Identity", "skipped"},
    {"Dropout", "skipped (inference)"},
    {"Constant", "folded"},
    {"Shape", "folded (static shapes)"},
    {"Gather", "folded (constant data and indices)"},
    {"Unsqueeze", "folded; on the model's data: reshape"},
    {"Squeeze", "folded; on the model's data: reshape"},
    {"Cast", "folded; float to float on the model's data: skipped"},
};

bool is_supported(const std::string& op) {
    for (const OpMapping& m : kOps)
        if (op == m.op) return true;
    return false;
}

std::string shape_text(const std::vector<int64_t>& s) {
    std::string t = "[";
    for (size_t i = 0; i < s.size(); ++i)
        t += (i ? ", " : "") + (s[i] == kBatchMark ? std::string("N") : std::to_string(s[i]));
    return t + "]";
}

// A tensor during the walk: a constant (folded), or the output of a layer (or the model input).
struct Value {
    bool is_const = false;
    HostTensor c;
    std::string node;                // the xylem node that produces it (Net::kInput for the model's input)
    std::vector<int64_t> shape;      // ONNX's full shape; shape[0] is the batch
    bool squeezed = false;           // global_avgpool's [N, C] standing for ONNX's [N, C, 1, 1]
};

struct LayerOut {
    std::string type, name;
    std::vector<std::string> inputs;
    std::vector<std::pair<std::string, std::string>> keys;  // TOML values, written as they stand
};

std::string toml_float(double v) {
    char b[64];
    std::snprintf(b, sizeof b, "%.9g", v);
    std::string s = b;
    if (s.find_first_of(".eEn") == std::string::npos) s += ".0";
    return s;
}

std::string toml_ints(const std::vector<int64_t>& v) {
    std::string s = "[";
    for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
    return s + "]";
}

std::string toml_string(const std::string& v) {
    std::string s = "\"";
    for (char ch : v) {
        if (ch == '"' || ch == '\\') s += '\\';
        s += ch;
    }
    return s + "\"";
}

// A layer name a config, a checkpoint and a shell all take: letters, digits, '_' and '-' (a
// config's layer names have no dots: those separate a block's instances). torch's module path
// "layer1.0.conv1" becomes "layer1_0_conv1"; its parameters "layer1_0_conv1.weight".
std::string clean_name(const std::string& raw) {
    std::string s;
    for (char ch : raw) {
        const bool ok = std::isalnum(static_cast<unsigned char>(ch)) || ch == '_' || ch == '-';
        if (!ok && (s.empty() || s.back() == '_')) continue;  // no leading or doubled separators
        s += ok ? ch : '_';
    }
    while (!s.empty() && s.back() == '_') s.pop_back();
    return s;
}

class Importer {
public:
    Importer(const onnx::ModelProto& model, std::string source, std::string dir)
        : m_(model), g_(model.graph()), source_(std::move(source)), dir_(std::move(dir)) {}

    Imported run();

private:
    // Checks before any work.
    void check_opset();
    void check_ops() const;
    void check_structure();
    void decode_initializers();
    void read_input();
    // The walk.
    void visit(const onnx::NodeProto& n);
    void fold(const onnx::NodeProto& n);
    std::string use(const std::string& tensor, const onnx::NodeProto& reader);
    const Value& value(const std::string& tensor) const {
        auto it = values_.find(tensor);
        if (it == values_.end()) throw Error(source_ + ": tensor '" + tensor + "' is read before anything makes it");
        return it->second;
    }
    // Input k of node n: an Error naming the node when it has none (never an out-of-range read).
    const std::string& input_of(const onnx::NodeProto& n, int k) const {
        if (k >= n.input_size() || n.input(k).empty()) refuse(n, "has no input " + std::to_string(k));
        return n.input(k);
    }
    const HostTensor& constant(const onnx::NodeProto& n, size_t input, const char* what) const;
    std::string layer_name(const onnx::NodeProto& n, const std::string& weight);
    std::string emit(LayerOut l, const onnx::NodeProto& n, std::vector<int64_t> shape, const std::string& output);
    void param(const std::string& layer, const std::string& name, Shape shape, std::vector<float> v);
    [[noreturn]] void refuse(const onnx::NodeProto& n, const std::string& why) const;
    std::string label(const onnx::NodeProto& n) const;

    // Attributes, type-checked.
    const onnx::AttributeProto* attr(const onnx::NodeProto& n, const char* name, int type) const;
    int64_t attr_int(const onnx::NodeProto& n, const char* name, int64_t dflt) const;
    float attr_float(const onnx::NodeProto& n, const char* name, float dflt) const;
    std::string attr_string(const onnx::NodeProto& n, const char* name, const std::string& dflt) const;
    std::vector<int64_t> attr_ints(const onnx::NodeProto& n, const char* name, std::vector<int64_t> dflt) const;
    void check_known_attrs(const onnx::NodeProto& n, std::initializer_list<const char*> known) const;

    // The ops.
    void conv(const onnx::NodeProto& n);
    void gemm(const onnx::NodeProto& n);
    void matmul(const onnx::NodeProto& n);
    void add(const onnx::NodeProto& n);
    void batchnorm(const onnx::NodeProto& n);
    void pool(const onnx::NodeProto& n, bool max);
    void reshape_like(const onnx::NodeProto& n, const std::vector<int64_t>& out_shape, const std::string& input);

    const onnx::ModelProto& m_;
    const onnx::GraphProto& g_;
    std::string source_, dir_;
    Imported out_;
    std::map<std::string, int> producer_;           // tensor -> node index
    std::map<std::string, int> readers_;            // tensor -> how many node inputs (and graph outputs) read it
    std::map<std::string, const onnx::TensorProto*> initializers_;
    std::vector<int> order_;                        // topological, live nodes only
    std::map<std::string, Value> values_;
    std::vector<LayerOut> layers_;
    std::map<std::string, std::vector<int64_t>> layer_shapes_;  // xylem node -> ONNX full shape of its output
    std::set<std::string> names_;
    std::set<int> absorbed_;                        // Add nodes that became a linear layer's bias
    std::map<std::string, std::string> unsqueezed_;  // global_avgpool node -> its [C, 1, 1] reshape
    int folded_ = 0;
    int current_ = -1;  // the node visit() works on
};

std::string Importer::label(const onnx::NodeProto& n) const {
    return n.op_type() + " node '" + n.name() + "'";
}

void Importer::refuse(const onnx::NodeProto& n, const std::string& why) const {
    throw Error(source_ + ": " + label(n) + ": " + why);
}

const onnx::AttributeProto* Importer::attr(const onnx::NodeProto& n, const char* name, int type) const {
    for (const auto& a : n.attribute())
        if (a.name() == name) {
            if (a.type() != type && !(a.type() == onnx::AttributeProto::UNDEFINED))
                refuse(n, std::string("attribute '") + name + "' has the wrong type (" + std::to_string(a.type()) +
                              ", expected " + std::to_string(type) + ")");
            if (!a.ref_attr_name().empty()) refuse(n, std::string("attribute '") + name + "' refers to a function's attribute");
            return &a;
        }
    return nullptr;
}

int64_t Importer::attr_int(const onnx::NodeProto& n, const char* name, int64_t dflt) const {
    const auto* a = attr(n, name, onnx::AttributeProto::INT);
    return a ? a->i() : dflt;
}

float Importer::attr_float(const onnx::NodeProto& n, const char* name, float dflt) const {
    const auto* a = attr(n, name, onnx::AttributeProto::FLOAT);
    return a ? a->f() : dflt;
}

std::string Importer::attr_string(const onnx::NodeProto& n, const char* name, const std::string& dflt) const {
    const auto* a = attr(n, name, onnx::AttributeProto::STRING);
    return a ? a->s() : dflt;
}

std::vector<int64_t> Importer::attr_ints(const onnx::NodeProto& n, const char* name, std::vector<int64_t> dflt) const {
    const auto* a = attr(n, name, onnx::AttributeProto::INTS);
    if (!a) return dflt;
    return {a->ints().begin(), a->ints().end()};
}

void Importer::check_known_attrs(const onnx::NodeProto& n, std::initializer_list<const char*> known) const {
    for (const auto& a : n.attribute()) {
        bool ok = false;
        for (const char* k : known) ok |= a.name() == k;
        if (!ok) refuse(n, "attribute '" + a.name() + "' is not one this op has at opset " + std::to_string(out_.opset) +
                               " (or xylem does not read it)");
    }
}

void Importer::check_opset() {
    bool found = false;
    for (const auto& o : m_.opset_import()) {
        if (o.domain().empty() || o.domain() == "ai.onnx") {
            out_.opset = o.version();
            found = true;
        }
    }
    if (!found) throw Error(source_ + ": the model imports no opset of the default ONNX domain");
    if (out_.opset < kMinOpset || out_.opset > kMaxOpset)
        throw Error(source_ + ": opset " + std::to_string(out_.opset) + " is not supported: xylem imports opsets " +
                    std::to_string(kMinOpset) + " to " + std::to_string(kMaxOpset) +
                    " (export again with torch.onnx.export(..., opset_version=17))");
}

void Importer::check_ops() const {
    std::map<std::string, std::vector<std::string>> missing;  // op type -> its nodes
    for (int i = 0; i < g_.node_size(); ++i) {
        const auto& n = g_.node(i);
        const bool default_domain = n.domain().empty() || n.domain() == "ai.onnx";
        if (default_domain && is_supported(n.op_type())) continue;
        const std::string op = default_domain ? n.op_type() : n.domain() + "." + n.op_type();
        missing[op].push_back(n.name().empty() ? "#" + std::to_string(i) : n.name());
    }
    if (missing.empty()) return;
    std::string msg = source_ + ": the model uses " + std::to_string(missing.size()) + " op type" +
                      (missing.size() > 1 ? "s" : "") + " xylem cannot import (opset " + std::to_string(out_.opset) + "): ";
    bool first = true;
    for (const auto& [op, nodes] : missing) {
        msg += (first ? "" : "; ") + op + " (" + std::to_string(nodes.size()) + " node" + (nodes.size() > 1 ? "s" : "") + ": ";
        for (size_t k = 0; k < nodes.size(); ++k) {
            if (k == 8) {
                msg += ", ... " + std::to_string(nodes.size() - 8) + " more";
                break;
            }
            msg += (k ? ", " : "") + nodes[k];
        }
        msg += ")";
        first = false;
    }
    throw Error(msg + ". docs/onnx.md lists the ops xylem imports");
}

void Importer::check_structure() {
    if (g_.node_size() == 0) throw Error(source_ + ": the graph has no nodes (an empty or truncated file?)");
    for (const auto& t : g_.initializer()) {
        if (t.name().empty()) throw Error(source_ + ": an initializer has no name");
        if (!initializers_.emplace(t.name(), &t).second) throw Error(source_ + ": initializer '" + t.name() + "' is defined twice");
    }
    if (g_.sparse_initializer_size()) throw Error(source_ + ": sparse initializers are not supported");
    std::set<std::string> inputs;
    for (const auto& in : g_.input()) inputs.insert(in.name());
    for (int i = 0; i < g_.node_size(); ++i) {
        const auto& n = g_.node(i);
        for (const auto& o : n.output()) {
            if (o.empty()) continue;
            if (initializers_.count(o) || inputs.count(o))
                refuse(n, "writes '" + o + "', which is already a graph input or initializer");
            if (!producer_.emplace(o, i).second)
                refuse(n, "writes '" + o + "', which " + label(g_.node(producer_.at(o))) + " also writes");
        }
    }
    for (const auto& n : g_.node()) {
        for (const auto& a : n.attribute())
            if (a.has_g() || a.graphs_size()) refuse(n, "has a subgraph attribute '" + a.name() + "' (control flow is not supported)");
        for (const auto& in : n.input()) {
            if (in.empty()) continue;
            if (!producer_.count(in) && !initializers_.count(in) && !inputs.count(in))
                refuse(n, "reads '" + in + "', which no node writes and no initializer or graph input holds (a missing initializer?)");
            ++readers_[in];
        }
    }
    if (g_.output_size() != 1)
        throw Error(source_ + ": the graph has " + std::to_string(g_.output_size()) +
                    " outputs; xylem models have one (the last layer's)");
    const std::string& out = g_.output(0).name();
    out_.output_name = out;
    ++readers_[out];
    if (!producer_.count(out))
        throw Error(source_ + ": the graph's output '" + out + "' is not written by any node");
    // The nodes the output needs, in topological order (Kahn over the live subgraph; what is left
    // over lies on a cycle).
    std::vector<bool> live(static_cast<size_t>(g_.node_size()), false);
    std::vector<int> stack{producer_.at(out)};
    while (!stack.empty()) {
        const int i = stack.back();
        stack.pop_back();
        if (live[static_cast<size_t>(i)]) continue;
        live[static_cast<size_t>(i)] = true;
        for (const auto& in : g_.node(i).input())
            if (auto it = producer_.find(in); it != producer_.end()) stack.push_back(it->second);
    }
    std::vector<int> pending(static_cast<size_t>(g_.node_size()), 0);
    std::vector<std::vector<int>> next(static_cast<size_t>(g_.node_size()));
    for (int i = 0; i < g_.node_size(); ++i) {
        if (!live[static_cast<size_t>(i)]) continue;
        for (const auto& in : g_.node(i).input())
            if (auto it = producer_.find(in); it != producer_.end()) {
                ++pending[static_cast<size_t>(i)];
                next[static_cast<size_t>(it->second)].push_back(i);
            }
    }
    std::vector<int> ready;
    for (int i = g_.node_size() - 1; i >= 0; --i)
        if (live[static_cast<size_t>(i)] && !pending[static_cast<size_t>(i)]) ready.push_back(i);
    size_t live_count = static_cast<size_t>(std::count(live.begin(), live.end(), true));
    while (!ready.empty()) {
        const int i = ready.back();
        ready.pop_back();
        order_.push_back(i);
        for (int j : next[static_cast<size_t>(i)])
            if (--pending[static_cast<size_t>(j)] == 0) ready.push_back(j);
    }
    if (order_.size() != live_count) {
        std::string cycle;
        int shown = 0;
        for (int i = 0; i < g_.node_size() && shown < 8; ++i)
            if (live[static_cast<size_t>(i)] && pending[static_cast<size_t>(i)]) {
                cycle += (shown++ ? ", " : "") + label(g_.node(i));
            }
        throw Error(source_ + ": the graph has a cycle (ONNX graphs are acyclic); nodes on or after it: " + cycle);
    }
}

void Importer::decode_initializers() {
    for (const auto& [name, t] : initializers_) {
        Value v;
        v.is_const = true;
        v.c = decode_tensor(*t, dir_, source_ + ": initializer '" + name + "'");
        values_[name] = std::move(v);
    }
}

void Importer::read_input() {
    const onnx::ValueInfoProto* input = nullptr;
    int count = 0;
    for (const auto& in : g_.input()) {
        if (initializers_.count(in.name())) continue;  // an initializer listed as an input (IR < 4 style)
        ++count;
        input = &in;
    }
    if (count != 1)
        throw Error(source_ + ": the graph has " + std::to_string(count) +
                    " inputs besides its initializers; xylem models take one");
    out_.input_name = input->name();
    const auto& type = input->type();
    if (!type.has_tensor_type()) throw Error(source_ + ": input '" + input->name() + "' is not a tensor");
    if (type.tensor_type().elem_type() != onnx::TensorProto::FLOAT)
        throw Error(source_ + ": input '" + input->name() + "' has element type " +
                    std::to_string(type.tensor_type().elem_type()) + "; xylem imports float32 inputs");
    if (!type.tensor_type().has_shape()) throw Error(source_ + ": input '" + input->name() + "' has no shape (xylem needs static shapes)");
    const auto& dims = type.tensor_type().shape().dim();
    if (dims.size() < 2)
        throw Error(source_ + ": input '" + input->name() + "' has rank " + std::to_string(dims.size()) +
                    "; xylem needs [batch, ...] (rank 2 or more)");
    Value v;
    v.node = Net::kInput;
    for (int k = 0; k < dims.size(); ++k) {
        const auto& d = dims[k];
        if (k == 0) {
            out_.batch = d.has_dim_value() ? d.dim_value() : 0;
            if (out_.batch < 0 || out_.batch > kMaxDim) throw Error(source_ + ": input batch size " + std::to_string(out_.batch) + " is out of range");
            v.shape.push_back(out_.batch > 0 ? out_.batch : kBatchMark);
            continue;
        }
        if (!d.has_dim_value())
            throw Error(source_ + ": input '" + input->name() + "' axis " + std::to_string(k) + " is symbolic ('" +
                        d.dim_param() + "'); xylem imports static shapes (only the batch axis may be symbolic)");
        if (d.dim_value() < 1 || d.dim_value() > kMaxDim)
            throw Error(source_ + ": input '" + input->name() + "' axis " + std::to_string(k) + " is " +
                        std::to_string(d.dim_value()) + ", out of range [1, 2^31 - 1]");
        v.shape.push_back(d.dim_value());
        out_.input_sample.push_back(d.dim_value());
    }
    int64_t n = 1;
    for (int64_t d : out_.input_sample)
        if (__builtin_mul_overflow(n, d, &n) || n > kMaxElements)
            throw Error(source_ + ": input '" + input->name() + "' has more than 2^31 - 1 elements per sample");
    values_[input->name()] = std::move(v);
}

const HostTensor& Importer::constant(const onnx::NodeProto& n, size_t input, const char* what) const {
    if (static_cast<int>(input) >= n.input_size() || n.input(static_cast<int>(input)).empty())
        refuse(n, std::string("has no ") + what + " input");
    const Value& v = value(n.input(static_cast<int>(input)));
    if (!v.is_const) refuse(n, std::string("its ") + what + " '" + n.input(static_cast<int>(input)) + "' is computed by the model; xylem needs a constant (an initializer)");
    return v.c;
}

std::string Importer::layer_name(const onnx::NodeProto& n, const std::string& weight) {
    std::string base;
    // torch names a module's initializers "<module path>.weight": the layer takes the module's name.
    const std::string suffix = ".weight";
    if (weight.size() > suffix.size() && weight.compare(weight.size() - suffix.size(), suffix.size(), suffix) == 0)
        base = clean_name(weight.substr(0, weight.size() - suffix.size()));
    if (base.empty()) base = clean_name(n.name());
    if (base.empty()) base = clean_name(n.op_type());
    if (base == Net::kInput) base += "_";
    std::string name = base;
    for (int k = 2; names_.count(name); ++k) name = base + "_" + std::to_string(k);
    names_.insert(name);
    return name;
}

void Importer::param(const std::string& layer, const std::string& name, Shape shape, std::vector<float> v) {
    out_.params[layer + "." + name] = SavedTensor{std::move(shape), std::move(v)};
}

std::string Importer::emit(LayerOut l, const onnx::NodeProto& n, std::vector<int64_t> shape, const std::string& output) {
    (void)n;
    const std::string name = l.name;
    layer_shapes_[name] = shape;
    layers_.push_back(std::move(l));
    Value v;
    v.node = name;
    v.shape = std::move(shape);
    values_[output] = std::move(v);
    return name;
}

// The xylem node that holds `tensor` for a reader that needs ONNX's shape: a global_avgpool's
// [C] gets a reshape to [C, 1, 1] first (once).
std::string Importer::use(const std::string& tensor, const onnx::NodeProto& reader) {
    const Value& v = value(tensor);
    if (v.is_const) refuse(reader, "reads the constant '" + tensor + "' where xylem needs the model's data");
    if (!v.squeezed) return v.node;
    auto it = unsqueezed_.find(v.node);
    if (it != unsqueezed_.end()) return it->second;
    const std::string name = v.node + "_unflatten";
    names_.insert(name);
    LayerOut l{"reshape", name, {v.node}, {{"shape", toml_ints({v.shape.begin() + 1, v.shape.end()})}}};
    layer_shapes_[name] = v.shape;
    layers_.push_back(std::move(l));
    unsqueezed_[v.node] = name;
    return name;
}

// ---- folding ----------------------------------------------------------------------------

int64_t normalize_axis(int64_t axis, size_t rank, const std::function<void(const std::string&)>& fail) {
    const int64_t r = static_cast<int64_t>(rank);
    if (axis < -r || axis >= r) fail("axis " + std::to_string(axis) + " is out of range for rank " + std::to_string(r));
    return axis < 0 ? axis + r : axis;
}

void Importer::fold(const onnx::NodeProto& n) {
    const std::string& op = n.op_type();
    auto fail = [&](const std::string& why) { refuse(n, why); };
    HostTensor r;
    auto ints_of = [&](size_t k, const char* what) -> const HostTensor& {
        const HostTensor& t = constant(n, k, what);
        if (t.is_float) refuse(n, std::string("its ") + what + " is float; xylem folds integer shape values");
        return t;
    };
    if (op == "Constant") {
        check_known_attrs(n, {"value", "value_int", "value_ints", "value_float", "value_floats"});
        if (n.attribute_size() != 1) refuse(n, "needs exactly one value attribute");
        const auto& a = n.attribute(0);
        if (a.name() == "value") {
            if (a.type() != onnx::AttributeProto::TENSOR) refuse(n, "attribute 'value' is not a tensor");
            r = decode_tensor(a.t(), dir_, source_ + ": " + label(n) + " value");
        } else if (a.name() == "value_int") {
            r.is_float = false;
            r.i = {attr_int(n, "value_int", 0)};
        } else if (a.name() == "value_ints") {
            r.is_float = false;
            r.i = attr_ints(n, "value_ints", {});
            r.dims = {static_cast<int64_t>(r.i.size())};
        } else if (a.name() == "value_float") {
            r.f = {attr_float(n, "value_float", 0)};
        } else {
            const auto* fa = attr(n, "value_floats", onnx::AttributeProto::FLOATS);
            r.f.assign(fa->floats().begin(), fa->floats().end());
            r.dims = {static_cast<int64_t>(r.f.size())};
        }
    } else if (op == "Shape") {
        check_known_attrs(n, {"start", "end"});
        const Value& x = value(input_of(n, 0));
        const std::vector<int64_t> s = x.is_const ? x.c.dims : x.shape;
        const int64_t rank = static_cast<int64_t>(s.size());
        int64_t start = attr_int(n, "start", 0), end = attr_int(n, "end", rank);
        if (start < 0) start += rank;
        if (end < 0) end += rank;
        start = std::clamp<int64_t>(start, 0, rank);
        end = std::clamp<int64_t>(end, 0, rank);
        r.is_float = false;
        for (int64_t k = start; k < end; ++k) r.i.push_back(s[static_cast<size_t>(k)]);
        r.dims = {static_cast<int64_t>(r.i.size())};
    } else if (op == "Gather") {
        check_known_attrs(n, {"axis"});
        const HostTensor& data = constant(n, 0, "data");
        const HostTensor& idx = ints_of(1, "indices");
        if (data.dims.size() != 1) refuse(n, "xylem folds Gather of a 1-D constant only, got rank " + std::to_string(data.dims.size()));
        if (normalize_axis(attr_int(n, "axis", 0), 1, fail) != 0) refuse(n, "axis must be 0");
        const int64_t len = data.dims[0];
        r.is_float = data.is_float;
        r.dims = idx.dims;
        for (int64_t k : idx.i) {
            if (k < -len || k >= len) refuse(n, "index " + std::to_string(k) + " is out of range for " + std::to_string(len) + " values");
            const size_t at = static_cast<size_t>(k < 0 ? k + len : k);
            if (data.is_float) r.f.push_back(data.f[at]);
            else r.i.push_back(data.i[at]);
        }
    } else if (op == "Unsqueeze" || op == "Squeeze" || op == "Reshape") {
        const HostTensor& data = constant(n, 0, "data");
        std::vector<int64_t> dims = data.dims;
        if (op == "Reshape") {
            check_known_attrs(n, {"allowzero"});
            const HostTensor& shape = ints_of(1, "shape");
            int64_t known = 1, infer = -1;
            dims.clear();
            for (size_t k = 0; k < shape.i.size(); ++k) {
                int64_t d = shape.i[k];
                if (d == 0 && !attr_int(n, "allowzero", 0)) {
                    if (k >= data.dims.size()) refuse(n, "shape copies an axis the data lacks");
                    d = data.dims[k];
                }
                if (d == -1) {
                    if (infer >= 0) refuse(n, "shape has two -1");
                    infer = static_cast<int64_t>(k);
                } else if (d < 0 || d > kMaxDim) {
                    refuse(n, "shape entry " + std::to_string(d) + " is out of range");
                } else if (__builtin_mul_overflow(known, d, &known) || known > kMaxElements) {
                    refuse(n, "shape " + shape_text(shape.i) + " holds more than 2^31 - 1 elements");
                }
                dims.push_back(d);
            }
            if (infer >= 0) {
                if (known == 0 || data.numel() % known) refuse(n, "cannot infer the -1 of shape " + shape_text(shape.i));
                dims[static_cast<size_t>(infer)] = data.numel() / known;
            }
        } else {
            check_known_attrs(n, {});
            std::vector<int64_t> axes;
            if (n.input_size() > 1 && !n.input(1).empty()) axes = ints_of(1, "axes").i;
            if (op == "Unsqueeze") {
                const size_t rank = dims.size() + axes.size();
                std::vector<int64_t> norm;
                for (int64_t a : axes) norm.push_back(normalize_axis(a, rank, fail));
                std::sort(norm.begin(), norm.end());
                if (std::adjacent_find(norm.begin(), norm.end()) != norm.end()) refuse(n, "repeats an axis");
                for (int64_t a : norm) {
                    if (a > static_cast<int64_t>(dims.size())) refuse(n, "axis " + std::to_string(a) + " is out of range");
                    dims.insert(dims.begin() + a, 1);
                }
            } else {
                std::vector<int64_t> keep;
                std::set<int64_t> drop;
                for (int64_t a : axes) drop.insert(normalize_axis(a, dims.size(), fail));
                for (size_t k = 0; k < dims.size(); ++k) {
                    const bool squeeze = axes.empty() ? dims[k] == 1 : drop.count(static_cast<int64_t>(k)) > 0;
                    if (squeeze && dims[k] != 1) refuse(n, "squeezes axis " + std::to_string(k) + " of size " + std::to_string(dims[k]));
                    if (!squeeze) keep.push_back(dims[k]);
                }
                dims = keep;
            }
        }
        r = data;
        r.dims = dims;
        if (r.numel() != data.numel()) refuse(n, "the new shape " + shape_text(dims) + " does not hold the data's values");
    } else if (op == "Concat") {
        check_known_attrs(n, {"axis"});
        r = constant(n, 0, "first");
        if (r.dims.size() != 1) refuse(n, "xylem folds Concat of 1-D constants only");
        for (int k = 1; k < n.input_size(); ++k) {
            const HostTensor& t = constant(n, static_cast<size_t>(k), "next");
            if (t.dims.size() != 1 || t.is_float != r.is_float) refuse(n, "xylem folds Concat of 1-D constants of one type only");
            r.f.insert(r.f.end(), t.f.begin(), t.f.end());
            r.i.insert(r.i.end(), t.i.begin(), t.i.end());
        }
        r.dims = {static_cast<int64_t>(r.is_float ? r.f.size() : r.i.size())};
    } else if (op == "Cast") {
        check_known_attrs(n, {"to", "saturate"});
        const HostTensor& data = constant(n, 0, "data");
        const int64_t to = attr_int(n, "to", 0);
        r.dims = data.dims;
        if (to == onnx::TensorProto::FLOAT) {
            r.is_float = true;
            if (data.is_float) r.f = data.f;
            else for (int64_t v : data.i) r.f.push_back(static_cast<float>(v));
        } else if (to == onnx::TensorProto::INT64 || to == onnx::TensorProto::INT32) {
            r.is_float = false;
            if (!data.is_float) r.i = data.i;
            else for (float v : data.f) r.i.push_back(static_cast<int64_t>(v));
        } else {
            refuse(n, "casts to type " + std::to_string(to) + "; xylem folds casts to float, int32 and int64");
        }
    } else if (op == "Add") {
        const HostTensor& a = constant(n, 0, "first"), &b = constant(n, 1, "second");
        if (a.is_float != b.is_float || a.dims != b.dims) refuse(n, "xylem folds Add of constants of one type and shape only");
        r = a;
        for (size_t k = 0; k < r.f.size(); ++k) r.f[k] += b.f[k];
        for (size_t k = 0; k < r.i.size(); ++k) r.i[k] += b.i[k];
    } else if (op == "Identity" || op == "Dropout") {
        r = value(input_of(n, 0)).c;
    } else {
        refuse(n, "has only constant inputs, and xylem folds this op only on the model's data");
    }
    ++folded_;
    Value v;
    v.is_const = true;
    v.c = std::move(r);
    values_[n.output(0)] = std::move(v);
}

// ---- the ops that become layers ---------------------------------------------------------

void Importer::conv(const onnx::NodeProto& n) {
    check_known_attrs(n, {"auto_pad", "dilations", "group", "kernel_shape", "pads", "strides"});
    const Value& x = value(input_of(n, 0));
    const HostTensor& w = constant(n, 1, "weight");
    if (x.shape.size() != 4 || w.dims.size() != 4) refuse(n, "xylem imports 2-D convolutions (NCHW) only");
    const int64_t group = attr_int(n, "group", 1);
    const int64_t c = x.shape[1];
    if (group < 1 || c % group || w.dims[0] % group || w.dims[1] * group != c)
        refuse(n, "weight " + shape_text(w.dims) + " does not fit input " + shape_text(x.shape) + " with group " + std::to_string(group));
    const auto kernel = attr_ints(n, "kernel_shape", {w.dims[2], w.dims[3]});
    if (kernel != std::vector<int64_t>{w.dims[2], w.dims[3]}) refuse(n, "kernel_shape does not match the weight");
    const auto strides = attr_ints(n, "strides", {1, 1}), dil = attr_ints(n, "dilations", {1, 1});
    std::vector<int64_t> pads = attr_ints(n, "pads", {0, 0, 0, 0});
    const std::string auto_pad = attr_string(n, "auto_pad", "NOTSET");
    if (auto_pad != "NOTSET" && auto_pad != "VALID") refuse(n, "auto_pad " + auto_pad + " has no xylem equivalent (give explicit pads)");
    if (auto_pad == "VALID") pads = {0, 0, 0, 0};
    if (strides.size() != 2 || strides[0] != strides[1] || strides[0] < 1)
        refuse(n, "strides " + shape_text(strides) + ": xylem's conv2d takes one stride for both axes");
    if (dil.size() != 2 || dil[0] != dil[1] || dil[0] < 1) refuse(n, "dilations " + shape_text(dil) + ": xylem's conv2d takes one dilation for both axes");
    if (pads.size() != 4 || pads[0] != pads[2] || pads[1] != pads[3] || pads[0] != pads[1] || pads[0] < 0)
        refuse(n, "pads " + shape_text(pads) + ": xylem's conv2d pads all four sides alike (asymmetric padding has no equivalent)");
    if (kernel[0] > INT32_MAX || strides[0] > INT32_MAX || dil[0] > INT32_MAX || pads[0] > INT32_MAX / 2) refuse(n, "attributes out of range");
    const int64_t oh = (x.shape[2] + 2 * pads[0] - dil[0] * (kernel[0] - 1) - 1) / strides[0] + 1;
    const int64_t ow = (x.shape[3] + 2 * pads[0] - dil[0] * (kernel[1] - 1) - 1) / strides[0] + 1;
    if (oh < 1 || ow < 1) refuse(n, "its output would be empty for input " + shape_text(x.shape));
    const bool bias = n.input_size() > 2 && !n.input(2).empty();
    const std::string name = layer_name(n, input_of(n, 1));
    if (bias) {
        const HostTensor& b = constant(n, 2, "bias");
        if (b.dims != std::vector<int64_t>{w.dims[0]} || !b.is_float) refuse(n, "bias " + shape_text(b.dims) + " does not match the weight");
        param(name, "bias", {w.dims[0]}, b.f);
    }
    if (!w.is_float) refuse(n, "its weight is not float");
    param(name, "weight", w.dims, w.f);
    LayerOut l{"conv2d", name, {use(input_of(n, 0), n)},
               {{"out", std::to_string(w.dims[0])}, {"kernel", toml_ints(kernel)}, {"stride", std::to_string(strides[0])},
                {"padding", std::to_string(pads[0])}, {"dilation", std::to_string(dil[0])}, {"groups", std::to_string(group)},
                {"bias", bias ? "true" : "false"}}};
    emit(std::move(l), n, {x.shape[0], w.dims[0], oh, ow}, n.output(0));
}

void Importer::gemm(const onnx::NodeProto& n) {
    check_known_attrs(n, {"alpha", "beta", "transA", "transB"});
    const Value& a = value(input_of(n, 0));
    const HostTensor& b = constant(n, 1, "B");
    if (a.shape.size() != 2 || b.dims.size() != 2 || !b.is_float) refuse(n, "xylem imports Gemm of a [batch, features] input and a 2-D float B");
    if (attr_int(n, "transA", 0)) refuse(n, "transA = 1 (the batch along columns) has no xylem equivalent");
    const bool trans_b = attr_int(n, "transB", 0) != 0;
    const float alpha = attr_float(n, "alpha", 1), beta = attr_float(n, "beta", 1);
    const int64_t in = trans_b ? b.dims[1] : b.dims[0], out = trans_b ? b.dims[0] : b.dims[1];
    if (in != a.shape[1]) refuse(n, "B " + shape_text(b.dims) + " does not fit input " + shape_text(a.shape));
    const std::string name = layer_name(n, input_of(n, 1));
    std::vector<float> w(static_cast<size_t>(in * out));
    for (int64_t o = 0; o < out; ++o)
        for (int64_t i = 0; i < in; ++i)
            w[static_cast<size_t>(o * in + i)] = alpha * b.f[static_cast<size_t>(trans_b ? o * in + i : i * out + o)];
    param(name, "weight", {out, in}, std::move(w));
    const bool bias = n.input_size() > 2 && !n.input(2).empty();
    if (bias) {
        const HostTensor& c = constant(n, 2, "C");
        const bool vector = c.dims == std::vector<int64_t>{out} || c.dims == std::vector<int64_t>{1, out};
        if (!c.is_float || !vector) refuse(n, "C " + shape_text(c.dims) + ": xylem imports a bias of [out] or [1, out]");
        std::vector<float> bv = c.f;
        for (float& v : bv) v *= beta;
        param(name, "bias", {out}, std::move(bv));
    }
    LayerOut l{"linear", name, {use(input_of(n, 0), n)}, {{"out", std::to_string(out)}, {"bias", bias ? "true" : "false"}}};
    emit(std::move(l), n, {a.shape[0], out}, n.output(0));
}

void Importer::matmul(const onnx::NodeProto& n) {
    check_known_attrs(n, {});
    const Value& a = value(input_of(n, 0));
    const HostTensor& b = constant(n, 1, "B");
    if (b.dims.size() != 2 || !b.is_float) refuse(n, "xylem imports MatMul by a 2-D float initializer only");
    if (a.shape.size() < 2 || a.shape.size() > 3) refuse(n, "xylem's linear takes [batch, features] or [batch, steps, features]");
    const int64_t in = b.dims[0], out = b.dims[1];
    if (a.shape.back() != in) refuse(n, "B " + shape_text(b.dims) + " does not fit input " + shape_text(a.shape));
    const std::string name = layer_name(n, input_of(n, 1));
    std::vector<float> w(static_cast<size_t>(in * out));
    for (int64_t o = 0; o < out; ++o)
        for (int64_t i = 0; i < in; ++i) w[static_cast<size_t>(o * in + i)] = b.f[static_cast<size_t>(i * out + o)];
    param(name, "weight", {out, in}, std::move(w));
    // MatMul then Add of a constant [out] (torch's nn.Linear on 3-D input, or without Gemm): one
    // linear layer with that bias, when the Add is the MatMul's one reader.
    std::string output = n.output(0);
    bool bias = false;
    if (readers_[output] == 1) {
        for (int j : order_) {
            const auto& add = g_.node(j);
            if (add.op_type() != "Add" || add.input_size() != 2) continue;
            const int k = add.input(0) == output ? 1 : add.input(1) == output ? 0 : -1;
            if (k < 0) continue;
            auto it = values_.find(add.input(k));
            if (it == values_.end() || !it->second.is_const) break;
            const HostTensor& c = it->second.c;
            if (!c.is_float || !(c.dims == std::vector<int64_t>{out} || c.dims == std::vector<int64_t>{1, out})) break;
            param(name, "bias", {out}, c.f);
            bias = true;
            absorbed_.insert(j);
            output = add.output(0);
            break;
        }
    }
    std::vector<int64_t> shape = a.shape;
    shape.back() = out;
    LayerOut l{"linear", name, {use(input_of(n, 0), n)}, {{"out", std::to_string(out)}, {"bias", bias ? "true" : "false"}}};
    emit(std::move(l), n, shape, output);
}

void Importer::add(const onnx::NodeProto& n) {
    check_known_attrs(n, {});
    const Value& a = value(input_of(n, 0));
    const Value& b = value(input_of(n, 1));
    if (a.is_const || b.is_const)
        refuse(n, "adds a constant to the model's data; xylem has no bias layer (only the bias of a MatMul right before it "
                  "is imported)");
    if (a.shape != b.shape)
        refuse(n, "adds " + shape_text(a.shape) + " and " + shape_text(b.shape) + "; xylem's add takes two tensors of one shape");
    LayerOut l{"add", layer_name(n, ""), {use(input_of(n, 0), n), use(input_of(n, 1), n)}, {}};
    emit(std::move(l), n, a.shape, n.output(0));
}

void Importer::batchnorm(const onnx::NodeProto& n) {
    check_known_attrs(n, {"epsilon", "momentum", "training_mode"});
    if (attr_int(n, "training_mode", 0)) refuse(n, "training_mode = 1: xylem imports batch norm in inference form");
    for (int k = 1; k < n.output_size(); ++k)
        if (!n.output(k).empty() && readers_[n.output(k)]) refuse(n, "its running statistics outputs are read (a training graph)");
    const Value& x = value(input_of(n, 0));
    if (x.shape.size() < 2) refuse(n, "needs a channel axis");
    const int64_t c = x.shape[1];
    const char* names[] = {"scale", "B", "mean", "var"};
    const char* xylem[] = {"weight", "bias", "running_mean", "running_var"};
    const std::string name = layer_name(n, input_of(n, 1));
    for (int k = 0; k < 4; ++k) {
        const HostTensor& t = constant(n, static_cast<size_t>(k + 1), names[k]);
        if (!t.is_float || t.dims != std::vector<int64_t>{c})
            refuse(n, std::string(names[k]) + " " + shape_text(t.dims) + " does not match " + std::to_string(c) + " channels");
        param(name, xylem[k], {c}, t.f);
    }
    const float eps = attr_float(n, "epsilon", 1e-5f), momentum = attr_float(n, "momentum", 0.9f);
    if (!(eps > 0) || !(momentum >= 0 && momentum <= 1)) refuse(n, "epsilon must be positive and momentum in [0, 1]");
    // ONNX: running = running * momentum + batch * (1 - momentum); PyTorch and xylem: the reverse.
    LayerOut l{"batchnorm", name, {use(input_of(n, 0), n)},
               {{"eps", toml_float(eps)}, {"momentum", toml_float(1.0 - static_cast<double>(momentum))}}};
    emit(std::move(l), n, x.shape, n.output(0));
}

void Importer::pool(const onnx::NodeProto& n, bool max) {
    if (max) check_known_attrs(n, {"auto_pad", "ceil_mode", "dilations", "kernel_shape", "pads", "storage_order", "strides"});
    else check_known_attrs(n, {"auto_pad", "ceil_mode", "count_include_pad", "kernel_shape", "pads", "strides"});
    if (max && n.output_size() > 1 && !n.output(1).empty() && readers_[n.output(1)]) refuse(n, "its Indices output has no xylem equivalent");
    const Value& x = value(input_of(n, 0));
    if (x.shape.size() != 4) refuse(n, "xylem pools 2-D maps (NCHW) only");
    const auto kernel = attr_ints(n, "kernel_shape", {});
    if (kernel.size() != 2 || kernel[0] != kernel[1] || kernel[0] < 1) refuse(n, "kernel_shape " + shape_text(kernel) + ": xylem pools with a square kernel");
    const auto strides = attr_ints(n, "strides", {1, 1});
    if (strides.size() != 2 || strides[0] != strides[1] || strides[0] < 1) refuse(n, "strides " + shape_text(strides) + ": xylem takes one stride for both axes");
    std::vector<int64_t> pads = attr_ints(n, "pads", {0, 0, 0, 0});
    const std::string auto_pad = attr_string(n, "auto_pad", "NOTSET");
    if (auto_pad != "NOTSET" && auto_pad != "VALID") refuse(n, "auto_pad " + auto_pad + " has no xylem equivalent");
    if (auto_pad == "VALID") pads = {0, 0, 0, 0};
    if (pads.size() != 4 || pads[0] != pads[2] || pads[1] != pads[3] || pads[0] != pads[1] || pads[0] < 0)
        refuse(n, "pads " + shape_text(pads) + ": xylem pads all four sides alike (asymmetric padding has no equivalent)");
    if (pads[0] * 2 > kernel[0]) refuse(n, "padding " + std::to_string(pads[0]) + " is more than half the kernel");
    if (attr_int(n, "ceil_mode", 0)) refuse(n, "ceil_mode = 1 has no xylem equivalent (xylem's pools round down)");
    if (max) {
        const auto dil = attr_ints(n, "dilations", {1, 1});
        if (dil != std::vector<int64_t>{1, 1}) refuse(n, "dilations " + shape_text(dil) + " have no xylem equivalent");
        if (attr_int(n, "storage_order", 0)) refuse(n, "storage_order = 1 has no xylem equivalent");
    }
    if (kernel[0] > INT32_MAX || strides[0] > INT32_MAX || pads[0] > INT32_MAX / 2) refuse(n, "attributes out of range");
    const int64_t oh = (x.shape[2] + 2 * pads[0] - kernel[0]) / strides[0] + 1;
    const int64_t ow = (x.shape[3] + 2 * pads[0] - kernel[0]) / strides[0] + 1;
    if (oh < 1 || ow < 1 || x.shape[2] + 2 * pads[0] < kernel[0] || x.shape[3] + 2 * pads[0] < kernel[0])
        refuse(n, "its output would be empty for input " + shape_text(x.shape));
    std::vector<std::pair<std::string, std::string>> keys{
        {"kernel", std::to_string(kernel[0])}, {"stride", std::to_string(strides[0])}, {"padding", std::to_string(pads[0])}};
    if (!max) keys.push_back({"count_include_pad", attr_int(n, "count_include_pad", 0) ? "true" : "false"});
    LayerOut l{max ? "maxpool2d" : "avgpool2d", layer_name(n, ""), {use(input_of(n, 0), n)}, keys};
    emit(std::move(l), n, {x.shape[0], x.shape[1], oh, ow}, n.output(0));
}

// A reshape of the model's data to ONNX's full shape `out_shape`, whose first axis must be the batch.
void Importer::reshape_like(const onnx::NodeProto& n, const std::vector<int64_t>& out_shape, const std::string& input) {
    const Value& x = value(input);
    if (out_shape.empty() || out_shape[0] != x.shape[0])
        refuse(n, "reshapes " + shape_text(x.shape) + " to " + shape_text(out_shape) +
                      ", which moves the batch axis; xylem reshapes each sample");
    const std::vector<int64_t> sample(out_shape.begin() + 1, out_shape.end());
    if (sample.empty()) refuse(n, "leaves no axis per sample");
    // A global_avgpool's [C] reshaped to [C] or flattened needs nothing.
    std::vector<int64_t> flat_input(x.shape.begin() + 1, x.shape.end());
    if (x.squeezed && sample.size() == 1) {
        values_[n.output(0)] = x;
        values_[n.output(0)].squeezed = false;
        values_[n.output(0)].shape = out_shape;
        return;
    }
    LayerOut l{"reshape", layer_name(n, ""), {use(input, n)}, {{"shape", toml_ints(sample)}}};
    emit(std::move(l), n, out_shape, n.output(0));
}

void Importer::visit(const onnx::NodeProto& n) {
    const std::string& op = n.op_type();
    if (n.output_size() < 1 || n.output(0).empty()) refuse(n, "has no output");
    for (int k = 1; k < n.output_size(); ++k)
        if (!n.output(k).empty() && readers_[n.output(k)] && op != "Dropout" && op != "MaxPool" && op != "BatchNormalization")
            refuse(n, "its output " + std::to_string(k) + " is read; xylem layers have one output");
    if (absorbed_.count(current_)) return;  // a linear layer's bias
    bool all_const = true;
    for (const auto& in : n.input())
        if (!in.empty() && !value(in).is_const) all_const = false;
    if (all_const || op == "Constant" || op == "Shape") return fold(n);
    // An op whose input is the model's data.
    if (op == "Identity" || op == "Dropout") {
        if (op == "Dropout") {
            check_known_attrs(n, {"seed"});
            if (n.input_size() > 2 && !n.input(2).empty()) {
                const HostTensor& t = constant(n, 2, "training_mode");
                if (t.is_float || t.i.size() != 1 || t.i[0]) refuse(n, "training_mode is not false: xylem imports inference graphs");
            }
            if (n.output_size() > 1 && !n.output(1).empty() && readers_[n.output(1)]) refuse(n, "its mask output is read");
        }
        values_[n.output(0)] = value(input_of(n, 0));
        out_.notes.push_back("skipped " + label(n));
        return;
    }
    if (op == "Cast") {
        check_known_attrs(n, {"to", "saturate"});
        if (attr_int(n, "to", 0) != onnx::TensorProto::FLOAT) refuse(n, "casts the model's data away from float");
        values_[n.output(0)] = value(input_of(n, 0));
        out_.notes.push_back("skipped " + label(n) + " (float to float)");
        return;
    }
    if (op == "Conv") return conv(n);
    if (op == "Gemm") return gemm(n);
    if (op == "MatMul") return matmul(n);
    if (op == "Add") return add(n);
    if (op == "BatchNormalization") return batchnorm(n);
    if (op == "MaxPool") return pool(n, true);
    if (op == "AveragePool") return pool(n, false);
    const Value& x = value(input_of(n, 0));
    if (op == "Relu" || op == "Sigmoid" || op == "Tanh") {
        check_known_attrs(n, {});
        const std::string type = op == "Relu" ? "relu" : op == "Sigmoid" ? "sigmoid" : "tanh";
        const std::vector<int64_t> shape = x.shape;
        LayerOut l{type, layer_name(n, ""), {use(input_of(n, 0), n)}, {}};
        emit(std::move(l), n, shape, n.output(0));
        return;
    }
    if (op == "Softmax" || op == "LogSoftmax") {
        check_known_attrs(n, {"axis"});
        // Opset 13 on: the op normalises along one axis (default -1); before 13 it flattened to 2-D.
        auto fail = [&](const std::string& why) { refuse(n, why); };
        const int64_t axis = normalize_axis(attr_int(n, "axis", -1), x.shape.size(), fail);
        if (axis != static_cast<int64_t>(x.shape.size()) - 1 || axis == 0)
            refuse(n, "axis " + std::to_string(axis) + ": xylem's " + (op == "Softmax" ? "softmax" : "log_softmax") +
                          " normalises over the last axis only");
        const std::vector<int64_t> shape = x.shape;
        LayerOut l{op == "Softmax" ? "softmax" : "log_softmax", layer_name(n, ""), {use(input_of(n, 0), n)}, {}};
        emit(std::move(l), n, shape, n.output(0));
        return;
    }
    if (op == "GlobalAveragePool") {
        check_known_attrs(n, {});
        if (x.shape.size() != 4) refuse(n, "xylem pools 2-D maps (NCHW) only");
        const std::vector<int64_t> shape{x.shape[0], x.shape[1], 1, 1};
        LayerOut l{"global_avgpool", layer_name(n, ""), {use(input_of(n, 0), n)}, {}};
        emit(std::move(l), n, shape, n.output(0));
        values_[n.output(0)].squeezed = true;  // xylem's global_avgpool gives [C]
        return;
    }
    if (op == "Flatten") {
        check_known_attrs(n, {"axis"});
        auto fail = [&](const std::string& why) { refuse(n, why); };
        (void)fail;
        int64_t axis = attr_int(n, "axis", 1);
        if (axis < 0) axis += static_cast<int64_t>(x.shape.size());
        if (axis != 1) refuse(n, "axis " + std::to_string(axis) + ": xylem flattens each sample (axis 1) only");
        int64_t features = 1;
        for (size_t k = 1; k < x.shape.size(); ++k) features *= x.shape[k];
        if (x.squeezed || x.shape.size() == 2) {  // already [N, features]
            values_[n.output(0)] = x;
            values_[n.output(0)].squeezed = false;
            values_[n.output(0)].shape = {x.shape[0], features};
            out_.notes.push_back("skipped " + label(n) + " (its input is flat already)");
            return;
        }
        LayerOut l{"flatten", layer_name(n, ""), {use(input_of(n, 0), n)}, {}};
        emit(std::move(l), n, {x.shape[0], features}, n.output(0));
        return;
    }
    if (op == "Reshape") {
        check_known_attrs(n, {"allowzero"});
        const HostTensor& s = constant(n, 1, "shape");
        if (s.is_float || s.dims.size() != 1) refuse(n, "its shape must be a 1-D integer constant");
        const bool allowzero = attr_int(n, "allowzero", 0) != 0;
        std::vector<int64_t> out;
        int64_t known = 1, infer = -1, total = 1;
        for (size_t k = 1; k < x.shape.size(); ++k) total *= x.shape[k];
        for (size_t k = 0; k < s.i.size(); ++k) {
            int64_t d = s.i[k];
            if (k == 0 && (d == x.shape[0] || d == kBatchMark || (d == 0 && !allowzero))) {
                out.push_back(x.shape[0]);
                continue;
            }
            if (k == 0 && d != -1)
                refuse(n, "its shape " + shape_text(s.i) + " changes the batch axis; xylem reshapes each sample");
            if (d == 0 && !allowzero) {
                if (k >= x.shape.size()) refuse(n, "its shape copies an axis the input lacks");
                d = x.shape[k];
            }
            if (d == -1) {
                if (infer >= 0) refuse(n, "its shape has two -1");
                infer = static_cast<int64_t>(k);
            } else if (d < 1 || d > kMaxDim) {
                refuse(n, "shape entry " + std::to_string(d) + " is out of range");
            } else if (k > 0 && (__builtin_mul_overflow(known, d, &known) || known > kMaxElements)) {
                refuse(n, "its shape " + shape_text(s.i) + " holds more than 2^31 - 1 elements per sample");
            }
            out.push_back(d);
        }
        if (infer == 0) {  // [-1, a, b]: the batch inferred, so the rest must hold one sample exactly
            if (known != total) refuse(n, "its shape " + shape_text(s.i) + " does not keep the batch axis");
            out[0] = x.shape[0];
        } else if (infer > 0) {
            if (total % known) refuse(n, "cannot infer the -1 of shape " + shape_text(s.i));
            out[static_cast<size_t>(infer)] = total / known;
        } else if (known != total) {
            refuse(n, "its shape " + shape_text(s.i) + " does not hold the input " + shape_text(x.shape));
        }
        return reshape_like(n, out, input_of(n, 0));
    }
    if (op == "Unsqueeze" || op == "Squeeze") {
        check_known_attrs(n, {});
        std::vector<int64_t> axes;
        if (n.input_size() > 1 && !n.input(1).empty()) {
            const HostTensor& t = constant(n, 1, "axes");
            if (t.is_float) refuse(n, "its axes must be integers");
            axes = t.i;
        }
        auto fail = [&](const std::string& why) { refuse(n, why); };
        std::vector<int64_t> dims = x.shape;
        if (op == "Unsqueeze") {
            const size_t rank = dims.size() + axes.size();
            std::vector<int64_t> norm;
            for (int64_t a : axes) norm.push_back(normalize_axis(a, rank, fail));
            std::sort(norm.begin(), norm.end());
            if (std::adjacent_find(norm.begin(), norm.end()) != norm.end()) refuse(n, "repeats an axis");
            for (int64_t a : norm) {
                if (a == 0) refuse(n, "inserts an axis before the batch");
                if (a > static_cast<int64_t>(dims.size())) refuse(n, "axis " + std::to_string(a) + " is out of range");
                dims.insert(dims.begin() + a, 1);
            }
        } else {
            if (axes.empty()) refuse(n, "squeezes every axis of size 1, the batch's perhaps; xylem needs explicit axes");
            std::set<int64_t> drop;
            for (int64_t a : axes) drop.insert(normalize_axis(a, dims.size(), fail));
            if (drop.count(0)) refuse(n, "squeezes the batch axis");
            std::vector<int64_t> keep;
            for (size_t k = 0; k < dims.size(); ++k) {
                if (drop.count(static_cast<int64_t>(k))) {
                    if (dims[k] != 1) refuse(n, "squeezes axis " + std::to_string(k) + " of size " + std::to_string(dims[k]));
                    continue;
                }
                keep.push_back(dims[k]);
            }
            dims = keep;
        }
        return reshape_like(n, dims, input_of(n, 0));
    }
    if (op == "Concat") {
        check_known_attrs(n, {"axis"});
        auto fail = [&](const std::string& why) { refuse(n, why); };
        const int64_t axis = normalize_axis(attr_int(n, "axis", 0), x.shape.size(), fail);
        if (axis == 0) refuse(n, "joins along the batch axis; xylem's concat joins axis 1 or later");
        std::vector<int64_t> shape = x.shape;
        shape[static_cast<size_t>(axis)] = 0;
        std::vector<std::string> inputs;
        for (const auto& in : n.input()) {
            const Value& v = value(in);
            if (v.is_const) refuse(n, "joins a constant to the model's data; xylem's concat joins layer outputs");
            if (v.shape.size() != x.shape.size()) refuse(n, "joins tensors of different ranks");
            for (size_t k = 0; k < v.shape.size(); ++k)
                if (static_cast<int64_t>(k) != axis && v.shape[k] != x.shape[k])
                    refuse(n, "joins " + shape_text(x.shape) + " and " + shape_text(v.shape) + " along axis " + std::to_string(axis));
            shape[static_cast<size_t>(axis)] += v.shape[static_cast<size_t>(axis)];
            inputs.push_back(use(in, n));
        }
        LayerOut l{"concat", layer_name(n, ""), inputs, {{"axis", std::to_string(axis)}}};
        emit(std::move(l), n, shape, n.output(0));
        return;
    }
    refuse(n, "reads the model's data, and xylem only folds this op on constants");
}

Imported Importer::run() {
    out_.source = source_;
    out_.producer = m_.producer_name() + (m_.producer_version().empty() ? "" : " " + m_.producer_version());
    if (!m_.has_graph()) throw Error(source_ + ": not an ONNX model: it has no graph (a truncated or different file?)");
    check_opset();
    check_ops();
    check_structure();
    decode_initializers();
    read_input();
    for (int i : order_) {
        current_ = i;
        visit(g_.node(i));
    }
    // The output.
    const Value& y = value(out_.output_name);
    if (y.is_const) throw Error(source_ + ": the graph's output '" + out_.output_name + "' is a constant");
    if (y.node == Net::kInput) throw Error(source_ + ": the graph's output is its input: there is no layer to run");
    std::string last = y.node;
    if (y.squeezed) {
        last = use(out_.output_name, g_.node(producer_.at(out_.output_name)));
    }
    out_.output_sample.assign(layer_shapes_.at(last).begin() + 1, layer_shapes_.at(last).end());
    // Only the layers the output needs (a layer read only by a folded Shape is dropped), with
    // the output's last: the Net's output is its last node.
    std::map<std::string, const LayerOut*> by_name;
    for (const LayerOut& l : layers_) by_name[l.name] = &l;
    std::set<std::string> needed;
    std::vector<std::string> stack{last};
    while (!stack.empty()) {
        const std::string s = stack.back();
        stack.pop_back();
        if (s == Net::kInput || !needed.insert(s).second) continue;
        for (const auto& in : by_name.at(s)->inputs) stack.push_back(in);
    }
    std::vector<const LayerOut*> kept;
    for (const LayerOut& l : layers_)
        if (needed.count(l.name) && l.name != last) kept.push_back(&l);
    kept.push_back(by_name.at(last));
    for (auto it = out_.params.begin(); it != out_.params.end();) {
        const std::string owner = it->first.substr(0, it->first.rfind('.'));
        it = needed.count(owner) ? std::next(it) : out_.params.erase(it);
    }
    std::ostringstream t;
    for (const LayerOut* l : kept) {
        t << "[[model.layers]]\ntype = " << toml_string(l->type) << "\nname = " << toml_string(l->name) << "\ninputs = [";
        for (size_t k = 0; k < l->inputs.size(); ++k) t << (k ? ", " : "") << toml_string(l->inputs[k]);
        t << "]\n";
        for (const auto& [key, v] : l->keys) t << key << " = " << v << "\n";
        t << "\n";
    }
    out_.layers_toml = t.str();
    if (folded_) out_.notes.push_back("folded " + std::to_string(folded_) + " constant node(s) (shape computations)");
    out_.layers = run_config(out_).layers;
    return std::move(out_);
}

}  // namespace

const std::vector<OpMapping>& supported_ops() { return kOps; }

Imported import_bytes(const std::string& bytes, const std::string& source, const std::string& dir) {
    if (bytes.size() > static_cast<size_t>(INT32_MAX))
        throw Error(source + ": " + std::to_string(bytes.size()) + " bytes: larger than protobuf's 2 GiB limit (keep big weights "
                    "as external data)");
    onnx::ModelProto model;
    if (bytes.empty()) throw Error(source + ": the file is empty");
    if (!model.ParseFromArray(bytes.data(), static_cast<int>(bytes.size())))
        throw Error(source + ": not an ONNX model: the protobuf does not parse (a truncated, corrupt or different file)");
    return Importer(model, source, dir).run();
}

Imported import_file(const std::string& path) {
    const std::string bytes = io::read_regular_file(path, "an ONNX model");
    std::string dir = std::filesystem::path(path).parent_path().string();
    if (dir.empty()) dir = ".";
    return import_bytes(bytes, path, dir);
}

}  // namespace xylem::onnx_import
