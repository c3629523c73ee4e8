// [[model.layers]] type = "clamp": y = min(max(x, lo), hi) elementwise (torch's Hardtanh; ReLU6 is
// lo = 0, hi = 6; ONNX's Clip). A bound left out is none (-inf, +inf: a config holds finite numbers
// only). The gradient passes where lo < x < hi, as torch's hardtanh's.
#pragma once

#include <limits>

#include "xylem/layers/layer.h"

namespace xylem {

struct ClampOptions {
    float lo = -std::numeric_limits<float>::infinity(), hi = std::numeric_limits<float>::infinity();
};

class Clamp : public Layer {
public:
    Clamp(float lo, float hi);
    std::string kind() const override { return "clamp"; }
    Shape output_shape(const Shape& input) const override { return input; }
    const Tensor& forward(Device& dev, const Tensor& x, bool train) override;
    const Tensor& backward(Device& dev, const Tensor& dy, bool need_dx) override;
    std::vector<uint32_t> ops_needed(bool) const override {
        return {XYLEM_OP_FUSED_ELEMENTWISE};  // forward and backward
    }
    float lo() const { return lo_; }
    float hi() const { return hi_; }

private:
    float lo_, hi_;
    Tensor x_, y_, dx_;
};

}  // namespace xylem
