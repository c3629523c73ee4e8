// Batches from the host (uploaded per step) or from a device-resident dataset (gathered there).
#include "xylem/train/batch_source.h"

#include <algorithm>
#include <climits>
#include <cstring>
#include <numeric>

#include "xylem/error.h"
#include "xylem/layers/layer.h"
#include "xylem/op_calls.h"

namespace xylem::train {

Shape input_sample_shape(const io::Dataset& d) { return d.sample_shape(); }

DType input_dtype(const io::Dataset& d) { return d.is_tokens() ? DType::I32 : DType::F32; }

Shape target_sample_shape(const io::Dataset& d) { return d.is_tokens() ? Shape{d.steps} : Shape{}; }

void gather_host(const io::Dataset& d, const std::vector<int64_t>& order, int64_t first, int64_t n, void* x,
                 void* targets, DType target_dtype, int64_t classes) {
    auto row = [&](int64_t i) { return order[static_cast<size_t>(first + i)]; };
    if (d.is_tokens()) {  // a sequence of tokens and one label per token
        if (target_dtype != DType::I32) throw Error("a token set's targets are int32 labels, not one-hot rows");
        const size_t steps = static_cast<size_t>(d.steps);
        for (int64_t i = 0; i < n; ++i) {
            const size_t from = static_cast<size_t>(row(i)) * steps, to = static_cast<size_t>(i) * steps;
            if (x) std::memcpy(static_cast<int32_t*>(x) + to, d.tokens.data() + from, steps * sizeof(int32_t));
            std::memcpy(static_cast<int32_t*>(targets) + to, d.labels.data() + from, steps * sizeof(int32_t));
        }
        return;
    }
    const int64_t per = d.sample_size();
    for (int64_t i = 0; x && i < n; ++i)
        std::memcpy(static_cast<float*>(x) + i * per, d.images.data() + row(i) * per,
                    static_cast<size_t>(per) * sizeof(float));
    if (target_dtype == DType::I32) {
        auto* y = static_cast<int32_t*>(targets);
        for (int64_t i = 0; i < n; ++i) y[i] = d.labels[static_cast<size_t>(row(i))];
    } else {  // one-hot targets for regression losses
        auto* y = static_cast<float*>(targets);
        std::fill(y, y + n * classes, 0.0f);
        for (int64_t i = 0; i < n; ++i) y[i * classes + d.labels[static_cast<size_t>(row(i))]] = 1.0f;
    }
}

namespace {
void* host_write_any(Tensor& t) {  // f32 or int32: both fill 4-byte elements
    return t.dtype() == DType::I32 ? static_cast<void*>(t.host_write<int32_t>()) : static_cast<void*>(t.host_write<float>());
}

// A batch of n targets: int32 labels, or one-hot rows of `classes` for regression losses.
Tensor batch_targets(const io::Dataset& d, int64_t n, DType target_dtype, int64_t classes, Device& dev) {
    return target_dtype == DType::I32 ? Tensor(batched(n, target_sample_shape(d)), DType::I32, dev)
                                      : Tensor({n, classes}, DType::F32, dev);
}

// A batch of n rows of a resident tensor [count, ...]: the same sample shape and type.
Tensor rows_like(const Tensor& all, int64_t n, Device& dev) {
    Shape s = all.shape();
    s[0] = n;
    return Tensor(s, all.dtype(), dev);
}
}  // namespace

void fill_batch(const io::Dataset& d, const std::vector<int64_t>& order, int64_t first, Tensor& inputs, Tensor& labels) {
    gather_host(d, order, first, inputs.dim(0), host_write_any(inputs), host_write_any(labels), labels.dtype(),
                labels.dtype() == DType::I32 ? 0 : labels.dim(1));
}

ResidentData upload_dataset(const io::Dataset& d, Device& dev, DType target_dtype, int64_t classes) {
    ResidentData r{Tensor(batched(d.count, input_sample_shape(d)), input_dtype(d), dev), Tensor()};
    r.images.upload_from(dev, d.is_tokens() ? static_cast<const void*>(d.tokens.data()) : d.images.data());
    std::vector<float> onehot;
    if (target_dtype == DType::I32) {
        r.targets = Tensor(batched(d.count, target_sample_shape(d)), DType::I32, dev);
        r.targets.upload_from(dev, d.labels.data());
    } else {  // one-hot targets for regression losses, built once, the same way a batch builds them
        std::vector<int64_t> all(static_cast<size_t>(d.count));
        std::iota(all.begin(), all.end(), 0);
        onehot.resize(static_cast<size_t>(d.count * classes));
        gather_host(d, all, 0, d.count, nullptr, onehot.data(), DType::F32, classes);
        r.targets = Tensor({d.count, classes}, DType::F32, dev);
        r.targets.upload_from(dev, onehot.data());
    }
    dev.sync();  // the copies read host memory asynchronously; `onehot` dies here
    return r;
}

HostBatches::HostBatches(const io::Dataset& data, Device& dev, DType target_dtype, int64_t classes, bool staged)
    : data_(data), dev_(dev), target_dtype_(target_dtype), classes_(classes), staged_(staged) {}

HostBatches::Slot& HostBatches::slot(int64_t n) {
    auto it = slots_.find(n);
    if (it != slots_.end()) return it->second;
    Slot s;
    s.x = Tensor(batched(n, input_sample_shape(data_)), input_dtype(data_), dev_);
    s.y = batch_targets(data_, n, target_dtype_, classes_, dev_);
    if (staged_) {
        s.x_stage.resize(static_cast<size_t>(s.x.numel()));
        s.y_stage.resize(static_cast<size_t>(s.y.numel()));
    }
    return slots_.emplace(n, std::move(s)).first->second;
}

void HostBatches::stage(int64_t first, int64_t n) {
    Slot& s = slot(n);
    if (!staged_) {
        fill_batch(data_, *order_, first, s.x, s.y);
        return;
    }
    dev_.sync();  // the previous launch's copies read the staging areas until they finish
    gather_host(data_, *order_, first, n, s.x_stage.data(), s.y_stage.data(), target_dtype_, classes_);
}

Batch HostBatches::enqueue(int64_t, int64_t n) {
    Slot& s = slot(n);
    if (staged_) {
        s.x.upload_from(dev_, s.x_stage.data());
        s.y.upload_from(dev_, s.y_stage.data());
    } else {
        s.x.upload(dev_);  // the step's only host->device traffic (none on host-memory backends)
        s.y.upload(dev_);
    }
    return {s.x, s.y};
}

ResidentBatches::ResidentBatches(const io::Dataset& data, Device& dev, DType target_dtype, int64_t classes, bool staged)
    : dev_(dev), count_(data.count), staged_(staged), data_(upload_dataset(data, dev, target_dtype, classes)),
      perm_({data.count}, DType::I32, dev) {}

ResidentBatches::Slot& ResidentBatches::slot(int64_t n) {
    auto it = slots_.find(n);
    if (it != slots_.end()) return it->second;
    Slot s{rows_like(data_.images, n, dev_), rows_like(data_.targets, n, dev_), Tensor()};
    if (staged_) s.idx = Tensor({n}, DType::I32, dev_);
    return slots_.emplace(n, std::move(s)).first->second;
}

void ResidentBatches::begin_epoch(const std::vector<int64_t>& order) {
    dev_.sync();  // the previous epoch's upload may still read perm_host_
    perm_host_.assign(order.begin(), order.end());
    perm_.upload_from(dev_, perm_host_.data());
}

void ResidentBatches::stage(int64_t first, int64_t n) {
    Slot& s = slot(n);
    if (staged_) ops::copy(dev_, perm_.rows(first, n), s.idx);  // device to device: no transfer
}

Batch ResidentBatches::enqueue(int64_t first, int64_t n) {
    Slot& s = slot(n);
    const Tensor idx = staged_ ? s.idx : perm_.rows(first, n);
    ops::gather_rows(dev_, data_.images, idx, s.x);
    ops::gather_rows(dev_, data_.targets, idx, s.y);
    return {s.x, s.y};
}

WindowBatches::WindowBatches(const TextWindows& windows, Device& dev, bool staged)
    : windows_(windows), dev_(dev), staged_(staged) {}

WindowBatches::Slot& WindowBatches::slot(int64_t n) {
    auto it = slots_.find(n);
    if (it != slots_.end()) return it->second;
    Slot s;
    s.x = Tensor({n, windows_.block_size}, DType::I32, dev_);
    s.y = Tensor({n, windows_.block_size}, DType::I32, dev_);
    if (staged_) {
        s.x_stage.resize(static_cast<size_t>(s.x.numel()));
        s.y_stage.resize(static_cast<size_t>(s.y.numel()));
    }
    return slots_.emplace(n, std::move(s)).first->second;
}

void WindowBatches::stage(int64_t first, int64_t n) {
    Slot& s = slot(n);
    if (!staged_) {
        gather_windows(windows_, *order_, first, n, s.x.host_write<int32_t>(), s.y.host_write<int32_t>());
        return;
    }
    dev_.sync();  // the previous launch's copies read the staging areas until they finish
    gather_windows(windows_, *order_, first, n, s.x_stage.data(), s.y_stage.data());
}

Batch WindowBatches::enqueue(int64_t, int64_t n) {
    Slot& s = slot(n);
    if (staged_) {
        s.x.upload_from(dev_, s.x_stage.data());
        s.y.upload_from(dev_, s.y_stage.data());
    } else {
        s.x.upload(dev_);  // the step's only host->device traffic (none on host-memory backends)
        s.y.upload(dev_);
    }
    return {s.x, s.y};
}

ResidentWindowBatches::ResidentWindowBatches(const TextWindows& windows, Device& dev, bool staged)
    : dev_(dev), count_(windows.count()), block_size_(windows.block_size), staged_(staged),
      tokens_({static_cast<int64_t>(windows.tokens.size()), 1}, DType::I32, dev),
      labels_(tokens_.rows(1, tokens_.dim(0) - 1)) {
    if (tokens_.dim(0) > INT32_MAX) throw Error("data.resident: the text's tokens are more than int32 positions address");
    tokens_.upload_from(dev, windows.tokens.data());
    dev.sync();  // the copy reads the host array asynchronously
}

ResidentWindowBatches::Slot& ResidentWindowBatches::slot(int64_t n) {
    auto it = slots_.find(n);
    if (it != slots_.end()) return it->second;
    Slot s;
    s.xg = Tensor({n * block_size_, 1}, DType::I32, dev_);
    s.yg = Tensor({n * block_size_, 1}, DType::I32, dev_);
    s.x = s.xg.reshaped({n, block_size_});
    s.y = s.yg.reshaped({n, block_size_});
    s.idx = Tensor({n * block_size_}, DType::I32, dev_);
    if (staged_) s.idx_stage.resize(static_cast<size_t>(n * block_size_));
    return slots_.emplace(n, std::move(s)).first->second;
}

void ResidentWindowBatches::stage(int64_t first, int64_t n) {
    Slot& s = slot(n);
    if (staged_) dev_.sync();  // the previous launch's copy reads the staging area until it finishes
    int32_t* at = staged_ ? s.idx_stage.data() : s.idx.host_write<int32_t>();
    for (int64_t i = 0; i < n; ++i) {
        const int64_t o = (*order_)[static_cast<size_t>(first + i)];
        if (o < 0 || o >= count_)
            throw Error("ResidentWindowBatches: window " + std::to_string(o) + " of " + std::to_string(count_));
        for (int64_t t = 0; t < block_size_; ++t) *at++ = static_cast<int32_t>(o + t);
    }
}

Batch ResidentWindowBatches::enqueue(int64_t, int64_t n) {
    Slot& s = slot(n);
    if (staged_) s.idx.upload_from(dev_, s.idx_stage.data());
    else s.idx.upload(dev_);  // the step's only host->device traffic (none on host-memory backends)
    // Window o's inputs are rows o + t of the tokens, its labels the rows after them.
    ops::gather_rows(dev_, tokens_, s.idx, s.xg);
    ops::gather_rows(dev_, labels_, s.idx, s.yg);
    return {s.x, s.y};
}

std::unique_ptr<BatchSource> make_window_source(const TextWindows& windows, Device& dev, bool resident, bool staged) {
    if (resident) return std::make_unique<ResidentWindowBatches>(windows, dev, staged);
    return std::make_unique<WindowBatches>(windows, dev, staged);
}

std::unique_ptr<BatchSource> make_batch_source(const io::Dataset& data, Device& dev, DType target_dtype,
                                               int64_t classes, bool resident, bool staged) {
    if (resident) return std::make_unique<ResidentBatches>(data, dev, target_dtype, classes, staged);
    return std::make_unique<HostBatches>(data, dev, target_dtype, classes, staged);
}

}  // namespace xylem::train
