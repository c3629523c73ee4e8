// Step fusion (xylem/fusion.h) never changes what a training step computes: random gradient
// chains of the kinds a step issues (activation gradients, products, axpby, clip by value, clip
// by norm) each followed by one solver update (every SGD variant, Adam, AdamW, every RMSprop
// variant), run for a few steps with fusion on and off from the same state, end with the same
// parameters and solver state. A chain that reads a value it wrote earlier (the clamped gradient
// read by the update) must read the new value: a planner that took the op's input instead would
// skip the clipping only with fusion on, which no "it learns" test notices.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "../support/backends.h"
#include "xylem/fusion.h"
#include "xylem/op_calls.h"

using namespace xylem;
using xylem::test::backend_named;

namespace {

constexpr int64_t kRows = 23, kCols = 41;  // not multiples of any tile

// One parameter's tensors: the gradient chain's operands and the solver state.
struct Slot {
    Tensor p, g, dy, y, s1, s2, s3, sumsq;
};

Slot make_slot(Device& dev, std::mt19937& rng) {
    std::uniform_real_distribution<float> u(-1.0f, 1.0f), pos(0.0f, 0.5f), act(0.05f, 0.95f);
    auto values = [&](auto& dist) {
        std::vector<float> v(static_cast<size_t>(kRows * kCols));
        for (float& x : v) x = dist(rng);
        return v;
    };
    Slot s;
    s.p = test::upload(dev, {kRows, kCols}, values(u));
    s.g = test::upload(dev, {kRows, kCols}, values(u));
    s.dy = test::upload(dev, {kRows, kCols}, values(u));
    s.y = test::upload(dev, {kRows, kCols}, values(act));  // a valid sigmoid/tanh/relu output
    s.s1 = test::upload(dev, {kRows, kCols}, values(u));
    s.s2 = test::upload(dev, {kRows, kCols}, values(pos));  // second moments are >= 0
    s.s3 = test::upload(dev, {kRows, kCols}, values(u));
    s.sumsq = test::upload(dev, {1}, {0.0f});
    return s;
}

// A random step: per slot, 1 to 4 gradient ops into g, then one update reading g. The ops and
// their constants are drawn once (the same every step); per-step values (lr, bias corrections)
// change with the step, as a schedule's would.
struct Plan {
    struct Op {
        int kind;     // 0 act_bwd, 1 mul by y, 2 axpby with dy, 3 clamp, 4 clip by norm
        int act;      // act_bwd's activation
        float a, b;   // axpby's alpha/beta, clamp's bounds, clip's max norm
    };
    struct Update {
        int kind;  // 0 sgd, 1 adam, 2 adamw, 3 rmsprop
        xylem_sgd_attrs sgd{};
        xylem_rmsprop_attrs rms{};
        float wd = 0;
    };
    std::vector<std::vector<Op>> chains;
    std::vector<Update> updates;
    std::string text;
};

Plan draw_plan(std::mt19937& rng, int slots) {
    Plan plan;
    // act_bwd's activations that read y (ReLU6's two tests through the fused RELU_GRADs included)
    static const xylem_activation acts[] = {XYLEM_ACT_NONE, XYLEM_ACT_RELU, XYLEM_ACT_SIGMOID, XYLEM_ACT_TANH,
                                            XYLEM_ACT_RELU6};
    std::uniform_int_distribution<int> n_ops(1, 4), op_kind(0, 4), act(0, 4), upd(0, 3), coin(0, 1);
    std::uniform_real_distribution<float> u(0.1f, 0.9f);
    static const char* op_names[] = {"act_bwd", "mul", "axpby", "clamp", "clip_by_norm"};
    static const char* update_names[] = {"sgd", "adam", "adamw", "rmsprop"};
    for (int s = 0; s < slots; ++s) {
        std::vector<Plan::Op> chain;
        const int n = n_ops(rng);
        for (int i = 0; i < n; ++i) {
            Plan::Op op{op_kind(rng), acts[act(rng)], u(rng), u(rng)};
            if (op.kind == 3) op.a = -0.3f * op.a, op.b = 0.3f * op.b;  // bounds that clip
            if (op.kind == 4) op.a = 0.5f + op.a;                        // a norm below the gradient's
            chain.push_back(op);
            plan.text += op_names[op.kind];
            if (op.kind == 0) plan.text += "(act " + std::to_string(op.act) + ")";
            plan.text += ", ";
        }
        Plan::Update up;
        up.kind = upd(rng);
        up.wd = coin(rng) ? 0.01f : 0.0f;
        up.sgd = {0.0f, coin(rng) ? 0.9f : 0.0f, coin(rng) ? 0.1f : 0.0f, up.wd, 0};
        if (up.sgd.momentum > 0 && up.sgd.dampening == 0 && coin(rng)) up.sgd.nesterov = 1;
        up.rms = {0.0f, 0.95f, 1e-8f, up.wd, coin(rng) ? 0.9f : 0.0f, coin(rng)};
        plan.text += update_names[up.kind];
        plan.text += "; ";
        plan.chains.push_back(chain);
        plan.updates.push_back(up);
    }
    return plan;
}

void issue(Device& dev, const Plan& plan, std::vector<Slot>& slots, int step) {
    const float lr = 0.01f / static_cast<float>(step + 1);
    for (size_t i = 0; i < slots.size(); ++i) {
        Slot& s = slots[i];
        for (const Plan::Op& op : plan.chains[i]) switch (op.kind) {
            case 0: ops::act_bwd(dev, static_cast<xylem_activation>(op.act), s.dy, s.y, s.g); break;
            case 1: ops::mul(dev, s.g, s.y, s.g); break;
            case 2: ops::axpby(dev, op.a, s.g, op.b, s.dy, s.g); break;
            case 3: ops::clamp(dev, s.g, op.a, op.b); break;
            case 4:
                ops::sum_squares(dev, s.g, s.sumsq, 0.0f);
                ops::clip_by_norm(dev, s.sumsq, s.g, op.a);
                break;
            }
        const Plan::Update& up = plan.updates[i];
        const float t = static_cast<float>(step + 1);
        const float bc1 = 1.0f - std::pow(0.9f, t), bc2 = 1.0f - std::pow(0.999f, t);
        switch (up.kind) {
        case 0: {
            xylem_sgd_attrs a = up.sgd;
            a.lr = lr;
            ops::sgd_update(dev, s.p, s.s1, s.g, a);
            break;
        }
        case 1: ops::adam_update(dev, s.p, s.s1, s.s2, s.g, {lr, 0.9f, 0.999f, 1e-8f, up.wd, bc1, bc2}); break;
        case 2: ops::adamw_update(dev, s.p, s.s1, s.s2, s.g, {lr, 0.9f, 0.999f, 1e-8f, up.wd, bc1, bc2}); break;
        case 3: {
            xylem_rmsprop_attrs a = up.rms;
            a.lr = lr;
            ops::rmsprop_update(dev, s.p, s.s2, a.momentum > 0 ? &s.s1 : nullptr, a.centered ? &s.s3 : nullptr, s.g, a);
            break;
        }
        }
    }
}

class FusionChains : public ::testing::TestWithParam<std::string> {
protected:
    Device& dev() { return *backend_named(GetParam())->device(0); }
};

// max |a - b| / max(1, |b|).
double difference(const Tensor& a, const Tensor& b) {
    const std::vector<float> x = a.to_vector(), y = b.to_vector();
    double worst = 0;
    for (size_t i = 0; i < x.size(); ++i)
        worst = std::max(worst, std::fabs(double(x[i]) - y[i]) / std::max(1.0, std::fabs(double(y[i]))));
    return worst;
}

}  // namespace

TEST_P(FusionChains, RandomGradientChainsAndUpdatesGiveTheUnfusedResults) {
    std::mt19937 rng(static_cast<uint32_t>(test::test_seed()));
    const bool fusable = backend_named(GetParam())->supports(XYLEM_OP_FUSED_ELEMENTWISE);
    uint64_t fewer_launches = 0;
    for (int trial = 0; trial < 40; ++trial) {
        const Plan plan = draw_plan(rng, 2);
        SCOPED_TRACE("trial " + std::to_string(trial) + ": " + plan.text);
        const uint32_t seed = static_cast<uint32_t>(rng());
        std::mt19937 r_on(seed), r_off(seed);
        std::vector<Slot> on, off;
        for (int s = 0; s < 2; ++s) on.push_back(make_slot(dev(), r_on)), off.push_back(make_slot(dev(), r_off));
        {
            fusion::StepFusion fused(dev(), true);  // one pass per device at a time
            for (int step = 0; step < 4; ++step)    // the first records, the next run the plan
                fused.run([&] { issue(dev(), plan, on, step); });
            fewer_launches += fused.last_step_launches() < fused.last_step_ops();
        }
        for (int step = 0; step < 4; ++step) issue(dev(), plan, off, step);  // every op as issued
        // The step's results: parameters and solver state. (The gradient is an intermediate: when
        // nothing reads its last value before the next step overwrites it, the pass never stores it.)
        for (int s = 0; s < 2; ++s) {
            EXPECT_LT(difference(on[s].p, off[s].p), 1e-5) << "slot " << s << ": parameter";
            EXPECT_LT(difference(on[s].s1, off[s].s1), 1e-5) << "slot " << s << ": first solver state";
            EXPECT_LT(difference(on[s].s2, off[s].s2), 1e-5) << "slot " << s << ": second solver state";
            EXPECT_LT(difference(on[s].s3, off[s].s3), 1e-5) << "slot " << s << ": RMSprop's gradient average";
        }
    }
    // The comparison is only worth something if the pass fused: most plans must have.
    if (fusable) {
        EXPECT_GE(fewer_launches, 30u);
    }
}

INSTANTIATE_TEST_SUITE_P(Backends, FusionChains, ::testing::ValuesIn(xylem::test::available_backends()),
                         xylem::test::backend_param_name);
