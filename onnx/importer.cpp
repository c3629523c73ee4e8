// The ONNX importer: ModelProto -> [[model.layers]] + named parameters (importer.h).
//
// Order of work: parse; refuse an opset outside 13-17 and every op type xylem lacks (all listed
// at once, before anything else); check the graph's structure (every tensor read exists, one
// producer per tensor, no cycle); decode every initializer; then walk the nodes the output needs
// in topological order, folding constants (shape subgraphs) and emitting one layer per node that
// computes on the model's data (fold.cpp, ops.cpp). Nothing is allocated on a device here.
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

#include "importer_impl.h"
#include "xylem/error.h"
#include "xylem/io/input_file.h"

namespace xylem::onnx_import {
namespace detail {

// The importer's one table: each op, what it becomes, and its handler on the model's data
// (nullptr: folded on constants, or only a step of a pattern, patterns.cpp). docs/onnx.md's table
// is generated from this one (tests/onnx/importer_test.cpp checks it; XYLEM_WRITE_DOCS=1 rewrites it),
// so "becomes" is written for that page: markdown, xylem's layer types in backticks.
const std::vector<Importer::OpEntry>& Importer::table() {
    static const std::vector<OpEntry> entries = {
        {"Gemm",
         "`linear` (B an initializer, `transB` either way; `alpha`, `beta` folded into the weight and bias; "
         "`transA` = 0)",
         [](Importer& i, const onnx::NodeProto& n) { i.gemm(n); }},
        {"MatMul",
         "`linear` without bias (B a 2-D initializer, input `[N, F]` or `[N, T, F]`); MatMul then Add of a "
         "constant `[out]` vector, the Add its one reader: `linear` with that bias; inside attention q k^T and"
         " by v (Patterns)",
         [](Importer& i, const onnx::NodeProto& n) { i.matmul(n); }},
        {"Add",
         "`add` (two layer outputs of one shape, or `[N, T, F]` + `[N, 1, F]`: the second's sample after its "
         "leading 1s the trailing axes of the first's, as xylem's add broadcasts); the MatMul bias above; a "
         "constant `[T, C]` added to `[N, T, C]`: `position_embedding`; another constant (one value, or each "
         "sample's trailing axes): `bias`; steps of the patterns; folded on constants",
         [](Importer& i, const onnx::NodeProto& n) { i.add(n); }},
        {"Conv",
         "`conv2d` (2-D; one padding for all four sides, one stride, one dilation; groups, so depthwise too; "
         "bias optional; `auto_pad` NOTSET or VALID)",
         [](Importer& i, const onnx::NodeProto& n) { i.conv(n); }},
        {"BatchNormalization",
         "`batchnorm` (inference form: `scale`, `B`, `mean`, `var` become `weight`, `bias`, `running_mean`, "
         "`running_var`; `epsilon` is `eps`; ONNX's `momentum` m is PyTorch's and xylem's 1 - m)",
         [](Importer& i, const onnx::NodeProto& n) { i.batchnorm(n); }},
        {"Relu",
         "`relu`", [](Importer& i, const onnx::NodeProto& n) { i.activation(n); }},
        {"Sigmoid",
         "`sigmoid`", [](Importer& i, const onnx::NodeProto& n) { i.activation(n); }},
        {"Tanh",
         "`tanh`; inside GELU's tanh form (Patterns)", [](Importer& i, const onnx::NodeProto& n) { i.activation(n); }},
        {"HardSigmoid",
         "`scale` (alpha), `bias` (beta), `clamp` to [0, 1]", [](Importer& i, const onnx::NodeProto& n) { i.hard_sigmoid(n); }},
        {"HardSwish",
         "`mul` of x and HardSigmoid(x) with alpha 1/6, beta 1/2 (as above)",
         [](Importer& i, const onnx::NodeProto& n) { i.hard_sigmoid(n); }},
        {"Clip",
         "`relu6` for min 0 and max 6 (torch's ReLU6; a convolution or linear runs it as its epilogue); else "
         "`clamp` (min and max constant scalars or absent)",
         [](Importer& i, const onnx::NodeProto& n) { i.clip(n); }},
        {"MaxPool",
         "`maxpool2d` (square kernel, one stride, one padding, no dilation, no Indices output; ceil mode where it gives floor mode's size)",
         [](Importer& i, const onnx::NodeProto& n) { i.pool(n, true); }},
        {"AveragePool",
         "`avgpool2d` (as MaxPool; `count_include_pad` kept)",
         [](Importer& i, const onnx::NodeProto& n) { i.pool(n, false); }},
        {"GlobalAveragePool",
         "`global_avgpool` (xylem's gives `[C]`; a reader other than Flatten gets a `reshape` to `[C, 1, 1]`)", [](Importer& i, const onnx::NodeProto& n) { i.global_avgpool(n); }},
        {"Flatten",
         "`flatten` (axis 1); nothing when the input is flat already", [](Importer& i, const onnx::NodeProto& n) { i.flatten(n); }},
        {"Reshape",
         "`reshape` (a constant or folded shape that keeps the batch axis: `0`, `-1` or the batch first); "
         "inside attention (Patterns); folded on constants",
         [](Importer& i, const onnx::NodeProto& n) { i.reshape(n); }},
        {"Concat",
         "`concat` (axis 1 or later); folded on constants",
         [](Importer& i, const onnx::NodeProto& n) { i.concat(n); }},
        {"Pad",
         "the padding of the Conv or AveragePool reading it (constant zeros, H and W alike on all four sides; "
         "torch exports `AvgPool2d(padding=p)` so); any other reader is refused (MaxPool pads with -inf, not "
         "zeros)",
         [](Importer& i, const onnx::NodeProto& n) { i.pad(n); }},
        {"Softmax",
         "`softmax` over the last axis (opset 13 on: one axis, default -1; another axis is refused); inside "
         "attention (Patterns)", [](Importer& i, const onnx::NodeProto& n) { i.softmax(n); }},
        {"LogSoftmax",
         "`log_softmax` over the last axis (as Softmax)", [](Importer& i, const onnx::NodeProto& n) { i.softmax(n); }},
        {"LayerNormalization",
         "`layer_norm` (the last axis; scale and bias constants)", nullptr},
        {"ReduceMean",
         "a layer norm's mean or variance below opset 17 (Patterns); over H and W of NCHW maps, `global_avgpool`",
         nullptr},
        {"Sub",
         "data minus a constant: `bias` (negated), the constant one value or each sample's trailing axes (a "
         "constant minus the data is refused); two layer outputs: `sub` (as Add, the second operand the one "
         "broadcast); a layer norm's x - mean (Patterns); folded on constants",
         [](Importer& i, const onnx::NodeProto& n) { i.sub(n); }},
        {"Pow",
         "a layer norm's square below opset 17 (Patterns); folded on constants", nullptr},
        {"Sqrt",
         "a layer norm's standard deviation below opset 17 (Patterns); folded on constants", nullptr},
        {"Div",
         "data over a constant: `scale` (its reciprocal), the constant as for Sub (a constant over the data is"
         " refused); a layer norm's (x - mean) / std, GELU's `x / sqrt(2)`, attention's scale (Patterns); "
         "folded on constants",
         nullptr},
        {"Mul",
         "data times a constant: `scale` (as Div); two layer outputs: `mul` (as Add, or `[N, C, H, W]` times "
         "`[N, C, 1, 1]`, one value per channel); a layer norm's weight, GELU's steps, attention's scale "
         "(Patterns); folded on constants",
         [](Importer& i, const onnx::NodeProto& n) { i.mul(n); }},
        {"Erf",
         "GELU's erf form: `gelu` (Patterns); folded on constants", nullptr},
        {"Split",
         "attention's q, k, v from one linear (Patterns)", nullptr},
        {"Where",
         "attention's causal mask (Patterns); folded on constants", nullptr},
        {"Equal",
         "folded", nullptr},
        {"Range",
         "folded", nullptr},
        {"Identity",
         "nothing", [](Importer& i, const onnx::NodeProto& n) { i.skip(n); }},
        {"Dropout",
         "nothing (inference; a Dropout whose `training_mode` is true or whose mask is read is refused)", [](Importer& i, const onnx::NodeProto& n) { i.skip(n); }},
        {"Constant",
         "folded", nullptr},
        {"Shape",
         "folded (static shapes; opset 15's `start` and `end`)", nullptr},
        {"Gather",
         "folded (constant data and indices); a constant table `[V, C]` by the model's integer input: "
         "`embedding`; the model's data along axis 1 or later by a scalar or a run of consecutive constant "
         "indices (torch's `y[:, -1]`): `slice` (+ `reshape`)",
         [](Importer& i, const onnx::NodeProto& n) { i.gather_data(n); }},
        {"Slice",
         "folded on constants; on the model's data along one axis (1 or later, step 1): `slice`",
         [](Importer& i, const onnx::NodeProto& n) { i.slice(n); }},
        {"ConstantOfShape",
         "folded; zeros of a shape holding the batch are an LSTM's or GRU's zero initial state", nullptr},
        {"Transpose",
         "`transpose` of each sample's axes when the batch stays first; `[1, 0, 2]` of a `[batch, time, features]` "
         "sequence into an LSTM or GRU and back (no layer: xylem's recurrent layers take and give `[N, T, F]`); "
         "inside attention (Patterns)",
         [](Importer& i, const onnx::NodeProto& n) { i.transpose(n); }},
        {"LSTM",
         "`lstm` of one level (forward; default activations; no clip, peepholes or `input_forget`; `layout` 0;"
         " zero or absent initial states; `sequence_lens` absent or all T). ONNX's gate blocks i, o, f, c are "
         "reordered to PyTorch's i, f, g, o; B is split into `bias_ih` and `bias_hh`. The Y output only, read "
         "through Squeeze(1)",
         [](Importer& i, const onnx::NodeProto& n) { i.recurrent(n, false); }},
        {"GRU",
         "`gru` of one level (as LSTM; `linear_before_reset` = 1, PyTorch's cell); gate blocks z, r, h "
         "reordered to r, z, n",
         [](Importer& i, const onnx::NodeProto& n) { i.recurrent(n, true); }},
        {"Unsqueeze",
         "`reshape` on the model's data (not the batch axis); folded on constants (`axes` an input, opset 13 "
         "on)",
         [](Importer& i, const onnx::NodeProto& n) { i.squeeze(n); }},
        {"Squeeze",
         "`reshape` on the model's data (not the batch axis); Squeeze(1) of an LSTM's or GRU's Y; folded on "
         "constants",
         [](Importer& i, const onnx::NodeProto& n) { i.squeeze(n); }},
        {"Cast",
         "nothing from float to float on the model's data; folded on constants (to float, int32, int64, bool)",
         [](Importer& i, const onnx::NodeProto& n) { i.cast(n); }},
    };
    return entries;
}

bool is_supported(const std::string& op) {
    for (const Importer::OpEntry& e : Importer::table())
        if (op == e.op) return true;
    return false;
}

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
            if (!a.ref_attr_name().empty())
                refuse(n, std::string("attribute '") + name + "' refers to a function's attribute");
            return &a;
        }
    return nullptr;
}

int64_t Importer::attr_int(const onnx::NodeProto& n, const char* name, int64_t dflt) const {
    const auto* a = attr(n, name, onnx::AttributeProto::INT);
    return a ? a->i() : dflt;
}

std::vector<int64_t> Importer::reshape_dims(const onnx::NodeProto& n, const std::vector<int64_t>& shape,
                                            const std::vector<int64_t>& in, bool allowzero, bool allow_empty,
                                            const std::vector<int64_t>& named) const {
    int64_t known = 1, infer = -1, total = 1;
    for (int64_t d : in) total *= d;
    std::vector<int64_t> out;
    for (size_t k = 0; k < shape.size(); ++k) {
        int64_t d = shape[k];
        if (d == 0 && !allowzero) {
            if (k >= in.size()) refuse(n, "its shape " + shape_text(named) + " copies an axis the input lacks");
            d = in[k];
        }
        if (d == -1) {
            if (infer >= 0) refuse(n, "its shape " + shape_text(named) + " has two -1");
            infer = static_cast<int64_t>(k);
        } else if (d < (allow_empty ? 0 : 1) || d > kMaxDim) {
            refuse(n, "shape entry " + std::to_string(d) + " is out of range");
        } else if (__builtin_mul_overflow(known, d, &known) || known > kMaxElements) {
            refuse(n, "its shape " + shape_text(named) + " holds more than 2^31 - 1 elements");
        }
        out.push_back(d);
    }
    if (infer >= 0) {
        if (known == 0 || total % known) refuse(n, "cannot infer the -1 of shape " + shape_text(named));
        out[static_cast<size_t>(infer)] = total / known;
    } else if (known != total) {
        refuse(n, "its shape " + shape_text(named) + " does not hold the input's " + std::to_string(total) +
                      " elements");
    }
    return out;
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
        if (!ok)
            refuse(n, "attribute '" + a.name() + "' is not one this op has at opset " + std::to_string(out_.opset) +
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
                      (missing.size() > 1 ? "s" : "") + " xylem cannot import (opset " + std::to_string(out_.opset) +
                      "): ";
    bool first = true;
    for (const auto& [op, nodes] : missing) {
        msg += (first ? "" : "; ") + op + " (" + std::to_string(nodes.size()) + " node" +
               (nodes.size() > 1 ? "s" : "") + ": ";
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
        if (!initializers_.emplace(t.name(), &t).second)
            throw Error(source_ + ": initializer '" + t.name() + "' is defined twice");
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
            if (a.has_g() || a.graphs_size())
                refuse(n, "has a subgraph attribute '" + a.name() + "' (control flow is not supported)");
        for (const auto& in : n.input()) {
            if (in.empty()) continue;
            if (!producer_.count(in) && !initializers_.count(in) && !inputs.count(in))
                refuse(n,
                       "reads '" + in +
                           "', which no node writes and no initializer or graph input holds (a missing initializer?)");
            ++readers_[in];
        }
    }
    if (g_.output_size() == 0) throw Error(source_ + ": the graph has no outputs");
    if (g_.output_size() > static_cast<int>(Net::kMaxInputs))  // the most a model gives
        throw Error(source_ + ": the graph has " + std::to_string(g_.output_size()) + " outputs; xylem takes at most " +
                    std::to_string(Net::kMaxInputs));
    std::vector<int> stack;
    for (const auto& o : g_.output()) {
        const std::string& out = o.name();
        for (const ModelIO& seen : out_.outputs)
            if (seen.name == out) throw Error(source_ + ": the graph lists output '" + out + "' twice");
        out_.outputs.push_back(ModelIO{out, "", {}, false});
        ++readers_[out];
        if (!producer_.count(out)) {
            if (inputs.count(out) || initializers_.count(out))
                throw Error(source_ + ": the graph's output '" + out + "' is " +
                            (initializers_.count(out) ? "a constant" : "a graph input") + ": there is no layer to run");
            throw Error(source_ + ": the graph's output '" + out + "' is not written by any node");
        }
        stack.push_back(producer_.at(out));
    }
    // The nodes the outputs need, in topological order (Kahn over the live subgraph; what is left
    // over lies on a cycle).
    std::vector<bool> live(static_cast<size_t>(g_.node_size()), false);
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

bool Importer::is_model_input(const std::string& node) const {
    for (const ModelIO& in : out_.inputs)
        if (in.node == node) return true;
    return false;
}

bool Importer::is_token_input(const std::string& node) const {
    for (const ModelIO& in : out_.inputs)
        if (in.node == node) return in.tokens;
    return false;
}

void Importer::read_inputs() {
    std::vector<const onnx::ValueInfoProto*> inputs;
    for (const auto& in : g_.input())
        if (!initializers_.count(in.name())) inputs.push_back(&in);  // else an initializer listed as an input (IR < 4 style)
    if (inputs.empty()) throw Error(source_ + ": the graph has no inputs besides its initializers");
    if (inputs.size() > Net::kMaxInputs)
        throw Error(source_ + ": the graph has " + std::to_string(inputs.size()) + " inputs; xylem takes at most " +
                    std::to_string(Net::kMaxInputs));
    for (size_t k = 0; k < inputs.size(); ++k) {
        for (size_t m = 0; m < k; ++m)
            if (inputs[m]->name() == inputs[k]->name())
                throw Error(source_ + ": the graph lists input '" + inputs[k]->name() + "' twice");
        // One input is "input", as in every config; several keep their names (as layer names are
        // cleaned), reserved before any layer is named.
        std::string node = Net::kInput;
        if (inputs.size() > 1) {
            const std::string base = clean_name(inputs[k]->name()).empty() ? "input_" + std::to_string(k)
                                                                            : clean_name(inputs[k]->name());
            node = base == Net::kInput ? base + "_" : base;
            for (int r = 2; names_.count(node); ++r) node = base + "_" + std::to_string(r);
            names_.insert(node);
        }
        read_input(*inputs[k], node, k == 0);
    }
}

void Importer::read_input(const onnx::ValueInfoProto& in, const std::string& node, bool first) {
    const onnx::ValueInfoProto* input = &in;
    ModelIO io{input->name(), node, {}, false};
    const auto& type = input->type();
    if (!type.has_tensor_type()) throw Error(source_ + ": input '" + input->name() + "' is not a tensor");
    const int elem = type.tensor_type().elem_type();
    if (elem != onnx::TensorProto::FLOAT && elem != onnx::TensorProto::INT64 && elem != onnx::TensorProto::INT32)
        throw Error(source_ + ": input '" + input->name() + "' has element type " + std::to_string(elem) +
                    "; xylem imports float32 inputs, or int64/int32 token ids an embedding (Gather) reads");
    io.tokens = elem != onnx::TensorProto::FLOAT;
    if (!type.tensor_type().has_shape())
        throw Error(source_ + ": input '" + input->name() + "' has no shape (xylem needs static shapes)");
    const auto& dims = type.tensor_type().shape().dim();
    if (dims.size() < 2)
        throw Error(source_ + ": input '" + input->name() + "' has rank " + std::to_string(dims.size()) +
                    "; xylem needs [batch, ...] (rank 2 or more)");
    Value v;
    v.node = node;
    for (int k = 0; k < dims.size(); ++k) {
        const auto& d = dims[k];
        if (k == 0) {
            const int64_t batch = d.has_dim_value() ? d.dim_value() : 0;
            if (batch < 0 || batch > kMaxDim)
                throw Error(source_ + ": input '" + input->name() + "' batch size " + std::to_string(batch) +
                            " is out of range");
            if (first) out_.batch = batch;
            else if (batch != out_.batch)  // every input holds the same samples
                throw Error(source_ + ": input '" + input->name() + "' has batch " +
                            (batch ? std::to_string(batch) : "'" + d.dim_param() + "'") + ", input '" +
                            out_.inputs[0].name + "' " +
                            (out_.batch ? std::to_string(out_.batch) : std::string("a symbolic one")) +
                            " (xylem feeds every input the same batch)");
            v.shape.push_back(batch > 0 ? batch : kBatchMark);
            continue;
        }
        if (!d.has_dim_value())
            throw Error(source_ + ": input '" + input->name() + "' axis " + std::to_string(k) + " is symbolic ('" +
                        d.dim_param() + "'); xylem imports static shapes (only the batch axis may be symbolic)");
        if (d.dim_value() < 1 || d.dim_value() > kMaxDim)
            throw Error(source_ + ": input '" + input->name() + "' axis " + std::to_string(k) + " is " +
                        std::to_string(d.dim_value()) + ", out of range [1, 2^31 - 1]");
        v.shape.push_back(d.dim_value());
        io.sample.push_back(d.dim_value());
    }
    int64_t n = 1;
    for (int64_t d : io.sample)
        if (__builtin_mul_overflow(n, d, &n) || n > kMaxElements)
            throw Error(source_ + ": input '" + input->name() + "' has more than 2^31 - 1 elements per sample");
    values_[input->name()] = std::move(v);
    out_.inputs.push_back(std::move(io));
}

const HostTensor& Importer::constant(const onnx::NodeProto& n, size_t input, const char* what) const {
    if (static_cast<int>(input) >= n.input_size() || n.input(static_cast<int>(input)).empty())
        refuse(n, std::string("has no ") + what + " input");
    const Value& v = value(n.input(static_cast<int>(input)));
    if (!v.is_const)
        refuse(n, std::string("its ") + what + " '" + n.input(static_cast<int>(input)) +
                      "' is computed by the model; xylem needs a constant (an initializer)");
    return v.c;
}

int Importer::sole_reader(const std::string& tensor) const {
    auto it = readers_.find(tensor);
    if (it == readers_.end() || it->second != 1) return -1;
    for (int j : order_)
        for (const auto& in : g_.node(j).input())
            if (in == tensor) return j;
    return -1;
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

std::string Importer::inner_layer(const onnx::NodeProto& n, const std::string& suffix, LayerOut l,
                                  std::vector<int64_t> shape) {
    const std::string base = (clean_name(n.name()).empty() ? clean_name(n.op_type()) : clean_name(n.name())) + suffix;
    std::string name = base;
    for (int k = 2; names_.count(name); ++k) name = base + "_" + std::to_string(k);
    names_.insert(name);
    l.name = name;
    layer_shapes_[name] = std::move(shape);
    layers_.push_back(std::move(l));
    return name;
}

std::string Importer::emit(LayerOut l, const onnx::NodeProto& n, std::vector<int64_t> shape,
                           const std::string& output) {
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
std::string Importer::use(const std::string& tensor, const onnx::NodeProto& reader, bool pad_ok) {
    const Value& v = value(tensor);
    if (v.is_const) refuse(reader, "reads the constant '" + tensor + "' where xylem needs the model's data");
    if (v.pending.kind == "gelu.half" || v.pending.kind == "gelu.scaled") {
        // x * 0.5 or x / sqrt(2) that another node reads too (or that was no GELU at all): the
        // product as a scale layer, made once.
        auto it = materialized_.find(tensor);
        if (it != materialized_.end()) return it->second;
        const std::string input = use(v.pending.of, reader);
        const std::string name = clean_name(reader.name()) + "_scale";
        std::string unique = name;
        for (int k = 2; names_.count(unique); ++k) unique = name + "_" + std::to_string(k);
        names_.insert(unique);
        const float w = v.pending.kind == "gelu.half" ? 0.5f : static_cast<float>(1 / std::sqrt(2.0));
        param(unique, "weight", {1}, {w});
        layers_.push_back(LayerOut{"scale", unique, {input}, {{"shape", "[1]"}}});
        layer_shapes_[unique] = v.shape;
        materialized_[tensor] = unique;
        return unique;
    }
    if (!v.pending.kind.empty())
        refuse(reader, "reads '" + tensor + "', a step inside a " + v.pending.kind.substr(0, v.pending.kind.find('.')) +
                           " pattern xylem imports whole only (docs/onnx.md, \"Patterns\")");
    if (is_token_input(v.node) && reader.op_type() != "Gather")
        refuse(reader, "reads the model's integer input; xylem reads token ids through an embedding (Gather) only");
    if (v.zeros)
        refuse(reader,
               "reads '" + tensor + "', zeros of the batch's shape; xylem takes those as an LSTM's initial state only");
    if (v.layout != Value::kBatchMajor)
        refuse(reader,
               "reads '" + tensor + "', a time-major sequence (" + shape_text(v.shape) +
                   "); xylem's layers take [batch, time, ...]: only Transpose [1, 0, 2], Squeeze and LSTM read it");
    if (v.pad && !pad_ok)
        refuse(reader,
               "reads the output of a Pad node; xylem folds a zero Pad only into the Conv or AveragePool that "
               "reads it (it has no pad layer)");
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

// The xylem node that gives graph output `output`, its value checked: a layer's output of [batch, ...].
std::string Importer::output_node(const std::string& output) {
    const std::string what = source_ + ": the graph's output '" + output + "'";
    const Value& y = value(output);
    if (y.is_const) throw Error(what + " is a constant");
    if (is_model_input(y.node) && y.pending.kind.empty())
        throw Error(what + " is a graph input: there is no layer to run");
    if (y.pad) throw Error(what + " is a Pad's; xylem folds a Pad only into the layer reading it");
    const bool materializable = y.pending.kind == "gelu.half" || y.pending.kind == "gelu.scaled";
    if (!y.pending.kind.empty() && !materializable)
        throw Error(what + " is a step inside a pattern xylem imports whole only");
    if (y.zeros || y.layout != Value::kBatchMajor)
        throw Error(what + " is time-major or zeros of the batch's shape; xylem's outputs are [batch, ...]");
    if (y.squeezed || materializable) return use(output, g_.node(producer_.at(output)));
    return y.node;
}

Imported Importer::run() {
    out_.source = source_;
    out_.producer = m_.producer_name() + (m_.producer_version().empty() ? "" : " " + m_.producer_version());
    if (!m_.has_graph()) throw Error(source_ + ": not an ONNX model: it has no graph (a truncated or different file?)");
    check_opset();
    check_ops();
    check_structure();
    decode_initializers();
    read_inputs();
    for (int i : order_) {
        current_ = i;
        visit(g_.node(i));
    }
    for (ModelIO& o : out_.outputs) {
        o.node = output_node(o.name);
        o.sample.assign(layer_shapes_.at(o.node).begin() + 1, layer_shapes_.at(o.node).end());
        for (const ModelIO& other : out_.outputs)
            if (&other != &o && other.node == o.node)
                throw Error(source_ + ": the graph's outputs '" + other.name + "' and '" + o.name +
                            "' are one tensor in xylem's model (an Identity between them?); xylem gives each output once");
    }
    // Only the layers the outputs need (a layer read only by a folded Shape is dropped). One
    // output is the last layer, as in every config; several are listed in [model] outputs.
    const std::string last = out_.outputs.back().node;
    std::map<std::string, const LayerOut*> by_name;
    for (const LayerOut& l : layers_) by_name[l.name] = &l;
    std::set<std::string> needed;
    std::vector<std::string> stack;
    for (const ModelIO& o : out_.outputs) stack.push_back(o.node);
    while (!stack.empty()) {
        const std::string s = stack.back();
        stack.pop_back();
        if (is_model_input(s) || !needed.insert(s).second) continue;
        for (const auto& in : by_name.at(s)->inputs) stack.push_back(in);
    }
    std::vector<const LayerOut*> kept;
    for (const LayerOut& l : layers_)
        if (needed.count(l.name) && l.name != last) kept.push_back(&l);
    kept.push_back(by_name.at(last));
    for (auto it = out_.params.begin(); it != out_.params.end();) {
        const std::string owner = it->first.substr(0, it->first.find('.'));  // layer names have no dots
        it = needed.count(owner) ? std::next(it) : out_.params.erase(it);
    }
    std::ostringstream t;
    if (out_.inputs.size() > 1 || out_.outputs.size() > 1) {
        auto list = [&t](const std::vector<ModelIO>& v) {
            t << "[";
            for (size_t k = 0; k < v.size(); ++k) t << (k ? ", " : "") << toml_string(v[k].node);
            t << "]\n";
        };
        t << "[model]\ninputs = ";
        list(out_.inputs);
        t << "outputs = ";
        list(out_.outputs);
        t << "\n";
    }
    for (const LayerOut* l : kept) {
        t << "[[model.layers]]\ntype = " << toml_string(l->type) << "\nname = " << toml_string(l->name)
          << "\ninputs = [";
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

}  // namespace detail

using detail::Importer;

const std::vector<OpMapping>& supported_ops() {
    static const std::vector<OpMapping> ops = [] {
        std::vector<OpMapping> v;
        for (const Importer::OpEntry& e : Importer::table()) v.push_back({e.op, e.becomes});
        return v;
    }();
    return ops;
}

Imported import_bytes(const std::string& bytes, const std::string& source, const std::string& dir) {
    if (bytes.size() > static_cast<size_t>(INT32_MAX))
        throw Error(source + ": " + std::to_string(bytes.size()) +
                    " bytes: larger than protobuf's 2 GiB limit (keep big weights "
                    "as external data)");
    onnx::ModelProto model;
    if (bytes.empty()) throw Error(source + ": the file is empty");
    if (!model.ParseFromArray(bytes.data(), static_cast<int>(bytes.size())))
        throw Error(source +
                    ": not an ONNX model: the protobuf does not parse (a truncated, corrupt or different file)");
    return Importer(model, source, dir).run();
}

Imported import_file(const std::string& path) {
    const std::string bytes = io::read_regular_file(path, "an ONNX model");
    std::string dir = std::filesystem::path(path).parent_path().string();
    if (dir.empty()) dir = ".";
    return import_bytes(bytes, path, dir);
}

}  // namespace xylem::onnx_import
