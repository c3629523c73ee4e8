// The clamp layer (clamp.h): forward and backward are one fused_elementwise launch each,
// y = min(max(x, lo), hi) and dx = (lo < x < hi) ? dy : 0.
#include "xylem/layers/clamp.h"

#include <cmath>

#include "xylem/error.h"
#include "xylem/fused_builder.h"
#include "xylem/layers/registry.h"
#include "xylem/op_calls.h"

namespace xylem {

Clamp::Clamp(float lo, float hi) : lo_(lo), hi_(hi) {
    if (std::isnan(lo) || std::isnan(hi) || !(lo <= hi))
        throw Error("clamp layer: needs lo <= hi, got lo = " + std::to_string(lo) + ", hi = " + std::to_string(hi));
}

const Tensor& Clamp::forward(Device& dev, const Tensor& x, bool) {
    x_ = x;  // the producer's output, valid until its next forward (read by backward)
    // One pass, y = min(max(x, lo), hi): a copy then the in-place clamp op read and wrote y twice
    // (a quarter of MobileNetV2's time on native).
    FusedBuilder b;
    b.output(0, b.apply(XYLEM_FUSED_MIN, b.apply(XYLEM_FUSED_MAX, b.input(0), b.param(lo_)), b.param(hi_)));
    ops::fused_elementwise(dev, b.finish({XYLEM_FUSED_FULL}), {&x}, {&ensure(y_, x.shape(), dev)});
    return y_;
}

const Tensor& Clamp::backward(Device& dev, const Tensor& dy, bool) {
    if (dy.shape() != y_.shape()) shape_error("output gradient", dy.shape(), y_.shape());
    FusedBuilder b;
    const auto g = b.input(0), x = b.input(1);
    const auto inside =
        b.apply(XYLEM_FUSED_MUL, b.apply(XYLEM_FUSED_GT, x, b.param(lo_)), b.apply(XYLEM_FUSED_GT, b.param(hi_), x));
    b.output(0, b.apply(XYLEM_FUSED_MUL, g, inside));
    ops::fused_elementwise(dev, b.finish({XYLEM_FUSED_FULL, XYLEM_FUSED_FULL}), {&dy, &x_},
                           {&ensure(dx_, dy.shape(), dev)});
    return dx_;
}

namespace {
const LayerRegistration<ClampOptions> kClamp{
    "clamp",
    {"lo", "hi"},
    [](const ConfigSection& s) {
        ClampOptions o;
        s.get("lo", o.lo);
        s.get("hi", o.hi);
        if (std::isnan(o.lo) || std::isnan(o.hi) || !(o.lo <= o.hi)) s.fail("hi", "must be at least lo");
        return o;
    },
    [](const ClampOptions& o, LayerContext&) -> std::unique_ptr<Layer> { return std::make_unique<Clamp>(o.lo, o.hi); }};
}  // namespace

}  // namespace xylem
