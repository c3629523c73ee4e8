// [model]: layers wired by name, and blocks written once and instantiated with a count.
//
//   [model.blocks.basic]                      # a block: its arguments (with defaults) and layers
//   args = { channels = 16, stride = 1, project = false }
//   layers = [
//     { type = "conv2d", name = "conv1", out = "$channels", kernel = 3, stride = "$stride", padding = 1 },
//     ...
//     { type = "add", inputs = ["bn2", "shortcut"] },
//   ]
//   [[model.layers]]
//   type = "block"; block = "basic"; name = "layer2"; count = 3
//   args = { channels = 32 }; first = { stride = 2, project = true }   # instance 0 only
//
// Inside a block, "input" is the block instance's input and names are local: instance r of
// layer2 prefixes its layers' names with "layer2.<r>." (PyTorch module paths: layer2.0.conv1.weight);
// a block instantiated without a count is one module, "shortcut.", as in layer2.0.shortcut.0.weight.
// A string "$arg" anywhere in a block's layer is replaced by that argument's value. A layer with
// enabled = false is left out and its name stands for its input (an identity shortcut).
//
// A model of several inputs names them, and may name several outputs (an imported ONNX graph):
//   [model]
//   inputs = ["tokens", "mask"]     # fed in this order; the first layer reads the first by default
//   outputs = ["logits", "pooled"]  # layers whose outputs the model gives (default: the last layer)
#include "model_config.h"

#include <algorithm>
#include <deque>
#include <map>

#include "xylem/error.h"

namespace xylem {
namespace {

// Limits that keep a hostile config from expanding without end.
constexpr int64_t kMaxLayers = 100000;  // after expansion
constexpr size_t kMaxBlockDepth = 16;

bool is_argument(const std::string& s) { return s.size() > 1 && s[0] == '$'; }

class Expander {
public:
    Expander(const Section& model, LayerTableParser parse) : model_(model), parse_(parse) {}

    void run(RunConfig& c);

private:
    struct Scope {
        std::string prefix;  // "" at the top, "layer2.0." in a block instance
        std::string input;   // what "input" stands for here
        const toml::table* args = nullptr;  // the instance's arguments (null at the top)
        std::string block;   // the block's name ("" at the top)
    };

    // Expands one list of layer tables in `scope`; returns the name of its last layer's output.
    std::string expand(const toml::array& layers, const std::string& path, const Scope& scope);
    void instantiate(const Section& s, const std::string& local, const std::string& input, std::string& out);
    toml::table substitute(const toml::table& in, const Scope& scope, const std::string& path) const;
    toml::array substitute(const toml::array& in, const Scope& scope, const std::string& path) const;
    const toml::node& argument(const std::string& ref, const Scope& scope, const std::string& path) const;
    [[noreturn]] void fail(const std::string& path, const std::string& what) const {
        throw Error(model_.source() + ": " + path + " " + what);
    }

    const Section& model_;
    LayerTableParser parse_;
    std::vector<LayerSpec> specs_;
    std::vector<std::string> stack_;       // the blocks being expanded, outermost first
    int64_t instances_ = 0;
    std::deque<toml::table> keep_;  // substituted tables (Sections point into them: a deque never moves them)
    std::vector<std::string> model_inputs_{"input"};
};

const toml::node& Expander::argument(const std::string& ref, const Scope& scope, const std::string& path) const {
    const std::string name = ref.substr(1);
    if (!scope.args)
        fail(path, "is \"" + ref + "\", a block argument, outside a block (arguments exist only in [model.blocks])");
    const toml::node* v = scope.args->get(name);
    if (!v) {
        std::string known;
        for (auto&& [k, unused] : *scope.args) known += (known.empty() ? "" : ", ") + std::string(k.str());
        fail(path, "is \"" + ref + "\" but block '" + scope.block + "' has no argument '" + name + "' (its arguments: " +
                       (known.empty() ? "none" : known) + ")");
    }
    return *v;
}

toml::table Expander::substitute(const toml::table& in, const Scope& scope, const std::string& path) const {
    toml::table out;
    for (auto&& [k, v] : in) {
        const std::string key_path = path + "." + std::string(k.str());
        const toml::node* value = &v;
        if (const auto* s = v.as_string(); s && is_argument(s->get())) value = &argument(s->get(), scope, "key '" + key_path + "'");
        if (const auto* t = value->as_table()) out.insert_or_assign(k, substitute(*t, scope, key_path));
        else if (const auto* a = value->as_array()) out.insert_or_assign(k, substitute(*a, scope, key_path));
        else value->visit([&out, &key = k](const auto& x) { out.insert_or_assign(key, x); });  // clang 14: no captured bindings
    }
    return out;
}

toml::array Expander::substitute(const toml::array& in, const Scope& scope, const std::string& path) const {
    toml::array out;
    for (size_t i = 0; i < in.size(); ++i) {
        const std::string item_path = path + "[" + std::to_string(i) + "]";
        const toml::node* value = in.get(i);
        if (const auto* s = value->as_string(); s && is_argument(s->get())) value = &argument(s->get(), scope, "key '" + item_path + "'");
        if (const auto* t = value->as_table()) out.push_back(substitute(*t, scope, item_path));
        else if (const auto* a = value->as_array()) out.push_back(substitute(*a, scope, item_path));
        else value->visit([&](const auto& x) { out.push_back(x); });
    }
    return out;
}

std::string Expander::expand(const toml::array& layers, const std::string& path, const Scope& scope) {
    // Pass 1: the local names, so an input may name a layer listed later in the same list.
    std::map<std::string, std::string> local;  // local name -> global name (or, once resolved, its alias)
    std::vector<Section> sections;
    for (size_t j = 0; j < layers.size(); ++j) {
        const std::string item = path + "[" + std::to_string(j) + "]";
        if (!layers.get(j)->is_table()) fail("key '" + item + "'", "must be a table (one layer)");
        keep_.push_back(substitute(*layers.get(j)->as_table(), scope, item));
        sections.emplace_back(keep_.back(), item, model_.source());
    }
    for (size_t j = 0; j < sections.size(); ++j) {
        std::string name = std::to_string(j);
        sections[j].get("name", name);
        if (name.empty() || name == "input" || name.find('.') != std::string::npos)
            sections[j].fail("name", "must be a non-empty name without dots, other than 'input' (got '" + name + "')");
        if (scope.block.empty() && std::find(model_inputs_.begin(), model_inputs_.end(), name) != model_inputs_.end())
            sections[j].fail("name", "is '" + name + "', which names a model input (model.inputs)");
        if (!local.emplace(name, scope.prefix + name).second)
            sections[j].fail("name", "is '" + name + "', which another layer of " +
                                         (scope.block.empty() ? std::string("the model") : "block '" + scope.block + "'") + " has");
    }
    auto resolve = [&](const std::string& n) -> std::string {
        if (n == "input") return scope.input;
        const auto it = local.find(n);
        return it == local.end() ? scope.prefix + n : it->second;  // unknown: Net::build names it
    };
    // Pass 2: each layer, with its inputs resolved (default: the layer before it).
    std::string previous = scope.input;
    for (size_t j = 0; j < sections.size(); ++j) {
        const Section& s = sections[j];
        std::string name = std::to_string(j), type;
        s.get("name", name);
        if (!s.has("type")) s.fail("type", "is required");
        s.get("type", type);
        std::vector<std::string> inputs;
        if (s.has("inputs")) {
            s.get_list("inputs", inputs);
            if (inputs.empty()) s.fail("inputs", "must name at least one layer (or \"input\", the model's input)");
            for (std::string& in : inputs) in = resolve(in);
        } else {
            inputs = {previous};
        }
        bool enabled = true;
        s.get("enabled", enabled);
        if (!enabled) {  // left out: its name stands for its input
            if (j + 1 == sections.size() && scope.block.empty()) s.fail("enabled", "is false on the model's last layer, its output");
            if (inputs.size() != 1) s.fail("enabled", "is false on a layer of " + std::to_string(inputs.size()) +
                                                          " inputs: only a one-input layer can stand for its input");
            local[name] = inputs[0];
            previous = inputs[0];
            continue;
        }
        if (type == "block") {
            s.allow({"type", "name", "inputs", "enabled", "block", "count", "args", "first"});
            if (inputs.size() != 1) s.fail("inputs", "names " + std::to_string(inputs.size()) + " layers; a block takes one input");
            std::string out;
            instantiate(s, scope.prefix + name, inputs[0], out);
            local[name] = out;
            previous = out;
            continue;
        }
        LayerSpec spec = parse_(s);
        spec.name = scope.prefix + name;
        spec.inputs = std::move(inputs);
        if (s.has("shares")) {
            s.get("shares", spec.shares);
            spec.shares = resolve(spec.shares);
        }
        if (static_cast<int64_t>(specs_.size()) >= kMaxLayers)
            s.fail("type", "makes the model larger than " + std::to_string(kMaxLayers) + " layers");
        specs_.push_back(std::move(spec));
        previous = specs_.back().name;
        local[name] = previous;
    }
    return previous;
}

// One `type = "block"` table: `count` instances of the block, each reading the one before.
void Expander::instantiate(const Section& s, const std::string& global, const std::string& input, std::string& out) {
    std::string block;
    if (!s.has("block")) s.fail("block", "is required: the name of a block in [model.blocks]");
    s.get("block", block);
    const Section blocks = model_.sub("blocks");
    if (!blocks.node(block)) {
        std::string known;
        for (auto&& [k, unused] : blocks.table()) known += (known.empty() ? "" : ", ") + std::string(k.str());
        s.fail("block", "names no block '" + block + "' (blocks: " + (known.empty() ? "none" : known) + ")");
    }
    const Section def = blocks.sub(block);
    def.allow({"args", "layers"});
    const toml::node* layers = def.node("layers");
    if (!layers || !layers->is_array() || layers->as_array()->empty())
        def.fail("layers", "must list the block's layers (an array of tables)");
    for (const std::string& b : stack_)
        if (b == block) {
            std::string chain;
            for (const std::string& c : stack_) chain += c + " -> ";
            s.fail("block", "makes block '" + block + "' contain itself (" + chain + block + ")");
        }
    if (stack_.size() >= kMaxBlockDepth) s.fail("block", "nests blocks deeper than " + std::to_string(kMaxBlockDepth));
    int64_t count = 1;
    s.get("count", count, IntRange{1, kMaxLayers});
    // Arguments: the block's defaults, then the instance's `args`, then for instance 0 `first`.
    toml::table defaults;
    if (const toml::node* a = def.node("args")) {
        if (!a->is_table()) def.fail("args", "must be a table of argument names and their default values");
        defaults = *a->as_table();
    }
    auto overlay = [&](toml::table& onto, const char* key) {
        const toml::node* n = s.node(key);
        if (!n) return;
        if (!n->is_table()) s.fail(key, "must be a table of the block's arguments");
        for (auto&& [k, v] : *n->as_table()) {
            if (!defaults.get(k.str()))
                s.fail(key, "sets '" + std::string(k.str()) + "', which block '" + block +
                                "' does not take (declare it in [model.blocks." + block + "] args)");
            v.visit([&onto, &key = k](const auto& x) { onto.insert_or_assign(key, x); });
        }
    };
    toml::table args = defaults;
    overlay(args, "args");
    stack_.push_back(block);
    std::string current = input;
    for (int64_t r = 0; r < count; ++r) {
        if (++instances_ > kMaxLayers)
            s.fail("count", "makes more than " + std::to_string(kMaxLayers) + " block instances in the model");
        toml::table instance = args;
        if (r == 0) overlay(instance, "first");
        // With a count, instance r is "<name>.<r>" (an nn.Sequential of blocks); without, "<name>".
        const std::string prefix = s.has("count") ? global + "." + std::to_string(r) + "." : global + ".";
        Scope inner{prefix, current, &instance, block};
        current = expand(*layers->as_array(), def.key_path("layers"), inner);
    }
    stack_.pop_back();
    out = current;
}

void Expander::run(RunConfig& c) {
    model_.allow({"layers", "blocks", "inputs", "outputs"});
    c.model_inputs.clear();
    c.model_outputs.clear();
    if (model_.has("inputs")) {
        model_.get_list("inputs", c.model_inputs);
        if (c.model_inputs.empty() || c.model_inputs.size() > RunConfig::kMaxModelInputs)
            model_.fail("inputs", "must name 1 to " + std::to_string(RunConfig::kMaxModelInputs) + " model inputs (got " +
                                      std::to_string(c.model_inputs.size()) + ")");
        for (size_t k = 0; k < c.model_inputs.size(); ++k) {
            const std::string& n = c.model_inputs[k];
            if (n.empty() || n.find('.') != std::string::npos || n[0] == '$')
                model_.fail("inputs", "holds '" + n + "'; an input's name is non-empty, without dots or a leading '$'");
            if (std::find(c.model_inputs.begin(), c.model_inputs.begin() + static_cast<std::ptrdiff_t>(k), n) !=
                c.model_inputs.begin() + static_cast<std::ptrdiff_t>(k))
                model_.fail("inputs", "names '" + n + "' twice");
        }
        model_inputs_ = c.model_inputs;
    }
    if (model_.has("outputs")) {
        model_.get_list("outputs", c.model_outputs);
        if (c.model_outputs.empty() || c.model_outputs.size() > RunConfig::kMaxModelInputs)
            model_.fail("outputs", "must name 1 to " + std::to_string(RunConfig::kMaxModelInputs) + " layers (got " +
                                       std::to_string(c.model_outputs.size()) + ")");
        for (size_t k = 0; k < c.model_outputs.size(); ++k)
            if (std::find(c.model_outputs.begin(), c.model_outputs.begin() + static_cast<std::ptrdiff_t>(k),
                          c.model_outputs[k]) != c.model_outputs.begin() + static_cast<std::ptrdiff_t>(k))
                model_.fail("outputs", "names '" + c.model_outputs[k] + "' twice");
    }
    const Section blocks = model_.sub("blocks");  // checks that it is a table
    for (auto&& [k, v] : blocks.table())
        if (!v.is_table()) blocks.fail(std::string(k.str()), "must be a table (args and layers)");
    const toml::node* n = model_.node("layers");
    if (!n) {
        c.layers.clear();
        return;
    }
    if (!n->is_array_of_tables()) model_.fail("layers", "must be an array of tables ([[model.layers]])");
    expand(*n->as_array(), model_.key_path("layers"), Scope{"", model_inputs_[0], nullptr, ""});
    c.layers = std::move(specs_);
}

}  // namespace

void parse_model(const Section& model, LayerTableParser parse_layer_table, RunConfig& c) {
    Expander(model, parse_layer_table).run(c);
}

}  // namespace xylem
