// Step fusion: the core's pass that turns chains of elementwise ops into single fused_elementwise
// launches (ops.h, ABI 1.5). A training step issues the same ops on the same buffers every time;
// StepFusion records the first step's ops, finds every chain of consecutive elementwise ops whose
// intermediates nothing else reads (within the step, across steps, or from the host), and from the
// second step on runs each chain as one program. Attribute values (learning rate, Adam's bias
// corrections, clip bounds) become the program's params, bound from the ops of the step being run,
// so nothing changing per step is frozen. A step that issues other ops than the recorded one runs
// eagerly (correct, unfused). A backend without fused_elementwise runs the chain's ops one by one on
// the same backend, and the report says so.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "xylem/backend.h"

namespace xylem::fusion {

// Whether fusion is on: XYLEM_FUSION=0/1 in the environment, else `config_value` ([train] fusion).
bool enabled(bool config_value);

struct StepState;  // core internal (core/src/fusion.cpp)

// One fused program of the plan, for --profile.
struct ProgramInfo {
    std::string members;  // the ops it replaced, in order: "act_bwd, mul, add"
    std::string text;     // the program as expressions (FusedBuilder::describe)
    uint32_t ops_replaced = 0;
    int64_t elements = 0;  // its iteration space
};

class StepFusion {
public:
    // warmup_steps: eager steps before the recording (a training step's first-step special cases).
    StepFusion(Device& dev, bool enabled, int warmup_steps = 1);
    ~StepFusion();
    StepFusion(const StepFusion&) = delete;
    StepFusion& operator=(const StepFusion&) = delete;

    // Runs one step: everything `step` enqueues on the device. The first call records (and runs
    // eagerly); later calls run the fused plan while the step issues the recorded ops.
    void run(const std::function<void()>& step);

    bool enabled() const;
    // Ops the last step enqueued on the device (a fused program counts once).
    uint64_t last_step_launches() const;
    // Ops the last step would have enqueued unfused.
    uint64_t last_step_ops() const;
    const std::vector<ProgramInfo>& programs() const;
    // Why fusion does less than it could ("" when nothing to say): e.g. the backend has no
    // fused_elementwise, or steps stopped matching the recording.
    std::string note() const;

private:
    std::unique_ptr<StepState> state_;
};

// Step fusion over a run of inference forwards of one model (evaluate, predict, `xylem run`):
// each forward is a step, so from the second batch of a shape on its elementwise chains run as
// single programs (a residual add and the ReLU after it, an LSTM cell's gate arithmetic). Attached
// for its lifetime, and only where no other fusion is attached to the device: a training run's
// validation runs inside its fit, whose step fusion owns the device, and there the forwards run
// as issued. Off with XYLEM_FUSION=0.
class ForwardFusion {
public:
    explicit ForwardFusion(Device& dev);
    ~ForwardFusion();
    ForwardFusion(const ForwardFusion&) = delete;
    ForwardFusion& operator=(const ForwardFusion&) = delete;
    void run(const std::function<void()>& forward);

private:
    std::unique_ptr<StepFusion> fusion_;  // null: forwards run as issued
};

}  // namespace xylem::fusion
