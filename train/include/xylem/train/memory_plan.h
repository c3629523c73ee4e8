// What a run needs on its device, counted before any work, against what the device has: a model
// that fits each allocation but not all of them together is refused with both numbers instead of
// running until the kernel kills it (on a host-memory device, pages are taken when first touched).
#pragma once

#include <cstdint>
#include <string>

#include "xylem/backend.h"
#include "xylem/layers/net.h"
#include "xylem/solvers/solver.h"

namespace xylem::train {

struct MemoryPlan {
    uint64_t parameters = 0;    // trainable parameters and buffers (batch-norm statistics)
    uint64_t trainable = 0;     // of which trainable
    uint64_t gradients = 0;     // one per trainable parameter (training only)
    uint64_t solver_state = 0;  // the solver's tensors per parameter (training only)
    std::string solver;         // "sgd, 1 tensor per parameter"; "" for inference
    uint64_t activations = 0;   // a batch's layer outputs, and their gradients when training
    int64_t batch = 0;
    uint64_t data = 0;  // datasets kept on the device (data.resident)
    uint64_t total() const { return parameters + gradients + solver_state + activations + data; }
    // "parameters 9.43 GiB, gradients 9.43 GiB, ..."
    std::string breakdown() const;
};

// Counted from the model's shapes (Net::footprint), before or after build(): nothing is allocated.
MemoryPlan training_memory(Net& model, const Shape& input_sample, const Solver& solver, int64_t batch,
                           uint64_t resident_data_bytes);
MemoryPlan inference_memory(Net& model, const Shape& input_sample, int64_t batch, uint64_t resident_data_bytes);
// A model of several inputs: one sample shape each (Net::input_names()).
MemoryPlan inference_memory(Net& model, std::span<const Shape> input_samples, int64_t batch,
                            uint64_t resident_data_bytes);

// Throws Error("<who>: <what> does not fit on <device>: ... needs about X (...) and <source> is Y
// ...") when the plan's total exceeds what the device's tensors may take (Device::capacity());
// nothing when the capacity is unknown.
void check_memory_fits(const MemoryPlan& plan, Device& dev, const std::string& who, const std::string& what);

}  // namespace xylem::train
