// Layer helpers shared by every layer.
#include "xylem/layers/layer.h"

#include "xylem/error.h"

namespace xylem {

void Layer::bind(Device&, const Shape& input, std::mt19937_64&) { output_shape(input); }

void Layer::shape_error(const std::string& what, const Shape& got, const Shape& expected) const {
    throw Error(label_ + ": " + what + ": got " + to_string(got) + ", expected " + to_string(expected));
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
