// Conformance, device-resident reductions: reduce (sum, mean or max over one axis or every element,
// blended into the output with beta) and scatter_add_rows (the embedding gradient: rows added back
// by index, repeated indices accumulating).
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>

#include "ops/conformance.h"
#include "support/backends.h"
#include "support/reference.h"
#include "xylem/error.h"
#include "xylem/op_calls.h"

namespace xylem::test {
namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();
const xylem_reduce_mode kModes[] = {XYLEM_REDUCE_SUM, XYLEM_REDUCE_MEAN, XYLEM_REDUCE_MAX};


const char* mode_name(xylem_reduce_mode m) {
    return m == XYLEM_REDUCE_SUM ? "sum" : m == XYLEM_REDUCE_MEAN ? "mean" : "max";
}

// What remains of x's shape after the reduction: the axis dropped ([] for a rank-1 x: any shape
// holding the right count is legal), [1] for every element.
Shape reduced_shape(const Shape& x, int axis) {
    if (axis < 0) return {1};
    Shape s = x;
    s.erase(s.begin() + axis);
    return s;
}

// Every axis a test checks: all elements, the first, a middle one (rank >= 3) and the last.
std::vector<int> axes_of(const Shape& x) {
    std::vector<int> axes = {-1, 0};
    const int rank = static_cast<int>(x.size());
    if (rank >= 3) axes.push_back(rank / 2);
    if (rank >= 2) axes.push_back(rank - 1);
    return axes;
}

// Shapes that reach every path of the plugins: short runs and many outputs (one item per output),
// few long runs (a work-group or block each), runs long enough to be cut into slices or chunks
// (axis -1 of [300, 1000]; [3, 200000], which the native plugin also splits between threads), with
// ranks 1 to 4 and odd sizes.
std::vector<Shape> reduce_shapes() {
    return {{1},         {7},          {129},        {1, 129},      {3, 1000},   {2000, 5},
            {2, 3, 5, 7}, {7, 33, 129}, {40, 50, 60}, {300, 1000}, {3, 200000}};
}

int64_t run_length(const Shape& x, int axis) {
    return axis < 0 ? numel(x) : x[static_cast<size_t>(axis)];
}

class ReduceConformance : public BackendTest {
protected:
    // reduce(x) into an output pre-filled with `old` (NaN when beta == 0: it must not be read),
    // compared with the float64 reference.
    void check(const Shape& s, const std::vector<float>& x, xylem_reduce_mode mode, int axis, float beta,
               const std::vector<float>& old) {
        SCOPED_TRACE(std::string(mode_name(mode)) + " of " + to_string(s) + " over axis " + std::to_string(axis) +
                     ", beta " + std::to_string(beta));
        const Shape out_shape = reduced_shape(s, axis);
        Tensor out = upload(dev(), out_shape, old);
        ops::reduce(dev(), upload(dev(), s, x), out, mode, axis, beta);
        const ref::Vec want = ref::reduce(to_double(x), s, mode, axis, beta, to_double(old));
        EXPECT_TRUE(near(out.to_vector(), want, tol::reduce(run_length(s, axis))));
    }
};
XYLEM_INSTANTIATE_OVER_BACKENDS(ReduceConformance);

TEST_P(ReduceConformance, EveryModeOverEveryAxis) {
    XYLEM_REQUIRE_OP(XYLEM_OP_REDUCE);
    Rng rng;
    for (const Shape& s : reduce_shapes()) {
        const auto x = rng.uniform(numel(s), -2.0f, 2.0f);
        for (int axis : axes_of(s)) {
            const std::vector<float> nan(static_cast<size_t>(numel(reduced_shape(s, axis))), kNaN);
            for (xylem_reduce_mode mode : kModes) check(s, x, mode, axis, 0.0f, nan);
        }
    }
}

// beta != 0 blends the old value in: out = beta*out + result (a running mean over batches, a metric
// accumulated across steps).
TEST_P(ReduceConformance, BetaBlendsTheOldValue) {
    XYLEM_REQUIRE_OP(XYLEM_OP_REDUCE);
    Rng rng;
    const Shape shapes[] = {{7}, {3, 1000}, {2000, 5}, {7, 33, 129}, {300, 1000}};
    for (const Shape& s : shapes) {
        const auto x = rng.uniform(numel(s));
        for (int axis : axes_of(s))
            for (xylem_reduce_mode mode : kModes)
                for (float beta : {1.0f, 0.5f, -2.0f})
                    check(s, x, mode, axis, beta, rng.uniform(numel(reduced_shape(s, axis)), -3.0f, 3.0f));
    }
}

// Reducing nothing: sum 0, mean NaN (0/0, as torch.mean), max -inf; and an output of no elements
// is legal. The NaN the output held before must not show through a sum or a max.
TEST_P(ReduceConformance, EmptyRuns) {
    XYLEM_REQUIRE_OP(XYLEM_OP_REDUCE);
    const Shape empty_axis{3, 0, 4};
    for (int axis : {-1, 1}) {
        const Shape out_shape = reduced_shape(empty_axis, axis);
        const size_t outputs = static_cast<size_t>(numel(out_shape));
        for (xylem_reduce_mode mode : kModes) {
            SCOPED_TRACE(std::string(mode_name(mode)) + " over axis " + std::to_string(axis));
            Tensor out = upload(dev(), out_shape, std::vector<float>(outputs, kNaN));
            ops::reduce(dev(), upload(dev(), empty_axis, {}), out, mode, axis, 0.0f);
            for (float v : out.to_vector()) {
                if (mode == XYLEM_REDUCE_MEAN) {
                    EXPECT_TRUE(std::isnan(v)) << v;
                } else {
                    EXPECT_EQ(v, mode == XYLEM_REDUCE_SUM ? 0.0f : -kInf);
                }
            }
        }
        // beta != 0: the old value plus the empty sum.
        Tensor out = upload(dev(), out_shape, std::vector<float>(outputs, 3.0f));
        ops::reduce(dev(), upload(dev(), empty_axis, {}), out, XYLEM_REDUCE_SUM, axis, 0.5f);
        for (float v : out.to_vector()) EXPECT_EQ(v, 1.5f);
    }
    // Axis 1 of [0, 5]: no outputs at all. Axis 0: five outputs, each over nothing.
    Tensor none({0}, DType::F32, dev());
    ops::reduce(dev(), upload(dev(), {0, 5}, {}), none, XYLEM_REDUCE_MAX, 1, 0.0f);
    EXPECT_TRUE(none.to_vector().empty());
    Tensor five = upload(dev(), {5}, std::vector<float>(5, kNaN));
    ops::reduce(dev(), upload(dev(), {0, 5}, {}), five, XYLEM_REDUCE_SUM, 0, 0.0f);
    EXPECT_EQ(five.to_vector(), std::vector<float>(5, 0.0f));
}

// A NaN anywhere in a run makes its max NaN, wherever it sits (first, middle, last element) and on
// every path; infinities are ordinary values.
TEST_P(ReduceConformance, MaxPropagatesNaN) {
    XYLEM_REQUIRE_OP(XYLEM_OP_REDUCE);
    Rng rng;
    const Shape shapes[] = {{6, 7}, {6, 1000}, {3000, 6}, {6, 33, 129}};
    for (const Shape& s : shapes)
        for (int axis : {-1, static_cast<int>(s.size()) - 1, 0}) {
            SCOPED_TRACE(to_string(s) + " over axis " + std::to_string(axis));
            auto x = rng.uniform(numel(s));
            const int64_t n = run_length(s, axis), outputs = numel(s) / std::max<int64_t>(n, 1);
            // Outputs 0, 1 and 2 (when there are that many) get a NaN at their first, middle and last
            // element; output 3 gets +inf and output 4 is -inf throughout.
            int64_t outer = 1, inner = 1;
            if (axis >= 0) {
                for (int d = 0; d < axis; ++d) outer *= s[static_cast<size_t>(d)];
                for (size_t d = static_cast<size_t>(axis) + 1; d < s.size(); ++d) inner *= s[d];
            }
            auto at = [&](int64_t t, int64_t k) -> float& {
                const int64_t o = t / inner, j = t % inner;
                return x[static_cast<size_t>((o * n + k) * inner + j)];
            };
            const int64_t spots[] = {0, n / 2, n - 1};
            for (int64_t t = 0; t < std::min<int64_t>(3, outputs); ++t) at(t, spots[t]) = kNaN;
            if (outputs > 3) at(3, n / 3) = kInf;
            if (outputs > 4)
                for (int64_t k = 0; k < n; ++k) at(4, k) = -kInf;
            Tensor out = upload(dev(), reduced_shape(s, axis), std::vector<float>(static_cast<size_t>(outputs), 0.0f));
            ops::reduce(dev(), upload(dev(), s, x), out, XYLEM_REDUCE_MAX, axis, 0.0f);
            const auto got = out.to_vector();
            const ref::Vec want = ref::reduce(to_double(x), s, XYLEM_REDUCE_MAX, axis, 0.0, {});
            for (size_t t = 0; t < got.size(); ++t) {
                if (std::isnan(want[t])) {
                    EXPECT_TRUE(std::isnan(got[t])) << "output " << t << " got " << got[t];
                } else {
                    EXPECT_EQ(got[t], static_cast<float>(want[t])) << "output " << t;
                }
            }
            if (outputs > 4) {
                EXPECT_EQ(got[3], kInf);
                EXPECT_EQ(got[4], -kInf);
            }
        }
}

// The same input gives the same bits (a fixed reduction order, no atomics whose order varies).
TEST_P(ReduceConformance, SameInputSameBits) {
    XYLEM_REQUIRE_OP(XYLEM_OP_REDUCE);
    Rng rng;
    const Shape s{300, 1000};
    const Tensor x = upload(dev(), s, rng.uniform(numel(s)));
    for (int axis : {-1, 0, 1})
        for (xylem_reduce_mode mode : {XYLEM_REDUCE_SUM, XYLEM_REDUCE_MEAN}) {
            SCOPED_TRACE(std::string(mode_name(mode)) + " over axis " + std::to_string(axis));
            Tensor a(reduced_shape(s, axis), DType::F32, dev()), b(reduced_shape(s, axis), DType::F32, dev());
            ops::reduce(dev(), x, a, mode, axis, 0.0f);
            ops::reduce(dev(), x, b, mode, axis, 0.0f);
            const auto va = a.to_vector(), vb = b.to_vector();
            EXPECT_EQ(std::memcmp(va.data(), vb.data(), va.size() * sizeof(float)), 0);
        }
}

// The core refuses bad calls before any plugin runs, naming the op and the shapes.
TEST_P(ReduceConformance, BadCallsNameTheShapes) {
    XYLEM_REQUIRE_OP(XYLEM_OP_REDUCE);
    Tensor x({2, 3, 4}, DType::F32, dev()), out8({8}, DType::F32, dev()), out6({2, 3}, DType::F32, dev());
    std::string msg = error_of([&] { ops::reduce(dev(), x, out6, XYLEM_REDUCE_SUM, 1, 0.0f); });
    EXPECT_TRUE(contains(msg, "reduce"));
    EXPECT_TRUE(contains(msg, "[2, 3]"));
    EXPECT_TRUE(contains(msg, "[2, 3, 4]"));
    EXPECT_TRUE(contains(msg, "leaves 8"));
    msg = error_of([&] { ops::reduce(dev(), x, out8, XYLEM_REDUCE_SUM, 3, 0.0f); });
    EXPECT_TRUE(contains(msg, "axis 3 is out of range for x [2, 3, 4] of rank 3"));
    msg = error_of([&] { ops::reduce(dev(), x, out8, XYLEM_REDUCE_SUM, -2, 0.0f); });
    EXPECT_TRUE(contains(msg, "axis -2"));
    msg = error_of([&] { ops::reduce(dev(), x, out8, static_cast<xylem_reduce_mode>(7), 1, 0.0f); });
    EXPECT_TRUE(contains(msg, "unknown reduce mode 7"));
    Tensor xi({2, 3, 4}, DType::I32, dev());
    msg = error_of([&] { ops::reduce(dev(), xi, out8, XYLEM_REDUCE_SUM, 1, 0.0f); });
    EXPECT_TRUE(contains(msg, "x must be"));
}

// The plugin checks a descriptor by the same rule when one arrives without the core's call (a
// plugin's own CI, another front end), with the same message and the backend's name.
TEST_P(ReduceConformance, PluginChecksTheDescriptor) {
    XYLEM_REQUIRE_OP(XYLEM_OP_REDUCE);
    Tensor x = upload(dev(), {2, 3, 4}, std::vector<float>(24, 1.0f)), out({8}, DType::F32, dev());
    const xylem_tensor_arg in = x.read(dev()), o = out.write(dev());
    xylem_reduce_attrs at{XYLEM_REDUCE_SUM, 2, 0.0f};  // leaves 6, not 8
    const xylem_op_desc d{XYLEM_OP_REDUCE, 1, 1, sizeof at, &in, &o, &at};
    const std::string msg = error_of([&] { dev().run(d); });
    EXPECT_TRUE(contains(msg, backend().name()));
    EXPECT_TRUE(contains(msg, "out [8] holds 8 elements but x [2, 3, 4] reduced over axis 2 leaves 6"));
}

// ---- scatter_add_rows ------------------------------------------------------------------------

class ScatterAddRowsConformance : public BackendTest {};
XYLEM_INSTANTIATE_OVER_BACKENDS(ScatterAddRowsConformance);

int64_t most_repeats(const std::vector<int32_t>& idx, int64_t rows) {
    std::vector<int64_t> seen(static_cast<size_t>(rows));
    int64_t most = 0;
    for (int32_t r : idx) most = std::max(most, ++seen[static_cast<size_t>(r)]);
    return most;
}

// Random indices (repeats, rows left untouched) over rows of rank 0 to 2, the same row named by
// every index, and a batch big enough to split; out's old values are kept and added to.
TEST_P(ScatterAddRowsConformance, RepeatedIndicesAccumulate) {
    XYLEM_REQUIRE_OP(XYLEM_OP_SCATTER_ADD_ROWS);
    Rng rng;
    struct Case {
        Shape src;
        int64_t rows;
        bool all_one_row;
    };
    const Case cases[] = {{{9}, 4, false},      {{13, 3}, 5, false},     {{17, 2, 5}, 30, false},
                          {{6, 300}, 3, false}, {{500, 4}, 7, true},     {{2000, 64}, 100, false},
                          {{64, 1}, 1000, false}, {{4000, 160}, 100, false}};  // the last one big enough to split
    for (const Case& c : cases) {
        SCOPED_TRACE("src " + to_string(c.src) + " into " + std::to_string(c.rows) + " rows");
        const int64_t n = c.src[0];
        std::vector<int32_t> idx =
            c.all_one_row ? std::vector<int32_t>(static_cast<size_t>(n), 3) : rng.labels(n, c.rows);
        Shape out_shape = c.src;
        out_shape[0] = c.rows;
        const auto src = rng.uniform(numel(c.src));
        const auto old = rng.uniform(numel(out_shape), -5.0f, 5.0f);
        Tensor out = upload(dev(), out_shape, old);
        ops::scatter_add_rows(dev(), upload(dev(), c.src, src), upload_i32(dev(), {n}, idx), out);
        const ref::Vec want = ref::scatter_add_rows(to_double(src), idx, to_double(old));
        const auto got = out.to_vector();
        EXPECT_TRUE(near(got, want, tol::reduction(most_repeats(idx, c.rows))));
        // A row no index names keeps its exact bits.
        const int64_t width = numel(out_shape) / c.rows;
        std::vector<bool> named(static_cast<size_t>(c.rows));
        for (int32_t r : idx) named[static_cast<size_t>(r)] = true;
        for (int64_t r = 0; r < c.rows; ++r) {
            if (named[static_cast<size_t>(r)]) continue;
            for (size_t e = static_cast<size_t>(r * width); e < static_cast<size_t>((r + 1) * width); ++e)
                ASSERT_EQ(got[e], old[e]) << "row " << r;
        }
    }
}

// Repeated indices add in a fixed order: the same inputs give the same bits.
TEST_P(ScatterAddRowsConformance, SameInputSameBits) {
    XYLEM_REQUIRE_OP(XYLEM_OP_SCATTER_ADD_ROWS);
    Rng rng;
    const int64_t n = 1000, rows = 5, width = 33;
    const Tensor src = upload(dev(), {n, width}, rng.uniform(n * width, -100.0f, 100.0f));
    const Tensor idx = upload_i32(dev(), {n}, rng.labels(n, rows));
    std::vector<float> first;
    for (int run = 0; run < 3; ++run) {
        Tensor out = upload(dev(), {rows, width}, std::vector<float>(static_cast<size_t>(rows * width), 0.25f));
        ops::scatter_add_rows(dev(), src, idx, out);
        const auto got = out.to_vector();
        if (run == 0) first = got;
        else EXPECT_EQ(std::memcmp(got.data(), first.data(), got.size() * sizeof(float)), 0) << "run " << run;
    }
}

// No indices: out keeps every value.
TEST_P(ScatterAddRowsConformance, EmptyBatch) {
    XYLEM_REQUIRE_OP(XYLEM_OP_SCATTER_ADD_ROWS);
    const std::vector<float> old = {1.0f, 2.0f, 3.0f, 4.0f, 5.0f, 6.0f};
    Tensor out = upload(dev(), {3, 2}, old);
    const Tensor no_idx({0}, DType::I32, dev());
    ops::scatter_add_rows(dev(), upload(dev(), {0, 2}, {}), no_idx, out);
    EXPECT_EQ(out.to_vector(), old);
}

// An index outside [0, R) is an Error (from the op or, on an asynchronous backend, at the readback
// at the latest) naming the backend and the index; the device stays usable afterwards.
TEST_P(ScatterAddRowsConformance, IndexOutOfRange) {
    XYLEM_REQUIRE_OP(XYLEM_OP_SCATTER_ADD_ROWS);
    const Tensor src = upload(dev(), {3, 2}, std::vector<float>(6, 1.0f));
    for (int32_t bad : {4, -1, 1 << 30}) {
        SCOPED_TRACE("index " + std::to_string(bad));
        Tensor idx = upload_i32(dev(), {3}, {0, bad, 2}), out = upload(dev(), {4, 2}, std::vector<float>(8, 0.0f));
        const std::string msg = error_of([&] {
            ops::scatter_add_rows(dev(), src, idx, out);
            out.to_vector();
        });
        EXPECT_TRUE(contains(msg, backend().name()));
        EXPECT_TRUE(contains(msg, "index"));
    }
    Tensor out = upload(dev(), {4, 2}, std::vector<float>(8, 0.0f));
    ops::scatter_add_rows(dev(), src, upload_i32(dev(), {3}, {3, 0, 3}), out);
    EXPECT_EQ(out.to_vector(), std::vector<float>({1, 1, 0, 0, 0, 0, 2, 2}));
}

TEST_P(ScatterAddRowsConformance, WrongShapesAndDtypes) {
    XYLEM_REQUIRE_OP(XYLEM_OP_SCATTER_ADD_ROWS);
    Tensor src({4, 2, 3}, DType::F32, dev()), idx({4}, DType::I32, dev()), out({9, 2, 3}, DType::F32, dev());
    Tensor idx3({3}, DType::I32, dev()), wide({9, 3, 2}, DType::F32, dev()), f32_idx({4}, DType::F32, dev());
    Tensor i32_out({9, 2, 3}, DType::I32, dev()), scalar(Shape{}, DType::F32, dev());
    std::string msg = error_of([&] { ops::scatter_add_rows(dev(), src, idx3, out); });
    EXPECT_TRUE(contains(msg, "scatter_add_rows"));
    EXPECT_TRUE(contains(msg, "idx [3] must be [4]: one index per row of src [4, 2, 3]"));
    msg = error_of([&] { ops::scatter_add_rows(dev(), src, idx, wide); });
    EXPECT_TRUE(contains(msg, "out [9, 3, 2] must be [R, ...] with the trailing dims of src [4, 2, 3]"));
    msg = error_of([&] { ops::scatter_add_rows(dev(), src, f32_idx, out); });
    EXPECT_TRUE(contains(msg, "idx must be int32"));
    msg = error_of([&] { ops::scatter_add_rows(dev(), src, idx, i32_out); });
    EXPECT_TRUE(contains(msg, "out must be"));
    msg = error_of([&] { ops::scatter_add_rows(dev(), scalar, idx, out); });
    EXPECT_TRUE(contains(msg, "rank >= 1"));
}

}  // namespace
}  // namespace xylem::test
