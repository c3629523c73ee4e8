// The fusion pass's entry points for Device (core internal; the pass is core/src/fusion.cpp).
#pragma once

#include "xylem/backend.h"
#include "xylem/fusion.h"

namespace xylem::fusion {

// Device::run while a StepFusion runs a step on the device: records, defers or launches `desc`.
void submit(StepState& state, Device& dev, const xylem_op_desc& desc);
// Device::sync: launches every deferred op first (the host is about to wait for them).
void flush(StepState& state);
// The host reads `buffer` during the step (flushes first): a recording never elides its writes.
void note_host_read(StepState& state, xylem_buffer_t buffer);

}  // namespace xylem::fusion
