// Net: the model. A directed acyclic graph of named layers wired by name; a chain of layers
// (what nn.Sequential holds) is the special case where each layer reads the one before it.
// Every model xylem trains, loads or exports is a Net: the configs' [[model.layers]], the
// training loop, checkpoints and data-parallel training all work on this one class.
//
// Each node has a name, a layer and the names of its inputs: other nodes, or a model input
// ("input" unless set_inputs names others: an ONNX graph's "input_ids" and "attention_mask").
// Every node has one output tensor; the model's output is the last node added, unless
// set_outputs names several (or others). build() orders the nodes topologically, infers every shape by name, decides which
// tensors need a gradient, fuses activations, and allocates the parameters.
//
// The accumulate rule. A tensor read by several nodes (a residual connection, y = f(x) + g(x))
// gets the sum of their input gradients: backward visits the nodes in reverse topological order,
// and the first consumer's gradient is copied into the tensor's accumulator, each later one
// added to it (persistent buffers: every step issues the same ops on the same buffers, which step
// fusion and capture rely on). Parameters shared by several nodes (a tied weight) are one
// parameter: the first node backward reaches writes the gradient, the others add to it, and
// params() lists it once.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "xylem/config.h"
#include "xylem/layers/layer.h"

namespace xylem {

class Net {
public:
    // The name that stands for the model's input in a node's inputs (a model of one input).
    static constexpr const char* kInput = "input";
    static constexpr size_t kMaxInputs = RunConfig::kMaxModelInputs;  // and outputs

    // The model's inputs, named, in the order forward() takes them (default: one, kInput). Names
    // are non-empty, distinct and no node's; set before build().
    void set_inputs(std::vector<std::string> names);
    const std::vector<std::string>& input_names() const { return input_names_; }
    // The nodes whose outputs the model gives, in order (default: the last node added). Each
    // names a node; an output may also be read by other nodes. Set before build().
    void set_outputs(std::vector<std::string> names);
    // The outputs' node names (after build, or once set_outputs named them).
    std::vector<std::string> output_names() const;
    size_t output_count() const { return output_names_.empty() ? 1 : output_names_.size(); }

    // Appends a layer that reads the previous node (the first: the model input), named by its
    // position as nn.Sequential names its children ("0", "1", ...), so its parameters are
    // "0.weight", "0.bias", ...
    void add(std::unique_ptr<Layer> layer);
    // Appends a named node. `inputs` name other nodes (defined before or after this one) or
    // kInput; `shares` names a node of the same type whose parameters this node uses instead of
    // its own (a tied weight), "" for none. An Error for an empty, reserved or duplicate name.
    void add(const std::string& name, std::vector<std::string> inputs, std::unique_ptr<Layer> layer,
             const std::string& shares = "");
    size_t size() const { return nodes_.size(); }
    // Node i: in the order added until build(), in topological order (the order forward runs)
    // after it.
    Layer& layer(size_t i) { return *nodes_.at(i).layer; }
    const Layer& layer(size_t i) const { return *nodes_.at(i).layer; }
    const std::string& name(size_t i) const { return nodes_.at(i).name; }
    const std::vector<std::string>& inputs(size_t i) const { return nodes_.at(i).inputs; }
    // The index of the node named `name` (after build: topological), or size() if none.
    size_t find(const std::string& name) const;

    // Checks the graph (every input names a node, no cycle, every output but the model's is read,
    // shared parameters fit), walks the per-sample shapes through it in topological order (a
    // mismatch names the layer and both shapes), fuses each activation into the linear or conv
    // layer it reads when that layer's output has no other reader and the backend runs the fused
    // op, hands a one_hot's token ids to its one reader when that reader takes them
    // (Layer::take_token_ids), and allocates and initialises the parameters on `dev` (drawn from
    // `seed`, in topological order). With `training` false the model is built to run only, its
    // parameters to be loaded next: zeros, no gradients, nothing drawn (Layer::set_inference_build);
    // backward() then refuses.
    // `input_samples` holds one shape per model input (input_names()); the Shape form is for a
    // model of one input (an Error naming the inputs otherwise: xylem's datasets feed one). A
    // span, not a vector: `build(dev, {20}, seed)` stays the one-input form.
    void build(Device& dev, std::span<const Shape> input_samples, uint64_t seed, bool training = true);
    void build(Device& dev, const Shape& input_sample, uint64_t seed, bool training = true);
    // Inference runs conv -> batchnorm [-> activation] as one rescaled convolution, and a residual
    // add after a conv (and the activation after it) inside that conv (on by default; results
    // differ from the unfolded layers by rounding only). Off: every node runs as written, as in
    // training.
    void set_fold_batch_norms(bool on) { fold_batch_norms_ = on; }
    const Shape& output_sample_shape(size_t k = 0) const { return output_shapes_.at(k); }
    // The element type of model input k (that of the layers that read it: int32 token indices
    // for a text model, f32 otherwise; once built, what build() found).
    DType input_dtype(size_t k = 0) const;
    // Token ids for model input k, on the host, checked before they reach the device: each must
    // lie in [0, vocab) of every embedding or one_hot that reads the input (the op's own check
    // names neither the layer nor the data). An Error names `what` (the file or the array), the
    // first id outside, its flat index and the layer. Built models only.
    void check_token_ids(size_t k, const int32_t* ids, int64_t count, const std::string& what) const;
    // Throws an Error naming the first layer whose forward (and, with `backward`, backward) ops
    // the backend does not support: "model layer 0 (conv2d): op conv2d_fwd is not supported by
    // backend 'tiny'". build() runs it for the forward ops, before any work is done.
    void check_ops(Backend& backend, bool backward) const;

    // Runs the model on one batch per input (the same batch size for all); returns output 0,
    // and output(k) gives every output until the next forward.
    const Tensor& forward(Device& dev, const std::vector<const Tensor*>& xs, bool train);
    const Tensor& forward(Device& dev, const Tensor& x, bool train);  // a model of one input
    const Tensor& output(size_t k) const;
    // Backward from dL/doutput (a model of one output); fills every parameter's gradient.
    void backward(Device& dev, const Tensor& dy);
    // The same with one gradient per output. A null one is a zero gradient; an Error where some
    // node then gets no gradient at all (its parameters' gradients would be stale).
    void backward(Device& dev, const std::vector<const Tensor*>& dys);
    // Called during backward right after node i's backward pass has enqueued the writes of its
    // parameter gradients, for every node that has parameters, in reverse topological order; the
    // call for the lowest such node ends the pass. Data-parallel training starts reducing a
    // bucket of gradients as soon as the nodes that write it are done (PyTorch DDP's autograd
    // hooks): see grad_ready_nodes().
    using BackwardHook = std::function<void(size_t node)>;
    void set_backward_hook(BackwardHook hook) { backward_hook_ = std::move(hook); }

    // The trainable parameters, each once (a shared parameter under its owner's name), in
    // topological order of their owners.
    std::vector<Param*> params();
    // For each of params(), the node after whose backward its gradient is complete (the lowest
    // of the nodes that write it).
    std::vector<size_t> grad_ready_nodes();
    std::vector<Param*> state();  // params, then buffers: every tensor a checkpoint holds
    // Asks each layer whether the values `values(buffer)` can be its buffer's (Layer::
    // buffer_value_problem): "" when every one can, else "tensor 'bn1.running_var' <what is wrong>".
    std::string buffer_value_problem(const std::function<std::vector<float>(const Param&)>& values);
    // Every node's host counters, named "<node name>.<counter>" ("3.mask_calls").
    std::vector<std::pair<std::string, uint64_t*>> counters();
    // Every layer's reset_state(): drops recurrent state carried between batches.
    void reset_state();
    // Every layer's set_decoding (layer.h): sampling with a key/value cache, one step per forward.
    void set_decoding(bool on);
    // The longest sequence the model takes (its smallest layer limit); 0: no limit.
    int64_t max_positions() const;
    // Every node's carried state, named "<node name>.<name>" ("1.h_l0"), and its inverse: each
    // node gets the entries under its name (an Error for a name of no node, or one a layer refuses).
    std::vector<std::pair<std::string, const Tensor*>> carried_state();
    void restore_carried_state(const std::map<std::string, SavedTensor>& saved);
    // What the model takes, in floats, counted without allocating anything (before build, for
    // the memory plan, or after): its parameters (a shared one once) and buffers, and what each
    // sample's layer outputs and the gradients backward computes for them take in one step.
    // Fused activations take nothing once built (before, they are counted); layers' own saved
    // tensors and workspaces come on top.
    // run_outputs_per_sample: what a forward of a model built to run holds instead (or of one yet
    // to be built, which the inference commands build to run): the inference memory plan's
    // buffers, as plan_lend would take them, and the outputs of the layers that take no loan.
    struct Footprint {
        int64_t trainable = 0, buffers = 0;
        int64_t outputs_per_sample = 0, output_grads_per_sample = 0;
        int64_t run_outputs_per_sample = 0;
    };
    Footprint footprint(std::span<const Shape> input_samples);
    Footprint footprint(const Shape& input_sample);
    std::string summary() const;  // one line per node: name, type, inputs, shape, parameters, fusion
    // Bytes of the buffers the inference memory plan holds (see plan_begin below): 0 for a model
    // built to train.
    size_t plan_bytes() const;

private:
    struct Node {
        std::string name;
        std::vector<std::string> inputs;  // as given
        std::unique_ptr<Layer> layer;
        std::string shares;               // "" or the owner's name
        // Set by build():
        std::vector<size_t> from;         // each input's producer node, or model_input(k)
        size_t owner = SIZE_MAX;          // the node whose parameters this one uses (SIZE_MAX: its own)
        size_t consumers = 0;             // readers of this node's output
        bool is_output = false;           // one of the model's outputs
        bool fused = false;               // an activation run inside the node it reads
        bool ids_passed = false;          // a one_hot not run: its one reader takes its token ids
        // Inference only (fold_batch_norms): a conv's batch norm, and the activation reading
        // that, run inside the conv; `fold` on the conv names them.
        bool folded = false;
        size_t fold_bn = SIZE_MAX, fold_act = SIZE_MAX;
        // Inference only: an add of a conv's output (through its folded batch norm) and another
        // tensor runs as that conv with the other tensor as its residual input (ops.h's conv2d_fwd
        // R), and the activation after the add (fold_act on the add) fused. The conv runs when the
        // add's turn comes (the residual may come later in the order), not at its own.
        size_t residual_conv = SIZE_MAX;  // on the add: the conv it runs
        size_t residual_from = SIZE_MAX;  // on the add: the residual's producer (or model input)
        size_t runs_in_add = SIZE_MAX;    // on the conv: the add that runs it
        bool needs_grad = false;          // its output needs a gradient (it, or a node before it, learns)
        bool owns_params = false;         // has parameters of its own (not shared from another node)
        bool writes_grads = false;        // has parameters at all (its own or shared)
        Shape shape;                      // per-sample output shape
        std::string forward_scope, backward_scope;  // profiler names
    };
    // A node's input that is model input k is recorded as kFirstModelInput + k in `from`.
    static constexpr size_t kFirstModelInput = SIZE_MAX - kMaxInputs;
    static bool is_model_input(size_t j) { return j >= kFirstModelInput; }
    static size_t model_input(size_t k) { return kFirstModelInput + k; }
    size_t input_index(const std::string& name) const;  // its place in input_names_, or kMaxInputs
    // The gradients that reach node i's output: one per reader, one more for a model output.
    size_t grad_sources(size_t i) const { return nodes_[i].consumers + (nodes_[i].is_output ? 1 : 0); }

    // Wiring, order and per-sample shapes: everything build() decides before allocating. Once;
    // build() and footprint() call it.
    void prepare(std::span<const Shape> input_samples);
    std::string inputs_given(size_t given) const;  // the Error text: `given` inputs for input_names_
    const std::vector<Shape>& input_shapes(size_t i, std::vector<Shape>& shapes) const;  // node i's
    Footprint count_footprint() const;  // after prepare()
    int64_t run_floats_per_sample() const;  // count_footprint's run_outputs_per_sample
    void check_param_floats(const Node& n, const std::vector<Shape>& inputs) const;
    void resolve_inputs();
    void order_topologically();
    void check_outputs_used() const;
    void bind_shared(size_t i);
    void sync_shared();
    void fuse_activations(Backend& backend);
    void pass_token_ids(Backend& backend);
    void fold_batch_norms(const Backend& backend);
    void fold_residual_adds(Backend& backend);
    const Shape& sample_shape(size_t j) const;  // node j's per-sample output, or model input j's
    size_t fold_target(size_t i) const;         // the conv that runs folded node i (summary)
    // Adds dx to the gradient of node `to`'s output (the accumulate rule).
    void deliver(Device& dev, size_t to, const Tensor* dx);
    // What a node's turn in forward() does (fold: the inference folds apply). view: nothing runs,
    // its output is its producer's (a fused or folded node) or the ids its reader takes; later: a
    // conv that its residual add runs; residual: the add, running that conv with its other input as
    // R; runs: the layer's forward (a conv with its folded batch norm included).
    enum class Turn { view, later, residual, runs };
    Turn turn_of(const Node& n, bool fold) const;
    // f(j) for each node (or model input) whose output the node's turn reads, in forward()'s order.
    template <class F>
    void for_each_read(const Node& n, bool fold, const F& f) const {
        switch (turn_of(n, fold)) {
        case Turn::view:
        case Turn::later: return;
        case Turn::residual:
            f(nodes_[n.residual_conv].from[0]);
            f(n.residual_from);
            return;
        case Turn::runs:
            for (size_t j : n.from) f(j);
        }
    }
    // The inference memory plan (a forward of a model built to run): the layers that take one
    // (Layer::takes_lent_output: convolutions, pools, linear, batch norm, activations, softmax,
    // add, mul, concat) write their outputs into buffers the Net lends, and a buffer goes to the
    // next such layer once every node output that is a view of it has been read by all its
    // readers (a model output never). A ResNet's maps then live in a
    // few buffers instead of one per layer: less memory, and a first batch that faults in a
    // fraction of the pages (ResNet-20's evaluation at batch 1000: 657 -> 204 MB, 2.7% faster).
    void plan_begin(bool fold);
    Layer* plan_lend(Device& dev, Layer& layer, const Shape& sample, int64_t batch);
    // Ends a loan when the step ends, also when the layer throws: a loan never outlives its step.
    struct Loan {
        Layer* layer;
        explicit Loan(Layer* l) : layer(l) {}
        Loan(const Loan&) = delete;
        Loan& operator=(const Loan&) = delete;
        ~Loan() {
            if (layer) layer->lend_output(Tensor());
        }
    };
    void plan_produced(size_t i);  // after node i's output is set
    void plan_read(size_t j);      // after a step that read node j's output (j may be a model input)
    void plan_release(size_t j);
    void plan_end();

    std::vector<Node> nodes_;
    std::map<std::string, size_t> index_;  // name -> node
    bool prepared_ = false, built_ = false, training_ = true;
    bool fold_batch_norms_ = true;
    bool decoding_ = false;
    std::vector<std::string> input_names_{kInput};
    std::vector<std::string> output_names_;  // as set_outputs named them (empty: the last node)
    std::vector<Shape> inputs_, output_shapes_;
    std::vector<DType> input_dtypes_;  // what the layers reading each input take (build)
    std::vector<size_t> output_nodes_;
    std::vector<const Tensor*> model_xs_, dys_;  // scratch: the one-input forward's and one-output backward's
    // Per step: each node's output, and the gradient of each node's output.
    std::vector<const Tensor*> outputs_, grads_;
    std::vector<size_t> arrived_;          // gradients added to a node's accumulator this pass
    std::vector<Tensor> accumulators_;     // for outputs read by several nodes
    std::vector<const Tensor*> xs_;        // scratch: a node's inputs
    std::vector<const Tensor*> dxs_;       // scratch: a node's input gradients
    std::vector<bool> need_dx_;            // scratch
    BackwardHook backward_hook_;
    struct PlanBuffer {
        Tensor buffer;       // flat, f32
        size_t holders = 0;  // live node outputs that are views of it
        bool lent = false;   // in this forward (those that were not are dropped at its end)
    };
    std::vector<PlanBuffer> plan_buffers_;
    std::vector<size_t> plan_left_;  // per node: reads of its output still to come in this forward
    std::vector<size_t> plan_held_;  // per node: the buffer its output holds, or SIZE_MAX
};

}  // namespace xylem
