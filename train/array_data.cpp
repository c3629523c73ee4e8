// Data sets from arrays in memory.
#include "xylem/train/array_data.h"

#include <algorithm>
#include <cstring>

#include "xylem/error.h"
#include "xylem/layers/layer.h"

namespace xylem::train {
namespace {

std::string shape_text(const Shape& s) {
    std::string t = "[";
    for (size_t i = 0; i < s.size(); ++i) t += (i ? ", " : "") + std::to_string(s[i]);
    return t + "]";
}

void check_labels(const int32_t* labels, size_t n, int64_t classes, const std::string& what) {
    for (size_t i = 0; i < n; ++i)
        if (labels[i] < 0 || (classes > 0 && labels[i] >= classes))
            throw Error(what + ": label " + std::to_string(labels[i]) + " at index " + std::to_string(i) +
                        (classes > 0 ? " is out of range for a model with " + std::to_string(classes) + " outputs"
                                     : " is negative"));
}

}  // namespace

io::Dataset image_layout(const Shape& sample, const std::string& what) {
    io::Dataset d;
    if (sample.size() == 1) d.rows = 1, d.cols = sample[0];
    else if (sample.size() == 2) d.rows = sample[0], d.cols = sample[1];
    else if (sample.size() == 3) d.channels = sample[0], d.rows = sample[1], d.cols = sample[2];
    else
        throw Error(what + ": samples of shape " + shape_text(sample) +
                    " are not images: give [N, F], [N, H, W] or [N, C, H, W]");
    if (d.channels < 1 || d.rows < 1 || d.cols < 1)
        throw Error(what + ": samples of shape " + shape_text(sample) + " are empty");
    return d;
}

io::Dataset image_dataset(const float* x, int64_t count, const Shape& sample, const int32_t* labels, int64_t classes,
                          const std::string& what) {
    if (count < 1) throw Error(what + ": no samples (the first dimension is 0)");
    io::Dataset d = image_layout(sample, what);
    d.count = count;
    const size_t n = static_cast<size_t>(count * d.sample_size());
    d.images.assign(x, x + n);
    if (labels) {
        check_labels(labels, static_cast<size_t>(count), classes, what);
        d.labels.assign(labels, labels + count);
    } else {
        d.labels.assign(static_cast<size_t>(count), 0);
    }
    return d;
}

io::Dataset token_dataset(const int32_t* tokens, int64_t count, int64_t steps, const int32_t* labels,
                          const std::string& what) {
    if (count < 1 || steps < 1) throw Error(what + ": no token sequences (a dimension is 0)");
    io::Dataset d;
    d.count = count;
    d.steps = steps;
    const size_t n = static_cast<size_t>(count * steps);
    d.tokens.assign(tokens, tokens + n);
    for (size_t i = 0; i < n; ++i)
        if (d.tokens[i] < 0) throw Error(what + ": token " + std::to_string(d.tokens[i]) + " at index " + std::to_string(i) + " is negative");
    if (labels) {
        check_labels(labels, n, 0, what);
        d.labels.assign(labels, labels + n);
    } else {
        d.labels.assign(n, 0);
    }
    return d;
}

io::Dataset split_tail(io::Dataset& all, int64_t held) {
    if (held <= 0) return {};
    if (held >= all.count)
        throw Error("validation holds out " + std::to_string(held) + " of the " + std::to_string(all.count) +
                    " samples, leaving none to train on");
    io::Dataset v = all.empty_like();
    const int64_t keep = all.count - held;
    v.count = held;
    const size_t per_x = static_cast<size_t>(all.sample_size());
    const size_t per_y = static_cast<size_t>(all.is_tokens() ? all.steps : 1);
    const size_t kx = static_cast<size_t>(keep) * per_x, ky = static_cast<size_t>(keep) * per_y;
    if (all.is_tokens()) {
        v.tokens.assign(all.tokens.begin() + static_cast<std::ptrdiff_t>(kx), all.tokens.end());
        all.tokens.resize(kx);
    } else {
        v.images.assign(all.images.begin() + static_cast<std::ptrdiff_t>(kx), all.images.end());
        all.images.resize(kx);
    }
    v.labels.assign(all.labels.begin() + static_cast<std::ptrdiff_t>(ky), all.labels.end());
    all.labels.resize(ky);
    all.count = keep;
    return v;
}

ArrayBatches::ArrayBatches(const void* x, DType dtype, int64_t count, Shape sample, Device& dev)
    : x_(static_cast<const char*>(x)), dtype_(dtype), count_(count), sample_(std::move(sample)),
      sample_bytes_(static_cast<size_t>(numel(sample_)) * dtype_size(dtype)), dev_(dev) {}

ArrayBatches::Slot& ArrayBatches::slot(int64_t n) {
    auto it = slots_.find(n);
    if (it != slots_.end()) return it->second;
    Slot s{Tensor(batched(n, sample_), dtype_, dev_), Tensor({n}, DType::I32, dev_)};
    std::fill_n(s.y.host_write<int32_t>(), n, 0);
    return slots_.emplace(n, std::move(s)).first->second;
}

void ArrayBatches::stage(int64_t first, int64_t n) {
    Slot& s = slot(n);
    char* to = dtype_ == DType::I32 ? reinterpret_cast<char*>(s.x.host_write<int32_t>()) : reinterpret_cast<char*>(s.x.host_write<float>());
    for (int64_t i = 0; i < n; ++i)
        std::memcpy(to + static_cast<size_t>(i) * sample_bytes_,
                    x_ + static_cast<size_t>((*order_)[static_cast<size_t>(first + i)]) * sample_bytes_, sample_bytes_);
}

Batch ArrayBatches::enqueue(int64_t, int64_t n) {
    Slot& s = slot(n);
    s.x.upload(dev_);
    s.y.upload(dev_);
    return {s.x, s.y};
}

}  // namespace xylem::train
