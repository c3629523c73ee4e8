// Shared test helpers: the backends found in the build's plugin folder (for suites that run
// over every backend), per-test seeded random data, tensor upload/readback, and the
// normalized-error comparison every numeric check uses.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iomanip>
#include <limits>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "xylem/backend.h"
#include "xylem/registry.h"
#include "xylem/tensor.h"

namespace xylem::test {

// ---- backends ------------------------------------------------------------------------------

// The plugin files the suites run over. The conformance kit (conformance/main.cpp) fills this
// from --plugin before gtest registers the tests; the test programs leave it empty and scan
// XYLEM_TEST_PLUGIN_DIR.
inline std::vector<std::string>& plugin_files() {
    static std::vector<std::string> files;
    return files;
}

// The registry over plugin_files() or XYLEM_TEST_PLUGIN_DIR, loaded once per process (plugins stay loaded).
inline const Registry& test_registry() {
    static const Registry* reg = [] {
        auto* r = new Registry();  // never destroyed: backends outlive every test
        for (const std::string& f : plugin_files()) r->load_file(f);
#ifdef XYLEM_TEST_PLUGIN_DIR
        if (plugin_files().empty()) r->scan({XYLEM_TEST_PLUGIN_DIR});
#endif
        return r;
    }();
    return *reg;
}

// Names of every available backend in the plugin folder, in scan order.
inline std::vector<std::string> available_backends() {
    std::vector<std::string> names;
    for (const PluginRecord& p : test_registry().plugins())
        if (p.available && p.backend) names.push_back(p.name);
    return names;
}

inline std::shared_ptr<Backend> backend_named(const std::string& name) {
    return test_registry().select(name);
}

// gtest parameter names allow only [A-Za-z0-9_].
inline std::string backend_param_name(const ::testing::TestParamInfo<std::string>& info) {
    std::string s = info.param;
    for (char& ch : s)
        if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
    return s;
}

// FNV-1a of the full test name (suite, test, backend): a fixed seed per test, so a failure
// reproduces, and different tests draw different data.
inline uint64_t test_seed() {
    const ::testing::TestInfo* t = ::testing::UnitTest::GetInstance()->current_test_info();
    std::string name = t ? std::string(t->test_suite_name()) + "." + t->name() : "no-test";
    uint64_t h = 1469598103934665603ull;
    for (char ch : name) h = (h ^ static_cast<unsigned char>(ch)) * 1099511628211ull;
    return h;
}

// Random data from the test's fixed seed.
class Rng {
public:
    explicit Rng(uint64_t seed = test_seed()) : gen_(seed) {}
    std::vector<float> uniform(int64_t n, float lo = -1.0f, float hi = 1.0f) {
        std::uniform_real_distribution<float> u(lo, hi);
        std::vector<float> v(static_cast<size_t>(n));
        for (float& x : v) x = u(gen_);
        return v;
    }
    // Magnitudes in [lo, hi] with a random sign: keeps values away from 0 (ReLU's kink).
    std::vector<float> away_from_zero(int64_t n, float lo, float hi) {
        std::vector<float> v = uniform(n, lo, hi);
        std::bernoulli_distribution coin(0.5);
        for (float& x : v)
            if (coin(gen_)) x = -x;
        return v;
    }
    std::vector<int32_t> labels(int64_t n, int64_t classes) {
        std::uniform_int_distribution<int32_t> u(0, static_cast<int32_t>(classes - 1));
        std::vector<int32_t> v(static_cast<size_t>(n));
        for (int32_t& x : v) x = u(gen_);
        return v;
    }
    std::mt19937_64& engine() { return gen_; }

private:
    std::mt19937_64 gen_;
};

// Fixture for suites that run over every available backend (the test parameter is its name).
class BackendTest : public ::testing::TestWithParam<std::string> {
protected:
    void SetUp() override {
        backend_ = backend_named(GetParam());
        device_ = backend_->device(0);
    }
    Backend& backend() { return *backend_; }
    Device& dev() { return *device_; }
    // The skip message names the op and the backend (see XYLEM_REQUIRE_OP).
    std::string unsupported(uint32_t op) const {
        return std::string("op ") + op_name(op) + " is not supported by backend '" + backend_->name() + "'";
    }

private:
    std::shared_ptr<Backend> backend_;
    std::shared_ptr<Device> device_;
};

// The ops the running test named through XYLEM_REQUIRE_OP (under test) and XYLEM_REQUIRE_HELPER_OP
// (setup only, e.g. a fill before the op under test). The kit's per-op table reads them.
struct RequiredOps {
    std::vector<uint32_t> tested, helpers;
};
inline RequiredOps& required_ops() {
    static RequiredOps ops;  // tests run on one thread; the kit clears it when a test starts
    return ops;
}

// Skips the current test when the backend does not implement `op` (must be used in the test body).
#define XYLEM_REQUIRE_OP(op)                                          \
    do {                                                              \
        ::xylem::test::required_ops().tested.push_back(op);           \
        if (!backend().supports(op)) GTEST_SKIP() << unsupported(op); \
    } while (0)

// The same for an op the test only uses to set up its data.
#define XYLEM_REQUIRE_HELPER_OP(op)                                   \
    do {                                                              \
        ::xylem::test::required_ops().helpers.push_back(op);          \
        if (!backend().supports(op)) GTEST_SKIP() << unsupported(op); \
    } while (0)

// Instantiates a BackendTest-derived suite once per available backend, named after it. With no
// backend at all, gtest fails the suite as one that generated no tests: never a silent pass.
#define XYLEM_INSTANTIATE_OVER_BACKENDS(Suite)                                                          \
    INSTANTIATE_TEST_SUITE_P(Backends, Suite, ::testing::ValuesIn(::xylem::test::available_backends()), \
                             ::xylem::test::backend_param_name)

// ---- tensors -------------------------------------------------------------------------------

// A tensor allocated on `dev` holding `values` (written on the host, uploaded when first read).
inline Tensor upload(Device& dev, const Shape& shape, const std::vector<float>& values) {
    Tensor t(shape, DType::F32, dev);
    EXPECT_EQ(static_cast<int64_t>(values.size()), t.numel()) << "test bug: value count for " << to_string(shape);
    if (!values.empty() && t.numel() > 0)  // memcpy from an empty vector's null data() is UB even for 0 bytes
        std::memcpy(t.host_write<float>(), values.data(), std::min<size_t>(values.size(), t.numel()) * sizeof(float));
    return t;
}

inline Tensor upload_i32(Device& dev, const Shape& shape, const std::vector<int32_t>& values) {
    Tensor t(shape, DType::I32, dev);
    EXPECT_EQ(static_cast<int64_t>(values.size()), t.numel()) << "test bug: value count for " << to_string(shape);
    std::memcpy(t.host_write<int32_t>(), values.data(), std::min<size_t>(values.size(), t.numel()) * sizeof(int32_t));
    return t;
}

inline std::vector<double> to_double(const std::vector<float>& v) {
    return {v.begin(), v.end()};
}

inline std::vector<float> to_float(const std::vector<double>& v) {
    std::vector<float> out(v.size());
    for (size_t i = 0; i < v.size(); ++i) out[i] = static_cast<float>(v[i]);
    return out;
}

// ---- comparison ----------------------------------------------------------------------------

// Normalized error: max|got - want| / max(1, max|want|); infinite when a value is not finite
// where the reference is, or the sizes differ.
struct Comparison {
    double error = 0.0;
    size_t worst = 0;
    double got = 0.0, want = 0.0;
    bool size_mismatch = false;
};

inline Comparison compare(const std::vector<float>& got, const std::vector<double>& want) {
    Comparison c;
    if (got.size() != want.size()) {
        c.size_mismatch = true;
        c.error = std::numeric_limits<double>::infinity();
        return c;
    }
    double scale = 1.0;
    for (double w : want)
        if (std::isfinite(w)) scale = std::max(scale, std::fabs(w));
    for (size_t i = 0; i < got.size(); ++i) {
        const double g = got[i], w = want[i];
        double e;
        if (std::isnan(g) || std::isnan(w))
            e = std::numeric_limits<double>::infinity();
        else if (std::isinf(g) || std::isinf(w))
            e = g == w ? 0.0 : std::numeric_limits<double>::infinity();
        else
            e = std::fabs(g - w) / scale;
        if (i == 0 || e > c.error) {
            c.error = e;
            c.worst = i;
            c.got = g;
            c.want = w;
        }
    }
    return c;
}

// gtest predicate: EXPECT_TRUE(near(got, want, tol)) << "context";
inline ::testing::AssertionResult near(const std::vector<float>& got, const std::vector<double>& want, double tol) {
    const Comparison c = compare(got, want);
    // XYLEM_TEST_PRINT_ERRORS=1 prints every comparison, to see the headroom under each tolerance.
    static const bool print = std::getenv("XYLEM_TEST_PRINT_ERRORS") != nullptr;
    if (print) std::printf("[ error    ] %.3g of tolerance %.3g (ratio %.3f)\n", c.error, tol, c.error / tol);
    if (c.error <= tol) return ::testing::AssertionSuccess() << "normalized error " << c.error << " <= " << tol;
    auto r = ::testing::AssertionFailure();
    if (c.size_mismatch) return r << "size mismatch: got " << got.size() << " values, expected " << want.size();
    return r << std::setprecision(9) << "normalized error " << c.error << " > tolerance " << tol << " (worst at index "
             << c.worst << ": got " << c.got << ", expected " << c.want << ", " << got.size() << " values)";
}

// gtest predicate: EXPECT_TRUE(contains(error_message, "[2, 3]"));
inline ::testing::AssertionResult contains(const std::string& text, const std::string& part) {
    if (text.find(part) != std::string::npos) return ::testing::AssertionSuccess();
    return ::testing::AssertionFailure() << "\"" << text << "\" does not contain \"" << part << "\"";
}

}  // namespace xylem::test
