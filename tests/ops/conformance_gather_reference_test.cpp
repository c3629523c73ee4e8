// Conformance, gather_rows against the float64 / int32 reference: index operands that are views
// (the per-step slice of an epoch's permutation), every row once, an empty batch, and the errors
// (an index out of range, wrong shapes and dtypes), each naming the op, backend or shapes.
#include <numeric>

#include "ops/conformance.h"
#include "support/backends.h"
#include "support/reference.h"
#include "xylem/error.h"
#include "xylem/op_calls.h"

namespace xylem::test {
namespace {


class GatherRowsConformance : public BackendTest {};
XYLEM_INSTANTIATE_OVER_BACKENDS(GatherRowsConformance);

// A shuffled permutation uploaded once and read through row views, as data.resident does.
TEST_P(GatherRowsConformance, ViewsOfAPermutation) {
    XYLEM_REQUIRE_OP(XYLEM_OP_GATHER_ROWS);
    Rng rng;
    const int64_t rows = 101, width = 33;
    const auto src = rng.uniform(rows * width, -50.0f, 50.0f);
    std::vector<int32_t> perm(static_cast<size_t>(rows));
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), rng.engine());
    Tensor tsrc = upload(dev(), {rows, 1, width}, src), tperm = upload_i32(dev(), {rows}, perm);
    std::vector<int32_t> labels(static_cast<size_t>(rows));
    for (int64_t i = 0; i < rows; ++i) labels[static_cast<size_t>(i)] = static_cast<int32_t>(i % 10);
    Tensor tlabels = upload_i32(dev(), {rows}, labels);
    for (int64_t first = 0; first < rows; first += 32) {  // batches of 32 and a tail of 5
        const int64_t n = std::min<int64_t>(32, rows - first);
        SCOPED_TRACE("rows " + std::to_string(first) + " + " + std::to_string(n));
        const std::vector<int32_t> idx(perm.begin() + first, perm.begin() + first + n);
        Tensor out({n, 1, width}, DType::F32, dev()), lout({n}, DType::I32, dev());
        ops::gather_rows(dev(), tsrc, tperm.rows(first, n), out);
        ops::gather_rows(dev(), tlabels, tperm.rows(first, n), lout);
        EXPECT_TRUE(near(out.to_vector(), ref::gather_rows(to_double(src), rows, idx), tol::kCopy));
        const int32_t* got = lout.host_read<int32_t>();
        EXPECT_EQ(std::vector<int32_t>(got, got + n), ref::gather_rows(labels, rows, idx));
    }
    // An empty batch is legal and writes nothing.
    Tensor empty({0, 1, width}, DType::F32, dev());
    ops::gather_rows(dev(), tsrc, tperm.rows(0, 0), empty);
    EXPECT_TRUE(empty.to_vector().empty());
}

// Out-of-range indices are an Error (from the op or, on an asynchronous backend, at the readback
// at the latest) naming the backend and the index.
TEST_P(GatherRowsConformance, IndexOutOfRange) {
    XYLEM_REQUIRE_OP(XYLEM_OP_GATHER_ROWS);
    Tensor src = upload(dev(), {4, 3}, std::vector<float>(12, 1.0f));
    for (int32_t bad : {4, -1, 1 << 30}) {
        SCOPED_TRACE("index " + std::to_string(bad));
        Tensor idx = upload_i32(dev(), {3}, {0, bad, 2}), out({3, 3}, DType::F32, dev());
        const std::string msg = error_of([&] {
            ops::gather_rows(dev(), src, idx, out);
            out.to_vector();
        });
        EXPECT_TRUE(contains(msg, backend().name()));
        EXPECT_TRUE(contains(msg, "index"));
    }
    // Long index lists (checked in slices where a backend splits them) with one bad entry late,
    // and a transposing index (idx[j*a + i] = i*b + j) over a source one row short of it.
    const int64_t a = 600, b = 500, n = a * b;
    std::vector<int32_t> transposing(static_cast<size_t>(n)), late_bad(static_cast<size_t>(n), 0);
    for (int64_t j = 0; j < b; ++j)
        for (int64_t i = 0; i < a; ++i) transposing[static_cast<size_t>(j * a + i)] = static_cast<int32_t>(i * b + j);
    late_bad[static_cast<size_t>(n - 7)] = static_cast<int32_t>(n);
    for (const auto& [what, idx] : {std::pair{"one bad entry late in a long index", late_bad},
                                    std::pair{"a transposing index over a short source", transposing}}) {
        SCOPED_TRACE(what);
        Tensor big_src = upload(dev(), {n - 1, 1}, std::vector<float>(static_cast<size_t>(n - 1), 1.0f));
        Tensor tidx = upload_i32(dev(), {n}, idx), out({n, 1}, DType::F32, dev());
        const std::string msg = error_of([&] {
            ops::gather_rows(dev(), big_src, tidx, out);
            out.to_vector();
        });
        EXPECT_TRUE(contains(msg, backend().name()));
        EXPECT_TRUE(contains(msg, "index"));
    }
}

// The index list a temporary, dropped right after the op: its memory's destructor waits for the
// upload and must not lose what that wait reports (an asynchronous backend finds the bad index
// on the device): the next sync throws it.
TEST_P(GatherRowsConformance, IndexOutOfRangeInATemporaryIsNotLost) {
    XYLEM_REQUIRE_OP(XYLEM_OP_GATHER_ROWS);
    Tensor src = upload(dev(), {4, 3}, std::vector<float>(12, 1.0f)), out({3, 3}, DType::F32, dev());
    const std::string msg = error_of([&] {
        ops::gather_rows(dev(), src, upload_i32(dev(), {3}, {0, 7, 2}), out);
        dev().sync();
    });
    EXPECT_TRUE(contains(msg, backend().name())) << msg;
    EXPECT_TRUE(contains(msg, "7")) << msg;
    ops::gather_rows(dev(), src, upload_i32(dev(), {3}, {0, 3, 2}), out);
    EXPECT_NO_THROW(dev().sync()) << "the error was thrown once";
}

// Shape and dtype errors are caught by the core before any backend runs, naming op and shapes.
TEST_P(GatherRowsConformance, WrongShapesAndDtypes) {
    XYLEM_REQUIRE_OP(XYLEM_OP_GATHER_ROWS);
    Tensor src({5, 2, 3}, DType::F32, dev()), idx({4}, DType::I32, dev());
    Tensor rows_off({3, 2, 3}, DType::F32, dev()), width_off({4, 3, 2}, DType::F32, dev());
    Tensor i32_out({4, 2, 3}, DType::I32, dev()), f32_idx({4}, DType::F32, dev()), idx2({2, 2}, DType::I32, dev());
    Tensor ok({4, 2, 3}, DType::F32, dev()), scalar_src(Shape{}, DType::F32, dev());
    std::string msg = error_of([&] { ops::gather_rows(dev(), src, idx, rows_off); });
    EXPECT_TRUE(contains(msg, "gather_rows"));
    EXPECT_TRUE(contains(msg, "[3, 2, 3]"));
    EXPECT_TRUE(contains(msg, "[4, 2, 3]"));
    msg = error_of([&] { ops::gather_rows(dev(), src, idx, width_off); });
    EXPECT_TRUE(contains(msg, "[4, 3, 2]"));
    msg = error_of([&] { ops::gather_rows(dev(), src, idx, i32_out); });
    EXPECT_TRUE(contains(msg, "dtype"));
    msg = error_of([&] { ops::gather_rows(dev(), src, f32_idx, ok); });
    EXPECT_TRUE(contains(msg, "indices must be int32"));
    msg = error_of([&] { ops::gather_rows(dev(), src, idx2, ok); });
    EXPECT_TRUE(contains(msg, "indices [2, 2] must have rank 1"));
    msg = error_of([&] { ops::gather_rows(dev(), scalar_src, idx, ok); });
    EXPECT_TRUE(contains(msg, "rank >= 1"));
}

}  // namespace
}  // namespace xylem::test
