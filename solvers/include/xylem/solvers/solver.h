// Solvers: SGD (momentum, Nesterov, weight decay) and Adam. State lives on the device and
// hyper-parameters travel by value inside the op, so a step allocates and copies nothing
// (the Leaf #88 scenario).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "xylem/layers/layer.h"

namespace xylem {

class Solver {
public:
    virtual ~Solver() = default;
    virtual std::string kind() const = 0;
    // Applies one update to every parameter from its gradient.
    virtual void step(Device& dev, const std::vector<Param*>& params) = 0;
    // The ops step() runs (checked against the backend before training starts).
    virtual std::vector<uint32_t> ops_needed() const = 0;
    float lr() const { return lr_; }
    void set_lr(float lr) { lr_ = lr; }

    // What a resumed run restores to continue exactly where it stopped: the number of steps
    // taken, and each per-parameter state tensor under PyTorch's name for it ("momentum_buffer";
    // "exp_avg", "exp_avg_sq"). state_slots() creates the tensors (zeroed) if no step has yet.
    uint64_t steps() const { return steps_; }
    void set_steps(uint64_t steps) { steps_ = steps; }
    struct StateSlot {
        std::string name;
        std::vector<Tensor>* tensors;  // one per parameter, in params() order
    };
    virtual std::vector<StateSlot> state_slots(Device& dev, const std::vector<Param*>& params) = 0;

protected:
    explicit Solver(float lr) : lr_(lr) {}
    // One zero-filled state tensor per parameter, created on the device on first use.
    static std::vector<Tensor>& state(std::vector<Tensor>& slots, Device& dev, const std::vector<Param*>& params);
    float lr_;
    uint64_t steps_ = 0;  // updates applied so far (SGD's first-step rule, Adam's bias correction)
};

struct SgdOptions {
    float lr = 0.01f, momentum = 0.0f, dampening = 0.0f, weight_decay = 0.0f;
    bool nesterov = false;
};

class Sgd : public Solver {
public:
    explicit Sgd(const SgdOptions& o);
    std::string kind() const override { return "sgd"; }
    void step(Device& dev, const std::vector<Param*>& params) override;
    std::vector<uint32_t> ops_needed() const override { return {XYLEM_OP_FILL, XYLEM_OP_SGD_UPDATE}; }
    std::vector<StateSlot> state_slots(Device& dev, const std::vector<Param*>& params) override;

private:
    SgdOptions o_;
    std::vector<Tensor> velocity_;
};

struct AdamOptions {
    float lr = 0.001f, beta1 = 0.9f, beta2 = 0.999f, eps = 1e-8f, weight_decay = 0.0f;
};

class Adam : public Solver {
public:
    explicit Adam(const AdamOptions& o);
    std::string kind() const override { return "adam"; }
    void step(Device& dev, const std::vector<Param*>& params) override;
    std::vector<uint32_t> ops_needed() const override { return {XYLEM_OP_FILL, XYLEM_OP_ADAM_UPDATE}; }
    std::vector<StateSlot> state_slots(Device& dev, const std::vector<Param*>& params) override;

private:
    AdamOptions o_;
    std::vector<Tensor> m_, v_;
};

}  // namespace xylem
