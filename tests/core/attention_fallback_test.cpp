// The attention ops' fallback: a plugin that declines a descriptor through op_accepts (ABI 1.7)
// still runs attention, composed by the core from gemm_batched, masked_softmax and dropout_fwd,
// with the fused op's results, and the profile says so once. fake_discrete (tests/core/plugins)
// declines head sizes above 16; its kernels are the native plugin's.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "support/backends.h"
#include "support/fake_discrete.h"
#include "xylem/op_calls.h"
#include "xylem/profiler.h"

namespace xylem::test {
namespace {

bool composed_note(const std::string& op) {
    const std::vector<std::string> notes = profiler::notes();
    return std::any_of(notes.begin(), notes.end(), [&](const std::string& n) {
        return n.find("fake_discrete:0: " + op + " is composed") != std::string::npos;
    });
}

struct Outputs {
    std::vector<float> o, lse, dq, dk, dv;
};

// Forward and backward of one causal attention with dropout on `dev`, from fixed inputs.
Outputs attention(Device& dev, int64_t head_dim, bool composed) {
    Rng rng(5);
    const Shape shape{2, 3, 7, head_dim};
    Tensor q = upload(dev, shape, rng.uniform(numel(shape), -1.0f, 1.0f));
    Tensor k = upload(dev, shape, rng.uniform(numel(shape), -1.0f, 1.0f));
    Tensor v = upload(dev, shape, rng.uniform(numel(shape), -1.0f, 1.0f));
    Tensor dout = upload(dev, shape, rng.uniform(numel(shape), -1.0f, 1.0f));
    Tensor o(shape, DType::F32, dev), lse({2, 3, 7}, DType::F32, dev);
    Tensor dq(shape, DType::F32, dev), dk(shape, DType::F32, dev), dv(shape, DType::F32, dev);
    xylem_attention_attrs at{};
    at.scale = 0.3f, at.causal = 1, at.dropout_p = 0.25f, at.seed = 99;
    if (composed) {
        ops::attention_fwd_composed(dev, q, k, v, nullptr, o, lse, at);
        ops::attention_bwd_composed(dev, dout, q, k, v, o, lse, nullptr, dq, dk, dv, at);
    } else {
        ops::attention_fwd(dev, q, k, v, nullptr, o, lse, at);
        ops::attention_bwd(dev, dout, q, k, v, o, lse, nullptr, dq, dk, dv, at);
    }
    return {o.to_vector(), lse.to_vector(), dq.to_vector(), dk.to_vector(), dv.to_vector()};
}

void expect_same_results(const Outputs& got, const Outputs& want) {
    EXPECT_TRUE(near(got.o, to_double(want.o), 1e-5)) << "O";
    EXPECT_TRUE(near(got.lse, to_double(want.lse), 1e-5)) << "LSE";
    EXPECT_TRUE(near(got.dq, to_double(want.dq), 1e-5)) << "dQ";
    EXPECT_TRUE(near(got.dk, to_double(want.dk), 1e-5)) << "dK";
    EXPECT_TRUE(near(got.dv, to_double(want.dv), 1e-5)) << "dV";
}

TEST(AttentionFallback, AnAcceptedShapeRunsTheFusedOp) {
    Device& dev = fake_discrete();
    const Outputs fused = attention(dev, 8, false);
    EXPECT_FALSE(composed_note("attention_fwd")) << "head size 8 is accepted: no composition";
    expect_same_results(fused, attention(dev, 8, true));
}

TEST(AttentionFallback, ADeclinedShapeIsComposedWithTheSameResultsAndSaidOnce) {
    Device& dev = fake_discrete();
    const Outputs declined = attention(dev, 24, false);  // fake_discrete declines head sizes above 16
    EXPECT_TRUE(composed_note("attention_fwd"));
    EXPECT_TRUE(composed_note("attention_bwd"));
    const size_t notes = profiler::notes().size();
    attention(dev, 24, false);
    EXPECT_EQ(profiler::notes().size(), notes) << "the note is made once";
    // The native plugin runs these shapes fused: the composition gives its results.
    expect_same_results(declined, attention(*backend_named("native")->device(0), 24, false));
}

}  // namespace
}  // namespace xylem::test
