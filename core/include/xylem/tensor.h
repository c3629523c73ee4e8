// Tensor: a shape and dtype over shared storage that keeps one buffer per device that has
// held it and a bitmask of which copies are current (Caffe's SyncedMemory, Coaster's
// SharedTensor). Copies happen lazily, only when a reader needs a stale location.
#pragma once

#include <memory>
#include <vector>

#include "xylem/backend.h"
#include "xylem/shape.h"

namespace xylem {

class Tensor {
public:
    Tensor() = default;
    // Buffers are allocated lazily, where the tensor is first accessed.
    explicit Tensor(Shape shape, DType dtype = DType::F32);
    // Allocated on `home` right away, so that on a host-memory backend host writes land in
    // the device buffer itself and never need a copy.
    Tensor(Shape shape, DType dtype, Device& home);

    bool defined() const { return storage_ != nullptr; }
    const Shape& shape() const { return shape_; }
    DType dtype() const { return dtype_; }
    int64_t numel() const { return xylem::numel(shape_); }
    size_t bytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype_); }
    int64_t dim(size_t i) const { return shape_.at(i); }

    // A tensor of another shape over the same storage (same element count).
    Tensor reshaped(Shape shape) const;
    // Rows [first, first + count) along axis 0: a view over the same storage, no copy. Writing
    // through a view that covers part of the storage keeps the other rows (it reads first).
    Tensor rows(int64_t first, int64_t count) const;
    // True when this tensor sees only part of its storage (a row view).
    bool partial() const;
    // True when both tensors are views of one storage (whatever their shapes and offsets).
    bool shares_storage(const Tensor& other) const { return storage_ && storage_ == other.storage_; }

    // Device access, as an op operand. read: bring current; write: discard old contents
    // (no copy); read_write: bring current, then only this copy stays valid.
    xylem_tensor_arg read(Device& dev) const;
    xylem_tensor_arg write(Device& dev);
    xylem_tensor_arg read_write(Device& dev);

    // Host access. Waits for the device when the current copy is there.
    template <class T> const T* host_read() const { return static_cast<const T*>(host_access(Access::Read)); }
    template <class T> T* host_write() { return static_cast<T*>(host_access(Access::Write)); }
    template <class T> T* host_read_write() { return static_cast<T*>(host_access(Access::ReadWrite)); }

    // Explicit transfers: allowed in strict mode (the input batch of a training step).
    void upload(Device& dev) const;
    // Copies bytes() from caller-owned host memory into this tensor on `dev` (explicit, counted);
    // afterwards only the device copy is current. The copy is asynchronous: keep `src` unchanged
    // until dev.sync(). Under capture the copy reads `src` again at every launch (a staging area).
    void upload_from(Device& dev, const void* src);
    // Brings the host copy current with an explicit, counted device->host copy (allowed in strict
    // mode; a no-op when the host copy is current, always on a host-memory backend). Waits for it.
    void download() const;
    std::vector<float> to_vector() const;  // copy of the contents as floats (host read)

    // Residency queries for tests and the profiler.
    bool current_on(const Device& dev) const;
    bool current_on_host() const;

    struct Storage;  // core internal (core/src/storage.h)

private:
    enum class Access { Read, Write, ReadWrite };
    void* host_access(Access access) const;
    xylem_tensor_arg arg(xylem_buffer_t buffer) const;

    void note_capture(Device& dev, bool read, bool write) const;

    std::shared_ptr<Storage> storage_;
    Shape shape_;
    int64_t offset_ = 0;  // in elements from the storage start (row views)
    DType dtype_ = DType::F32;
};

// Convenience: a host-initialised tensor.
Tensor tensor_from(const std::vector<float>& values, Shape shape);
Tensor tensor_from_i32(const std::vector<int32_t>& values, Shape shape);

}  // namespace xylem
