// The OpenCL plugin's fused_elementwise: each opcode's generated OpenCL C against the kit's
// arithmetic in double (special values included), every broadcast mode at nonzero offsets, exact
// in-place aliasing and the overlaps it refuses, the per-process kernel cache (a second run of a
// structure with other params, offsets and sizes builds nothing) and a failed build's message.
// Few distinct program structures: each costs PoCL a compile the first time.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "support/backends.h"
#include "xylem/fused_builder.h"
#include "xylem/op_calls.h"
#include "xylem/plugin_kit/fused.h"

using namespace xylem;
using test::near;
using test::Rng;
using test::upload;

namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr double kTol = 1e-5;  // ops.h's tolerance for fused_elementwise

class OpenclFused : public ::testing::Test {
protected:
    void SetUp() override {
        const auto names = test::available_backends();
        if (std::find(names.begin(), names.end(), "opencl") == names.end())
            GTEST_SKIP() << "no OpenCL platform on this machine";
        backend_ = test::backend_named("opencl");
        dev_ = backend_->device(0);
    }
    Device& dev() { return *dev_; }

    // The plugin's count of fused programs compiled in this process, from its probe's detail.
    uint64_t builds() const {
        xylem_probe_info info{};
        backend_->api().probe(&info);
        const char* tag = "fused programs built: ";
        const char* at = std::strstr(info.detail, tag);
        return at ? std::strtoull(at + std::strlen(tag), nullptr, 10) : 0;
    }

    std::string run_error(const xylem_fused_attrs& at, const std::vector<const Tensor*>& in,
                          const std::vector<Tensor*>& out) {
        try {
            ops::fused_elementwise(dev(), at, in, out);
            dev().sync();
        } catch (const std::exception& e) {
            return e.what();
        }
        return "no error";
    }

private:
    std::shared_ptr<Backend> backend_;
    std::shared_ptr<Device> dev_;
};

// got matches want: NaN where want is NaN, the same infinity where it is infinite, else within
// kTol of max(1, max finite |want|).
::testing::AssertionResult matches(const std::vector<float>& got, const std::vector<double>& want) {
    if (got.size() != want.size())
        return ::testing::AssertionFailure() << "size " << got.size() << " vs " << want.size();
    double scale = 1.0;
    for (double w : want)
        if (std::isfinite(w)) scale = std::max(scale, std::fabs(w));
    for (size_t i = 0; i < got.size(); ++i) {
        const double g = got[i], w = want[i];
        const bool ok = std::isnan(w) ? std::isnan(g) : std::isinf(w) ? g == w : std::fabs(g - w) <= kTol * scale;
        if (!ok) return ::testing::AssertionFailure() << "element " << i << ": got " << g << ", expected " << w;
    }
    return ::testing::AssertionSuccess();
}

}  // namespace

// One program computes every arithmetic opcode from inputs (a, b, c) and stores the one that a
// one-hot params vector selects (select(p_k, r_k, ...) chains: a zero selector passes the rest
// through untouched, NaN results included), so all 30 opcodes share one build. Each run feeds the
// opcode inputs from its domain plus a block of special values (NaN, +-inf, +-0, +-1, 0.5).
TEST_F(OpenclFused, EveryOpcodeMatchesTheKitInDouble) {
    std::vector<uint32_t> opcodes;
    for (uint32_t op = 0; op < XYLEM_FUSED_OPCODE_COUNT_; ++op)
        if (op != XYLEM_FUSED_INPUT && op != XYLEM_FUSED_PARAM && op != XYLEM_FUSED_CONST && op != XYLEM_FUSED_OUTPUT)
            opcodes.push_back(op);
    ASSERT_EQ(opcodes.size(), 30u);

    FusedBuilder fb;
    const auto a = fb.input(0), b = fb.input(1), c = fb.input(2);
    std::vector<FusedBuilder::Value> results, selectors;
    for (uint32_t op : opcodes) results.push_back(fb.apply(static_cast<xylem_fused_opcode>(op), a, b, c));
    for (size_t k = 0; k < opcodes.size(); ++k) selectors.push_back(fb.param(0.0f));
    auto chosen = fb.constant(-7.0f);  // stored only when no selector is set
    for (size_t k = opcodes.size(); k-- > 0;) chosen = fb.apply(XYLEM_FUSED_SELECT, selectors[k], results[k], chosen);
    fb.output(0, chosen);

    Rng rng;
    const int64_t n_random = 301;
    const float specials[] = {kNaN, kInf, -kInf, 0.0f, -0.0f, 1.0f, -1.0f, 0.5f};
    const uint64_t before = builds();
    for (size_t k = 0; k < opcodes.size(); ++k) {
        const uint32_t op = opcodes[k];
        SCOPED_TRACE(std::string("opcode ") + plugin_kit::fused_opcode_info(op).name);
        std::vector<float> va = rng.uniform(n_random, -3.0f, 3.0f), vb = rng.uniform(n_random, -3.0f, 3.0f),
                           vc = rng.uniform(n_random, -3.0f, 3.0f);
        if (op == XYLEM_FUSED_LOG || op == XYLEM_FUSED_SQRT || op == XYLEM_FUSED_RSQRT)
            va = rng.uniform(n_random, 0.05f, 4.0f);
        if (op == XYLEM_FUSED_RECIP) va = rng.away_from_zero(n_random, 0.1f, 3.0f);
        if (op == XYLEM_FUSED_DIV) vb = rng.away_from_zero(n_random, 0.1f, 3.0f);
        for (int64_t i = 0; i < n_random; i += 5) vb[i] = va[i];  // ties for eq, ge, min and max
        for (int64_t i = 1; i < n_random; i += 7) va[i] = 0.0f;   // select's false branch
        for (float x : specials)
            for (float y : specials) {
                va.push_back(x);
                vb.push_back(y);
                vc.push_back(specials[(va.size() * 3) % 8]);
            }
        std::vector<double> want(va.size());
        for (size_t i = 0; i < va.size(); ++i) want[i] = plugin_kit::fused_apply<double>(op, va[i], vb[i], vc[i]);

        std::vector<float> params(opcodes.size(), 0.0f);
        params[k] = 1.0f;
        fb.set_params(params);
        const xylem_fused_attrs at = fb.finish({XYLEM_FUSED_FULL, XYLEM_FUSED_FULL, XYLEM_FUSED_FULL});
        const Shape shape{static_cast<int64_t>(va.size())};
        Tensor ta = upload(dev(), shape, va), tb = upload(dev(), shape, vb), tc = upload(dev(), shape, vc);
        Tensor out = upload(dev(), shape, std::vector<float>(va.size(), kNaN));
        ops::fused_elementwise(dev(), at, {&ta, &tb, &tc}, {&out});
        EXPECT_TRUE(matches(out.to_vector(), want));
    }
    EXPECT_LE(builds() - before, 1u) << "30 runs of one structure with other params";
}

// FULL, ROW, COL and SCALAR inputs, each a row view at a nonzero offset into a larger tensor,
// over 2-D and 3-D iteration spaces; then the same structure with other params, offsets and sizes
// reuses the kernel, and a different constant is a different structure.
TEST_F(OpenclFused, BroadcastModesAtOffsetsAndTheKernelCache) {
    auto program = [](float constant, float p0, float p1) {
        FusedBuilder fb;
        const auto full = fb.input(0), row = fb.input(1), col = fb.input(2), scalar = fb.input(3);
        const auto t = fb.apply(XYLEM_FUSED_FMA, full, row, col);  // full*row + col
        const auto u = fb.apply(XYLEM_FUSED_MUL, t, scalar);       // * scalar
        const auto scale = fb.param(p0), shift = fb.constant(constant);
        const auto v = fb.apply(XYLEM_FUSED_FMA, u, scale, shift);
        fb.output(0, fb.apply(XYLEM_FUSED_SUB, v, fb.param(p1)));
        fb.output(1, fb.apply(XYLEM_FUSED_MAX, row, col));  // broadcast to every element
        return fb.finish({XYLEM_FUSED_FULL, XYLEM_FUSED_ROW, XYLEM_FUSED_COL, XYLEM_FUSED_SCALAR});
    };
    // The rows views' first element within a parent of `pad` extra leading rows.
    auto view = [&](const Shape& shape, int64_t pad, const std::vector<float>& values) {
        Shape parent = shape;
        if (parent.empty()) parent = {1};
        const int64_t per_row = numel(Shape(parent.begin() + 1, parent.end()));
        parent[0] += pad;
        std::vector<float> all(static_cast<size_t>(numel(parent)), 1e6f);  // poison outside the view
        std::copy(values.begin(), values.end(), all.begin() + pad * per_row);
        Tensor whole = upload(dev(), parent, all);
        Tensor v = whole.rows(pad, shape.empty() ? 1 : shape[0]);
        return shape.empty() ? v.reshaped({}) : v;
    };

    Rng rng;
    struct Case {
        Shape space;
        int64_t pad;
        float p0, p1;
    };
    const Case cases[] = {
        {{37, 53}, 3, 0.5f, -2.0f}, {{3, 5, 7}, 1, -1.5f, 0.25f}, {{1, 1}, 2, 2.0f, 0.0f}, {{0, 4}, 1, 1.0f, 1.0f}};
    const uint64_t before = builds();
    for (const Case& cs : cases) {
        SCOPED_TRACE(to_string(cs.space));
        const int64_t cols = cs.space.back(), rows = numel(cs.space) / std::max<int64_t>(cols, 1);
        Shape col_shape(cs.space.begin(), cs.space.end() - 1);
        col_shape.push_back(1);
        const auto full = rng.uniform(numel(cs.space)), row = rng.uniform(cols), col = rng.uniform(rows),
                   scalar = rng.uniform(1);
        Tensor tf = view(cs.space, cs.pad, full), tr = view({1, cols}, cs.pad, row), tc = view(col_shape, cs.pad, col),
               ts = view({}, cs.pad, scalar);
        Tensor o0 = view(cs.space, cs.pad + 1, std::vector<float>(full.size(), kNaN));
        Tensor o1 = view(cs.space, cs.pad, std::vector<float>(full.size(), kNaN));
        ops::fused_elementwise(dev(), program(0.75f, cs.p0, cs.p1), {&tf, &tr, &tc, &ts}, {&o0, &o1});
        std::vector<double> want0(full.size()), want1(full.size());
        for (int64_t r = 0; r < rows; ++r)
            for (int64_t k = 0; k < cols; ++k) {
                const size_t i = static_cast<size_t>(r * cols + k);
                const double t = (double(full[i]) * row[k] + col[r]) * scalar[0];
                want0[i] = t * cs.p0 + 0.75 - cs.p1;
                want1[i] = std::max<double>(row[k], col[r]);
            }
        EXPECT_TRUE(near(o0.to_vector(), want0, kTol));
        EXPECT_TRUE(near(o1.to_vector(), want1, kTol));
    }
    EXPECT_LE(builds() - before, 1u) << "one structure: other params, offsets and sizes reuse the kernel";

    // Another constant is another structure: one more build, and its own value.
    const uint64_t mid = builds();
    Tensor tf = upload(dev(), {2, 3}, std::vector<float>(6, 1.0f)), tr = upload(dev(), {3}, {1, 2, 3}),
           tc = upload(dev(), {2, 1}, {0, 10}), ts = upload(dev(), {}, {2.0f});
    Tensor o0({2, 3}, DType::F32, dev()), o1({2, 3}, DType::F32, dev());
    ops::fused_elementwise(dev(), program(-100.0f, 1.0f, 0.0f), {&tf, &tr, &tc, &ts}, {&o0, &o1});
    EXPECT_TRUE(near(o0.to_vector(), {-98, -96, -94, -78, -76, -74}, kTol));
    EXPECT_EQ(builds() - mid, 1u);
}

// An input that is an output exactly is updated in place (a parameter update: x -= lr * g, with
// a second output); an input that overlaps an output any other way, or two overlapping outputs,
// are refused before anything runs.
TEST_F(OpenclFused, InPlaceAliasingAndRefusedOverlaps) {
    FusedBuilder fb;
    const auto x = fb.input(0), g = fb.input(1);
    fb.output(0, fb.apply(XYLEM_FUSED_SUB, x, fb.apply(XYLEM_FUSED_MUL, fb.param(0.1f), g)));
    fb.output(1, fb.apply(XYLEM_FUSED_SQUARE, g));
    const xylem_fused_attrs at = fb.finish({XYLEM_FUSED_FULL, XYLEM_FUSED_FULL});

    Rng rng;
    const int64_t n = 1000;
    const auto vx = rng.uniform(2 * n), vg = rng.uniform(n);
    Tensor whole = upload(dev(), {2, n}, vx);
    Tensor xs = whole.rows(1, 1).reshaped({n});  // the second row: offset n
    Tensor tg = upload(dev(), {n}, vg), sq({n}, DType::F32, dev());
    ops::fused_elementwise(dev(), at, {&xs, &tg}, {&xs, &sq});
    std::vector<double> want(2 * n), want_sq(n);
    for (int64_t i = 0; i < n; ++i) {
        want[i] = vx[i];  // the first row is untouched
        want[n + i] = double(vx[n + i]) - double(0.1f) * vg[i];
        want_sq[i] = double(vg[i]) * vg[i];
    }
    EXPECT_TRUE(near(whole.to_vector(), want, kTol));
    EXPECT_TRUE(near(sq.to_vector(), want_sq, kTol));

    // Overlaps the plugin refuses: x one element off its output, and the outputs on one range.
    Tensor big = upload(dev(), {n + 1}, rng.uniform(n + 1));
    Tensor shifted_in = big.rows(0, n), shifted_out = big.rows(1, n);
    std::string msg = run_error(at, {&shifted_in, &tg}, {&shifted_out, &sq});
    EXPECT_TRUE(test::contains(msg, "fused_elementwise")) << msg;
    EXPECT_TRUE(test::contains(msg, "input 0 (full) overlaps output 0")) << msg;
    Tensor other = upload(dev(), {n}, vg);
    msg = run_error(at, {&other, &tg}, {&shifted_out, &shifted_in});
    EXPECT_TRUE(test::contains(msg, "output 0 overlaps output 1")) << msg;
}

// A program whose build fails (here: a user's XYLEM_OPENCL_BUILD_OPTIONS that redefines a helper)
// is an error naming the op and the program with the compiler's log; the failure is not cached,
// so the same program builds once the options are fixed.
TEST_F(OpenclFused, AFailedBuildNamesTheProgramAndIsNotCached) {
    FusedBuilder fb;
    fb.output(0, fb.apply(XYLEM_FUSED_ADD, fb.input(0), fb.constant(12345.0f)));  // a structure no other test builds
    const xylem_fused_attrs at = fb.finish({XYLEM_FUSED_FULL});
    Tensor x = upload(dev(), {4}, {1, 2, 3, 4}), y({4}, DType::F32, dev());

    const char* old = std::getenv("XYLEM_OPENCL_BUILD_OPTIONS");
    const std::string saved = old ? old : "";
    ::setenv("XYLEM_OPENCL_BUILD_OPTIONS", "-Dxf_add=1", 1);
    const std::string msg = run_error(at, {&x}, {&y});
    if (old)
        ::setenv("XYLEM_OPENCL_BUILD_OPTIONS", saved.c_str(), 1);
    else
        ::unsetenv("XYLEM_OPENCL_BUILD_OPTIONS");
    char name[40];
    std::snprintf(name, sizeof name, "xylem_fused_%016llx",
                  static_cast<unsigned long long>(plugin_kit::fused_program_key(at, 1, 1)));
    EXPECT_TRUE(test::contains(msg, "fused_elementwise program")) << msg;
    EXPECT_TRUE(test::contains(msg, name)) << msg;
    EXPECT_TRUE(test::contains(msg, "build log")) << msg;

    ops::fused_elementwise(dev(), at, {&x}, {&y});
    EXPECT_TRUE(near(y.to_vector(), {12346, 12347, 12348, 12349}, kTol));
}
