// Tensor residency: lazy copies between the host and device buffers, each one counted; row views.
#include "xylem/tensor.h"

#include <cstring>

#include "storage.h"
#include "xylem/error.h"

namespace xylem {

Tensor::Tensor(Shape shape, DType dtype) : shape_(std::move(shape)), dtype_(dtype) {
    for (int64_t d : shape_)
        if (d < 0) throw Error("negative dimension in shape " + to_string(shape_));
    storage_ = std::make_shared<Storage>(bytes());
}

Tensor::Tensor(Shape shape, DType dtype, Device& home) : Tensor(std::move(shape), dtype) { storage_->ensure(home); }

Tensor Tensor::reshaped(Shape shape) const {
    if (xylem::numel(shape) != numel())
        throw Error("cannot reshape " + to_string(shape_) + " to " + to_string(shape) + ": element counts differ");
    Tensor t = *this;
    t.shape_ = std::move(shape);
    return t;
}

Tensor Tensor::rows(int64_t first, int64_t count) const {
    if (shape_.empty() || first < 0 || count < 0 || first + count > shape_[0])
        throw Error("rows [" + std::to_string(first) + ", " + std::to_string(first + count) + ") are outside a tensor of shape " +
                    to_string(shape_));
    Tensor t = *this;
    const int64_t row = shape_[0] ? numel() / shape_[0] : 0;
    t.offset_ = offset_ + first * row;
    t.shape_[0] = count;
    return t;
}

bool Tensor::partial() const { return storage_ && bytes() != storage_->bytes; }

// While `dev` records a graph, the graph pins this storage and replays its residency at launch.
void Tensor::note_capture(Device& dev, bool read, bool write) const {
    if (CaptureLog* log = dev.capture_log()) log->note(storage_, read, write);
}

xylem_tensor_arg Tensor::arg(xylem_buffer_t buffer) const {
    xylem_tensor_arg a{};
    a.buffer = buffer;
    a.offset = static_cast<uint64_t>(offset_);
    a.dtype = static_cast<uint32_t>(dtype_);
    if (shape_.size() > XYLEM_MAX_DIMS) throw Error("tensor rank " + std::to_string(shape_.size()) + " exceeds 8");
    a.ndim = static_cast<uint32_t>(shape_.size());
    for (size_t i = 0; i < shape_.size(); ++i) a.dims[i] = shape_[i];
    return a;
}

xylem_tensor_arg Tensor::read(Device& dev) const {
    if (!storage_) throw Error("read of an undefined tensor");
    note_capture(dev, true, false);
    return arg(storage_->push_to(dev, false));
}

xylem_tensor_arg Tensor::write(Device& dev) {
    if (!storage_) throw Error("write to an undefined tensor");
    if (partial()) return read_write(dev);  // the rows outside the view must survive
    note_capture(dev, false, true);
    xylem_tensor_arg a = arg(storage_->ensure(dev).buffer);
    storage_->set_only(dev.location_bit());
    return a;
}

xylem_tensor_arg Tensor::read_write(Device& dev) {
    xylem_tensor_arg a = read(dev);
    note_capture(dev, true, true);
    storage_->set_only(dev.location_bit());
    return a;
}

void Tensor::upload(Device& dev) const {
    if (!storage_) throw Error("upload of an undefined tensor");
    note_capture(dev, true, false);
    storage_->push_to(dev, true);
}

void Tensor::upload_from(Device& dev, const void* src) {
    if (!storage_) throw Error("upload to an undefined tensor");
    Storage& s = *storage_;
    // A view keeps the rows around it: bring them to the device first (explicitly).
    xylem_buffer_t buf = partial() ? s.push_to(dev, true) : s.ensure(dev).buffer;
    note_capture(dev, partial(), true);
    Backend& b = dev.backend();
    const uint64_t at = static_cast<uint64_t>(offset_) * dtype_size(dtype_);
    dev.flush_deferred();  // held-back ops that read this buffer run before the copy overwrites it
    b.check(b.api().copy_h2d(b.framework(), dev.stream(), buf, at, src, bytes()), "host->device copy");
    count_transfer(dev, true, bytes());
    s.set_only(dev.location_bit());
}

void* Tensor::host_access(Access access) const {
    if (!storage_) throw Error("host access to an undefined tensor");
    Storage& s = *storage_;
    if (access == Access::Write && !partial()) {
        s.wait_pending_upload();
        if (s.alias_bits) s.copies_alias_dev()->sync();
        s.ensure_host();
        s.set_only(kHostBit);
        return s.host;
    }
    s.note_host_read();
    s.pull_to_host(false);
    if (access != Access::Read) {  // a partial write keeps the rows outside the view
        s.wait_pending_upload();
        s.set_only(kHostBit);
    }
    return static_cast<char*>(s.host) + offset_ * static_cast<int64_t>(dtype_size(dtype_));
}

void Tensor::download() const {
    if (!storage_) throw Error("download of an undefined tensor");
    storage_->pull_to_host(true);
}

std::vector<float> Tensor::to_vector() const {
    storage_->note_host_read();
    storage_->pull_to_host(true);
    std::vector<float> out(static_cast<size_t>(numel()));
    const char* host = static_cast<const char*>(storage_->host) + offset_ * static_cast<int64_t>(dtype_size(dtype_));
    if (dtype_ == DType::F32) {
        // An empty tensor may have no host buffer, and memcpy from null is undefined even for 0 bytes.
        if (!out.empty()) std::memcpy(out.data(), host, bytes());
    } else {
        const int32_t* p = reinterpret_cast<const int32_t*>(host);
        for (size_t i = 0; i < out.size(); ++i) out[i] = static_cast<float>(p[i]);
    }
    return out;
}

bool Tensor::current_on(const Device& dev) const { return storage_ && (storage_->valid & dev.location_bit()); }
bool Tensor::current_on_host() const { return storage_ && (storage_->valid & kHostBit); }

Tensor tensor_from(const std::vector<float>& values, Shape shape) {
    Tensor t(std::move(shape), DType::F32);
    if (static_cast<int64_t>(values.size()) != t.numel())
        throw Error("tensor_from: " + std::to_string(values.size()) + " values for shape " + to_string(t.shape()));
    if (!values.empty()) std::memcpy(t.host_write<float>(), values.data(), t.bytes());  // no null memcpy
    return t;
}

Tensor tensor_from_i32(const std::vector<int32_t>& values, Shape shape) {
    Tensor t(std::move(shape), DType::I32);
    if (static_cast<int64_t>(values.size()) != t.numel())
        throw Error("tensor_from_i32: " + std::to_string(values.size()) + " values for shape " + to_string(t.shape()));
    if (!values.empty()) std::memcpy(t.host_write<int32_t>(), values.data(), t.bytes());  // no null memcpy
    return t;
}

}  // namespace xylem
