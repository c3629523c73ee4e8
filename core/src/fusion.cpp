// Step fusion (xylem/fusion.h). First commit: the plumbing; every op runs as issued.
#include "xylem/fusion.h"

#include <cstdlib>
#include <cstring>

#include "fusion_internal.h"
#include "xylem/error.h"

namespace xylem::fusion {

bool enabled(bool config_value) {
    const char* env = std::getenv("XYLEM_FUSION");
    if (env && *env) return std::strcmp(env, "0") != 0;
    return config_value;
}

struct StepState {
    Device* dev = nullptr;
    bool enabled = false;
    uint64_t step_launches = 0, step_ops = 0;
    std::vector<ProgramInfo> programs;
    std::string note;
};

void submit(StepState& s, Device& dev, const xylem_op_desc& desc) {
    ++s.step_ops;
    dev.launch(desc);
}

void flush(StepState&) {}

StepFusion::StepFusion(Device& dev, bool on) : state_(std::make_unique<StepState>()) {
    state_->dev = &dev;
    state_->enabled = on;
}

StepFusion::~StepFusion() {
    if (state_->dev->fusion_state() == state_.get()) state_->dev->set_fusion_state(nullptr);
}

void StepFusion::run(const std::function<void()>& step) {
    Device& dev = *state_->dev;
    if (dev.fusion_state()) throw Error(dev.name() + ": a fused step is already running on this device");
    const uint64_t before = dev.launches();
    state_->step_ops = 0;
    dev.set_fusion_state(state_.get());
    try {
        step();
    } catch (...) {
        dev.set_fusion_state(nullptr);
        throw;
    }
    flush(*state_);
    dev.set_fusion_state(nullptr);
    state_->step_launches = dev.launches() - before;
}

bool StepFusion::enabled() const { return state_->enabled; }
uint64_t StepFusion::last_step_launches() const { return state_->step_launches; }
uint64_t StepFusion::last_step_ops() const { return state_->step_ops; }
const std::vector<ProgramInfo>& StepFusion::programs() const { return state_->programs; }
std::string StepFusion::note() const { return state_->note; }

}  // namespace xylem::fusion
