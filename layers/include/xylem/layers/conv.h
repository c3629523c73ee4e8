// Conv2d (NCHW, stride, padding, dilation, groups, bias) with a fusable activation, and
// 2-D max/average pooling, and global average pooling.
#pragma once

#include "xylem/layers/layer.h"

namespace xylem {

class BatchNorm;

// Also the options of [[model.layers]] type = "conv2d" (out and kernel required).
struct Conv2dOptions {
    int64_t out_channels = 0;
    int32_t kernel_h = 1, kernel_w = 1;
    int32_t stride = 1, padding = 0, dilation = 1, groups = 1;
    bool bias = true;
};

class Conv2d : public Layer {
public:
    explicit Conv2d(const Conv2dOptions& o);

    std::string kind() const override { return "conv2d"; }
    Shape output_shape(const Shape& input) const override;
    void bind(Device& dev, const Shape& input, std::mt19937_64& rng) override;
    const Tensor& forward(Device& dev, const Tensor& x, bool train) override;
    const Tensor& backward(Device& dev, const Tensor& dy, bool need_dx) override;
    std::vector<Param*> params() override;
    ParamFloats param_floats_of(const std::vector<Shape>& in) const override;
    bool can_accumulate_param_grads() const override { return true; }
    bool fuse_activation(xylem_activation act, Backend& backend) override;
    bool takes_lent_output() const override { return true; }  // the inference memory plan (layer.h)
    std::vector<uint32_t> ops_needed(bool backward) const override;
    // Inference with what Net's rewrites fold into this layer: the batch norm that reads it (one
    // convolution with the rescaled weights and bias; bn may be null), a residual added to the
    // result (the add that reads it, with its other input; may be null: ops.h's conv2d_fwd R), and
    // `act` (the activation after them, or none) fused. Nothing is kept for a backward pass.
    const Tensor& forward_folded(Device& dev, const Tensor& x, BatchNorm* bn, const Tensor* residual,
                                 xylem_activation act);
    bool has_fused_activation() const { return attrs_.activation != XYLEM_ACT_NONE; }
    const xylem_conv2d_attrs& attrs() const { return attrs_; }
    const Shape& weight_shape() const { return weight_.value.shape(); }

private:
    Shape weight_shape(int64_t in_channels) const;
    Conv2dOptions o_;
    xylem_conv2d_attrs attrs_{};
    Param weight_, bias_;
    Tensor x_, y_, dz_, dx_;
    Tensor folded_w_, folded_b_;  // forward_folded's weights and bias, refolded every call
    Tensor zero_b_;               // [K] zeros: the bias a residual needs where there is none
};

struct Pool2dOptions {
    xylem_pool_mode mode = XYLEM_POOL_MAX;
    int32_t kernel = 2, stride = 0, padding = 0;  // stride 0 = the kernel size
    bool count_include_pad = true;
};

// [[model.layers]] type = "maxpool2d" / "avgpool2d": the pool's options with the kernel as written
// (`kernel = 3` or `[3, 3]`; the layer needs a square one, checked when the model is built).
struct Pool2dConfig {
    Pool2dOptions pool;
    int32_t kernel_h = 0, kernel_w = 0;
};

class Pool2d : public Layer {
public:
    explicit Pool2d(const Pool2dOptions& o);
    std::string kind() const override { return attrs_.mode == XYLEM_POOL_MAX ? "maxpool2d" : "avgpool2d"; }
    Shape output_shape(const Shape& input) const override;
    const Tensor& forward(Device& dev, const Tensor& x, bool train) override;
    const Tensor& backward(Device& dev, const Tensor& dy, bool need_dx) override;
    bool takes_lent_output() const override { return true; }  // the inference memory plan (layer.h)
    std::vector<uint32_t> ops_needed(bool backward) const override {
        if (!backward) return {XYLEM_OP_POOL2D_FWD};
        return {XYLEM_OP_POOL2D_FWD, XYLEM_OP_POOL2D_BWD};
    }

private:
    xylem_pool2d_attrs attrs_{};
    Tensor x_, y_, dx_;
};

// [[model.layers]] type = "global_avgpool": the mean of each channel over the image, [C, H, W] ->
// [C] (PyTorch: x.mean((2, 3)), or AdaptiveAvgPool2d(1) then flatten).
class GlobalAvgPool : public Layer {
public:
    std::string kind() const override { return "global_avgpool"; }
    Shape output_shape(const Shape& input) const override;
    const Tensor& forward(Device& dev, const Tensor& x, bool train) override;
    const Tensor& backward(Device& dev, const Tensor& dy, bool need_dx) override;
    bool takes_lent_output() const override { return true; }  // the inference memory plan (layer.h)
    std::vector<uint32_t> ops_needed(bool backward) const override {
        if (!backward) return {XYLEM_OP_POOL2D_FWD};
        return {XYLEM_OP_POOL2D_FWD, XYLEM_OP_POOL2D_BWD};
    }

private:
    xylem_pool2d_attrs window(const Shape& x) const;
    Tensor x_, y_, out_, dx_;
};

}  // namespace xylem
