// Ctrl-C and SIGTERM during training. The first asks the loop to stop after the current step,
// write a resumable checkpoint and exit 130 / 143; a second exits at once, removing the temp
// files of checkpoints being written (their final names are only ever replaced by a rename, so
// nothing under a final name is half-written).
#pragma once

#include "xylem/train/callbacks.h"

namespace xylem::train {

// Installs the handlers for SIGINT and SIGTERM while it lives; restores the previous ones after.
// Passed to fit() (or RunOptions::callbacks), it asks the run to stop once a signal came.
class InterruptGuard final : public Callbacks {
public:
    InterruptGuard();
    ~InterruptGuard() override;
    InterruptGuard(const InterruptGuard&) = delete;
    InterruptGuard& operator=(const InterruptGuard&) = delete;
    int stop_requested() override;
};

// The signal that asked training to stop (SIGINT or SIGTERM), or 0.
int stop_signal();

}  // namespace xylem::train
