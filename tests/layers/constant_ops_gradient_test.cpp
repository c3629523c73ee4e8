// The bias and scale layers (layers/constant_ops.cpp): forward values against host arithmetic for
// a feature vector, a whole trailing block and a single value, and the numerical gradient check
// of input and weight, over every available backend.
#include "support/backends.h"
#include "support/gradcheck.h"
#include "xylem/error.h"
#include "xylem/layers/constant_ops.h"

namespace xylem::test {
namespace {

class ConstantOpsGradient : public BackendTest {
protected:
    Rng rng_;
};
XYLEM_INSTANTIATE_OVER_BACKENDS(ConstantOpsGradient);

TEST_P(ConstantOpsGradient, BiasAndScaleBroadcastTheirWeightOverTrailingAxes) {
    XYLEM_REQUIRE_OP(XYLEM_OP_FUSED_ELEMENTWISE);
    XYLEM_REQUIRE_OP(XYLEM_OP_ADD);
    XYLEM_REQUIRE_OP(XYLEM_OP_BIAS_GRAD);
    const Shape sample{3, 4};
    for (bool scale : {false, true})
        for (const Shape& w_shape : {Shape{4}, Shape{3, 4}, Shape{1}}) {
            SCOPED_TRACE(std::string(scale ? "scale" : "bias") + " weight " + to_string(w_shape));
            BroadcastConstant layer(scale, w_shape);
            layer.bind(dev(), sample, rng_.engine());
            const std::vector<float> w = rng_.uniform(numel(w_shape), 0.5f, 1.5f);
            layer.params()[0]->value.upload_from(dev(), w.data());
            dev().sync();
            const std::vector<float> xv = rng_.uniform(2 * 12);
            Tensor x = upload(dev(), {2, 3, 4}, xv);
            std::vector<double> want;
            for (size_t i = 0; i < xv.size(); ++i) {
                const float wi = w[i % w.size()];  // the weight covers the trailing elements, cyclically
                want.push_back(scale ? static_cast<double>(xv[i]) * wi : static_cast<double>(xv[i]) + wi);
            }
            EXPECT_TRUE(near(layer.forward(dev(), x, true).to_vector(), want, 1e-6));
            check_layer_gradients(dev(), layer, x, rng_);
        }
}

TEST(ConstantOpsLayer, AWeightThatIsNotTheTrailingAxesIsAnError) {
    BroadcastConstant layer(false, {3});
    EXPECT_THROW(layer.output_shape({3, 4}), Error);
    EXPECT_THROW(BroadcastConstant(true, Shape{}), Error);
}

}  // namespace
}  // namespace xylem::test
