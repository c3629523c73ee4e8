// The ONNX exporter's walk (export.h): checks that every layer of the model has a mapping, then
// visits the layers in topological order, each writing its nodes through its table entry
// (export_layers.cpp), and wraps the graph in a ModelProto of opset 17.
#include "xylem/onnx/export.h"

#include <algorithm>
#include <map>
#include <set>

#include "export_graph.h"
#include "xylem/error.h"
#include "xylem/io/atomic_file.h"

namespace xylem::onnx_export {
namespace detail {

std::string GraphWriter::fresh(const std::string& base) {
    std::string name = base;
    for (int k = 1; !used_.insert(name).second; ++k) name = base + "_" + std::to_string(k);
    return name;
}

void GraphWriter::node_to(const std::string& output, const std::string& layer, const std::string& op,
                          std::vector<std::string> inputs, std::vector<Attr> attrs) {
    node_outputs({output}, layer, op, std::move(inputs), std::move(attrs));
}

void GraphWriter::node_outputs(const std::vector<std::string>& outputs, const std::string& layer, const std::string& op,
                               std::vector<std::string> inputs, std::vector<Attr> attrs) {
    onnx::NodeProto* n = g_.add_node();
    n->set_op_type(op);
    n->set_name(fresh(layer + "/" + op));
    for (const std::string& in : inputs) n->add_input(in);
    for (const std::string& out : outputs) n->add_output(out);
    for (const Attr& a : attrs) {
        onnx::AttributeProto* p = n->add_attribute();
        p->set_name(a.name);
        switch (a.kind) {
            case Attr::Int:
                p->set_type(onnx::AttributeProto::INT), p->set_i(a.i);
                break;
            case Attr::Float:
                p->set_type(onnx::AttributeProto::FLOAT), p->set_f(a.f);
                break;
            case Attr::Ints:
                p->set_type(onnx::AttributeProto::INTS);
                for (int64_t v : a.ints) p->add_ints(v);
                break;
            case Attr::String:
                p->set_type(onnx::AttributeProto::STRING), p->set_s(a.s);
                break;
        }
    }
}

std::string GraphWriter::node(const std::string& layer, const std::string& op, std::vector<std::string> inputs,
                              std::vector<Attr> attrs) {
    const std::string out = fresh(layer + "/" + op + ":0");  // a tensor name no node name takes
    node_to(out, layer, op, std::move(inputs), std::move(attrs));
    return out;
}

const std::string& GraphWriter::floats(const std::string& name, const Shape& dims, const std::vector<float>& values) {
    if (!initializers_.emplace(name, true).second) return initializers_.find(name)->first;
    onnx::TensorProto* t = g_.add_initializer();
    t->set_name(name);
    t->set_data_type(onnx::TensorProto::FLOAT);
    for (int64_t d : dims) t->add_dims(d);
    t->set_raw_data(std::string(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(float)));
    return initializers_.find(name)->first;
}

const std::string& GraphWriter::int64s(const std::string& name, const Shape& dims, const std::vector<int64_t>& values) {
    if (!initializers_.emplace(name, true).second) return initializers_.find(name)->first;
    onnx::TensorProto* t = g_.add_initializer();
    t->set_name(name);
    t->set_data_type(onnx::TensorProto::INT64);
    for (int64_t d : dims) t->add_dims(d);
    t->set_raw_data(std::string(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(int64_t)));
    return initializers_.find(name)->first;
}

std::string LayerView::param_name(const std::string& suffix) const {
    const std::string owner = spec && !spec->shares.empty() ? spec->shares : name;
    return owner + "." + suffix;
}

bool LayerView::has_param(const std::string& suffix) const {
    return state->count(param_name(suffix)) != 0;
}

std::vector<float> LayerView::param(const std::string& suffix, Shape* shape) const {
    auto it = state->find(param_name(suffix));
    if (it == state->end()) refuse("has no parameter '" + param_name(suffix) + "'");
    if (shape) *shape = it->second->value.shape();
    return it->second->value.to_vector();
}

void LayerView::refuse(const std::string& why) const {
    throw Error("cannot export model layer '" + name + "' (" + spec->type + "): " + why);
}

}  // namespace detail

const std::vector<LayerMapping>& mapped_layers() {
    static const std::vector<LayerMapping> table = [] {
        std::vector<LayerMapping> t;
        for (const detail::Mapping& m : detail::mappings()) t.push_back({m.layer, m.onnx});
        return t;
    }();
    return table;
}

namespace {
using detail::GraphWriter;

const detail::Mapping* find_mapping(const std::string& type) {
    for (const detail::Mapping& m : detail::mappings())
        if (type == m.layer) return &m;
    return nullptr;
}

void set_value_info(onnx::ValueInfoProto* v, const std::string& name, int elem_type, const Shape& sample) {
    v->set_name(name);
    onnx::TypeProto_Tensor* t = v->mutable_type()->mutable_tensor_type();
    t->set_elem_type(elem_type);
    onnx::TensorShapeProto* s = t->mutable_shape();
    s->add_dim()->set_dim_param(kBatchAxis);
    for (int64_t d : sample) s->add_dim()->set_dim_value(d);
}

// The spec of every node, by the node's name (a spec without a name is the next link of a chain,
// named by its position as Net::add names it).
std::map<std::string, const LayerSpec*> specs_by_node(const std::vector<LayerSpec>& layers) {
    std::map<std::string, const LayerSpec*> m;
    for (size_t k = 0; k < layers.size(); ++k)
        m[layers[k].name.empty() ? std::to_string(k) : layers[k].name] = &layers[k];
    return m;
}

// The layer type of node i: its spec's (the config's `type`; a layer's kind() may say more, "gelu (tanh)").
std::string type_of(const Net& net, size_t i, const std::map<std::string, const LayerSpec*>& specs) {
    auto it = specs.find(net.name(i));
    if (it == specs.end()) throw Error("onnx export: model layer '" + net.name(i) + "' is in no spec of the config");
    return it->second->type;
}

// Every layer without a mapping, named with its type, in one Error before any work.
void check_mapped(const Net& net, const std::map<std::string, const LayerSpec*>& specs) {
    std::vector<std::string> missing;
    std::set<std::string> types;
    for (size_t i = 0; i < net.size(); ++i) {
        const std::string type = type_of(net, i, specs);
        if (find_mapping(type)) continue;
        missing.push_back("'" + net.name(i) + "' (" + type + ")");
        types.insert(type);
    }
    if (missing.empty()) return;
    std::string list, type_list;
    for (const std::string& m : missing) list += (list.empty() ? "" : ", ") + m;
    for (const std::string& t : types) type_list += (type_list.empty() ? "" : ", ") + t;
    throw Error("cannot export the model to ONNX: " + std::to_string(missing.size()) + " layer" +
                (missing.size() == 1 ? "" : "s") + " of a type the exporter has no mapping for (" + type_list +
                "): " + list);
}
}  // namespace

std::string export_bytes(const Source& src) {
    if (!src.model || !src.layers || src.layers->empty()) throw Error("onnx export: no model given");
    Net& net = *src.model;
    if (net.input_names().size() != 1 || net.output_count() != 1)
        throw Error("onnx export: the model has " + std::to_string(net.input_names().size()) + " input(s) and " +
                    std::to_string(net.output_count()) + " output(s); xylem export writes models of one of each "
                    "(what xylem trains)");
    const auto specs = specs_by_node(*src.layers);
    check_mapped(net, specs);
    std::map<std::string, Param*> state;
    for (Param* p : net.state()) state[p->name] = p;

    onnx::ModelProto model;
    model.set_ir_version(8);  // the IR version of opset 17
    model.set_producer_name("xylem");
    model.set_model_version(1);
    onnx::OperatorSetIdProto* opset = model.add_opset_import();
    opset->set_domain("");
    opset->set_version(kOpset);
    onnx::GraphProto& g = *model.mutable_graph();
    g.set_name(src.name.empty() ? "xylem" : src.name);
    GraphWriter w(g);

    // The model's output: its last layer, or the one [model] outputs names.
    const std::string out_node = net.output_names().at(0);
    // The graph's and the layers' own tensor names are taken before any node asks for a fresh one.
    for (const std::string& n : {std::string(kInputName), std::string(kOutputName)}) w.fresh(n);
    for (size_t i = 0; i < net.size(); ++i) w.fresh(net.name(i));
    // Tensors by node name (ONNX names), and per-sample shapes, as the walk makes them.
    std::map<std::string, std::string> tensor{{net.input_names()[0], kInputName}};
    std::map<std::string, Shape> sample{{net.input_names()[0], src.input_sample}};
    const bool tokens = net.input_dtype() == DType::I32;
    for (size_t i = 0; i < net.size(); ++i) {
        detail::LayerView v;
        v.name = net.name(i);
        v.spec = specs.at(v.name);
        v.layer = &net.layer(i);
        v.state = &state;
        v.max_positions = net.max_positions();
        for (const std::string& in : net.inputs(i)) {
            v.inputs.push_back(tensor.at(in));
            v.input_samples.push_back(sample.at(in));
        }
        v.output_sample = v.layer->output_shape_of(v.input_samples);
        // The layer's tensor is named as the layer; a layer named as the graph's output that is not
        // the model's last takes another name (the last's tensor is renamed to it below).
        v.output = v.name == kOutputName && v.name != out_node ? w.fresh(v.name + "_") : v.name;
        const std::string wrote = find_mapping(v.spec->type)->emit(w, v);
        tensor[v.name] = wrote.empty() ? v.inputs.at(0) : v.output;
        sample[v.name] = v.output_sample;
    }
    std::string out_tensor = tensor.at(out_node);
    if (out_tensor == kInputName) out_tensor = w.node(out_node, "Identity", {kInputName});
    // Renamed to the graph's output name wherever it is written or read.
    for (onnx::NodeProto& n : *g.mutable_node()) {
        for (std::string& o : *n.mutable_output())
            if (o == out_tensor) o = kOutputName;
        for (std::string& in : *n.mutable_input())
            if (in == out_tensor) in = kOutputName;
    }
    set_value_info(g.add_input(), kInputName, tokens ? onnx::TensorProto::INT64 : onnx::TensorProto::FLOAT,
                   src.input_sample);
    set_value_info(g.add_output(), kOutputName, onnx::TensorProto::FLOAT, sample.at(out_node));
    std::string bytes;
    if (!model.SerializeToString(&bytes)) throw Error("onnx export: the model does not serialize (over 2 GiB?)");
    return bytes;
}

void export_file(const Source& source, const std::string& path) {
    const std::string bytes = export_bytes(source);  // every check first: nothing is written on an error
    io::write_file_atomic(path, bytes);
}

}  // namespace xylem::onnx_export
