// Solvers: SGD (momentum, Nesterov, weight decay), Adam, AdamW and RMSprop, with optional gradient
// clipping (by value or by global norm) and weight decay left off biases and normalisation
// parameters. State lives on the device and hyper-parameters travel by value inside the ops, so a
// step allocates and copies nothing and reads nothing back (the Leaf #88 scenario).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "xylem/layers/layer.h"

namespace xylem {

// Gradient clipping before each update; 0 = off. At most one of the two may be set.
struct ClipOptions {
    float value = 0.0f;  // every gradient element clamped to [-value, value]
    float norm = 0.0f;   // all gradients scaled by min(1, norm / (total L2 norm + 1e-6)) (clip_grad_norm_)
};

class Solver {
public:
    virtual ~Solver() = default;
    virtual std::string kind() const = 0;
    // Clips the gradients (if asked), then applies one update to every parameter from its gradient.
    // Everything runs on the device and nothing is read back, so a step can be captured (except
    // where capture_blocker() says why not).
    void step(Device& dev, const std::vector<Param*>& params);
    // The ops step() runs (checked against the backend before training starts).
    std::vector<uint32_t> ops_needed() const;
    float lr() const { return lr_; }
    void set_lr(float lr) { lr_ = lr; }

    // Throws an Error naming the solver key when the settings are out of range.
    void set_clipping(const ClipOptions& clip);
    const ClipOptions& clipping() const { return clip_; }
    // no_decay_bias: parameters of rank <= 1 (biases, batch-norm weight and bias) get no weight decay.
    void set_no_decay_bias(bool on) { no_decay_bias_ = on; }
    bool no_decay_bias() const { return no_decay_bias_; }
    // The weight decay `p` gets from a solver whose weight_decay is `wd`.
    float weight_decay_for(const Param& p, float wd) const;
    // Why a captured step would replay stale values ("" when it would not): a per-step host value
    // baked into the update op's attributes. step() throws it when called while `dev` captures.
    virtual std::string capture_blocker() const { return ""; }

    // What a resumed run restores to continue exactly where it stopped: the number of steps
    // taken, and each per-parameter state tensor under PyTorch's name for it ("momentum_buffer";
    // "exp_avg", "exp_avg_sq"; "square_avg", "grad_avg"). state_slots() creates the tensors
    // (zeroed) if no step has yet.
    uint64_t steps() const { return steps_; }
    void set_steps(uint64_t steps) { steps_ = steps; }
    struct StateSlot {
        std::string name;
        std::vector<Tensor>* tensors;  // one per parameter, in params() order
    };
    virtual std::vector<StateSlot> state_slots(Device& dev, const std::vector<Param*>& params) = 0;
    // How many state tensors (the parameter's shape each) the solver keeps per parameter: the
    // number of state_slots(), known before any is created (the memory plan asks before training).
    virtual size_t state_tensors_per_param() const = 0;

protected:
    explicit Solver(float lr) : lr_(lr) {}
    // One update of every parameter (the gradients are already clipped).
    // One step's update, in two parts so that each parameter's clipping and update are issued back
    // to back (one fused program per parameter when the fusion pass runs): prepare() takes the
    // step's host values and makes sure the state tensors exist (their zero fills come first);
    // update_one() updates parameter i.
    virtual void prepare(Device& dev, const std::vector<Param*>& params) = 0;
    virtual void update_one(Device& dev, size_t i, Param& p) = 0;
    virtual std::vector<uint32_t> update_ops() const = 0;
    // One zero-filled state tensor per parameter, created on the device on first use.
    static std::vector<Tensor>& state(std::vector<Tensor>& slots, Device& dev, const std::vector<Param*>& params);
    float lr_;
    uint64_t steps_ = 0;  // updates applied so far (SGD's first-step rule, Adam's bias correction)

private:
    void clip(Device& dev, Param& p);
    ClipOptions clip_;
    bool no_decay_bias_ = false;
    Tensor norm_sq_;  // the squared global gradient norm, a device scalar
};

struct SgdOptions {
    float lr = 0.01f, momentum = 0.0f, dampening = 0.0f, weight_decay = 0.0f;
    bool nesterov = false;
};

class Sgd : public Solver {
public:
    explicit Sgd(const SgdOptions& o);
    std::string kind() const override { return "sgd"; }
    std::vector<StateSlot> state_slots(Device& dev, const std::vector<Param*>& params) override;
    size_t state_tensors_per_param() const override { return 1; }  // the update op reads a velocity even without momentum

protected:
    void prepare(Device& dev, const std::vector<Param*>& params) override;
    void update_one(Device& dev, size_t i, Param& p) override;
    std::vector<uint32_t> update_ops() const override { return {XYLEM_OP_FILL, XYLEM_OP_SGD_UPDATE}; }

private:
    SgdOptions o_;
    std::vector<Tensor> velocity_;
    xylem_sgd_attrs step_{};  // this step's attributes (prepare)
};

struct AdamOptions {
    float lr = 0.001f, beta1 = 0.9f, beta2 = 0.999f, eps = 1e-8f, weight_decay = 0.0f;
};

// Adam (L2 weight decay added to the gradient, torch.optim.Adam).
class Adam : public Solver {
public:
    explicit Adam(const AdamOptions& o) : Adam(o, false) {}
    std::string kind() const override { return decoupled_ ? "adamw" : "adam"; }
    std::vector<StateSlot> state_slots(Device& dev, const std::vector<Param*>& params) override;
    size_t state_tensors_per_param() const override { return 2; }
    std::string capture_blocker() const override;

protected:
    Adam(const AdamOptions& o, bool decoupled);
    void prepare(Device& dev, const std::vector<Param*>& params) override;
    void update_one(Device& dev, size_t i, Param& p) override;
    std::vector<uint32_t> update_ops() const override {
        return {XYLEM_OP_FILL, decoupled_ ? XYLEM_OP_ADAMW_UPDATE : XYLEM_OP_ADAM_UPDATE};
    }

private:
    AdamOptions o_;
    bool decoupled_;
    float bc1_ = 1, bc2_ = 1;  // this step's bias corrections (prepare)
    std::vector<Tensor> m_, v_;
};

struct AdamWOptions {
    float lr = 0.001f, beta1 = 0.9f, beta2 = 0.999f, eps = 1e-8f, weight_decay = 0.01f;  // torch's defaults
};

// AdamW (decoupled weight decay, torch.optim.AdamW): p *= 1 - lr*wd before Adam's step.
class AdamW : public Adam {
public:
    explicit AdamW(const AdamWOptions& o) : Adam(AdamOptions{o.lr, o.beta1, o.beta2, o.eps, o.weight_decay}, true) {}
};

struct RmspropOptions {
    float lr = 0.01f, alpha = 0.99f, eps = 1e-8f, weight_decay = 0.0f, momentum = 0.0f;  // torch's defaults
    bool centered = false;
};

// RMSprop as torch.optim.RMSprop: square_avg always, momentum_buffer when momentum > 0, grad_avg
// when centered.
class Rmsprop : public Solver {
public:
    explicit Rmsprop(const RmspropOptions& o);
    std::string kind() const override { return "rmsprop"; }
    std::vector<StateSlot> state_slots(Device& dev, const std::vector<Param*>& params) override;
    size_t state_tensors_per_param() const override {
        return 1 + (o_.momentum > 0 ? 1 : 0) + (o_.centered ? 1 : 0);
    }

protected:
    void prepare(Device& dev, const std::vector<Param*>& params) override;
    void update_one(Device& dev, size_t i, Param& p) override;
    std::vector<uint32_t> update_ops() const override { return {XYLEM_OP_FILL, XYLEM_OP_RMSPROP_UPDATE}; }

private:
    RmspropOptions o_;
    std::vector<Tensor> square_avg_, momentum_buffer_, grad_avg_;
};

}  // namespace xylem
