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
    dev.backend().require(XYLEM_OP_FILL, label_);  // zeroes the gradient: say which layer needs it
    Param p{prefix_ + name, Tensor(shape, DType::F32, dev), Tensor(shape, DType::F32, dev)};
    std::uniform_real_distribution<float> u(-bound, bound);
    float* v = p.value.host_write<float>();  // on a host-memory backend this is the device buffer
    for (int64_t i = 0; i < numel(shape); ++i) v[i] = u(rng);
    ops::fill(dev, p.grad, 0.0f);
    return p;
}

Tensor& Layer::ensure(Tensor& t, const Shape& shape, Device& dev, DType dtype) {
    if (!t.defined() || t.shape() != shape || t.dtype() != dtype) t = Tensor(shape, dtype, dev);
    return t;
}

Shape batched(int64_t batch, const Shape& sample) {
    Shape s{batch};
    s.insert(s.end(), sample.begin(), sample.end());
    return s;
}

}  // namespace xylem
