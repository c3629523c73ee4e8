// Conformance, convolution family (ABI 1.1): conv2d forward (bias, fused activation, stride,
// padding, dilation, groups) and both backward passes, max/average pooling (ties, padding,
// overlapping windows) and batch normalisation (training and evaluation).
#include <algorithm>
#include <cmath>
#include <limits>

#include "ops/conformance.h"
#include "support/backends.h"
#include "support/reference_conv.h"
#include "xylem/op_calls.h"

namespace xylem::test {
namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

class ConvConformance : public BackendTest {};
XYLEM_INSTANTIATE_OVER_BACKENDS(ConvConformance);

struct ConvCase {
    Shape x, w;
    xylem_conv2d_attrs a;  // stride_h, stride_w, pad_h, pad_w, dilation_h, dilation_w, groups, activation, beta
    bool bias;
};

const ConvCase kConvCases[] = {
    {{1, 1, 7, 7}, {1, 1, 3, 3}, {1, 1, 0, 0, 1, 1, 1, XYLEM_ACT_NONE, 0}, false},
    {{2, 3, 9, 7}, {4, 3, 3, 3}, {2, 2, 1, 1, 1, 1, 1, XYLEM_ACT_RELU, 0}, true},
    {{2, 4, 8, 8}, {6, 2, 3, 2}, {1, 2, 1, 0, 2, 1, 2, XYLEM_ACT_TANH, 0}, true},     // groups, dilation
    {{1, 3, 6, 5}, {3, 1, 5, 5}, {1, 1, 2, 2, 1, 1, 3, XYLEM_ACT_SIGMOID, 0}, true},  // depthwise
    {{3, 5, 4, 4}, {7, 5, 1, 1}, {1, 1, 0, 0, 1, 1, 1, XYLEM_ACT_NONE, 0}, false},    // 1x1
    {{2, 16, 12, 12}, {8, 16, 5, 5}, {1, 1, 2, 2, 1, 1, 1, XYLEM_ACT_NONE, 0}, true},
    {{2, 16, 12, 12}, {8, 16, 5, 5}, {1, 1, 2, 2, 1, 1, 1, XYLEM_ACT_RELU6, 0}, true},  // sums past 6 (ABI 1.8)
    {{2, 3, 4, 5}, {6, 3, 4, 5}, {1, 1, 0, 0, 1, 1, 1, XYLEM_ACT_RELU, 0}, true},        // kernel covers the image
    {{2, 4, 3, 3}, {4, 2, 3, 3}, {1, 1, 0, 0, 1, 1, 2, XYLEM_ACT_NONE, 0}, true},        // ... with groups
    {{2, 4, 3, 3}, {6, 2, 1, 1}, {1, 1, 0, 0, 1, 1, 2, XYLEM_ACT_NONE, 0}, false},       // 1x1 with groups
    {{3, 32, 160, 160}, {2, 32, 3, 3}, {1, 1, 1, 1, 1, 1, 1, XYLEM_ACT_NONE, 0}, true},  // > 64 MiB of im2col
    // Few taps, stride 1, no padding: native's direct kernel (8-wide rows, filters in fours, tails).
    {{3, 1, 28, 28}, {20, 1, 5, 5}, {1, 1, 0, 0, 1, 1, 1, XYLEM_ACT_RELU, 0}, true},    // LeNet's first layer
    {{2, 3, 11, 13}, {6, 3, 3, 3}, {1, 1, 0, 0, 1, 1, 1, XYLEM_ACT_NONE, 0}, true},
    {{2, 4, 9, 10}, {6, 2, 2, 2}, {1, 1, 0, 0, 1, 1, 2, XYLEM_ACT_TANH, 0}, false},
    // Enough work that native's forward splits the images between threads (uneven slices).
    {{9, 20, 12, 12}, {50, 20, 5, 5}, {1, 1, 0, 0, 1, 1, 1, XYLEM_ACT_RELU, 0}, true},  // LeNet's second layer
    {{13, 1, 28, 28}, {20, 1, 5, 5}, {1, 1, 0, 0, 1, 1, 1, XYLEM_ACT_NONE, 0}, true},   // ... direct kernel
    // Native's filter gradient by positions, which also sums the bias gradient (ABI 1.9): 18 taps
    // (whole tiles at avx512 and avx2), 9 (a rest of 3 at avx512), 7 filters (tiles of 4, 2, 1).
    {{3, 2, 10, 10}, {7, 2, 3, 3}, {1, 1, 0, 0, 1, 1, 1, XYLEM_ACT_NONE, 0}, true},
    {{2, 1, 10, 10}, {7, 1, 3, 3}, {1, 1, 0, 0, 1, 1, 1, XYLEM_ACT_NONE, 0}, true},
};

std::string describe(const ConvCase& c) {
    return "x " + to_string(c.x) + " w " + to_string(c.w) + " stride " + std::to_string(c.a.stride_h) + "x" +
           std::to_string(c.a.stride_w) + " pad " + std::to_string(c.a.pad_h) + "x" + std::to_string(c.a.pad_w) +
           " dilation " + std::to_string(c.a.dilation_h) + "x" + std::to_string(c.a.dilation_w) + " groups " +
           std::to_string(c.a.groups) + " activation " + std::to_string(c.a.activation);
}

TEST_P(ConvConformance, Conv2dForward) {
    XYLEM_REQUIRE_OP(XYLEM_OP_CONV2D_FWD);
    Rng rng;
    for (const ConvCase& c : kConvCases) {
        SCOPED_TRACE(describe(c));
        if (c.a.activation == XYLEM_ACT_RELU6 && backend().api().abi_minor < 8) continue;  // came with ABI 1.8
        const Shape ys = ops::conv2d_output_shape(c.x, c.w, c.a);
        const auto x = rng.uniform(numel(c.x)), w = rng.uniform(numel(c.w)), b = rng.uniform(c.w[0]);
        Tensor tx = upload(dev(), c.x, x), tw = upload(dev(), c.w, w), tb = upload(dev(), {c.w[0]}, b);
        Tensor ty(ys, DType::F32, dev());
        ops::conv2d_fwd(dev(), tx, tw, c.bias ? &tb : nullptr, ty, c.a);
        const auto want =
            ref::conv2d_fwd(to_double(x), c.x, to_double(w), c.w, c.bias ? to_double(b) : ref::Vec{}, c.a);
        EXPECT_TRUE(near(ty.to_vector(), want, tol::gemm(c.w[1] * c.w[2] * c.w[3] + 1)));
    }
}

// ABI 1.10: a residual R added before the activation, in every case's shape (with a bias, which R
// needs). Y starts as NaN: every element written. A plugin may decline R through op_accepts.
TEST_P(ConvConformance, Conv2dForwardWithResidual) {
    XYLEM_REQUIRE_OP(XYLEM_OP_CONV2D_FWD);
    Rng rng;
    for (const ConvCase& c : kConvCases) {
        SCOPED_TRACE(describe(c));
        if (c.a.activation == XYLEM_ACT_RELU6 && backend().api().abi_minor < 8) continue;
        const Shape sample(c.x.begin() + 1, c.x.end());
        if (!ops::conv2d_fwd_takes_residual(backend(), sample, c.w, c.a)) continue;
        const Shape ys = ops::conv2d_output_shape(c.x, c.w, c.a);
        const auto x = rng.uniform(numel(c.x)), w = rng.uniform(numel(c.w)), b = rng.uniform(c.w[0]);
        const auto r = rng.uniform(numel(ys));
        Tensor tx = upload(dev(), c.x, x), tw = upload(dev(), c.w, w), tb = upload(dev(), {c.w[0]}, b);
        Tensor tr = upload(dev(), ys, r);
        Tensor ty = upload(dev(), ys, std::vector<float>(static_cast<size_t>(numel(ys)), kNaN));
        ops::conv2d_fwd(dev(), tx, tw, &tb, ty, c.a, &tr);
        const auto want = ref::conv2d_fwd(to_double(x), c.x, to_double(w), c.w, to_double(b), c.a, to_double(r));
        EXPECT_TRUE(near(ty.to_vector(), want, tol::gemm(c.w[1] * c.w[2] * c.w[3] + 2)));
        // R of another shape is refused by the core before the plugin sees it.
        Tensor wrong(Shape{ys[0], ys[1], ys[2], ys[3] + 1}, DType::F32, dev());
        EXPECT_THROW(ops::conv2d_fwd(dev(), tx, tw, &tb, ty, c.a, &wrong), Error);
    }
}

TEST_P(ConvConformance, Conv2dBackwardData) {
    XYLEM_REQUIRE_OP(XYLEM_OP_CONV2D_BWD_DATA);
    Rng rng;
    for (const ConvCase& c : kConvCases) {
        SCOPED_TRACE(describe(c));
        const Shape ys = ops::conv2d_output_shape(c.x, c.w, c.a);
        const auto dy = rng.uniform(numel(ys)), w = rng.uniform(numel(c.w));
        Tensor tdy = upload(dev(), ys, dy), tw = upload(dev(), c.w, w);
        Tensor tdx = upload(dev(), c.x, std::vector<float>(static_cast<size_t>(numel(c.x)), kNaN));
        ops::conv2d_bwd_data(dev(), tdy, tw, tdx, c.a);  // every element written, also those no window reads
        const auto want = ref::conv2d_bwd_data(to_double(dy), c.x, to_double(w), c.w, c.a);
        EXPECT_TRUE(near(tdx.to_vector(), want, tol::gemm(c.w[0] * c.w[2] * c.w[3])));
    }
}

TEST_P(ConvConformance, Conv2dBackwardFilter) {
    XYLEM_REQUIRE_OP(XYLEM_OP_CONV2D_BWD_FILTER);
    XYLEM_REQUIRE_HELPER_OP(XYLEM_OP_FILL);
    Rng rng;
    for (const ConvCase& base : kConvCases)
        for (float beta : {0.0f, 1.0f, 0.5f}) {
            ConvCase c = base;
            c.a.beta = beta;
            SCOPED_TRACE(describe(c) + " beta " + std::to_string(beta));
            const Shape ys = ops::conv2d_output_shape(c.x, c.w, c.a);
            const auto x = rng.uniform(numel(c.x)), dy = rng.uniform(numel(ys)), old = rng.uniform(numel(c.w));
            Tensor tx = upload(dev(), c.x, x), tdy = upload(dev(), ys, dy), tdw(c.w, DType::F32, dev());
            if (beta == 0.0f)
                ops::fill(dev(), tdw, kNaN);  // beta = 0 must not read dw
            else
                tdw = upload(dev(), c.w, old);
            ops::conv2d_bwd_filter(dev(), tx, tdy, tdw, c.a);
            const auto want = ref::conv2d_bwd_filter(to_double(x), c.x, to_double(dy), c.w, beta, to_double(old), c.a);
            EXPECT_TRUE(near(tdw.to_vector(), want, tol::gemm(ys[0] * ys[2] * ys[3])));
            if (!c.bias || !ops::conv2d_bwd_filter_takes_bias(backend())) continue;
            // ABI 1.9: the bias gradient out of the same op, beside the same filter gradient.
            const auto old_b = rng.uniform(c.w[0]);
            Tensor tdb(Shape{c.w[0]}, DType::F32, dev());
            if (beta == 0.0f) {
                ops::fill(dev(), tdw, kNaN);
                ops::fill(dev(), tdb, kNaN);  // nor db
            } else {
                tdw = upload(dev(), c.w, old);
                tdb = upload(dev(), {c.w[0]}, old_b);
            }
            ops::conv2d_bwd_filter(dev(), tx, tdy, tdw, c.a, &tdb);
            EXPECT_TRUE(near(tdw.to_vector(), want, tol::gemm(ys[0] * ys[2] * ys[3]))) << "dW beside db";
            EXPECT_TRUE(near(tdb.to_vector(), ref::bias_grad(to_double(dy), ys, beta, to_double(old_b)),
                             tol::reduction(ys[0] * ys[2] * ys[3])))
                << "db";
        }
}

struct PoolCase {
    Shape x;
    xylem_pool2d_attrs a;  // mode, kernel_h, kernel_w, stride_h, stride_w, pad_h, pad_w, count_include_pad
};

const PoolCase kPoolCases[] = {
    {{2, 3, 7, 10}, {XYLEM_POOL_MAX, 2, 2, 2, 2, 0, 0, 1}},  // odd height, 5 windows a row
    {{1, 2, 4, 6}, {XYLEM_POOL_MAX, 2, 2, 2, 2, 0, 0, 1}},   // 3 windows a row
    {{1, 2, 7, 9}, {XYLEM_POOL_MAX, 3, 3, 2, 2, 1, 1, 1}},
    {{2, 1, 5, 5}, {XYLEM_POOL_MAX, 3, 3, 1, 1, 1, 1, 1}},  // overlapping windows
    {{1, 3, 7, 6}, {XYLEM_POOL_MAX, 3, 2, 2, 1, 0, 1, 1}},  // non-square
    {{2, 3, 8, 8}, {XYLEM_POOL_AVG, 2, 2, 2, 2, 0, 0, 1}},
    {{2, 1, 5, 14}, {XYLEM_POOL_AVG, 2, 2, 2, 2, 0, 0, 1}},  // 7 windows a row
    {{1, 2, 7, 9}, {XYLEM_POOL_AVG, 3, 3, 2, 2, 1, 1, 1}},   // padding counted
    {{1, 2, 7, 9}, {XYLEM_POOL_AVG, 3, 3, 2, 2, 1, 1, 0}},   // padding not counted
    {{2, 1, 5, 5}, {XYLEM_POOL_AVG, 3, 3, 1, 1, 1, 1, 0}},
    // Rows of 35 and 40 windows: whole vectors of outputs and a remainder at every vector width
    // (ResNet's 3x3 stride-2 max pool; a stride-1 average).
    {{2, 3, 11, 70}, {XYLEM_POOL_MAX, 3, 3, 2, 2, 1, 1, 1}},
    {{1, 2, 6, 40}, {XYLEM_POOL_AVG, 3, 3, 1, 1, 1, 1, 0}},
    // Stride 2 beyond ResNet's window (native splits each row into even and odd columns): no
    // padding on an odd width, a padded 2x2, a 5x5 reaching two columns either side.
    {{1, 2, 8, 11}, {XYLEM_POOL_MAX, 3, 3, 2, 2, 0, 0, 1}},
    {{1, 2, 6, 10}, {XYLEM_POOL_AVG, 2, 2, 2, 2, 1, 1, 0}},
    {{2, 1, 9, 12}, {XYLEM_POOL_MAX, 5, 5, 2, 2, 2, 2, 1}},
    // global_avgpool's window, the whole plane (the native plugin's own path): 7x7, and 21 values
    // a plane (a lane remainder); the max over the whole plane too.
    {{3, 5, 7, 7}, {XYLEM_POOL_AVG, 7, 7, 7, 7, 0, 0, 1}},
    {{2, 3, 3, 7}, {XYLEM_POOL_AVG, 3, 7, 3, 7, 0, 0, 1}},
    {{2, 3, 3, 7}, {XYLEM_POOL_MAX, 3, 7, 3, 7, 0, 0, 1}},
};

std::string describe(const PoolCase& c) {
    return std::string(c.a.mode == XYLEM_POOL_MAX ? "max" : "avg") + " x " + to_string(c.x) + " kernel " +
           std::to_string(c.a.kernel_h) + "x" + std::to_string(c.a.kernel_w) + " stride " +
           std::to_string(c.a.stride_h) + "x" + std::to_string(c.a.stride_w) + " pad " + std::to_string(c.a.pad_h) +
           "x" + std::to_string(c.a.pad_w) + " count_include_pad " + std::to_string(c.a.count_include_pad);
}

// Three inputs per case: random, all negative (padding must never win a max), and small
// integers (many ties: the gradient goes to the first maximum of each window).
std::vector<std::vector<float>> pool_inputs(Rng& rng, int64_t n) {
    std::vector<float> ties = rng.uniform(n, 0.0f, 3.0f);
    for (float& v : ties) v = std::floor(v);
    return {rng.uniform(n), rng.uniform(n, -2.0f, -1.0f), ties};
}

TEST_P(ConvConformance, Pool2dForwardAndBackward) {
    XYLEM_REQUIRE_OP(XYLEM_OP_POOL2D_FWD);
    XYLEM_REQUIRE_OP(XYLEM_OP_POOL2D_BWD);
    Rng rng;
    for (const PoolCase& c : kPoolCases)
        for (const auto& x : pool_inputs(rng, numel(c.x))) {
            SCOPED_TRACE(describe(c) + " input range [" + std::to_string(x[0]) + "...]");
            const Shape ys = ops::pool2d_output_shape(c.x, c.a);
            Tensor tx = upload(dev(), c.x, x), ty(ys, DType::F32, dev());
            ops::pool2d_fwd(dev(), tx, ty, c.a);
            const auto y = ty.to_vector();
            EXPECT_TRUE(near(y, ref::pool2d_fwd(to_double(x), c.x, c.a), tol::kElementwise)) << "forward";
            const auto dy = rng.uniform(numel(ys));
            Tensor tdy = upload(dev(), ys, dy), tdx = upload(dev(), c.x, std::vector<float>(x.size(), kNaN));
            ops::pool2d_bwd(dev(), tdy, tx, ty, tdx, c.a);
            EXPECT_TRUE(
                near(tdx.to_vector(), ref::pool2d_bwd(to_double(dy), to_double(x), c.x, c.a), tol::kElementwise))
                << "backward";
        }
}

const Shape kNormShapes[] = {{8, 5}, {4, 3, 5, 5}, {2, 1, 3, 3}, {33, 7}, {2, 4, 1, 1}};

TEST_P(ConvConformance, BatchNormForward) {
    XYLEM_REQUIRE_OP(XYLEM_OP_BATCHNORM_FWD);
    Rng rng;
    for (const Shape& s : kNormShapes)
        for (int32_t training : {1, 0}) {
            SCOPED_TRACE("x " + to_string(s) + " training " + std::to_string(training));
            const int64_t c = s[1];
            const xylem_batchnorm_attrs a{1e-5f, 0.1f, training, XYLEM_ACT_NONE};
            const auto x = rng.uniform(numel(s), -2.0f, 3.0f), gamma = rng.uniform(c, 0.5f, 1.5f);
            const auto beta = rng.uniform(c), rmean = rng.uniform(c), rvar = rng.uniform(c, 0.5f, 2.0f);
            Tensor tx = upload(dev(), s, x), tg = upload(dev(), {c}, gamma), tb = upload(dev(), {c}, beta);
            Tensor trm = upload(dev(), {c}, rmean), trv = upload(dev(), {c}, rvar), ty(s, DType::F32, dev());
            Tensor tsm = upload(dev(), {c}, std::vector<float>(c, 7.0f)),
                   tsi = upload(dev(), {c}, std::vector<float>(c, 7.0f));
            ops::batchnorm_fwd(dev(), tx, tg, tb, ty, trm, trv, tsm, tsi, a);
            const auto want = ref::batchnorm_fwd(to_double(x), s, to_double(gamma), to_double(beta), to_double(rmean),
                                                 to_double(rvar), a);
            EXPECT_TRUE(near(ty.to_vector(), want.y, tol::reduction(numel(s) / c))) << "output";
            EXPECT_TRUE(near(trm.to_vector(), want.running_mean, tol::reduction(numel(s) / c))) << "running mean";
            EXPECT_TRUE(near(trv.to_vector(), want.running_var, tol::reduction(numel(s) / c))) << "running var";
            if (training) {
                EXPECT_TRUE(near(tsm.to_vector(), want.saved_mean, tol::reduction(numel(s) / c))) << "saved mean";
                EXPECT_TRUE(near(tsi.to_vector(), want.saved_invstd, tol::reduction(numel(s) / c))) << "saved invstd";
            } else {  // evaluation leaves the saved statistics alone
                EXPECT_TRUE(near(tsm.to_vector(), ref::fill(c, 7.0), tol::kCopy)) << "saved mean";
                EXPECT_TRUE(near(tsi.to_vector(), ref::fill(c, 7.0), tol::kCopy)) << "saved invstd";
            }
        }
}

TEST_P(ConvConformance, BatchNormBackward) {
    XYLEM_REQUIRE_OP(XYLEM_OP_BATCHNORM_BWD);
    Rng rng;
    for (const Shape& s : kNormShapes) {
        SCOPED_TRACE("x " + to_string(s));
        const int64_t c = s[1];
        const xylem_batchnorm_attrs a{1e-5f, 0.1f, 1, XYLEM_ACT_NONE};
        const auto x = rng.uniform(numel(s), -2.0f, 3.0f), gamma = rng.uniform(c, 0.5f, 1.5f);
        const auto dy = rng.uniform(numel(s));
        // Saved statistics as a training forward leaves them (rounded to float).
        const auto fwd = ref::batchnorm_fwd(to_double(x), s, to_double(gamma), ref::Vec(c, 0.0), ref::Vec(c, 0.0),
                                            ref::Vec(c, 1.0), a);
        const auto mean = to_float(fwd.saved_mean), invstd = to_float(fwd.saved_invstd);
        Tensor tdy = upload(dev(), s, dy), tx = upload(dev(), s, x), tg = upload(dev(), {c}, gamma);
        Tensor tm = upload(dev(), {c}, mean), ti = upload(dev(), {c}, invstd);
        Tensor tdx(s, DType::F32, dev()), tdg({c}, DType::F32, dev()), tdb({c}, DType::F32, dev());
        ops::batchnorm_bwd(dev(), tdy, tx, tg, tm, ti, tdx, tdg, tdb, a);
        const auto want =
            ref::batchnorm_bwd(to_double(dy), to_double(x), s, to_double(gamma), to_double(mean), to_double(invstd));
        EXPECT_TRUE(near(tdx.to_vector(), want.dx, tol::reduction(numel(s) / c))) << "input gradient";
        EXPECT_TRUE(near(tdg.to_vector(), want.dgamma, tol::reduction(numel(s) / c))) << "gamma gradient";
        EXPECT_TRUE(near(tdb.to_vector(), want.dbeta, tol::reduction(numel(s) / c))) << "beta gradient";
    }
}

// ABI 1.11: the ReLU inside the batch norm, where the backend takes it (ops::batchnorm_takes_relu).
TEST_P(ConvConformance, BatchNormWithRelu) {
    XYLEM_REQUIRE_OP(XYLEM_OP_BATCHNORM_FWD);
    XYLEM_REQUIRE_OP(XYLEM_OP_BATCHNORM_BWD);
    if (!ops::batchnorm_takes_relu(dev().backend(), {3, 5, 5}))
        GTEST_SKIP() << "backend does not take the batch norm's ReLU (ABI 1.11, op_accepts)";
    Rng rng;
    for (const Shape& s : kNormShapes) {
        const int64_t c = s[1];
        const auto x = rng.uniform(numel(s), -2.0f, 3.0f), gamma = rng.uniform(c, 0.5f, 1.5f);
        const auto beta = rng.uniform(c), rmean = rng.uniform(c), rvar = rng.uniform(c, 0.5f, 2.0f);
        for (int32_t training : {1, 0}) {
            SCOPED_TRACE("x " + to_string(s) + " training " + std::to_string(training));
            const xylem_batchnorm_attrs a{1e-5f, 0.1f, training, XYLEM_ACT_RELU};
            Tensor tx = upload(dev(), s, x), tg = upload(dev(), {c}, gamma), tb = upload(dev(), {c}, beta);
            Tensor trm = upload(dev(), {c}, rmean), trv = upload(dev(), {c}, rvar);
            Tensor ty = upload(dev(), s, std::vector<float>(x.size(), kNaN));
            Tensor tsm(Shape{c}, DType::F32, dev()), tsi(Shape{c}, DType::F32, dev());
            ops::batchnorm_fwd(dev(), tx, tg, tb, ty, trm, trv, tsm, tsi, a);
            const auto want = ref::batchnorm_fwd(to_double(x), s, to_double(gamma), to_double(beta), to_double(rmean),
                                                 to_double(rvar), a);
            const auto y = ty.to_vector();
            EXPECT_TRUE(near(y, want.y, tol::reduction(numel(s) / c))) << "output";
            EXPECT_TRUE(std::all_of(y.begin(), y.end(), [](float v) { return v >= 0.0f; })) << "a negative output";
            if (!training) continue;
            // Backward from this forward's output (zeros where the ReLU cut), against the reference
            // with dY masked by the same Y.
            const auto dy = rng.uniform(numel(s));
            Tensor tdy = upload(dev(), s, dy), tdx = upload(dev(), s, std::vector<float>(x.size(), kNaN));
            Tensor tdg(Shape{c}, DType::F32, dev()), tdb(Shape{c}, DType::F32, dev());
            ops::batchnorm_bwd(dev(), tdy, tx, tg, tsm, tsi, tdx, tdg, tdb, a, &ty);
            const auto mean = tsm.to_vector(), invstd = tsi.to_vector();
            const auto bwd = ref::batchnorm_bwd(ref::relu_gradient(to_double(dy), to_double(y)), to_double(x), s,
                                                to_double(gamma), to_double(mean), to_double(invstd));
            EXPECT_TRUE(near(tdx.to_vector(), bwd.dx, tol::reduction(numel(s) / c))) << "input gradient";
            EXPECT_TRUE(near(tdg.to_vector(), bwd.dgamma, tol::reduction(numel(s) / c))) << "gamma gradient";
            EXPECT_TRUE(near(tdb.to_vector(), bwd.dbeta, tol::reduction(numel(s) / c))) << "beta gradient";
            // Y is the ReLU's gradient source: missing, or of another shape, it is refused.
            EXPECT_THROW(ops::batchnorm_bwd(dev(), tdy, tx, tg, tsm, tsi, tdx, tdg, tdb, a), Error);
            Tensor wrong(Shape{numel(s)}, DType::F32, dev());
            EXPECT_THROW(ops::batchnorm_bwd(dev(), tdy, tx, tg, tsm, tsi, tdx, tdg, tdb, a, &wrong), Error);
        }
    }
}

}  // namespace
}  // namespace xylem::test
