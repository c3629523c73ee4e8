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

ClassRows class_rows(const Tensor& out, const Tensor& target, const std::string& who) {
    const Shape& o = out.shape();
    const bool fits = (o.size() == 2 || o.size() == 3) && target.dtype() == DType::I32 &&
                      target.shape() == Shape(o.begin(), o.end() - 1);
    if (!fits)
        throw Error(who + ": outputs " + to_string(o) + " need int32 targets " +
                    (o.size() >= 2 ? to_string(Shape(o.begin(), o.end() - 1)) : std::string("[N]")) + " (one class " +
                    (o.size() == 3 ? "per time step" : "per sample") + "), got " + dtype_name(target.dtype()) + " " +
                    to_string(target.shape()));
    const int64_t classes = o.back(), rows = out.numel() / classes;
    return {out.reshaped({rows, classes}), target.reshaped({rows}), o.size() == 3 ? o[1] : 1};
}

void Loss::check_output(const Shape& output_sample) const {
    if (output_sample.size() != 1 && output_sample.size() != 2)
        throw Error("loss " + kind() + ": expects the model to output one score vector per sample ([classes]) or per "
                    "time step ([time, classes]), got per-sample shape " + to_string(output_sample));
}

// Each sample's loss is the mean over its time steps; the gradient is that of the batch mean.
void CrossEntropyLoss::forward(Device& dev, const Tensor& out, const Tensor& target, Tensor& loss_sum) {
    const ClassRows r = class_rows(out, target, "loss cross_entropy");
    ops::xent_fwd(dev, r.scores, r.labels, loss_sum, 1.0f / static_cast<float>(r.steps), true);
}

const Tensor& CrossEntropyLoss::backward(Device& dev, const Tensor& out, const Tensor& target) {
    const ClassRows r = class_rows(out, target, "loss cross_entropy");
    Tensor grad_rows = sized_like(grad_, out, dev).reshaped(r.scores.shape());
    ops::xent_bwd(dev, r.scores, r.labels, grad_rows, 1.0f / static_cast<float>(r.labels.numel()));
    return grad_;
}

void NllLoss::forward(Device& dev, const Tensor& out, const Tensor& target, Tensor& loss_sum) {
    const ClassRows r = class_rows(out, target, "loss nll");
    ops::nll_fwd(dev, r.scores, r.labels, loss_sum, 1.0f / static_cast<float>(r.steps), true);
}

const Tensor& NllLoss::backward(Device& dev, const Tensor& out, const Tensor& target) {
    const ClassRows r = class_rows(out, target, "loss nll");
    Tensor grad_rows = sized_like(grad_, out, dev).reshaped(r.scores.shape());
    ops::nll_bwd(dev, r.scores, r.labels, grad_rows, 1.0f / static_cast<float>(r.labels.numel()));
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
