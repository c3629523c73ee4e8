// The imported model as a config, and its parameters into a built Net.
#include <cstring>
#include <sstream>

#include "xylem/error.h"
#include "xylem/onnx/importer.h"

namespace xylem::onnx_import {

namespace {
// Text for a comment line: no line breaks or other control characters.
std::string one_line(std::string s) {
    for (char& c : s)
        if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) c = ' ';
    return s;
}
// "# Input 'x': [3, 224, 224] per sample." (several: "# Input 'b:0' (xylem: 'b_0'): ...").
std::string io_lines(const std::vector<ModelIO>& v, const char* what) {
    std::string s;
    for (const ModelIO& io : v) {
        s += std::string("# ") + what + " '" + one_line(io.name) + "'";
        if (v.size() > 1) s += " (xylem: '" + io.node + "')";
        s += ": " + to_string(io.sample) + " per sample" + (io.tokens ? ", token ids" : "") + ".\n";
    }
    return s;
}

}  // namespace

std::string config_text(const Imported& m) {
    std::ostringstream t;
    t << "# Imported by `xylem import` from " << one_line(m.source) << " (ONNX opset " << m.opset
      << (m.producer.empty() ? "" : ", made by " + one_line(m.producer)) << ").\n"
      << io_lines(m.inputs, "Input") << io_lines(m.outputs, "Output")
      << "# The weights are in the safetensors file written beside this config. [data], [loss], [solver] and\n"
      << "# [train] are defaults: edit them before fine-tuning with xylem train (docs/onnx.md).\n"
      << "backend = \"auto\"\n\n[data]\ndir = \"/usr/share/datasets/fashion-mnist\"\n\n"
      << m.layers_toml << "[loss]\ntype = \"cross_entropy\"\n\n[solver]\ntype = \"sgd\"\nlr = 0.01\nmomentum = 0.9\n\n"
      << "[train]\nepochs = 1\nbatch_size = 64\nseed = 1\n";
    return t.str();
}

std::vector<Shape> Imported::input_samples() const {
    std::vector<Shape> samples;
    for (const ModelIO& in : inputs) samples.push_back(in.sample);
    return samples;
}

RunConfig run_config(const Imported& m) { return parse_config(config_text(m), m.source); }

void load_parameters(Net& model, const Imported& m) {
    const std::vector<Param*> state = model.state();
    for (Param* p : state) {
        auto it = m.params.find(p->name);
        if (it == m.params.end()) throw Error(m.source + ": the imported model has no tensor for parameter '" + p->name + "'");
        if (it->second.shape != p->value.shape())
            throw Error(m.source + ": tensor '" + p->name + "' has shape " + to_string(it->second.shape) + ", the layer holds " +
                        to_string(p->value.shape()));
        if (static_cast<int64_t>(it->second.values.size()) != p->value.numel())
            throw Error(m.source + ": tensor '" + p->name + "' holds the wrong number of values");
    }
    if (state.size() != m.params.size())
        for (const auto& [name, t] : m.params) {
            bool used = false;
            for (Param* p : state) used |= p->name == name;
            if (!used) throw Error(m.source + ": imported tensor '" + name + "' belongs to no layer of the model");
        }
    for (Param* p : state)  // everything checked: now copy
        std::memcpy(p->value.host_write<float>(), m.params.at(p->name).values.data(), p->value.bytes());
}

}  // namespace xylem::onnx_import
