// Losses: each adds the batch's summed loss to a device scalar (so the host reads losses
// only when it prints) and produces the gradient of the batch-mean loss.
#pragma once

#include <memory>
#include <string>

#include "xylem/tensor.h"

namespace xylem {

// The class losses' view of a batch, the one home of the rule: outputs [N, C] with int32 labels
// [N] are N rows of class scores; a batch of sequences, outputs [N, T, C] with labels [N, T] (one
// class per time step: a character model), is N*T rows, and each sample's loss is the mean over
// its T steps (the loss per character). An Error names both shapes when they do not match.
struct ClassRows {
    Tensor scores, labels;  // [rows, C] f32 and [rows] int32, views of the batch
    int64_t steps = 1;      // rows per sample: T, or 1
};
ClassRows class_rows(const Tensor& output, const Tensor& target, const std::string& who);

class Loss {
public:
    virtual ~Loss() = default;
    virtual std::string kind() const = 0;
    // Targets are int32 class indices [N] (class losses) or float tensors shaped like the output.
    virtual DType target_dtype() const { return DType::I32; }
    // Checks the model's per-sample output shape at build time (names the loss and the shape):
    // class losses take [classes] or, per time step, [time, classes].
    virtual void check_output(const Shape& output_sample) const;
    // loss_sum[0] += sum over the batch of the per-sample loss.
    virtual void forward(Device& dev, const Tensor& output, const Tensor& target, Tensor& loss_sum) = 0;
    // dL/doutput for L = the mean of the per-sample losses over the batch (over every time step
    // of a batch of sequences).
    virtual const Tensor& backward(Device& dev, const Tensor& output, const Tensor& target) = 0;
    // The ops forward() and backward() run (checked against the backend before training starts).
    virtual std::vector<uint32_t> ops_needed() const = 0;

protected:
    Tensor grad_;
};

// Softmax + negative log-likelihood in one numerically stable op, on raw logits.
class CrossEntropyLoss : public Loss {
public:
    std::string kind() const override { return "cross_entropy"; }
    std::vector<uint32_t> ops_needed() const override { return {XYLEM_OP_XENT_FWD, XYLEM_OP_XENT_BWD}; }
    void forward(Device& dev, const Tensor& output, const Tensor& target, Tensor& loss_sum) override;
    const Tensor& backward(Device& dev, const Tensor& output, const Tensor& target) override;
};

// Negative log-likelihood on log-probabilities (after a log_softmax layer).
class NllLoss : public Loss {
public:
    std::string kind() const override { return "nll"; }
    std::vector<uint32_t> ops_needed() const override { return {XYLEM_OP_NLL_FWD, XYLEM_OP_NLL_BWD}; }
    void forward(Device& dev, const Tensor& output, const Tensor& target, Tensor& loss_sum) override;
    const Tensor& backward(Device& dev, const Tensor& output, const Tensor& target) override;
};

// Mean squared error; the per-sample loss is the mean over the sample's elements.
class MseLoss : public Loss {
public:
    std::string kind() const override { return "mse"; }
    std::vector<uint32_t> ops_needed() const override { return {XYLEM_OP_MSE_FWD, XYLEM_OP_MSE_BWD}; }
    DType target_dtype() const override { return DType::F32; }
    void check_output(const Shape& output_sample) const override;
    void forward(Device& dev, const Tensor& output, const Tensor& target, Tensor& loss_sum) override;
    const Tensor& backward(Device& dev, const Tensor& output, const Tensor& target) override;
};

std::unique_ptr<Loss> make_loss(const std::string& kind);  // Error naming the kind if unknown

}  // namespace xylem
