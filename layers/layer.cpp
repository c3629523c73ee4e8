// Layer helpers shared by every layer.
#include "xylem/layers/layer.h"

#include "xylem/error.h"
#include "xylem/op_calls.h"

namespace xylem {

void Layer::bind(Device&, const Shape& input, std::mt19937_64&) { output_shape(input); }

void Layer::shape_error(const std::string& what, const Shape& got, const Shape& expected) const {
    throw Error(label_ + ": " + what + ": got " + to_string(got) + ", expected " + to_string(expected));
}

void Layer::restore_carried_state(const std::map<std::string, SavedTensor>& saved) {
    if (!saved.empty())
        throw Error(label_ + ": carries no state between batches, but the checkpoint holds '" + saved.begin()->first +
                    "' for it");
}

Param Layer::uniform_param(Device& dev, const std::string& name, const Shape& shape, float bound,
                           std::mt19937_64& rng) const {
    if (inference_build_) return constant_param(dev, name, shape, 0.0f);
    dev.backend().require(XYLEM_OP_FILL, label_);  // zeroes the gradient: say which layer needs it
    Param p{prefix_ + name, Tensor(shape, DType::F32, dev), Tensor(shape, DType::F32, dev)};
    std::uniform_real_distribution<float> u(-bound, bound);
    float* v = p.value.host_write<float>();  // on a host-memory backend this is the device buffer
    for (int64_t i = 0; i < numel(shape); ++i) v[i] = u(rng);
    ops::fill(dev, p.grad, 0.0f);
    return p;
}

Param Layer::normal_param(Device& dev, const std::string& name, const Shape& shape, float std,
                          std::mt19937_64& rng) const {
    if (inference_build_) return constant_param(dev, name, shape, 0.0f);
    dev.backend().require(XYLEM_OP_FILL, label_);
    Param p{prefix_ + name, Tensor(shape, DType::F32, dev), Tensor(shape, DType::F32, dev)};
    std::normal_distribution<float> normal(0.0f, std);
    float* v = p.value.host_write<float>();
    for (int64_t i = 0; i < numel(shape); ++i) v[i] = normal(rng);
    ops::fill(dev, p.grad, 0.0f);
    return p;
}

Param Layer::constant_param(Device& dev, const std::string& name, const Shape& shape, float value) const {
    dev.backend().require(XYLEM_OP_FILL, label_);
    Param p{prefix_ + name, Tensor(shape, DType::F32, dev), inference_build_ ? Tensor() : Tensor(shape, DType::F32, dev)};
    ops::fill(dev, p.value, value);
    if (!inference_build_) ops::fill(dev, p.grad, 0.0f);
    return p;
}

Tensor& Layer::ensure(Tensor& t, const Shape& shape, Device& dev, DType dtype) {
    if (!t.defined() || t.shape() != shape || t.dtype() != dtype) t = Tensor(shape, dtype, dev);
    return t;
}

Tensor& Layer::ensure_output(Tensor& t, const Shape& shape, Device& dev) {
    Tensor lent = std::move(lent_);
    lent_ = Tensor();
    const int64_t n = numel(shape);
    if (lent.defined() && lent.dtype() == DType::F32 && lent.shape().size() == 1 && lent.numel() >= n) {
        output_on_loan_ = true;
        return t = lent.rows(0, n).reshaped(shape);  // its first n elements
    }
    // A forward without a loan (a training-mode or decoding forward of a model built to run) must
    // not write into the buffer of an earlier loan: the Net may have lent it to another layer since.
    if (output_on_loan_) t = Tensor(), output_on_loan_ = false;
    return ensure(t, shape, dev);
}

namespace {
void expect_one(const Layer& l, size_t got) {
    if (got != 1) throw Error(l.label() + ": takes one input, got " + std::to_string(got));
}
}  // namespace

Shape Layer::output_shape_of(const std::vector<Shape>& inputs) const {
    expect_one(*this, inputs.size());
    return output_shape(inputs[0]);
}

void Layer::bind_inputs(Device& dev, const std::vector<Shape>& inputs, std::mt19937_64& rng) {
    expect_one(*this, inputs.size());
    bind(dev, inputs[0], rng);
}

const Tensor& Layer::forward_inputs(Device& dev, const std::vector<const Tensor*>& xs, bool train) {
    expect_one(*this, xs.size());
    return forward(dev, *xs[0], train);
}

void Layer::backward_inputs(Device& dev, const Tensor& dy, const std::vector<bool>& need_dx,
                            std::vector<const Tensor*>& dxs) {
    expect_one(*this, need_dx.size());
    const Tensor& dx = backward(dev, dy, need_dx[0]);
    dxs.assign(1, need_dx[0] ? &dx : nullptr);
}

void MultiInputLayer::check_input_count(size_t got) const {
    const size_t want = input_count();
    if (want ? got != want : got < 2)
        throw Error(label() + ": takes " + (want ? std::to_string(want) : std::string("two or more")) +
                    " inputs, got " + std::to_string(got) + " (list them in `inputs`)");
}

void MultiInputLayer::bind_inputs(Device&, const std::vector<Shape>& inputs, std::mt19937_64&) {
    output_shape_of(inputs);
}

Shape MultiInputLayer::output_shape(const Shape&) const { check_input_count(1); return {}; }
void MultiInputLayer::bind(Device&, const Shape&, std::mt19937_64&) { check_input_count(1); }
const Tensor& MultiInputLayer::forward(Device&, const Tensor&, bool) {
    check_input_count(1);
    throw Error(label() + ": takes several inputs");
}
const Tensor& MultiInputLayer::backward(Device&, const Tensor&, bool) {
    check_input_count(1);
    throw Error(label() + ": takes several inputs");
}

Shape batched(int64_t batch, const Shape& sample) {
    Shape s{batch};
    s.insert(s.end(), sample.begin(), sample.end());
    return s;
}

}  // namespace xylem
