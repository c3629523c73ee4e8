// The [solver] keys of the optimisers: rmsprop and adamw, their defaults, clipping and
// no_decay_bias; every error names the key and what is allowed.
#include <gtest/gtest.h>

#include "xylem/config.h"
#include "xylem/error.h"

namespace xylem {
namespace {

std::string error_of(const std::string& solver_section) {
    try {
        parse_config("[solver]\n" + solver_section, "test.toml");
    } catch (const Error& e) {
        return e.what();
    }
    return "(no error)";
}

SolverSpec parse(const std::string& solver_section) {
    return parse_config("[solver]\n" + solver_section, "test.toml").solver;
}

TEST(SolverConfig, RmspropKeysAndTorchDefaults) {
    const SolverSpec d = parse("type = \"rmsprop\"\n");
    EXPECT_EQ(d.type, "rmsprop");
    EXPECT_FLOAT_EQ(d.lr, 0.01f);
    EXPECT_FLOAT_EQ(d.alpha, 0.99f);
    EXPECT_FLOAT_EQ(d.eps, 1e-8f);
    EXPECT_FLOAT_EQ(d.momentum, 0.0f);
    EXPECT_FALSE(d.centered);
    const SolverSpec s = parse("type = \"rmsprop\"\nlr = 0.002\nalpha = 0.9\neps = 1e-6\nmomentum = 0.5\ncentered = true\n"
                               "weight_decay = 0.01\n");
    EXPECT_FLOAT_EQ(s.lr, 0.002f);
    EXPECT_FLOAT_EQ(s.alpha, 0.9f);
    EXPECT_FLOAT_EQ(s.eps, 1e-6f);
    EXPECT_FLOAT_EQ(s.momentum, 0.5f);
    EXPECT_TRUE(s.centered);
    EXPECT_FLOAT_EQ(s.weight_decay, 0.01f);
}

TEST(SolverConfig, AdamwTakesTorchDefaults) {
    const SolverSpec d = parse("type = \"adamw\"\n");
    EXPECT_FLOAT_EQ(d.lr, 0.001f);
    EXPECT_FLOAT_EQ(d.weight_decay, 0.01f);  // torch.optim.AdamW's default, unlike Adam's 0
    EXPECT_FLOAT_EQ(parse("type = \"adam\"\n").weight_decay, 0.0f);
    EXPECT_FLOAT_EQ(parse("type = \"adamw\"\nweight_decay = 0.1\nbeta1 = 0.8\n").weight_decay, 0.1f);
}

TEST(SolverConfig, ClippingAndNoDecayBias) {
    const SolverSpec off = parse("");
    EXPECT_EQ(off.clip_value, 0.0f);
    EXPECT_EQ(off.clip_norm, 0.0f);
    EXPECT_FALSE(off.no_decay_bias);
    EXPECT_FLOAT_EQ(parse("clip_value = 0.5\n").clip_value, 0.5f);
    EXPECT_FLOAT_EQ(parse("type = \"adamw\"\nclip_norm = 1\n").clip_norm, 1.0f);
    EXPECT_TRUE(parse("type = \"adam\"\nno_decay_bias = true\n").no_decay_bias);
}

TEST(SolverConfig, ErrorsNameTheKeyAndTheAllowedValues) {
    struct Case {
        std::string text, want;
    };
    const Case cases[] = {
        {"type = \"lbfgs\"", "key 'solver.type' must be one of sgd, adam, adamw, rmsprop (got 'lbfgs')"},
        {"type = \"rmsprop\"\nalpha = 1.0", "key 'solver.alpha' must be in [0, 1)"},
        {"type = \"rmsprop\"\nalpha = -0.1", "key 'solver.alpha' must be in [0, 1)"},
        {"type = \"rmsprop\"\ncentered = 1", "key 'solver.centered' must be a boolean"},
        {"clip_value = 0", "key 'solver.clip_value' must be positive (> 0)"},
        {"clip_value = -1", "key 'solver.clip_value' must be positive (> 0)"},
        {"clip_norm = -0.5", "key 'solver.clip_norm' must be positive (> 0)"},
        {"clip_norm = \"big\"", "key 'solver.clip_norm' must be a number"},
        {"clip_value = 1\nclip_norm = 1", "key 'solver.clip_norm' cannot be combined with solver.clip_value"},
        {"no_decay_bias = \"yes\"", "key 'solver.no_decay_bias' must be a boolean"},
        // A key of another solver type would be ignored: it is an error naming the types it applies to.
        {"type = \"sgd\"\nalpha = 0.9", "key 'solver.alpha' applies to solver type rmsprop, not sgd"},
        {"type = \"adamw\"\ncentered = true", "key 'solver.centered' applies to solver type rmsprop, not adamw"},
        {"type = \"adamw\"\nmomentum = 0.9", "key 'solver.momentum' applies to solver type sgd, rmsprop, not adamw"},
        {"type = \"rmsprop\"\nbeta1 = 0.9", "key 'solver.beta1' applies to solver type adam, adamw, not rmsprop"},
        {"type = \"rmsprop\"\nnesterov = true", "key 'solver.nesterov' applies to solver type sgd, not rmsprop"},
        {"type = \"sgd\"\neps = 1e-8", "key 'solver.eps' applies to solver type adam, adamw, rmsprop, not sgd"},
        {"clip = 1", "unknown key 'solver.clip'"},
    };
    for (const Case& c : cases) EXPECT_NE(error_of(c.text).find(c.want), std::string::npos) << c.text << "\n -> " << error_of(c.text);
}

}  // namespace
}  // namespace xylem
