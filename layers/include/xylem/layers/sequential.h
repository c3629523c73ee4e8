// Sequential: a chain of layers, checked and fused once at build time.
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "xylem/layers/layer.h"

namespace xylem {

class Sequential {
public:
    void add(std::unique_ptr<Layer> layer);
    size_t size() const { return layers_.size(); }
    Layer& layer(size_t i) { return *layers_.at(i); }

    // Walks the per-sample shapes through every layer (a mismatch names the layer and both
    // shapes), fuses each activation that follows a linear layer into it when the backend
    // runs the fused op, and allocates and initialises parameters on `dev`.
    void build(Device& dev, const Shape& input_sample, uint64_t seed);
    const Shape& output_sample_shape() const { return output_; }
    // The element type of the model's input (its first layer's input_dtype: int32 token indices
    // for a text model, f32 otherwise).
    DType input_dtype() const;
    // Throws an Error naming the first layer whose forward (and, with `backward`, backward) ops
    // the backend does not support: "model layer 0 (conv2d): op conv2d_fwd is not supported by
    // backend 'tiny'". build() runs it for the forward ops, before any work is done.
    void check_ops(Backend& backend, bool backward) const;

    const Tensor& forward(Device& dev, const Tensor& x, bool train);
    // Backward from dL/doutput; fills every parameter's gradient.
    void backward(Device& dev, const Tensor& dy);
    // Called during backward right after layer i's backward pass has enqueued the writes of its
    // parameter gradients, for every layer that has parameters, last layer first; the call for
    // the first such layer ends the pass. Data-parallel training starts reducing a bucket of
    // gradients as soon as the layers that write it are done (PyTorch DDP's autograd hooks).
    using BackwardHook = std::function<void(size_t layer)>;
    void set_backward_hook(BackwardHook hook) { backward_hook_ = std::move(hook); }

    std::vector<Param*> params();
    std::vector<Param*> state();  // params, then buffers: every tensor a checkpoint holds
    // Every layer's host counters, named "<layer index>.<counter>" ("3.mask_calls").
    std::vector<std::pair<std::string, uint64_t*>> counters();
    // Every layer's reset_state(): drops recurrent state carried between batches.
    void reset_state();
    // Every layer's carried state, named "<layer index>.<name>" ("1.h_l0"), and its inverse: each
    // layer gets the entries of its index (an Error for a name of no layer, or one a layer refuses).
    std::vector<std::pair<std::string, const Tensor*>> carried_state();
    void restore_carried_state(const std::map<std::string, SavedTensor>& saved);
    std::string summary() const;  // one line per layer, with shapes and fusion

private:
    std::vector<std::unique_ptr<Layer>> layers_;
    std::vector<bool> fused_;     // layer i runs inside layer i-1
    std::vector<Shape> shapes_;   // per-sample output shape of each layer
    Shape input_, output_;
    std::vector<std::string> forward_scopes_, backward_scopes_;  // profiler names per layer pass
    BackwardHook backward_hook_;
};

}  // namespace xylem
