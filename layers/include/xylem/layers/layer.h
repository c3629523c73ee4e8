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
    // Takes over a following activation layer (one fused op) when this layer and the backend
    // can; returns whether it did.
    virtual bool fuse_activation(xylem_activation, Backend&) { return false; }
    // The ops this layer's forward pass runs (after fusion), and with `backward` those of its
    // backward pass too: checked against the backend before any work (Sequential::check_ops).
    virtual std::vector<uint32_t> ops_needed(bool /*backward*/) const { return {}; }

    // "model layer 2 (linear)": used in every error message about this layer.
    const std::string& label() const { return label_; }
    void set_label(std::string label) { label_ = std::move(label); }
    const std::string& param_prefix() const { return prefix_; }
    void set_param_prefix(std::string prefix) { prefix_ = std::move(prefix); }

protected:
    [[noreturn]] void shape_error(const std::string& what, const Shape& got, const Shape& expected) const;
    // A parameter on `dev` drawn from U(-bound, bound) (PyTorch's default init for linear and
    // conv layers), with its gradient zero-filled on the device.
    Param uniform_param(Device& dev, const std::string& name, const Shape& shape, float bound,
                        std::mt19937_64& rng) const;
    // Reuses `t` when it already has `shape`, so steady-state steps allocate nothing.
    static Tensor& ensure(Tensor& t, const Shape& shape, Device& dev, DType dtype = DType::F32);

private:
    std::string label_ = "layer", prefix_;
};

// Prepends the batch dimension to a per-sample shape.
Shape batched(int64_t batch, const Shape& sample);

}  // namespace xylem
