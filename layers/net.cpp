// Net: graph checks, topological order, shape inference by name, activation fusion, forward and
// backward with the accumulate rule (net.h).
#include "xylem/layers/net.h"

#include <algorithm>
#include <array>
#include <cstdio>
#include <map>
#include <queue>

#include "xylem/error.h"
#include "xylem/memory.h"
#include "xylem/layers/batchnorm.h"
#include "xylem/layers/conv.h"
#include "xylem/layers/elementwise.h"
#include "xylem/layers/embedding.h"
#include "xylem/layers/merge.h"
#include "xylem/op_calls.h"
#include "xylem/profiler.h"

namespace xylem {
namespace {

bool is_index(const std::string& s) { return !s.empty() && s.find_first_not_of("0123456789") == std::string::npos; }

// "model layer 2 (linear)" for a chain's layers, "model layer 'layer1.0.conv1' (conv2d)" for named ones.
std::string node_label(const std::string& name, const std::string& kind) {
    return "model layer " + (is_index(name) ? name : "'" + name + "'") + " (" + kind + ")";
}

std::string joined(const std::vector<std::string>& names) {
    std::string s;
    for (const std::string& n : names) s += (s.empty() ? "" : ", ") + n;
    return s;
}

}  // namespace

void Net::set_inputs(std::vector<std::string> names) {
    if (prepared_) throw Error("model inputs set after the model was planned or built");
    if (names.empty()) throw Error("model inputs: none named (a model reads at least one input)");
    if (names.size() > kMaxInputs)
        throw Error("model inputs: " + std::to_string(names.size()) + " named, at most " + std::to_string(kMaxInputs));
    for (size_t k = 0; k < names.size(); ++k) {
        if (names[k].empty()) throw Error("model input " + std::to_string(k) + ": its name is empty");
        for (size_t m = 0; m < k; ++m)
            if (names[m] == names[k]) throw Error("model inputs: '" + names[k] + "' is named twice");
        if (find(names[k]) != nodes_.size())
            throw Error("model input '" + names[k] + "': the name is taken by " + nodes_[find(names[k])].layer->label());
    }
    input_names_ = std::move(names);
}

void Net::set_outputs(std::vector<std::string> names) {
    if (prepared_) throw Error("model outputs set after the model was planned or built");
    if (names.empty()) throw Error("model outputs: none named (a model gives at least one output)");
    if (names.size() > kMaxInputs)
        throw Error("model outputs: " + std::to_string(names.size()) + " named, at most " + std::to_string(kMaxInputs));
    for (size_t k = 0; k < names.size(); ++k)
        for (size_t m = 0; m < k; ++m)
            if (names[m] == names[k]) throw Error("model outputs: '" + names[k] + "' is named twice");
    output_names_ = std::move(names);
}

std::vector<std::string> Net::output_names() const {
    if (!output_names_.empty()) return output_names_;
    return nodes_.empty() ? std::vector<std::string>{} : std::vector<std::string>{nodes_[output_nodes_.empty() ? nodes_.size() - 1 : output_nodes_[0]].name};
}

size_t Net::input_index(const std::string& name) const {
    for (size_t k = 0; k < input_names_.size(); ++k)
        if (input_names_[k] == name) return k;
    return kMaxInputs;
}

void Net::add(std::unique_ptr<Layer> layer) {
    std::vector<std::string> inputs{nodes_.empty() ? input_names_[0] : nodes_.back().name};
    add(std::to_string(nodes_.size()), std::move(inputs), std::move(layer));
}

void Net::add(const std::string& name, std::vector<std::string> inputs, std::unique_ptr<Layer> layer,
              const std::string& shares) {
    if (!layer) throw Error("model layer '" + name + "': no layer given");
    const std::string label = node_label(name, layer->kind());
    if (built_) throw Error(label + ": the model is already built; add every layer before build()");
    if (name.empty()) throw Error("model layer " + std::to_string(nodes_.size()) + " (" + layer->kind() + "): its name is empty");
    if (name == kInput || input_index(name) != kMaxInputs)
        throw Error(label + ": the name '" + name + "' is reserved for the model's input");
    if (find(name) != nodes_.size())
        throw Error(label + ": the name '" + name + "' is taken by " + nodes_[find(name)].layer->label() +
                    " (every layer needs a name of its own)");
    if (inputs.empty()) throw Error(label + ": has no inputs");
    layer->set_label(label);
    layer->set_input_names(inputs);
    layer->set_param_prefix(name + ".");  // PyTorch state_dict names: "0.weight", "layer1.0.conv1.weight"
    Node n;
    n.name = name;
    n.inputs = std::move(inputs);
    n.layer = std::move(layer);
    n.shares = shares;
    index_.emplace(name, nodes_.size());
    nodes_.push_back(std::move(n));
}

size_t Net::find(const std::string& name) const {
    const auto it = index_.find(name);
    return it == index_.end() ? nodes_.size() : it->second;
}

void Net::resolve_inputs() {
    for (Node& n : nodes_) {
        n.from.clear();
        const size_t want = n.layer->input_count();
        if (want ? n.inputs.size() != want : n.inputs.size() < 2)
            throw Error(n.layer->label() + ": takes " + (want ? std::to_string(want) : std::string("two or more")) +
                        " input(s), `inputs` names " + std::to_string(n.inputs.size()) + " (" + joined(n.inputs) + ")");
        for (const std::string& in : n.inputs) {
            if (const size_t k = input_index(in); k != kMaxInputs) {
                n.from.push_back(model_input(k));
                continue;
            }
            const size_t j = find(in);
            if (j == nodes_.size())
                throw Error(n.layer->label() + ": input '" + in + "' names no layer of the model (and is not " +
                            (input_names_.size() == 1 ? "'" + input_names_[0] + "', the model's input)"
                                                      : "one of the model's inputs: " + joined(input_names_) + ")"));
            if (j == static_cast<size_t>(&n - nodes_.data())) throw Error(n.layer->label() + ": reads its own output (a cycle)");
            n.from.push_back(j);
        }
    }
}

// Kahn's algorithm, taking the earliest-added ready node each time: a chain, or any graph listed
// in an order that already works, keeps its order.
void Net::order_topologically() {
    const size_t count = nodes_.size();
    std::vector<size_t> waiting(count, 0);
    std::vector<std::vector<size_t>> readers(count);
    for (size_t i = 0; i < count; ++i)
        for (size_t j : nodes_[i].from)
            if (!is_model_input(j)) {
                ++waiting[i];
                readers[j].push_back(i);
            }
    std::vector<size_t> order;
    std::vector<bool> done(count, false);
    std::priority_queue<size_t, std::vector<size_t>, std::greater<size_t>> ready;
    for (size_t i = 0; i < count; ++i)
        if (waiting[i] == 0) ready.push(i);
    while (order.size() < count) {
        if (ready.empty()) {  // every node left waits on another: follow inputs until one repeats
            size_t at = 0;
            while (done[at]) ++at;
            std::vector<size_t> path;
            while (std::find(path.begin(), path.end(), at) == path.end()) {
                path.push_back(at);
                for (size_t j : nodes_[at].from)
                    if (!is_model_input(j) && !done[j]) {
                        at = j;
                        break;
                    }
            }
            std::string cycle;
            for (auto it = std::find(path.begin(), path.end(), at); it != path.end(); ++it) cycle += nodes_[*it].name + " reads ";
            throw Error("model layers form a cycle: " + cycle + nodes_[at].name + " (a layer cannot read its own output)");
        }
        const size_t next = ready.top();
        ready.pop();
        done[next] = true;
        order.push_back(next);
        for (size_t r : readers[next])
            if (--waiting[r] == 0) ready.push(r);
    }
    std::vector<size_t> position(count);
    for (size_t k = 0; k < count; ++k) position[order[k]] = k;
    std::vector<Node> sorted;
    sorted.reserve(count);
    for (size_t k = 0; k < count; ++k) sorted.push_back(std::move(nodes_[order[k]]));
    nodes_ = std::move(sorted);
    index_.clear();
    for (size_t k = 0; k < count; ++k) index_.emplace(nodes_[k].name, k);
    for (Node& n : nodes_)
        for (size_t& j : n.from)
            if (!is_model_input(j)) j = position[j];
    output_nodes_.clear();
    if (output_names_.empty()) {
        output_nodes_.push_back(position[count - 1]);  // the last node added is the model's output
    } else {
        for (const std::string& o : output_names_) {
            const size_t j = find(o);
            if (j == nodes_.size())
                throw Error("model output '" + o + "' names no layer of the model" +
                            (input_index(o) != kMaxInputs ? " (it is a model input: an output needs a layer to run)" : ""));
            output_nodes_.push_back(j);
        }
    }
    for (size_t j : output_nodes_) nodes_[j].is_output = true;
}

void Net::check_outputs_used() const {
    for (size_t i = 0; i < nodes_.size(); ++i)
        if (!nodes_[i].is_output && nodes_[i].consumers == 0)
            throw Error(nodes_[i].layer->label() + ": its output is read by no layer (" +
                        (output_names_.empty() ? "only the last layer, " + nodes_[output_nodes_[0]].layer->label() +
                                                     ", gives the model's output"
                                               : "the model's outputs are " + joined(output_names_)) +
                        "; name '" + nodes_[i].name + "' in a later layer's inputs or remove it)");
}

// A node sharing another's parameters: same type, same parameter shapes, and a layer that can
// add its parameter gradients to the owner's.
void Net::bind_shared(size_t i) {
    Node& n = nodes_[i];
    const size_t o = find(n.shares);
    if (o == nodes_.size()) throw Error(n.layer->label() + ": shares the parameters of '" + n.shares + "', which names no layer");
    if (o == i) throw Error(n.layer->label() + ": shares the parameters of itself");
    if (o > i)  // the owner binds (draws its parameters) first
        throw Error(n.layer->label() + ": shares the parameters of " + nodes_[o].layer->label() +
                    ", which runs after it; let the layer that runs first own them (move `shares` to the other one)");
    if (nodes_[o].owner != SIZE_MAX)
        throw Error(n.layer->label() + ": shares the parameters of '" + n.shares + "', which shares those of '" +
                    nodes_[o].shares + "'; name '" + nodes_[o].shares + "' instead");
    // Layers of different types may share when their parameter lists match (GPT's tied token
    // embedding [vocab, C] and output head without bias [vocab, C]): checked after bind.
    if (!n.layer->can_accumulate_param_grads())
        throw Error(n.layer->label() + ": cannot share parameters (its backward pass cannot add to a shared gradient)");
    n.owner = o;
}

void Net::sync_shared() {
    for (Node& n : nodes_) {
        if (n.owner == SIZE_MAX) continue;
        std::vector<Param*> mine = n.layer->params(), theirs = nodes_[n.owner].layer->params();
        for (size_t k = 0; k < mine.size(); ++k) {
            mine[k]->value = theirs[k]->value;  // the same storage: one parameter, one gradient
            mine[k]->grad = theirs[k]->grad;
        }
    }
}

void Net::fuse_activations(Backend& backend) {
    for (Node& n : nodes_) {
        auto* act = dynamic_cast<Activation*>(n.layer.get());
        if (!act || is_model_input(n.from[0])) continue;
        Node& p = nodes_[n.from[0]];
        // Valid only when the activation is the producer's one reader: any other reader needs the
        // value before the activation.
        if (p.fused || p.consumers != 1 || p.is_output || p.owner != SIZE_MAX) continue;
        n.fused = p.layer->fuse_activation(act->activation(), backend);
    }
}

// A one_hot layer whose one reader multiplies it by a weight (an lstm or gru) is not run: the
// reader gets the one_hot's input, the token ids, and gathers its weight's columns (the same
// values; char-rnn's level-0 projection was a GEMM over 114-wide one-hot rows, 113 of them zero).
void Net::pass_token_ids(Backend& backend) {
    for (size_t i = 0; i < nodes_.size(); ++i) {
        Node& n = nodes_[i];
        const auto* one_hot = dynamic_cast<const OneHot*>(n.layer.get());
        if (!one_hot || n.consumers != 1 || n.is_output) continue;
        for (size_t j = i + 1; j < nodes_.size(); ++j) {
            Node& reader = nodes_[j];
            if (std::find(reader.from.begin(), reader.from.end(), i) == reader.from.end()) continue;
            n.ids_passed = reader.from.size() == 1 && reader.layer->take_token_ids(one_hot->vocab(), backend);
            break;
        }
    }
}

// Inference (forward with train = false) folds a batch norm into the convolution it reads:
// conv -> batchnorm [-> activation] runs as one convolution with rescaled weights and bias and the
// activation fused (Conv2d::forward_folded), two passes over each map fewer. Valid when the
// batch norm is the convolution's one reader and the activation the batch norm's, and the conv
// has no activation of its own; training runs every node as written.
void Net::fold_batch_norms(const Backend& backend) {
    for (size_t i = 0; i < nodes_.size(); ++i) {
        Node& bn = nodes_[i];
        if (!dynamic_cast<BatchNorm*>(bn.layer.get()) || is_model_input(bn.from[0])) continue;
        Node& conv = nodes_[bn.from[0]];
        auto* c = dynamic_cast<Conv2d*>(conv.layer.get());
        if (!c || c->has_fused_activation() || conv.consumers != 1 || conv.is_output || conv.fused) continue;
        conv.fold_bn = i;
        bn.folded = true;
        for (size_t j = i + 1; j < nodes_.size(); ++j) {
            Node& a = nodes_[j];
            if (a.from.size() != 1 || a.from[0] != i) continue;
            auto* act = dynamic_cast<Activation*>(a.layer.get());
            // Only what conv2d_fwd runs as its epilogue (a GELU after a batch norm stays a layer). An
            // activation fused into the batch norm (its ReLU) moves with it into the conv.
            if (bn.consumers == 1 && !bn.is_output && act &&
                (a.fused || fusable_activation(act->activation(), backend))) {
                conv.fold_act = j;
                a.folded = true;
            }
            break;
        }
    }
}

// Inference also folds a residual add into the convolution that feeds it: conv [-> batchnorm] ->
// add [-> activation] runs as one convolution whose epilogue adds the add's other input, then
// applies the activation (ResNet's conv2 -> bn2 -> add -> relu2, ONNX's Conv -> Add -> Relu): the
// add's and the activation's passes over memory are gone. Valid when the conv's output (or its
// folded batch norm's) is read by the add alone and the add's by the activation alone, the two
// inputs have one shape (no broadcast), the conv has no activation of its own, and the backend
// takes the residual input (ABI 1.10, not declined). The conv runs at the add's turn, where both
// inputs are computed. Run after fold_batch_norms.
void Net::fold_residual_adds(Backend& backend) {
    for (size_t i = 0; i < nodes_.size(); ++i) {
        Node& add = nodes_[i];
        const auto* sum = dynamic_cast<const Add*>(add.layer.get());
        if (!sum || sum->kind() != "add" || add.from.size() != 2) continue;
        for (size_t side = 0; side < 2 && add.residual_conv == SIZE_MAX; ++side) {
            const size_t t = add.from[side], other = add.from[1 - side];
            if (is_model_input(t) || t == other || sample_shape(t) != sample_shape(other)) continue;
            if (is_model_input(other) && input_dtypes_[other - kFirstModelInput] != DType::F32) continue;
            const Node& tail = nodes_[t];
            if (tail.consumers != 1 || tail.is_output) continue;
            // The tail is the conv, or the batch norm folded into it (with no activation folded).
            size_t c = t;
            if (dynamic_cast<const BatchNorm*>(tail.layer.get())) {
                if (!tail.folded || is_model_input(tail.from[0])) continue;
                c = tail.from[0];
                if (nodes_[c].fold_bn != t || nodes_[c].fold_act != SIZE_MAX) continue;
            } else if (tail.fold_bn != SIZE_MAX) {
                continue;
            }
            Node& conv = nodes_[c];
            const auto* layer = dynamic_cast<const Conv2d*>(conv.layer.get());
            if (!layer || layer->has_fused_activation() || conv.fused || conv.is_output || conv.consumers != 1 ||
                conv.runs_in_add != SIZE_MAX)
                continue;
            if (!ops::conv2d_fwd_takes_residual(backend, sample_shape(conv.from[0]), layer->weight_shape(), layer->attrs()))
                continue;
            conv.runs_in_add = i;
            add.residual_conv = c;
            add.residual_from = other;
        }
        if (add.residual_conv == SIZE_MAX || add.consumers != 1 || add.is_output) continue;
        for (size_t j = i + 1; j < nodes_.size(); ++j) {
            Node& a = nodes_[j];
            if (a.from.size() != 1 || a.from[0] != i) continue;
            auto* act = dynamic_cast<Activation*>(a.layer.get());
            if (act && !a.fused && fusable_activation(act->activation(), backend)) {
                add.fold_act = j;
                a.folded = true;
            }
            break;
        }
    }
}

const Shape& Net::sample_shape(size_t j) const {
    return is_model_input(j) ? inputs_[j - kFirstModelInput] : nodes_[j].shape;
}

size_t Net::fold_target(size_t i) const {
    const Node& p = nodes_[nodes_[i].from[0]];  // a batch norm's conv, or the node before an activation
    if (p.residual_conv != SIZE_MAX) return p.residual_conv;
    return p.folded ? p.from[0] : nodes_[i].from[0];
}

std::string Net::inputs_given(size_t given) const {
    std::string s = "model takes " + std::to_string(input_names_.size()) + " input(s) (" + joined(input_names_) +
                    "), given " + std::to_string(given);
    if (given == 1)  // the data-fed commands and Model.fit feed one
        s += ": xylem's datasets feed models of one input (an ONNX model of several runs with `xylem run MODEL.onnx "
             "--input A.npy --input B.npy`, or Python's Model.from_onnx(...).predict([a, b]))";
    return s;
}

void Net::prepare(std::span<const Shape> input_samples) {
    if (prepared_) {
        if (!std::equal(inputs_.begin(), inputs_.end(), input_samples.begin(), input_samples.end())) {
            std::string planned, given;
            for (const Shape& s : inputs_) planned += (planned.empty() ? "" : ", ") + to_string(s);
            for (const Shape& s : input_samples) given += (given.empty() ? "" : ", ") + to_string(s);
            throw Error("model was planned for samples of shape " + planned + ", not " + given);
        }
        return;
    }
    if (nodes_.empty()) throw Error("model has no layers");
    if (input_samples.size() != input_names_.size())
        throw Error(inputs_given(input_samples.size()));
    resolve_inputs();
    order_topologically();
    for (Node& n : nodes_)
        for (size_t j : n.from)
            if (!is_model_input(j)) ++nodes_[j].consumers;
    check_outputs_used();
    inputs_.assign(input_samples.begin(), input_samples.end());
    std::vector<Shape> shapes;
    for (size_t i = 0; i < nodes_.size(); ++i) {
        Node& n = nodes_[i];
        if (!n.shares.empty()) bind_shared(i);
        n.shape = n.layer->output_shape_of(input_shapes(i, shapes));
    }
    prepared_ = true;
}

const std::vector<Shape>& Net::input_shapes(size_t i, std::vector<Shape>& shapes) const {
    shapes.clear();
    for (size_t j : nodes_[i].from) shapes.push_back(is_model_input(j) ? inputs_[j - kFirstModelInput] : nodes_[j].shape);
    return shapes;
}

Net::Footprint Net::footprint(std::span<const Shape> input_samples) {
    prepare(input_samples);
    return count_footprint();
}

Net::Footprint Net::footprint(const Shape& input_sample) { return footprint(std::span<const Shape>(&input_sample, 1)); }

Net::Footprint Net::count_footprint() const {
    Footprint f;
    std::vector<bool> needs_grad(nodes_.size(), false);
    std::vector<Shape> shapes;
    for (size_t i = 0; i < nodes_.size(); ++i) {
        const Node& n = nodes_[i];
        const Layer::ParamFloats p = nodes_[n.owner == SIZE_MAX ? i : n.owner].layer->param_floats_of(
            input_shapes(n.owner == SIZE_MAX ? i : n.owner, shapes));
        if (n.owner == SIZE_MAX) {  // a shared parameter is counted once, under its owner
            f.trainable += p.trainable;
            f.buffers += p.buffers;
        }
        needs_grad[i] = p.trainable > 0;
        for (size_t j : n.from)
            if (!is_model_input(j) && needs_grad[j]) needs_grad[i] = true;
        if (n.fused || n.ids_passed) continue;  // runs in its producer's output, or not at all (known once built)
        f.outputs_per_sample += numel(n.shape);
        if (needs_grad[i]) f.output_grads_per_sample += numel(n.shape);
    }
    f.run_outputs_per_sample = built_ && training_ ? f.outputs_per_sample : run_floats_per_sample();
    return f;
}

void Net::build(Device& dev, const Shape& input_sample, uint64_t seed, bool training) {
    build(dev, std::span<const Shape>(&input_sample, 1), seed, training);
}

void Net::build(Device& dev, std::span<const Shape> input_samples, uint64_t seed, bool training) {
    if (built_) throw Error("model is already built");
    prepare(input_samples);
    training_ = training;
    std::mt19937_64 rng(seed);
    std::vector<Shape> shapes;
    for (size_t i = 0; i < nodes_.size(); ++i) {
        Node& n = nodes_[i];
        input_shapes(i, shapes);
        n.layer->set_inference_build(!training);
        n.layer->bind_inputs(dev, shapes, rng);
        n.shape = n.layer->output_shape_of(shapes);
        check_param_floats(n, shapes);
        const std::vector<Param*> ps = n.layer->params();
        n.writes_grads = !ps.empty();
        n.owns_params = n.writes_grads && n.owner == SIZE_MAX;
        if (n.owner != SIZE_MAX) {
            const std::vector<Param*> theirs = nodes_[n.owner].layer->params();
            if (ps.size() != theirs.size())
                throw Error(n.layer->label() + ": shares the parameters of " + nodes_[n.owner].layer->label() +
                            " but has " + std::to_string(ps.size()) + " parameter tensors where that layer has " +
                            std::to_string(theirs.size()) + " (a tied output head needs bias = false)");
            for (size_t k = 0; k < ps.size(); ++k)
                if (k >= theirs.size() || ps[k]->value.shape() != theirs[k]->value.shape())
                    throw Error(n.layer->label() + ": shares the parameters of " + nodes_[n.owner].layer->label() +
                                " but its " + ps[k]->name + " is " + to_string(ps[k]->value.shape()) + " where that layer's is " +
                                (k < theirs.size() ? to_string(theirs[k]->value.shape()) : std::string("missing")));
        }
        n.needs_grad = n.writes_grads;
        for (size_t j : n.from)
            if (!is_model_input(j) && nodes_[j].needs_grad) n.needs_grad = true;
    }
    // The first node backward reaches (the highest index) writes a shared gradient; the rest add.
    std::vector<bool> written(nodes_.size(), false);
    for (size_t i = nodes_.size(); i-- > 0;) {
        Node& n = nodes_[i];
        if (!n.writes_grads) continue;
        const size_t group = n.owner == SIZE_MAX ? i : n.owner;
        n.layer->set_accumulate_param_grads(written[group]);
        written[group] = true;
    }
    sync_shared();
    input_dtypes_.assign(input_names_.size(), DType::F32);
    std::vector<bool> seen(input_names_.size(), false);
    for (const Node& n : nodes_)
        for (size_t j : n.from)
            if (is_model_input(j)) {
                const size_t k = j - kFirstModelInput;
                if (seen[k] && n.layer->input_dtype() != input_dtypes_[k])
                    throw Error(n.layer->label() + ": reads the model input '" + input_names_[k] + "' as " +
                                dtype_name(n.layer->input_dtype()) + " values, another layer reads it as " +
                                dtype_name(input_dtypes_[k]));
                input_dtypes_[k] = n.layer->input_dtype();
                seen[k] = true;
            }
    fuse_activations(dev.backend());
    pass_token_ids(dev.backend());
    fold_batch_norms(dev.backend());
    fold_residual_adds(dev.backend());
    output_shapes_.clear();
    for (size_t j : output_nodes_) output_shapes_.push_back(nodes_[j].shape);
    for (Node& n : nodes_) {
        n.forward_scope = n.layer->label() + " forward";
        n.backward_scope = n.layer->label() + " backward";
    }
    outputs_.assign(nodes_.size(), nullptr);
    grads_.assign(nodes_.size(), nullptr);
    arrived_.assign(nodes_.size(), 0);
    accumulators_.assign(nodes_.size(), Tensor());
    built_ = true;
    check_ops(dev.backend(), false);  // inference needs the forward ops; train() checks backward too
}

DType Net::input_dtype(size_t k) const {
    if (nodes_.empty()) throw Error("model has no layers");
    if (k >= input_names_.size())
        throw Error("model input " + std::to_string(k) + ": the model has " + std::to_string(input_names_.size()));
    if (built_) return input_dtypes_[k];
    for (const Node& n : nodes_) {
        for (size_t m = 0; m < n.inputs.size(); ++m)  // by name: before build() `from` is not resolved
            if (n.inputs[m] == input_names_[k]) return n.layer->input_dtype();
    }
    return DType::F32;  // an input no layer reads
}

void Net::check_token_ids(size_t k, const int32_t* ids, int64_t count, const std::string& what) const {
    if (!built_) throw Error("model used before build()");
    if (k >= input_names_.size())
        throw Error("model input " + std::to_string(k) + ": the model has " + std::to_string(input_names_.size()));
    for (const Node& n : nodes_) {
        const auto* lookup = dynamic_cast<const TokenLookup*>(n.layer.get());
        if (!lookup || std::find(n.from.begin(), n.from.end(), model_input(k)) == n.from.end()) continue;
        for (int64_t i = 0; i < count; ++i)
            if (ids[i] < 0 || ids[i] >= lookup->vocab())
                throw Error(what + ": token id " + std::to_string(ids[i]) + " at flat index " + std::to_string(i) +
                            " is outside the vocabulary of " + n.layer->label() + ", [0, " +
                            std::to_string(lookup->vocab()) + ")");
    }
}

void Net::check_ops(Backend& backend, bool backward) const {
    for (const Node& n : nodes_)
        if (!n.fused && !n.ids_passed)
            for (uint32_t op : n.layer->ops_needed(backward)) backend.require(op, n.layer->label());
    if (backward)
        for (const Node& n : nodes_)
            if (n.consumers > 1 && n.needs_grad) {  // gradient accumulators
                backend.require(XYLEM_OP_COPY, n.layer->label() + " (its output feeds several layers)");
                backend.require(XYLEM_OP_AXPBY, n.layer->label() + " (its output feeds several layers)");
            }
}

const Tensor& Net::forward(Device& dev, const Tensor& x, bool train) {
    if (!built_) throw Error("model used before build()");
    model_xs_.assign(1, &x);
    return forward(dev, model_xs_, train);
}

const Tensor& Net::forward(Device& dev, const std::vector<const Tensor*>& xs, bool train) {
    if (!built_) throw Error("model used before build()");
    if (xs.size() != input_names_.size()) throw Error(inputs_given(xs.size()));
    for (size_t k = 0; k < xs.size(); ++k) {
        // "model input" for a model of one input (as always), "model input 'mask'" for several.
        auto what = [&] { return "model input" + (xs.size() == 1 ? std::string() : " '" + input_names_[k] + "'"); };
        if (!xs[k] || !xs[k]->defined()) throw Error(what() + ": no tensor given");
        const Tensor& x = *xs[k];
        const Shape& want = inputs_[k];
        Shape sample(x.shape().begin() + (x.shape().empty() ? 0 : 1), x.shape().end());
        // Decoding feeds a sequence's steps a few at a time: its time axis (the first per sample)
        // may differ from the one the model was built for (the layers with a context limit check it).
        if (decoding_ && !sample.empty() && sample.size() == want.size() &&
            std::equal(sample.begin() + 1, sample.end(), want.begin() + 1))
            sample = want;
        if (x.shape().empty() || sample != want)
            throw Error(what() + ": got batch shape " + to_string(x.shape()) + ", expected [N" + (want.empty() ? "" : ", ") +
                        to_string(want).substr(1));
        if (k > 0 && x.shape()[0] != xs[0]->shape()[0])
            throw Error(what() + ": batch of " + std::to_string(x.shape()[0]) + ", input '" + input_names_[0] + "' has " +
                        std::to_string(xs[0]->shape()[0]) + " (every input holds the same samples)");
        if (x.dtype() != input_dtypes_[k])  // an input no layer reads takes anything
            for (const Node& n : nodes_)
                if (std::find(n.from.begin(), n.from.end(), model_input(k)) != n.from.end())
                    throw Error(what() + ": got " + std::string(dtype_name(x.dtype())) + " values, " + n.layer->label() +
                                " takes " + dtype_name(input_dtypes_[k]));
    }
    sync_shared();
    const bool fold = !train && fold_batch_norms_;
    const bool plan = !training_ && !train && !decoding_;  // the inference memory plan (net.h)
    const int64_t batch = xs[0]->dim(0);
    if (plan) plan_begin(fold);
    auto value = [&](size_t j) { return is_model_input(j) ? xs[j - kFirstModelInput] : outputs_[j]; };
    for (size_t i = 0; i < nodes_.size(); ++i) {
        Node& n = nodes_[i];
        const Turn turn = turn_of(n, fold);
        if (turn == Turn::later) continue;  // at its add's turn (Turn::residual)
        if (turn == Turn::view) {
            outputs_[i] = value(n.from[0]);  // fused or folded: its producer's output holds it; ids: passed
        } else if (turn == Turn::residual) {
            const Node& c = nodes_[n.residual_conv];
            profiler::Scope scope(&c.forward_scope);
            const auto act = n.fold_act == SIZE_MAX ? XYLEM_ACT_NONE
                                                    : static_cast<Activation&>(*nodes_[n.fold_act].layer).activation();
            auto* bn = c.fold_bn == SIZE_MAX ? nullptr : &static_cast<BatchNorm&>(*nodes_[c.fold_bn].layer);
            const Loan loan(plan ? plan_lend(dev, *c.layer, n.shape, batch) : nullptr);
            outputs_[i] = &static_cast<Conv2d&>(*c.layer).forward_folded(dev, *value(c.from[0]), bn,
                                                                           value(n.residual_from), act);
        } else {
            xs_.clear();
            for (size_t j : n.from) xs_.push_back(value(j));
            profiler::Scope scope(&n.forward_scope);
            const Loan loan(plan ? plan_lend(dev, *n.layer, n.shape, batch) : nullptr);
            if (n.fold_bn != SIZE_MAX && fold) {
                const auto act = n.fold_act == SIZE_MAX ? XYLEM_ACT_NONE
                                                        : static_cast<Activation&>(*nodes_[n.fold_act].layer).activation();
                outputs_[i] = &static_cast<Conv2d&>(*n.layer).forward_folded(
                    dev, *xs_[0], &static_cast<BatchNorm&>(*nodes_[n.fold_bn].layer), nullptr, act);
            } else {
                outputs_[i] = &n.layer->forward_inputs(dev, xs_, train);
            }
        }
        if (plan) {
            plan_produced(i);
            for_each_read(n, fold, [&](size_t j) { plan_read(j); });
        }
    }
    if (plan) plan_end();
    return *outputs_[output_nodes_[0]];
}

Net::Turn Net::turn_of(const Node& n, bool fold) const {
    if (n.fused || (n.folded && fold) || n.ids_passed) return Turn::view;
    if (n.runs_in_add != SIZE_MAX && fold) return Turn::later;
    if (n.residual_conv != SIZE_MAX && fold) return Turn::residual;
    return Turn::runs;
}

const Tensor& Net::output(size_t k) const {
    if (!built_) throw Error("model used before build()");
    if (k >= output_nodes_.size())
        throw Error("model output " + std::to_string(k) + ": the model has " + std::to_string(output_nodes_.size()));
    if (!outputs_[output_nodes_[k]]) throw Error("model output read before forward()");
    return *outputs_[output_nodes_[k]];
}

void Net::deliver(Device& dev, size_t to, const Tensor* dx) {
    if (is_model_input(to) || !nodes_[to].needs_grad) return;
    if (grad_sources(to) == 1) {
        grads_[to] = dx;
        return;
    }
    Tensor& acc = accumulators_[to];
    if (arrived_[to]++ == 0) {
        if (!acc.defined() || acc.shape() != dx->shape()) acc = Tensor(dx->shape(), DType::F32, dev);
        ops::copy(dev, *dx, acc);
    } else {
        ops::axpby_inplace(dev, 1.0f, *dx, 1.0f, acc);
    }
    grads_[to] = &acc;
}

void Net::backward(Device& dev, const Tensor& dy) {
    if (built_ && output_nodes_.size() != 1)
        throw Error("model has " + std::to_string(output_nodes_.size()) + " outputs (" + joined(output_names()) +
                    "): backward takes a gradient for each (training fits models of one output)");
    dys_.assign(1, &dy);
    backward(dev, dys_);
}

void Net::backward(Device& dev, const std::vector<const Tensor*>& dys) {
    if (!built_) throw Error("model used before build()");
    if (!training_) throw Error("model built to run, not to train: it has no gradients (backward called)");
    if (dys.size() != output_nodes_.size())
        throw Error("model has " + std::to_string(output_nodes_.size()) + " output(s), backward given " +
                    std::to_string(dys.size()) + " gradients");
    sync_shared();
    std::fill(grads_.begin(), grads_.end(), nullptr);
    std::fill(arrived_.begin(), arrived_.end(), 0);
    for (size_t k = 0; k < dys.size(); ++k) {
        const Node& o = nodes_[output_nodes_[k]];
        if (!dys[k]) continue;
        const Shape& ds = dys[k]->shape();
        if (ds.empty() || !std::equal(ds.begin() + 1, ds.end(), o.shape.begin(), o.shape.end()))
            throw Error("model output '" + o.name + "': gradient of shape " + to_string(dys[k]->shape()) +
                        ", the output is [N, " + to_string(o.shape).substr(1));
        deliver(dev, output_nodes_[k], dys[k]);
    }
    for (size_t i = nodes_.size(); i-- > 0;) {
        Node& n = nodes_[i];
        if (!n.needs_grad) continue;
        const Tensor* g = grads_[i];
        // Every node's output is read by another node or is an output: only an output's missing
        // gradient (null in dys) leaves one without, and its parameters would keep stale
        // gradients. (Where others reach it, a null dy is a zero gradient: the sum is right.)
        if (!g)
            throw Error(n.layer->label() + ": no gradient reached its output (backward needs a gradient for model output" +
                        (n.is_output ? " '" + n.name + "')" : "s that depend on it)"));
        if (n.fused) {  // the activation's gradient goes to the node that ran it
            deliver(dev, n.from[0], g);
            continue;
        }
        need_dx_.clear();
        for (size_t j : n.from) need_dx_.push_back(!is_model_input(j) && nodes_[j].needs_grad);
        dxs_.clear();
        {
            profiler::Scope scope(&n.backward_scope);
            n.layer->backward_inputs(dev, *g, need_dx_, dxs_);
        }
        for (size_t k = 0; k < n.from.size(); ++k)
            if (need_dx_[k]) {
                if (k >= dxs_.size() || !dxs_[k] || !dxs_[k]->defined())
                    throw Error(n.layer->label() + ": its backward pass gave no gradient for input '" + n.inputs[k] + "'");
                deliver(dev, n.from[k], dxs_[k]);
            }
        if (backward_hook_ && n.writes_grads) backward_hook_(i);
    }
}

std::vector<Param*> Net::params() {
    std::vector<Param*> out;
    for (Node& n : nodes_)
        if (n.owner == SIZE_MAX)
            for (Param* p : n.layer->params()) out.push_back(p);
    return out;
}

std::vector<size_t> Net::grad_ready_nodes() {
    std::vector<size_t> ready(nodes_.size());
    for (size_t i = 0; i < nodes_.size(); ++i) ready[i] = i;
    for (size_t i = 0; i < nodes_.size(); ++i)
        if (nodes_[i].owner != SIZE_MAX) ready[nodes_[i].owner] = std::min(ready[nodes_[i].owner], i);
    std::vector<size_t> out;
    for (size_t i = 0; i < nodes_.size(); ++i)
        if (nodes_[i].owner == SIZE_MAX)
            for (size_t k = 0, c = nodes_[i].layer->params().size(); k < c; ++k) out.push_back(ready[i]);
    return out;
}

std::vector<Param*> Net::state() {
    std::vector<Param*> out = params();
    for (Node& n : nodes_)
        for (Param* p : n.layer->buffers()) out.push_back(p);
    return out;
}

std::string Net::buffer_value_problem(const std::function<std::vector<float>(const Param&)>& values) {
    for (Node& n : nodes_)
        for (Param* p : n.layer->buffers())
            if (std::string why = n.layer->buffer_value_problem(*p, values(*p)); !why.empty())
                return "tensor '" + p->name + "' " + why;
    return {};
}

std::vector<std::pair<std::string, uint64_t*>> Net::counters() {
    std::vector<std::pair<std::string, uint64_t*>> out;
    for (Node& n : nodes_)
        for (auto& [name, value] : n.layer->counters()) out.emplace_back(n.name + "." + name, value);
    return out;
}

namespace {

std::string grouped(int64_t n) {  // 109386 -> "109,386"
    std::string digits = std::to_string(n), out;
    for (size_t i = 0; i < digits.size(); ++i) {
        if (i && (digits.size() - i) % 3 == 0) out += ',';
        out += digits[i];
    }
    return out;
}


}  // namespace

std::string Net::summary() const {
    constexpr size_t kCols = 5;
    std::vector<std::array<std::string, kCols>> rows{{"name", "layer", "inputs", "output shape", "parameters"}};
    int64_t trainable = 0, buffers = 0;
    const int64_t activations = built_ ? count_footprint().outputs_per_sample : 0;
    for (size_t i = 0; i < nodes_.size(); ++i) {
        const Node& n = nodes_[i];
        int64_t count = 0;
        for (Param* p : n.layer->params()) count += p->value.numel();
        for (Param* p : const_cast<Layer&>(*n.layer).buffers()) buffers += p->value.numel();
        std::string params = grouped(count);
        if (n.owner != SIZE_MAX) params = "shared with " + nodes_[n.owner].name;
        else trainable += count;
        std::string shape = built_ ? to_string(n.shape) : "?";
        if (n.fused && n.folded && fold_batch_norms_)  // a ReLU fused into a batch norm folded into a conv
            shape += " (fused into " + nodes_[n.from[0]].name + ") (folded into " + nodes_[fold_target(i)].name +
                     " for inference)";
        else if (n.fused) shape += " (fused into " + nodes_[n.from[0]].name + ")";
        else if (n.ids_passed) shape += " (read as token ids)";
        else if (n.folded && fold_batch_norms_)  // a batch norm, or the activation after one or after an add
            shape += " (folded into " + nodes_[fold_target(i)].name + " for inference)";
        else if (n.residual_conv != SIZE_MAX && fold_batch_norms_)
            shape += " (" + nodes_[n.residual_conv].name + "'s residual input for inference)";
        rows.push_back({n.name, n.layer->kind(), joined(n.inputs), shape, params});
    }
    size_t width[kCols] = {};
    for (const auto& r : rows)
        for (size_t c = 0; c < kCols; ++c) width[c] = std::max(width[c], r[c].size());
    std::string s;
    for (const auto& r : rows) {
        for (size_t c = 0; c < kCols; ++c) {
            const std::string pad(width[c] - r[c].size(), ' ');
            s += "  " + (c + 1 == kCols ? pad + r[c] : r[c] + pad);  // the counts right-aligned
        }
        s += "\n";
    }
    if (input_names_.size() > 1 || output_names_.size() > 1) {  // a chain's one input and output go without saying
        s += "  model inputs: ";
        for (size_t k = 0; k < input_names_.size(); ++k)
            s += (k ? ", " : "") + input_names_[k] + (k < inputs_.size() ? " " + to_string(inputs_[k]) : "");
        s += "; outputs: " + joined(output_names()) + "\n";
    }
    const double f32 = 4.0;
    s += "  parameters: " + grouped(trainable) + " trainable (" + bytes_text(f32 * static_cast<double>(trainable)) +
         ", as much again for gradients)";
    if (buffers) s += ", " + grouped(buffers) + " in buffers (" + bytes_text(f32 * static_cast<double>(buffers)) + ")";
    s += "; layer outputs: " + bytes_text(f32 * static_cast<double>(activations)) + " per sample\n";
    return s;
}

void Net::check_param_floats(const Node& n, const std::vector<Shape>& inputs) const {
    const Layer::ParamFloats planned = n.layer->param_floats_of(inputs);
    Layer::ParamFloats made;
    for (Param* p : n.layer->params()) made.trainable += p->value.numel();
    for (Param* p : n.layer->buffers()) made.buffers += p->value.numel();
    if (made.trainable != planned.trainable || made.buffers != planned.buffers)
        throw Error(n.layer->label() + ": internal error: bind() made " + std::to_string(made.trainable) + " + " +
                    std::to_string(made.buffers) + " parameter floats where param_floats_of() says " +
                    std::to_string(planned.trainable) + " + " + std::to_string(planned.buffers));
}

void Net::reset_state() {
    for (Node& n : nodes_) n.layer->reset_state();
}

void Net::set_decoding(bool on) {
    decoding_ = on;
    for (Node& n : nodes_) n.layer->set_decoding(on);
}

int64_t Net::max_positions() const {
    int64_t limit = 0;
    for (const Node& n : nodes_) {
        const int64_t m = n.layer->max_positions();
        if (m && (!limit || m < limit)) limit = m;
    }
    return limit;
}

std::vector<std::pair<std::string, const Tensor*>> Net::carried_state() {
    std::vector<std::pair<std::string, const Tensor*>> out;
    for (Node& n : nodes_)
        for (auto& [name, t] : n.layer->carried_state()) out.emplace_back(n.name + "." + name, t);
    return out;
}

void Net::restore_carried_state(const std::map<std::string, SavedTensor>& saved) {
    std::vector<std::map<std::string, SavedTensor>> per_node(nodes_.size());
    for (const auto& [name, t] : saved) {
        // Node names may hold dots ("layer1.0.lstm"): the longest one that prefixes the entry wins.
        size_t node = nodes_.size(), cut = 0;
        for (size_t dot = name.rfind('.'); dot != std::string::npos && dot > 0; dot = name.rfind('.', dot - 1)) {
            node = find(name.substr(0, dot));
            if (node != nodes_.size()) {
                cut = dot;
                break;
            }
        }
        if (node == nodes_.size())
            throw Error("carried state '" + name + "' names no layer of the model (" + std::to_string(nodes_.size()) +
                        " layers)");
        per_node[node].emplace(name.substr(cut + 1), t);
    }
    for (size_t i = 0; i < nodes_.size(); ++i) nodes_[i].layer->restore_carried_state(per_node[i]);
}

}  // namespace xylem
