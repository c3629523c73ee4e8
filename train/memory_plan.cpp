#include "xylem/train/memory_plan.h"


#include "xylem/error.h"
#include "xylem/memory.h"

namespace xylem::train {
namespace {

MemoryPlan common(const Net::Footprint& f, int64_t batch, uint64_t resident, bool training) {
    const uint64_t b = static_cast<uint64_t>(batch), f32 = sizeof(float);
    MemoryPlan m;
    m.trainable = static_cast<uint64_t>(f.trainable) * f32;
    m.parameters = m.trainable + static_cast<uint64_t>(f.buffers) * f32;
    m.batch = batch;
    m.activations = b * f32 *
                    static_cast<uint64_t>(training ? f.outputs_per_sample + f.output_grads_per_sample : f.run_outputs_per_sample);
    m.data = resident;
    if (training) m.gradients = m.trainable;
    return m;
}

std::string part(const char* name, uint64_t bytes) { return std::string(name) + " " + bytes_text(static_cast<double>(bytes)); }

}  // namespace

MemoryPlan training_memory(Net& model, const Shape& input_sample, const Solver& solver, int64_t batch,
                           uint64_t resident_data_bytes) {
    MemoryPlan m = common(model.footprint(input_sample), batch, resident_data_bytes, true);
    const size_t per = solver.state_tensors_per_param();
    m.solver_state = m.trainable * per;
    m.solver = solver.kind() + ", " + std::to_string(per) + (per == 1 ? " tensor" : " tensors") + " per parameter";
    return m;
}

MemoryPlan inference_memory(Net& model, const Shape& input_sample, int64_t batch, uint64_t resident_data_bytes) {
    return inference_memory(model, std::span<const Shape>(&input_sample, 1), batch, resident_data_bytes);
}

MemoryPlan inference_memory(Net& model, std::span<const Shape> input_samples, int64_t batch,
                            uint64_t resident_data_bytes) {
    return common(model.footprint(input_samples), batch, resident_data_bytes, false);
}

std::string MemoryPlan::breakdown() const {
    std::string s = part("parameters", parameters);
    if (gradients) s += ", " + part("their gradients", gradients);
    if (!solver.empty()) s += ", " + part(("solver state (" + solver + ")").c_str(), solver_state);
    s += ", " + part(gradients ? "layer outputs and their gradients" : "layer outputs", activations) +
         " for a batch of " + std::to_string(batch) + " (layers' own saved tensors come on top)";
    if (data) s += ", " + part("data kept on the device", data);
    return s;
}

void check_memory_fits(const MemoryPlan& plan, Device& dev, const std::string& who, const std::string& what) {
    const Device::Capacity& cap = dev.capacity();
    if (!cap.bytes || plan.total() <= cap.bytes) return;
    throw Error(who + ": " + what + " does not fit on " + dev.name() + ": it needs about " +
                bytes_text(static_cast<double>(plan.total())) + " (" + plan.breakdown() + ") and " + cap.source +
                " is " + bytes_text(static_cast<double>(cap.bytes)) +
                "; make the model or the batch smaller, or use a device with more memory");
}

}  // namespace xylem::train
