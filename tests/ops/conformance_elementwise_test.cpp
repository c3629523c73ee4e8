// Conformance, elementwise family: fill, copy, axpby (both forms), mul, add, act_fwd/act_bwd, dropout_fwd.
#include <cmath>
#include <limits>

#include "ops/conformance.h"
#include "support/backends.h"
#include "support/reference.h"
#include "xylem/op_calls.h"

namespace xylem::test {
namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
const xylem_activation kActs[] = {XYLEM_ACT_NONE, XYLEM_ACT_RELU,      XYLEM_ACT_SIGMOID, XYLEM_ACT_TANH,
                                  XYLEM_ACT_GELU, XYLEM_ACT_GELU_TANH, XYLEM_ACT_RELU6};

class ElementwiseConformance : public BackendTest {};
XYLEM_INSTANTIATE_OVER_BACKENDS(ElementwiseConformance);

TEST_P(ElementwiseConformance, Fill) {
    XYLEM_REQUIRE_OP(XYLEM_OP_FILL);
    for (const Shape& s : elementwise_shapes())
        for (float value : {0.0f, 1.5f, -3.25f, 1e30f}) {
            SCOPED_TRACE("shape " + to_string(s) + " value " + std::to_string(value));
            Tensor out = upload(dev(), s, std::vector<float>(static_cast<size_t>(numel(s)), kNaN));
            ops::fill(dev(), out, value);
            EXPECT_TRUE(near(out.to_vector(), ref::fill(numel(s), value), tol::kCopy));
        }
}

TEST_P(ElementwiseConformance, CopyAcrossShapesWithTheSameCount) {
    XYLEM_REQUIRE_OP(XYLEM_OP_COPY);
    Rng rng;
    for (const Shape& s : elementwise_shapes()) {
        SCOPED_TRACE("shape " + to_string(s));
        const std::vector<float> x = rng.uniform(numel(s), -100.0f, 100.0f);
        Tensor in = upload(dev(), s, x);
        Tensor out = upload(dev(), {numel(s)}, std::vector<float>(x.size(), kNaN));  // flat view of the same count
        ops::copy(dev(), in, out);
        EXPECT_TRUE(near(out.to_vector(), to_double(x), tol::kCopy));
        EXPECT_TRUE(near(in.to_vector(), to_double(x), tol::kCopy)) << "copy modified its input";
    }
}

TEST_P(ElementwiseConformance, AxpbyTwoInputs) {
    XYLEM_REQUIRE_OP(XYLEM_OP_AXPBY);
    Rng rng;
    const std::pair<float, float> coefs[] = {{1.0f, 1.0f}, {2.5f, -0.75f}, {0.0f, 1.0f}, {-1.0f, 0.0f}};
    for (const Shape& s : elementwise_shapes())
        for (auto [alpha, beta] : coefs) {
            SCOPED_TRACE("shape " + to_string(s) + " alpha " + std::to_string(alpha) + " beta " + std::to_string(beta));
            const auto a = rng.uniform(numel(s)), b = rng.uniform(numel(s));
            Tensor ta = upload(dev(), s, a), tb = upload(dev(), s, b), out(s, DType::F32, dev());
            ops::axpby(dev(), alpha, ta, beta, tb, out);
            EXPECT_TRUE(near(out.to_vector(), ref::axpby(alpha, to_double(a), beta, to_double(b)), tol::kElementwise));
        }
}

TEST_P(ElementwiseConformance, AxpbyInPlace) {
    XYLEM_REQUIRE_OP(XYLEM_OP_AXPBY);
    Rng rng;
    for (const Shape& s : elementwise_shapes()) {
        SCOPED_TRACE("shape " + to_string(s));
        const auto a = rng.uniform(numel(s)), old = rng.uniform(numel(s));
        Tensor ta = upload(dev(), s, a), out = upload(dev(), s, old);
        ops::axpby_inplace(dev(), -0.5f, ta, 2.0f, out);  // out = -0.5*a + 2*out
        EXPECT_TRUE(near(out.to_vector(), ref::axpby(-0.5, to_double(a), 2.0, to_double(old)), tol::kElementwise));
        // beta = 0 must not read the old output, even when it holds NaN (BLAS convention).
        out = upload(dev(), s, std::vector<float>(a.size(), kNaN));  // read_write uploads the NaNs
        ops::axpby_inplace(dev(), 3.0f, ta, 0.0f, out);
        EXPECT_TRUE(near(out.to_vector(), ref::scale(3.0, to_double(a)), tol::kElementwise)) << "beta = 0 over NaN";
    }
}

// ADD with b of a's shape, a row vector [cols] (or [1, cols]) and a column vector [..., 1]; add
// and subtract; out starts as NaN, so an element left unwritten shows.
TEST_P(ElementwiseConformance, AddBroadcastsARowOrAColumn) {
    XYLEM_REQUIRE_OP(XYLEM_OP_ADD);
    Rng rng;
    struct Case {
        Shape a, b;
        ref::Bcast mode;
    };
    const Case cases[] = {
        {{7}, {7}, ref::Bcast::elementwise},          {{3, 33}, {3, 33}, ref::Bcast::elementwise},
        {{2, 4099}, {4099}, ref::Bcast::row},         {{33, 129}, {1, 129}, ref::Bcast::row},
        {{2, 3, 5, 7}, {7}, ref::Bcast::row},         {{33, 129}, {33, 1}, ref::Bcast::column},
        {{2, 3, 5, 7}, {2, 3, 5, 1}, ref::Bcast::column}, {{129}, {1}, ref::Bcast::column},
        {{7, 1}, {7, 1}, ref::Bcast::elementwise},    {{1, 1}, {1}, ref::Bcast::row},
    };
    const std::pair<float, float> coefs[] = {{1.0f, 1.0f}, {1.0f, -1.0f}, {-0.5f, 2.5f}};
    for (const Case& c : cases)
        for (auto [alpha, beta] : coefs) {
            SCOPED_TRACE("a " + to_string(c.a) + " b " + to_string(c.b) + " alpha " + std::to_string(alpha) + " beta " +
                         std::to_string(beta));
            const auto a = rng.uniform(numel(c.a)), b = rng.uniform(numel(c.b));
            Tensor ta = upload(dev(), c.a, a), tb = upload(dev(), c.b, b);
            Tensor out = upload(dev(), c.a, std::vector<float>(a.size(), kNaN));
            ops::add(dev(), alpha, ta, beta, tb, out);
            EXPECT_TRUE(near(out.to_vector(), ref::add(alpha, to_double(a), beta, to_double(b), c.a.back(), c.mode),
                             tol::kElementwise));
        }
}

// A b that is neither a's shape, a row nor a column is refused, naming both shapes.
TEST_P(ElementwiseConformance, AddRefusesOtherBroadcasts) {
    XYLEM_REQUIRE_OP(XYLEM_OP_ADD);
    Tensor a({4, 6}, DType::F32, dev()), b({4}, DType::F32, dev()), out({4, 6}, DType::F32, dev());
    std::string msg = "no error";
    try {
        ops::add(dev(), 1.0f, a, 1.0f, b, out);
    } catch (const std::exception& e) {
        msg = e.what();
    }
    EXPECT_NE(msg.find("add"), std::string::npos) << msg;
    EXPECT_NE(msg.find("[4]"), std::string::npos) << msg;
    EXPECT_NE(msg.find("[4, 6]"), std::string::npos) << msg;
}

TEST_P(ElementwiseConformance, Mul) {
    XYLEM_REQUIRE_OP(XYLEM_OP_MUL);
    Rng rng;
    for (const Shape& s : elementwise_shapes()) {
        SCOPED_TRACE("shape " + to_string(s));
        const auto a = rng.uniform(numel(s), -3.0f, 3.0f), b = rng.uniform(numel(s), -3.0f, 3.0f);
        Tensor ta = upload(dev(), s, a), tb = upload(dev(), s, b), out(s, DType::F32, dev());
        ops::mul(dev(), ta, tb, out);
        EXPECT_TRUE(near(out.to_vector(), ref::mul(to_double(a), to_double(b)), tol::kElementwise));
    }
}

// Inputs with exact zeros (ReLU's kink) and saturating values (exp overflow in sigmoid).
std::vector<float> activation_inputs(Rng& rng, int64_t n) {
    std::vector<float> x = rng.uniform(n, -4.0f, 4.0f);
    const float specials[] = {0.0f, -0.0f, 100.0f, -100.0f, 20.0f, -20.0f, 1e-6f};
    for (size_t i = 0; i < x.size() && i < std::size(specials); ++i) x[i * 5 % x.size()] = specials[i];
    return x;
}

// The GELUs came with ABI 1.7 and ReLU6 with 1.8: an older plugin is not asked for them (the core
// refuses them there with the reason).
bool knows(const Backend& b, xylem_activation act) {
    if (act == XYLEM_ACT_RELU6) return b.api().abi_minor >= 8;
    return b.api().abi_minor >= 7 || (act != XYLEM_ACT_GELU && act != XYLEM_ACT_GELU_TANH);
}

TEST_P(ElementwiseConformance, ActivationForward) {
    XYLEM_REQUIRE_OP(XYLEM_OP_ACT_FWD);
    Rng rng;
    for (xylem_activation act : kActs)
        for (const Shape& s : elementwise_shapes()) {
            if (!knows(backend(), act)) continue;
            SCOPED_TRACE("activation " + std::to_string(act) + " shape " + to_string(s));
            const auto x = activation_inputs(rng, numel(s));
            Tensor tx = upload(dev(), s, x), ty(s, DType::F32, dev());
            ops::act_fwd(dev(), act, tx, ty);
            EXPECT_TRUE(near(ty.to_vector(), ref::act_fwd(act, to_double(x)), tol::kActivation));
        }
}

TEST_P(ElementwiseConformance, ActivationBackwardThroughOutput) {
    XYLEM_REQUIRE_OP(XYLEM_OP_ACT_BWD);
    Rng rng;
    for (xylem_activation act : kActs)
        for (const Shape& s : elementwise_shapes()) {
            if (!knows(backend(), act)) continue;
            SCOPED_TRACE("activation " + std::to_string(act) + " shape " + to_string(s));
            // y is a genuine forward output (rounded to float), as the layers pass it; the GELUs'
            // act_bwd reads x instead (ops.h).
            const auto x = activation_inputs(rng, numel(s));
            const auto y = ref::act_bwd_reads_x(act) ? x : to_float(ref::act_fwd(act, to_double(x)));
            const auto dy = rng.uniform(numel(s), -2.0f, 2.0f);
            Tensor tdy = upload(dev(), s, dy), ty = upload(dev(), s, y), tdx(s, DType::F32, dev());
            ops::act_bwd(dev(), act, tdy, ty, tdx);
            EXPECT_TRUE(near(tdx.to_vector(), ref::act_bwd(act, to_double(dy), to_double(y)), tol::kActivation));
        }
}

TEST_P(ElementwiseConformance, DropoutIdentityAtZero) {
    XYLEM_REQUIRE_OP(XYLEM_OP_DROPOUT_FWD);
    Rng rng;
    for (const Shape& s : elementwise_shapes()) {
        SCOPED_TRACE("shape " + to_string(s));
        const auto x = rng.uniform(numel(s));
        Tensor tx = upload(dev(), s, x), ty(s, DType::F32, dev()), mask(s, DType::F32, dev());
        ops::dropout_fwd(dev(), tx, ty, mask, 0.0f, 42);
        EXPECT_TRUE(near(ty.to_vector(), to_double(x), tol::kDropout));
        EXPECT_TRUE(near(mask.to_vector(), ref::fill(numel(s), 1.0), tol::kDropout));
    }
}

TEST_P(ElementwiseConformance, DropoutMaskMatchesTheSharedHash) {
    XYLEM_REQUIRE_OP(XYLEM_OP_DROPOUT_FWD);
    Rng rng;
    const uint64_t seeds[] = {0, 12345, 0x632BE59BD9B4E019ull, ~0ull};
    for (float p : {0.5f, 0.1f, 0.9f})
        for (uint64_t seed : seeds)
            for (const Shape& s : elementwise_shapes()) {
                SCOPED_TRACE("p " + std::to_string(p) + " seed " + std::to_string(seed) + " shape " + to_string(s));
                const auto x = rng.uniform(numel(s), 0.5f, 2.0f);  // nonzero, so y shows the mask too
                Tensor tx = upload(dev(), s, x), ty(s, DType::F32, dev()), tmask(s, DType::F32, dev());
                ops::dropout_fwd(dev(), tx, ty, tmask, p, seed);
                const auto mask = tmask.to_vector();
                const ref::DropoutResult want = ref::dropout_fwd(to_double(x), p, seed);
                // The keep decision is integer hashing: it must agree element for element.
                int64_t wrong = 0, first_wrong = -1;
                for (size_t i = 0; i < mask.size(); ++i)
                    if ((mask[i] != 0.0f) != (want.mask[i] != 0.0)) {
                        if (first_wrong < 0) first_wrong = static_cast<int64_t>(i);
                        ++wrong;
                    }
                EXPECT_EQ(wrong, 0) << "keep decisions differ from xylem_dropout_keep, first at index " << first_wrong;
                EXPECT_TRUE(near(mask, want.mask, tol::kDropout));
                EXPECT_TRUE(near(ty.to_vector(), want.y, tol::kDropout));
            }
}

// Guards the hash itself: a broken xylem_dropout_keep would make every backend agree vacuously.
TEST(DropoutHash, KeepsAboutOneMinusP) {
    for (float p : {0.1f, 0.5f, 0.9f}) {
        int64_t kept = 0;
        const int64_t n = 200000;
        for (int64_t i = 0; i < n; ++i) kept += xylem_dropout_keep(7, static_cast<uint64_t>(i), p);
        EXPECT_NEAR(static_cast<double>(kept) / n, 1.0 - p, 0.01) << "p = " << p;
    }
    int64_t same = 0;
    for (uint64_t i = 0; i < 1000; ++i) same += xylem_dropout_keep(1, i, 0.5f) == xylem_dropout_keep(2, i, 0.5f);
    EXPECT_LT(same, 600) << "different seeds should draw different masks";
}

}  // namespace
}  // namespace xylem::test
