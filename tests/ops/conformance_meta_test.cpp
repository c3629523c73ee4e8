// The conformance suite's own guards: at least the native backend is present, the comparison
// helper and the reference catch wrong results (so the suite cannot pass vacuously), and
// error cases raise an Error that names the op, the shapes and the backend.
#include <filesystem>
#include <functional>
#include <iomanip>
#include <iostream>
#include <limits>

#include "ops/conformance.h"
#include "support/backends.h"
#include "support/reference.h"
#include "xylem/error.h"
#include "xylem/op_calls.h"

namespace xylem::test {
namespace {

// The message of the Error `fn` throws, or "<no error>".

TEST(ConformanceSetup, NativeBackendIsPresentAndAvailable) {
    const PluginRecord* native = test_registry().find("native");
    ASSERT_NE(native, nullptr) << "no native plugin in " << XYLEM_TEST_PLUGIN_DIR;
    EXPECT_TRUE(native->available) << native->reason;
    const auto names = available_backends();
    EXPECT_NE(std::find(names.begin(), names.end(), "native"), names.end());
}

// Prints the op x backend support table; the native backend is the reference and runs every op.
TEST(ConformanceSetup, SupportTable) {
    std::cout << "op support (" << XYLEM_TEST_PLUGIN_DIR << "):\n" << std::left << std::setw(20) << "op";
    for (const std::string& b : available_backends()) std::cout << std::setw(10) << b;
    std::cout << "\n";
    for (uint32_t op = 0; op < XYLEM_OP_COUNT_; ++op) {
        std::cout << std::setw(20) << op_name(op);
        for (const std::string& b : available_backends())
            std::cout << std::setw(10) << (backend_named(b)->supports(op) ? "yes" : "-");
        std::cout << "\n";
        EXPECT_TRUE(backend_named("native")->supports(op)) << "native lacks op " << op_name(op);
    }
}

TEST(ComparisonHelper, AcceptsEqualAndRejectsPerturbed) {
    const std::vector<double> want = {0.25, -3.0, 7.5, 1e-3};
    EXPECT_TRUE(near(to_float(want), want, 1e-7));
    std::vector<float> got = to_float(want);
    got[2] += 1e-4f;  // normalized: 1e-4 / 7.5
    EXPECT_FALSE(near(got, want, 1e-6));
    EXPECT_TRUE(near(got, want, 2e-5));
    const Comparison c = compare(got, want);
    EXPECT_EQ(c.worst, 2u);
    EXPECT_NEAR(c.error, (static_cast<double>(got[2]) - 7.5) / 7.5, 1e-15);
}

TEST(ComparisonHelper, NormalizesByAtLeastOne) {
    // Small references: the error is absolute (no blow-up near zero).
    EXPECT_NEAR(compare({1e-6f}, {0.0}).error, 1e-6, 1e-12);
    // Large references: the error is relative to the largest magnitude.
    EXPECT_NEAR(compare({1000.5f, 1.0f}, {1000.0, 1.0}).error, 0.5 / 1000.0, 1e-12);
}

TEST(ComparisonHelper, RejectsNonFiniteAndSizeMismatch) {
    const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
    EXPECT_FALSE(near({1.0f, nan}, std::vector<double>{1.0, 2.0}, 1e3));
    EXPECT_FALSE(near({nan, 2.0f}, std::vector<double>{1.0, 2.0}, 1e3));  // a NaN in the first slot too
    EXPECT_FALSE(near({1.0f, inf}, std::vector<double>{1.0, 2.0}, 1e3));
    EXPECT_FALSE(near({1.0f}, std::vector<double>{1.0, 2.0}, 1e3));
    EXPECT_FALSE(near({}, std::vector<double>{1.0}, 1e3));
}

// Hand-computed values: the reference itself must be right, or backends would agree with a bug.
TEST(Reference, KnownValues) {
    // [[1,2],[3,4]] * [[5,6],[7,8]] = [[19,22],[43,50]]; with A^T: [[26,30],[38,44]].
    EXPECT_TRUE(near(to_float(ref::gemm(false, false, 1, {1, 2, 3, 4}, 2, 2, {5, 6, 7, 8}, 2, 2, 0, {})),
                     std::vector<double>{19, 22, 43, 50}, 0));
    EXPECT_TRUE(near(to_float(ref::gemm(true, false, 1, {1, 2, 3, 4}, 2, 2, {5, 6, 7, 8}, 2, 2, 0, {})),
                     std::vector<double>{26, 30, 38, 44}, 0));
    EXPECT_TRUE(near(to_float(ref::gemm(false, true, 2, {1, 2, 3, 4}, 2, 2, {5, 6, 7, 8}, 2, 2, 1, {1, 1, 1, 1})),
                     std::vector<double>{35, 47, 79, 107}, 0));
    // softmax([0, ln 3]) = [1/4, 3/4]; log_softmax is its log.
    const auto sm = ref::softmax_fwd({0.0, std::log(3.0)}, 1, 2, false);
    EXPECT_NEAR(sm[0], 0.25, 1e-15);
    EXPECT_NEAR(sm[1], 0.75, 1e-15);
    EXPECT_NEAR(ref::softmax_fwd({0.0, std::log(3.0)}, 1, 2, true)[0], std::log(0.25), 1e-15);
    EXPECT_NEAR(ref::xent_sum({0.0, std::log(3.0)}, 1, 2, {1}), -std::log(0.75), 1e-15);
    EXPECT_NEAR(ref::xent_bwd({0.0, std::log(3.0)}, 1, 2, {1}, 2.0)[1], 2.0 * (0.75 - 1.0), 1e-15);
    EXPECT_NEAR(ref::act(XYLEM_ACT_SIGMOID, 0.0), 0.5, 1e-15);
    EXPECT_NEAR(ref::act_grad_from_y(XYLEM_ACT_TANH, std::tanh(0.5)), 1.0 / std::pow(std::cosh(0.5), 2), 1e-15);
    EXPECT_NEAR(ref::bias_grad({1, 2, 3, 4, 5, 6}, {1, 2, 3}, 0.0, {})[1], 15.0, 1e-15);
    EXPECT_NEAR(ref::accuracy({1, 3, 3, 0, 0, 0}, 2, 3, {1, 0}, 0.0), 2.0, 0);
    // Nesterov from v = 0: v = g; p -= lr*(g + m*g).
    ref::Vec p{1.0}, v{0.0};
    ref::sgd_update(p, v, {2.0}, xylem_sgd_attrs{0.1f, 0.5f, 0.0f, 0.0f, 1});
    EXPECT_NEAR(p[0], 1.0 - 0.1 * (2.0 + 0.5 * 2.0), 1e-7);
    // Adam's first step moves by lr*g/(|g| + eps), about lr.
    ref::Vec q{1.0}, m{0.0}, s{0.0};
    ref::adam_update(q, m, s, {-0.3}, xylem_adam_attrs{0.01f, 0.9f, 0.999f, 1e-8f, 0.0f, 0.1f, 0.001f});
    EXPECT_NEAR(q[0], 1.0 + 0.01, 1e-6);
}

class ConformanceSelfCheck : public BackendTest {};
XYLEM_INSTANTIATE_OVER_BACKENDS(ConformanceSelfCheck);

// The same comparison the suite uses catches a result that is off by one part in 1e4.
TEST_P(ConformanceSelfCheck, PerturbedGemmResultFails) {
    XYLEM_REQUIRE_OP(XYLEM_OP_GEMM);
    Rng rng;
    const auto a = rng.uniform(33 * 7), b = rng.uniform(7 * 5);
    Tensor ta = upload(dev(), {33, 7}, a), tb = upload(dev(), {7, 5}, b), tc({33, 5}, DType::F32, dev());
    ops::gemm(dev(), false, false, 1.0f, ta, tb, 0.0f, tc);
    const auto want = ref::gemm(false, false, 1.0, to_double(a), 33, 7, to_double(b), 7, 5, 0.0, {});
    auto got = tc.to_vector();
    EXPECT_TRUE(near(got, want, tol::gemm(7)));
    got[100] += 1e-3f;
    EXPECT_FALSE(near(got, want, tol::gemm(7)));
}

class ConformanceErrors : public BackendTest {};
XYLEM_INSTANTIATE_OVER_BACKENDS(ConformanceErrors);

TEST_P(ConformanceErrors, ShapeMismatchNamesOpAndBothShapes) {
    Tensor a({2, 3}, DType::F32, dev()), b({3, 2}, DType::F32, dev()), out({2, 3}, DType::F32, dev());
    std::string msg = error_of([&] { ops::axpby(dev(), 1.0f, a, 1.0f, b, out); });
    EXPECT_TRUE(contains(msg, "axpby"));
    EXPECT_TRUE(contains(msg, "[2, 3]"));
    EXPECT_TRUE(contains(msg, "[3, 2]"));
    msg = error_of([&] { ops::mul(dev(), a, b, out); });
    EXPECT_TRUE(contains(msg, "mul"));
    EXPECT_TRUE(contains(msg, "[3, 2]"));
    Tensor c({2, 5}, DType::F32, dev());
    msg = error_of([&] { ops::gemm(dev(), false, false, 1.0f, a, a, 0.0f, c); });  // [2,3] x [2,3]
    EXPECT_TRUE(contains(msg, "gemm"));
    EXPECT_TRUE(contains(msg, "[2, 3]"));
    EXPECT_TRUE(contains(msg, "[2, 5]"));
    Tensor w({4, 5}, DType::F32, dev()), y({2, 4}, DType::F32, dev());
    msg = error_of([&] { ops::linear_fwd(dev(), a, w, nullptr, y, XYLEM_ACT_NONE); });
    EXPECT_TRUE(contains(msg, "linear_fwd"));
    EXPECT_TRUE(contains(msg, "[2, 3]"));
    EXPECT_TRUE(contains(msg, "[4, 5]"));
    Tensor labels({3}, DType::I32, dev()), loss({1}, DType::F32, dev());
    msg = error_of([&] { ops::xent_fwd(dev(), a, labels, loss, 1.0f, false); });
    EXPECT_TRUE(contains(msg, "xent_fwd"));
    EXPECT_TRUE(contains(msg, "[3]"));
    EXPECT_TRUE(contains(msg, "[2, 3]"));
    msg = error_of([&] { ops::dropout_fwd(dev(), a, out, out, 1.0f, 0); });
    EXPECT_TRUE(contains(msg, "dropout_fwd"));
}

// Labels outside [0, C) are an Error (raised by the op or, on an asynchronous backend, by the
// readback at the latest); the message names the backend and the label.
TEST_P(ConformanceErrors, LabelOutOfRange) {
    const Shape s{3, 5};
    Tensor x = upload(dev(), s, std::vector<float>(15, 0.5f)), dx(s, DType::F32, dev());
    for (int32_t bad : {5, -1, 1000}) {
        SCOPED_TRACE("label " + std::to_string(bad));
        Tensor labels = upload_i32(dev(), {3}, {0, bad, 2});
        Tensor loss = upload(dev(), {1}, {0.0f});
        const std::pair<uint32_t, std::function<void()>> calls[] = {
            {XYLEM_OP_XENT_FWD,
             [&] {
                 ops::xent_fwd(dev(), x, labels, loss, 1.0f, false);
                 loss.to_vector();
             }},
            {XYLEM_OP_XENT_BWD,
             [&] {
                 ops::xent_bwd(dev(), x, labels, dx, 1.0f);
                 dx.to_vector();
             }},
            {XYLEM_OP_NLL_FWD,
             [&] {
                 ops::nll_fwd(dev(), x, labels, loss, 1.0f, false);
                 loss.to_vector();
             }},
            {XYLEM_OP_NLL_BWD,
             [&] {
                 ops::nll_bwd(dev(), x, labels, dx, 1.0f);
                 dx.to_vector();
             }},
            {XYLEM_OP_ACCURACY,
             [&] {
                 ops::accuracy(dev(), x, labels, loss);
                 loss.to_vector();
             }},
        };
        for (const auto& [op, call] : calls) {
            if (!backend().supports(op)) continue;
            SCOPED_TRACE(op_name(op));
            const std::string msg = error_of(call);
            EXPECT_TRUE(contains(msg, backend().name()));
            EXPECT_TRUE(contains(msg, "label"));
        }
    }
}

TEST_P(ConformanceErrors, UnknownActivationIsRejected) {
    XYLEM_REQUIRE_OP(XYLEM_OP_ACT_FWD);
    Tensor x = upload(dev(), {4}, {1, 2, 3, 4}), y({4}, DType::F32, dev());
    const std::string msg = error_of([&] {
        ops::act_fwd(dev(), static_cast<xylem_activation>(17), x, y);
        y.to_vector();
    });
    EXPECT_TRUE(contains(msg, backend().name()));
}

// An op the backend lacks: Device::run refuses it, naming the op and the backend.
void expect_unsupported_message(Backend& b, uint32_t op) {
    xylem_op_desc d{};
    d.op = op;
    const std::string msg = error_of([&] { b.device(0)->run(d); });
    EXPECT_EQ(msg, std::string("op ") + op_name(op) + " is not supported by backend '" + b.name() + "'");
}

TEST(ConformanceUnsupported, MessageNamesOpAndBackend) {
    // A real backend that lacks an op, if the plugin folder has one.
    for (const std::string& name : available_backends()) {
        auto b = backend_named(name);
        for (uint32_t op = 0; op < XYLEM_OP_COUNT_; ++op)
            if (!b->supports(op)) {
                SCOPED_TRACE("backend " + name);
                expect_unsupported_message(*b, op);
                return;
            }
    }
    // Otherwise the loader tests' fixture plugin, which runs only FILL.
    const std::string fixture = std::string(XYLEM_TEST_FIXTURE_PLUGIN_DIR) + "/libxylem_fixture.so";
    if (!std::filesystem::exists(fixture))
        GTEST_SKIP() << "every backend runs every op and the fixture plugin " << fixture << " is not built";
    static Registry* reg = new Registry();  // plugins are never unloaded
    const PluginRecord& rec = reg->load_file(fixture);
    if (!rec.available) GTEST_SKIP() << "fixture plugin unavailable: " << rec.reason;
    ASSERT_TRUE(rec.backend->supports(XYLEM_OP_FILL));
    ASSERT_FALSE(rec.backend->supports(XYLEM_OP_COPY));
    expect_unsupported_message(*rec.backend, XYLEM_OP_COPY);
    // Through the typed call as well.
    Device& dev = *rec.backend->device(0);
    Tensor in({4}, DType::F32, dev), out({4}, DType::F32, dev);
    const std::string msg = error_of([&] { ops::copy(dev, in, out); });
    EXPECT_TRUE(contains(msg, "copy"));
    EXPECT_TRUE(contains(msg, rec.backend->name()));
}

}  // namespace
}  // namespace xylem::test
