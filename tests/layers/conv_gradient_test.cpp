// Numerical gradient checks for the convolutional layers (Conv2d, Pool2d, BatchNorm) over every
// available backend, and their build-time shape errors.
#include <algorithm>
#include <memory>

#include "support/backends.h"
#include "support/gradcheck.h"
#include "xylem/error.h"
#include "xylem/layers/batchnorm.h"
#include "xylem/layers/conv.h"
#include "xylem/layers/net.h"

namespace xylem::test {
namespace {

class ConvLayerGradient : public BackendTest {
protected:
    Rng rng_;
};
XYLEM_INSTANTIATE_OVER_BACKENDS(ConvLayerGradient);

TEST_P(ConvLayerGradient, Conv2d) {
    for (uint32_t op : {XYLEM_OP_FILL, XYLEM_OP_CONV2D_FWD, XYLEM_OP_CONV2D_BWD_DATA, XYLEM_OP_CONV2D_BWD_FILTER,
                        XYLEM_OP_BIAS_GRAD, XYLEM_OP_ACT_BWD})
        XYLEM_REQUIRE_OP(op);
    struct Case {
        Shape x;  // [N, C, H, W]
        Conv2dOptions o;
        xylem_activation act;
    };
    const Case cases[] = {
        {{2, 3, 6, 5}, {4, 3, 3, 1, 1, 1, 1, true}, XYLEM_ACT_NONE},
        {{1, 2, 7, 7}, {2, 3, 2, 2, 1, 1, 1, false}, XYLEM_ACT_TANH},    // stride 2, no bias
        {{2, 4, 6, 6}, {4, 3, 3, 1, 2, 2, 2, true}, XYLEM_ACT_SIGMOID},  // dilation, groups
    };
    for (const Case& c : cases) {
        SCOPED_TRACE("x " + to_string(c.x) + " out " + std::to_string(c.o.out_channels) + " kernel " +
                     std::to_string(c.o.kernel_h) + "x" + std::to_string(c.o.kernel_w) + " stride " +
                     std::to_string(c.o.stride) + " padding " + std::to_string(c.o.padding) + " dilation " +
                     std::to_string(c.o.dilation) + " groups " + std::to_string(c.o.groups) + " activation " +
                     std::to_string(c.act));
        Conv2d layer(c.o);
        layer.bind(dev(), Shape(c.x.begin() + 1, c.x.end()), rng_.engine());
        if (c.act != XYLEM_ACT_NONE) {
            ASSERT_TRUE(layer.fuse_activation(c.act, backend()));
        }
        ASSERT_EQ(layer.params().size(), c.o.bias ? 2u : 1u);
        Tensor x = upload(dev(), c.x, rng_.uniform(numel(c.x)));
        check_layer_gradients(dev(), layer, x, rng_);
    }
}

// Inputs spaced 0.05 apart in random order: a +-0.01 step never changes which element wins a
// max window, so the numerical gradient of max pooling is well defined.
std::vector<float> distinct_values(Rng& rng, int64_t n) {
    std::vector<float> v(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = 0.05f * static_cast<float>(i - n / 2);
    std::shuffle(v.begin(), v.end(), rng.engine());
    return v;
}

TEST_P(ConvLayerGradient, Pool2d) {
    XYLEM_REQUIRE_OP(XYLEM_OP_POOL2D_FWD);
    XYLEM_REQUIRE_OP(XYLEM_OP_POOL2D_BWD);
    const Pool2dOptions cases[] = {
        {XYLEM_POOL_MAX, 2, 0, 0, true}, {XYLEM_POOL_MAX, 3, 1, 1, true},  // overlapping windows
        {XYLEM_POOL_AVG, 2, 0, 0, true}, {XYLEM_POOL_AVG, 3, 2, 1, true}, {XYLEM_POOL_AVG, 3, 2, 1, false},
    };
    for (const Pool2dOptions& o : cases) {
        SCOPED_TRACE(std::string(o.mode == XYLEM_POOL_MAX ? "max" : "avg") + " kernel " + std::to_string(o.kernel) +
                     " stride " + std::to_string(o.stride) + " padding " + std::to_string(o.padding) +
                     " count_include_pad " + std::to_string(o.count_include_pad));
        Pool2d layer(o);
        layer.bind(dev(), {2, 6, 7}, rng_.engine());
        Tensor x = upload(dev(), {2, 2, 6, 7}, distinct_values(rng_, 2 * 2 * 6 * 7));
        check_layer_gradients(dev(), layer, x, rng_);
    }
}

TEST_P(ConvLayerGradient, BatchNormTraining) {
    XYLEM_REQUIRE_OP(XYLEM_OP_FILL);
    XYLEM_REQUIRE_OP(XYLEM_OP_BATCHNORM_FWD);
    XYLEM_REQUIRE_OP(XYLEM_OP_BATCHNORM_BWD);
    for (const Shape& s : {Shape{6, 4}, Shape{3, 2, 3, 3}}) {
        SCOPED_TRACE("x " + to_string(s));
        BatchNorm layer;
        layer.bind(dev(), Shape(s.begin() + 1, s.end()), rng_.engine());
        ASSERT_EQ(layer.params().size(), 2u);
        // gamma and beta away from their 1 and 0 defaults, so a swapped gradient shows.
        set_values(layer.params()[0]->value, rng_.uniform(s[1], 0.5f, 1.5f));
        set_values(layer.params()[1]->value, rng_.uniform(s[1]));
        Tensor x = upload(dev(), s, rng_.uniform(numel(s), -2.0f, 3.0f));
        check_layer_gradients(dev(), layer, x, rng_);
    }
}

std::string build_error(Net& model, Device& dev, const Shape& input) {
    try {
        model.build(dev, input, 1);
    } catch (const Error& e) {
        return e.what();
    }
    return "<no error>";
}

TEST_P(ConvLayerGradient, ShapeErrorsNameTheLayer) {
    XYLEM_REQUIRE_OP(XYLEM_OP_FILL);
    Net flat;  // conv2d needs [C, H, W] per sample
    flat.add(std::make_unique<Conv2d>(Conv2dOptions{4, 3, 3}));
    std::string msg = build_error(flat, dev(), {12});
    EXPECT_TRUE(contains(msg, "model layer 0 (conv2d)"));
    EXPECT_TRUE(contains(msg, "[12]"));
    Net small;  // a 5x5 kernel on a 3x3 image
    small.add(std::make_unique<Conv2d>(Conv2dOptions{4, 5, 5}));
    msg = build_error(small, dev(), {1, 3, 3});
    EXPECT_TRUE(contains(msg, "model layer 0 (conv2d)"));
    EXPECT_TRUE(contains(msg, "3, 3]"));
    EXPECT_TRUE(contains(msg, "[5, 5]"));
    Net pooled;
    pooled.add(std::make_unique<Pool2d>(Pool2dOptions{XYLEM_POOL_MAX, 4}));
    msg = build_error(pooled, dev(), {1, 2, 2});
    EXPECT_TRUE(contains(msg, "model layer 0 (maxpool2d)"));
    EXPECT_TRUE(contains(msg, "2, 2]"));
    EXPECT_TRUE(contains(msg, "[4, 4]"));
}

}  // namespace
}  // namespace xylem::test
