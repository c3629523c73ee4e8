// Conformance, gather_rows: rows picked by index from a device-resident table (f32 and i32),
// repeated and out-of-order indices, trailing dims of rank 0 to 2; indices that transpose a grid
// of rows (the recurrent layers' changes of layout, which a plugin may recognise) and ones that
// almost do.
#include "ops/conformance.h"
#include "support/backends.h"
#include "xylem/op_calls.h"

namespace xylem::test {
namespace {

class GatherConformance : public BackendTest {};
XYLEM_INSTANTIATE_OVER_BACKENDS(GatherConformance);

TEST_P(GatherConformance, RowsByIndex) {
    XYLEM_REQUIRE_OP(XYLEM_OP_GATHER_ROWS);
    Rng rng;
    const Shape sources[] = {{7}, {5, 3}, {9, 2, 4}};
    for (const Shape& s : sources) {
        SCOPED_TRACE("source " + to_string(s));
        const int64_t rows = s[0], width = numel(s) / rows;
        const auto src = rng.uniform(numel(s));
        const std::vector<int32_t> idx = {static_cast<int32_t>(rows - 1), 0, 2, 2, 1, static_cast<int32_t>(rows - 1)};
        Shape out_shape = s;
        out_shape[0] = static_cast<int64_t>(idx.size());
        Tensor tsrc = upload(dev(), s, src), tidx = upload_i32(dev(), {out_shape[0]}, idx);
        Tensor out(out_shape, DType::F32, dev());
        ops::gather_rows(dev(), tsrc, tidx, out);
        std::vector<double> want;
        for (int32_t r : idx)
            for (int64_t j = 0; j < width; ++j) want.push_back(src[static_cast<size_t>(r * width + j)]);
        EXPECT_TRUE(near(out.to_vector(), want, tol::kCopy));

        // The same rows of an int32 table (labels): compared exactly.
        std::vector<int32_t> isrc(static_cast<size_t>(numel(s)));
        for (size_t i = 0; i < isrc.size(); ++i) isrc[i] = static_cast<int32_t>(i * 7 - 50);
        Tensor tisrc = upload_i32(dev(), s, isrc), iout(out_shape, DType::I32, dev());
        ops::gather_rows(dev(), tisrc, tidx, iout);
        const int32_t* got = iout.host_read<int32_t>();
        for (size_t i = 0; i < idx.size(); ++i)
            for (int64_t j = 0; j < width; ++j)
                EXPECT_EQ(got[i * width + j], isrc[static_cast<size_t>(idx[i] * width + j)]) << "row " << i;
    }
}

// idx[j*a + i] = i*b + j (an [a, b] grid of rows to [b, a]) for sizes around any tiling, big
// enough to be split over threads, then the same index with one entry changed: exact copies.
TEST_P(GatherConformance, TransposingIndices) {
    XYLEM_REQUIRE_OP(XYLEM_OP_GATHER_ROWS);
    Rng rng;
    struct Grid {
        int64_t a, b, width;
    };
    for (const Grid& g : {Grid{2, 2, 1}, Grid{33, 31, 1}, Grid{6400, 50, 1}, Grid{50, 6400, 1}, Grid{17, 5, 3},
                          Grid{512, 50, 50}, Grid{50, 131, 50}, Grid{13, 9, 300}}) {
        SCOPED_TRACE(std::to_string(g.a) + "x" + std::to_string(g.b) + " rows of " + std::to_string(g.width));
        const int64_t n = g.a * g.b;
        const auto src = rng.uniform(n * g.width);
        std::vector<int32_t> idx(static_cast<size_t>(n));
        for (int64_t j = 0; j < g.b; ++j)
            for (int64_t i = 0; i < g.a; ++i) idx[static_cast<size_t>(j * g.a + i)] = static_cast<int32_t>(i * g.b + j);
        for (bool changed : {false, true}) {
            if (changed) idx[static_cast<size_t>(n - 2)] = idx[static_cast<size_t>(n / 3)];  // no longer a permutation
            Tensor tsrc = upload(dev(), {n, g.width}, src), tidx = upload_i32(dev(), {n}, idx);
            Tensor out({n, g.width}, DType::F32, dev());
            ops::gather_rows(dev(), tsrc, tidx, out);
            const std::vector<float> got = out.to_vector();
            int64_t wrong = 0;
            for (int64_t k = 0; k < n; ++k)
                for (int64_t w = 0; w < g.width; ++w)
                    wrong += got[static_cast<size_t>(k * g.width + w)] != src[static_cast<size_t>(idx[static_cast<size_t>(k)] * g.width + w)];
            EXPECT_EQ(wrong, 0) << (changed ? "one index changed" : "a transpose");
        }
    }
}

}  // namespace
}  // namespace xylem::test
