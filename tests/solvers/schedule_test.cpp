// Learning-rate schedules against their closed forms (torch.optim.lr_scheduler's StepLR,
// MultiStepLR, ExponentialLR, CosineAnnealingLR, and a linear warm-up).
#include "xylem/solvers/schedule.h"

#include <gtest/gtest.h>

#include <cmath>

using namespace xylem;

namespace {
ScheduleSpec spec(const std::string& type) {
    ScheduleSpec s;
    s.type = type;
    return s;
}
}  // namespace

TEST(Schedule, NoneKeepsTheRate) {
    EXPECT_DOUBLE_EQ(scheduled_lr(0.1, spec("none"), 7, 12345), 0.1);
}

TEST(Schedule, StepDecaysEveryStepSizeEpochs) {
    ScheduleSpec s = spec("step");
    s.step_size = 3;
    s.gamma = 0.5;
    const double want[] = {0.1, 0.1, 0.1, 0.05, 0.05, 0.05, 0.025};
    for (int e = 0; e < 7; ++e) EXPECT_DOUBLE_EQ(scheduled_lr(0.1, s, e, 1000 * e), want[e]) << e;
}

TEST(Schedule, MultiStepDecaysAtEachMilestone) {
    ScheduleSpec s = spec("multistep");
    s.milestones = {2, 5};
    s.gamma = 0.1;
    const double want[] = {1, 1, 0.1, 0.1, 0.1, 0.01, 0.01};
    for (int e = 0; e < 7; ++e) EXPECT_NEAR(scheduled_lr(1.0, s, e, 0), want[e], 1e-15) << e;
}

TEST(Schedule, ExponentialCountsStepsWhenAsked) {
    ScheduleSpec s = spec("exponential");
    s.gamma = 0.9;
    s.unit = "step";
    for (int t : {0, 1, 10, 250}) EXPECT_NEAR(scheduled_lr(0.5, s, 99, t), 0.5 * std::pow(0.9, t), 1e-15) << t;
}

TEST(Schedule, CosineAnnealsToEtaMinAndStays) {
    ScheduleSpec s = spec("cosine");
    s.t_max = 10;
    s.eta_min = 0.001;
    for (int e = 0; e <= 12; ++e) {
        const double x = std::min(e, 10) / 10.0;
        EXPECT_NEAR(scheduled_lr(0.1, s, e, 0), 0.001 + (0.1 - 0.001) * (1 + std::cos(M_PI * x)) / 2, 1e-15) << e;
    }
    EXPECT_NEAR(scheduled_lr(0.1, s, 5, 0), 0.0505, 1e-12);  // half way
}

TEST(Schedule, WarmupRampsLinearlyOnTopOfAnyType) {
    ScheduleSpec s = spec("step");
    s.step_size = 1;
    s.gamma = 0.5;
    s.warmup_steps = 4;
    s.warmup_start = 0.2;
    // Epoch 1 (step decay once) while still warming up: 0.5 * (0.2 + 0.8 * 2/4).
    EXPECT_DOUBLE_EQ(scheduled_lr(1.0, s, 1, 2), 0.5 * 0.6);
    EXPECT_DOUBLE_EQ(scheduled_lr(1.0, s, 0, 0), 0.2);
    EXPECT_DOUBLE_EQ(scheduled_lr(1.0, s, 0, 3), 0.2 + 0.8 * 0.75);
    EXPECT_DOUBLE_EQ(scheduled_lr(1.0, s, 0, 4), 1.0);  // done
    ScheduleSpec only_warmup;
    only_warmup.warmup_steps = 10;
    EXPECT_TRUE(only_warmup.active());
    EXPECT_DOUBLE_EQ(scheduled_lr(0.3, only_warmup, 0, 5), 0.15);
}
