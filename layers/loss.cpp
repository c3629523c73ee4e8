// Loss functions.
#include "xylem/layers/loss.h"

#include "xylem/error.h"
#include "xylem/op_calls.h"

namespace xylem {

namespace {
Tensor& sized_like(Tensor& t, const Tensor& like, Device& dev) {
    if (!t.defined() || t.shape() != like.shape()) t = Tensor(like.shape(), DType::F32, dev);
    return t;
}
}  // namespace

void Loss::check_output(const Shape& output_sample) const {
    if (output_sample.size() != 1)
        throw Error("loss " + kind() + ": expects the model to output one score vector per sample, got per-sample shape " +
                    to_string(output_sample));
}

void CrossEntropyLoss::forward(Device& dev, const Tensor& out, const Tensor& target, Tensor& loss_sum) {
    ops::xent_fwd(dev, out, target, loss_sum, 1.0f, true);
}

const Tensor& CrossEntropyLoss::backward(Device& dev, const Tensor& out, const Tensor& target) {
    ops::xent_bwd(dev, out, target, sized_like(grad_, out, dev), 1.0f / static_cast<float>(out.dim(0)));
    return grad_;
}

void NllLoss::forward(Device& dev, const Tensor& out, const Tensor& target, Tensor& loss_sum) {
    ops::nll_fwd(dev, out, target, loss_sum, 1.0f, true);
}

const Tensor& NllLoss::backward(Device& dev, const Tensor& out, const Tensor& target) {
    ops::nll_bwd(dev, out, target, sized_like(grad_, out, dev), 1.0f / static_cast<float>(out.dim(0)));
    return grad_;
}

void MseLoss::check_output(const Shape& output_sample) const {
    if (output_sample.empty()) throw Error("loss mse: the model output has no per-sample elements");
}

void MseLoss::forward(Device& dev, const Tensor& out, const Tensor& target, Tensor& loss_sum) {
    const float per_sample = static_cast<float>(out.numel() / out.dim(0));
    ops::mse_fwd(dev, out, target, loss_sum, 1.0f / per_sample, true);
}

const Tensor& MseLoss::backward(Device& dev, const Tensor& out, const Tensor& target) {
    ops::mse_bwd(dev, out, target, sized_like(grad_, out, dev), 1.0f / static_cast<float>(out.numel()));
    return grad_;
}

std::unique_ptr<Loss> make_loss(const std::string& kind) {
    if (kind == "cross_entropy") return std::make_unique<CrossEntropyLoss>();
    if (kind == "nll") return std::make_unique<NllLoss>();
    if (kind == "mse") return std::make_unique<MseLoss>();
    throw Error("unknown loss '" + kind + "' (known: cross_entropy, nll, mse)");
}

}  // namespace xylem
