// The slice layer (layers/slice.cpp): forward values against index arithmetic for each axis and
// Python's negative bounds, and the numerical gradient check, over every available backend.
#include "support/backends.h"
#include "support/gradcheck.h"
#include "xylem/error.h"
#include "xylem/layers/slice.h"

namespace xylem::test {
namespace {

class SliceGradient : public BackendTest {
protected:
    Rng rng_;
};
XYLEM_INSTANTIATE_OVER_BACKENDS(SliceGradient);

TEST_P(SliceGradient, TakesTheRangeOfItsAxisAndScattersTheGradientBack) {
    XYLEM_REQUIRE_OP(XYLEM_OP_GATHER_ROWS);
    XYLEM_REQUIRE_OP(XYLEM_OP_SCATTER_ADD_ROWS);
    const Shape x_shape{2, 5, 3, 4};
    struct Case {
        int64_t axis, start, end, b, e;  // the options, then the range they mean on x_shape[axis]
    };
    for (const Case c :
         {Case{1, -1, INT64_MAX, 4, 5}, Case{1, 1, 4, 1, 4}, Case{2, 0, 2, 0, 2}, Case{3, -3, -1, 1, 3}}) {
        SCOPED_TRACE("axis " + std::to_string(c.axis) + " [" + std::to_string(c.start) + ", " + std::to_string(c.end) +
                     ")");
        Slice layer(SliceOptions{c.axis, c.start, c.end});
        layer.bind(dev(), Shape(x_shape.begin() + 1, x_shape.end()), rng_.engine());
        const std::vector<float> xv = rng_.uniform(numel(x_shape));
        Tensor x = upload(dev(), x_shape, xv);
        const Tensor& y = layer.forward(dev(), x, true);
        Shape want_shape = x_shape;
        want_shape[static_cast<size_t>(c.axis)] = c.e - c.b;
        ASSERT_EQ(y.shape(), want_shape);
        std::vector<double> want;
        for (int64_t i = 0; i < x_shape[0]; ++i)
            for (int64_t j = 0; j < x_shape[1]; ++j)
                for (int64_t k = 0; k < x_shape[2]; ++k)
                    for (int64_t l = 0; l < x_shape[3]; ++l) {
                        const int64_t at[4] = {i, j, k, l};
                        const int64_t v = at[c.axis];
                        if (v < c.b || v >= c.e) continue;
                        want.push_back(
                            xv[static_cast<size_t>(((i * x_shape[1] + j) * x_shape[2] + k) * x_shape[3] + l)]);
                    }
        EXPECT_TRUE(near(y.to_vector(), want, 0.0));
        check_layer_gradients(dev(), layer, x, rng_);
    }
}

TEST(SliceLayer, AnEmptyRangeOrTheBatchAxisIsAnError) {
    EXPECT_THROW(Slice(SliceOptions{0, 0, 1}), Error);
    Slice empty(SliceOptions{1, 3, 2});
    EXPECT_THROW(empty.output_shape({5}), Error);
}

}  // namespace
}  // namespace xylem::test
