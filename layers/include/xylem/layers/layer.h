// Layer: the interface every layer implements. Layers call core ops only, so one layer
// runs unchanged on every backend.
#pragma once

#include <cstdint>
#include <map>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "xylem/tensor.h"

namespace xylem {

// A trainable tensor and its gradient, named as in a PyTorch state_dict ("0.weight").
struct Param {
    std::string name;
    Tensor value;
    Tensor grad;
};

// A tensor's shape and values on the host, as a checkpoint holds them (carried state).
struct SavedTensor {
    Shape shape;
    std::vector<float> values;
};

// A layer of a Net (net.h). Most layers take one input tensor and return one: they implement the
// one-input methods below (output_shape, bind, forward, backward) and the Net calls them through
// the N-input methods, whose defaults adapt them. A layer with several inputs (add, concat)
// derives from MultiInputLayer and implements the N-input methods instead.
class Layer {
public:
    virtual ~Layer() = default;

    virtual std::string kind() const = 0;  // "linear", "relu", ...
    // The per-sample output shape for a per-sample input shape; throws an Error naming
    // this layer and both shapes when the input does not fit.
    virtual Shape output_shape(const Shape& input) const = 0;
    // The element type its input must have: f32 for every layer but those that take token
    // indices (embedding, one_hot: int32). A model's input type is its first layer's.
    virtual DType input_dtype() const { return DType::F32; }
    // Allocates parameters on `dev` for the given per-sample input shape and initialises them.
    virtual void bind(Device& dev, const Shape& input, std::mt19937_64& rng);

    // Forward on a batch; the result stays valid until the next forward.
    virtual const Tensor& forward(Device& dev, const Tensor& x, bool train) = 0;
    // Backward from dL/dy of the last forward: writes parameter gradients and returns dL/dx.
    // need_dx = false lets the first layer skip computing the input gradient.
    virtual const Tensor& backward(Device& dev, const Tensor& dy, bool need_dx) = 0;

    virtual std::vector<Param*> params() { return {}; }
    // Non-trainable state saved in checkpoints (batch-norm running statistics); grad unused.
    virtual std::vector<Param*> buffers() { return {}; }
    // The floats that bind() gives params() and buffers() for these input shapes, known before
    // anything is allocated: the memory plan counts them first (xylem/train/memory_plan.h). Net's
    // build checks them against what bind() made, so a count that drifts fails every build.
    struct ParamFloats {
        int64_t trainable = 0, buffers = 0;
    };
    virtual ParamFloats param_floats_of(const std::vector<Shape>& /*inputs*/) const { return {}; }
    // Whether values a checkpoint holds for one of this layer's buffers() can be that buffer's: ""
    // when they can, else what is wrong ("holds the negative variance -1 at index 3"). Checked
    // before anything is loaded (a batch norm's running variance must not be negative: evaluation
    // would turn it into NaN outputs and a meaningless accuracy).
    virtual std::string buffer_value_problem(const Param& /*buffer*/, const std::vector<float>& /*values*/) const {
        return {};
    }
    // Host-side counters that a resumed run must restore to give identical results (dropout's
    // mask stream), by name; checkpoints save them beside the tensors.
    virtual std::vector<std::pair<std::string, uint64_t*>> counters() { return {}; }
    // Recurrent layers carry their hidden state from one batch to the next (truncated
    // back-propagation through time); this drops it (zero state), at each epoch's start and before
    // validation or sampling. Other layers have no state to drop.
    virtual void reset_state() {}
    // That carried state, for a mid-epoch training checkpoint (a resumed run continues its streams
    // where they were, as an uninterrupted run would): named tensors, empty when the layer carries
    // nothing or its last forward was not a training one.
    virtual std::vector<std::pair<std::string, const Tensor*>> carried_state() { return {}; }
    // Installs saved carried state (names and shapes as carried_state() gave them) as the state the
    // next forward starts from, until reset_state(). Checks everything first: an Error naming
    // the tensor when one is missing, unknown or of the wrong shape, and then nothing changes.
    virtual void restore_carried_state(const std::map<std::string, SavedTensor>& saved);
    // Incremental decoding (sampling a language model with a key/value cache): while on, a layer with
    // per-sequence state (attention's keys and values, the position embedding's offset) takes each
    // forward's time steps as following those of the previous forwards, until reset_state(). Layers
    // without such state ignore it; inference only (a training forward refuses while it is on).
    virtual void set_decoding(bool /*on*/) {}
    // The longest sequence the layer takes (the positions it has embeddings for); 0: no limit.
    virtual int64_t max_positions() const { return 0; }
    // Takes over a following activation layer (one fused op) when this layer and the backend
    // can; returns whether it did.
    virtual bool fuse_activation(xylem_activation, Backend&) { return false; }
    // Reads the int32 token ids [N, ...] of a one_hot layer of `vocab` classes whose only reader it
    // is, in place of its one-hot rows [N, ..., vocab], when this layer and the backend can; returns
    // whether it will. One-hot rows times a weight matrix are the matrix's columns: a layer that
    // multiplies its input by a weight can gather those columns instead (the same values) and
    // scatter its weight gradient, where a GEMM would multiply by vocab - 1 zeros for each.
    virtual bool take_token_ids(int64_t /*vocab*/, Backend&) { return false; }
    // The ops this layer's forward pass runs (after fusion), and with `backward` those of its
    // backward pass too: checked against the backend before any work (Net::check_ops).
    virtual std::vector<uint32_t> ops_needed(bool /*backward*/) const { return {}; }

    // The N-input interface the Net calls. input_count(): how many inputs the layer takes (0: any
    // number from two on). The defaults hand a one-input layer its one input.
    virtual size_t input_count() const { return 1; }
    virtual Shape output_shape_of(const std::vector<Shape>& inputs) const;
    virtual void bind_inputs(Device& dev, const std::vector<Shape>& inputs, std::mt19937_64& rng);
    virtual const Tensor& forward_inputs(Device& dev, const std::vector<const Tensor*>& xs, bool train);
    // Backward from dL/dy: writes (or, when accumulating, adds to) the parameter gradients and sets
    // dxs[i] to dL/d(input i) for each i with need_dx[i] (a tensor the layer owns, or dy itself
    // when the two are equal); the others are left null.
    virtual void backward_inputs(Device& dev, const Tensor& dy, const std::vector<bool>& need_dx,
                                 std::vector<const Tensor*>& dxs);

    // Shared parameters (a tied weight): a layer whose parameters another layer owns adds its
    // parameter gradients to what that layer wrote in the same backward pass instead of
    // overwriting it. Only layers that say they can accumulate may share (the Net checks).
    virtual bool can_accumulate_param_grads() const { return false; }
    void set_accumulate_param_grads(bool on) { accumulate_param_grads_ = on; }
    // A model built to run, not to train (Net::build's `training` false: eval, predict, sample,
    // `xylem run`, export, each of which loads every parameter next): the parameter helpers below
    // allocate no gradients and draw nothing (values zero-filled; for ResNet-18 the draw and the
    // gradients' 47 MB were most of `xylem run`'s build time).
    void set_inference_build(bool on) { inference_build_ = on; }
    bool inference_build() const { return inference_build_; }
    // The inference memory plan (Net::forward of a model built to run): a layer that says it takes
    // one is lent, right before a forward, a flat buffer at least its output's size to write its
    // output into (ensure_output), in place of a buffer of its own; the Net hands the buffer to
    // another layer once every reader of this output has run. Only layers that keep nothing of a
    // forward but its output take one.
    virtual bool takes_lent_output() const { return false; }
    void lend_output(Tensor buffer) { lent_ = std::move(buffer); }

    // The beta of the ops that write parameter gradients: 0 (overwrite) or 1 (accumulate).
    float param_grad_beta() const { return accumulate_param_grads_ ? 1.0f : 0.0f; }

    // "model layer 2 (linear)": used in every error message about this layer.
    const std::string& label() const { return label_; }
    void set_label(std::string label) { label_ = std::move(label); }
    // The names of the tensors this layer reads, as its model wired them (for messages that must
    // say which input is wrong: "add of 'bn2' [16, 8, 8] and 'shortcut' [32, 4, 4]").
    const std::vector<std::string>& input_names() const { return input_names_; }
    void set_input_names(std::vector<std::string> names) { input_names_ = std::move(names); }
    const std::string& param_prefix() const { return prefix_; }
    void set_param_prefix(std::string prefix) { prefix_ = std::move(prefix); }

protected:
    [[noreturn]] void shape_error(const std::string& what, const Shape& got, const Shape& expected) const;
    // A parameter on `dev` drawn from U(-bound, bound) (PyTorch's default init for linear and
    // conv layers), with its gradient zero-filled on the device (in an inference build: zeros,
    // no gradient, nothing drawn from rng).
    Param uniform_param(Device& dev, const std::string& name, const Shape& shape, float bound,
                        std::mt19937_64& rng) const;
    // A parameter drawn from N(0, std^2) (GPT-2's init: std 0.02), or filled with `value` (a norm's
    // scale and shift), its gradient zero-filled on the device.
    Param normal_param(Device& dev, const std::string& name, const Shape& shape, float std,
                       std::mt19937_64& rng) const;
    Param constant_param(Device& dev, const std::string& name, const Shape& shape, float value) const;
    // Reuses `t` when it already has `shape`, so steady-state steps allocate nothing.
    static Tensor& ensure(Tensor& t, const Shape& shape, Device& dev, DType dtype = DType::F32);
    // The forward's output: the first elements of the buffer lent for this forward (lend_output)
    // when one is and holds them, else as ensure(). The loan is used once.
    Tensor& ensure_output(Tensor& t, const Shape& shape, Device& dev);

private:
    std::string label_ = "layer", prefix_;
    std::vector<std::string> input_names_;
    bool accumulate_param_grads_ = false;
    bool inference_build_ = false;
    Tensor lent_;  // the inference memory plan's buffer for the next forward's output (or none)
    bool output_on_loan_ = false;  // the output is a view of a buffer lent by an earlier forward
};

// A layer of several inputs: implements the N-input methods; the one-input ones refuse, naming
// the layer.
class MultiInputLayer : public Layer {
public:
    size_t input_count() const override = 0;
    Shape output_shape_of(const std::vector<Shape>& inputs) const override = 0;
    void bind_inputs(Device& dev, const std::vector<Shape>& inputs, std::mt19937_64& rng) override;
    const Tensor& forward_inputs(Device& dev, const std::vector<const Tensor*>& xs, bool train) override = 0;
    void backward_inputs(Device& dev, const Tensor& dy, const std::vector<bool>& need_dx,
                         std::vector<const Tensor*>& dxs) override = 0;

    Shape output_shape(const Shape& input) const override;
    void bind(Device& dev, const Shape& input, std::mt19937_64& rng) override;
    const Tensor& forward(Device& dev, const Tensor& x, bool train) override;
    const Tensor& backward(Device& dev, const Tensor& dy, bool need_dx) override;

protected:
    // An Error naming this layer unless `got` inputs fit input_count().
    void check_input_count(size_t got) const;
};

// Prepends the batch dimension to a per-sample shape.
Shape batched(int64_t batch, const Shape& sample);

}  // namespace xylem
