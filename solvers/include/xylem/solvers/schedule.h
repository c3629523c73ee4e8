// Learning-rate schedules ([solver.schedule]): a closed form of how far training has got, so a
// resumed run (which knows its epoch and step) gets the same rate without saved schedule state.
#pragma once

#include <cstdint>

#include "xylem/config.h"

namespace xylem {

// The rate for the step after `epochs_done` whole epochs and `steps_done` steps in all.
double scheduled_lr(double base_lr, const ScheduleSpec& schedule, int64_t epochs_done, int64_t steps_done);

}  // namespace xylem
