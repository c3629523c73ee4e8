// The schedule formulas of torch.optim.lr_scheduler (StepLR, MultiStepLR, ExponentialLR,
// CosineAnnealingLR, LinearLR for the warm-up), written as closed forms of t.
#include "xylem/solvers/schedule.h"

#include <algorithm>
#include <cmath>

namespace xylem {

double scheduled_lr(double base, const ScheduleSpec& s, int64_t epochs_done, int64_t steps_done) {
    const double t = static_cast<double>(s.unit == "step" ? steps_done : epochs_done);
    double lr = base;
    if (s.type == "step") {
        lr = base * std::pow(s.gamma, std::floor(t / static_cast<double>(s.step_size)));
    } else if (s.type == "multistep") {
        const auto passed = std::count_if(s.milestones.begin(), s.milestones.end(), [&](int64_t m) { return m <= t; });
        lr = base * std::pow(s.gamma, static_cast<double>(passed));
    } else if (s.type == "exponential") {
        lr = base * std::pow(s.gamma, t);
    } else if (s.type == "cosine") {
        const double x = std::min(t, static_cast<double>(s.t_max)) / static_cast<double>(s.t_max);
        lr = s.eta_min + (base - s.eta_min) * (1 + std::cos(M_PI * x)) / 2;
    }
    if (steps_done < s.warmup_steps)
        lr *= s.warmup_start + (1 - s.warmup_start) * static_cast<double>(steps_done) / static_cast<double>(s.warmup_steps);
    return lr;
}

}  // namespace xylem
