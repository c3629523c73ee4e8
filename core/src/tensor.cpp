// Tensor residency: lazy copies between the host and device buffers, each one counted.
#include "xylem/tensor.h"

#include <cstdlib>
#include <cstring>

#include "xylem/error.h"
#include "xylem/transfer.h"

namespace xylem {

namespace {
constexpr uint64_t kHostBit = 1;
}

struct Tensor::Storage {
    struct Copy {
        std::shared_ptr<Device> dev;
        xylem_buffer_t buffer = nullptr;
    };
    size_t bytes = 0;
    uint64_t valid = 0;       // bit 0: host; other bits: Device::location_bit()
    uint64_t alias_bits = 0;  // host + the host-memory device whose buffer is the host copy
    void* host = nullptr;
    bool host_owned = false;
    std::vector<Copy> copies;
    Device* pending_upload = nullptr;  // a device still reading `host` asynchronously

    explicit Storage(size_t n) : bytes(n) {}
    ~Storage() {
        for (Copy& c : copies) c.dev->free(c.buffer);
        if (host_owned) std::free(host);
    }

    Copy* find(const Device& dev) {
        for (Copy& c : copies)
            if (c.dev.get() == &dev) return &c;
        return nullptr;
    }

    Copy& ensure(Device& dev) {
        if (Copy* c = find(dev)) return *c;
        Copy c{dev.backend().device(dev.index()), dev.alloc(bytes)};
        copies.push_back(c);
        // A host-memory backend's buffer doubles as the host copy: no copies between them.
        if (!host && dev.host_memory()) {
            if (void* p = dev.host_ptr(c.buffer)) {
                host = p;
                alias_bits = kHostBit | dev.location_bit();
                if (valid & kHostBit) valid |= dev.location_bit();
            }
        }
        return copies.back();
    }

    void ensure_host() {
        if (host) return;
        host = std::aligned_alloc(64, ((bytes + 63) / 64) * 64 + 64);
        if (!host) throw Error("out of host memory allocating " + std::to_string(bytes) + " bytes");
        host_owned = true;
    }

    void set_only(uint64_t bit) { valid = (bit & alias_bits) ? alias_bits : bit; }
    void add(uint64_t bit) { valid |= (bit & alias_bits) ? alias_bits : bit; }

    void wait_pending_upload() {
        if (pending_upload) {
            pending_upload->sync();
            pending_upload = nullptr;
        }
    }

    // Brings the host copy up to date from whichever device holds the current data.
    void pull_to_host(bool explicit_transfer) {
        if (valid & kHostBit) {
            if (alias_bits) copies_alias_dev()->sync();  // device work may still write it
            return;
        }
        for (Copy& c : copies) {
            if (!(valid & c.dev->location_bit())) continue;
            ensure_host();
            if (!explicit_transfer && StrictTransfers::active())
                throw Error("strict transfer mode: implicit device->host copy of " + std::to_string(bytes) +
                            " bytes from " + c.dev->name());
            Backend& b = c.dev->backend();
            b.check(b.api().copy_d2h(b.framework(), c.dev->stream(), host, c.buffer, 0, bytes), "device->host copy");
            c.dev->sync();
            record_transfer(false, bytes);
            add(kHostBit);
            return;
        }
        ensure_host();  // never written: contents are undefined, nothing to copy
    }

    Device* copies_alias_dev() {
        for (Copy& c : copies)
            if (c.dev->location_bit() & alias_bits) return c.dev.get();
        return nullptr;
    }

    // Makes `dev`'s copy current (copying host->device, via the host if needed).
    // Returns that copy's buffer.
    xylem_buffer_t push_to(Device& dev, bool explicit_transfer) {
        Copy& c = ensure(dev);
        uint64_t bit = dev.location_bit();
        if (valid & bit) return c.buffer;
        if (valid == 0) return c.buffer;  // never written
        pull_to_host(explicit_transfer);
        if (valid & bit) return c.buffer;  // the host copy is this device's buffer
        if (!explicit_transfer && StrictTransfers::active())
            throw Error("strict transfer mode: implicit host->device copy of " + std::to_string(bytes) + " bytes to " +
                        dev.name());
        Backend& b = dev.backend();
        b.check(b.api().copy_h2d(b.framework(), dev.stream(), c.buffer, 0, host, bytes), "host->device copy");
        pending_upload = &dev;
        record_transfer(true, bytes);
        add(bit);
        return c.buffer;
    }
};

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

xylem_tensor_arg Tensor::arg(xylem_buffer_t buffer) const {
    xylem_tensor_arg a{};
    a.buffer = buffer;
    a.offset = 0;
    a.dtype = static_cast<uint32_t>(dtype_);
    if (shape_.size() > XYLEM_MAX_DIMS) throw Error("tensor rank " + std::to_string(shape_.size()) + " exceeds 8");
    a.ndim = static_cast<uint32_t>(shape_.size());
    for (size_t i = 0; i < shape_.size(); ++i) a.dims[i] = shape_[i];
    return a;
}

xylem_tensor_arg Tensor::read(Device& dev) const {
    if (!storage_) throw Error("read of an undefined tensor");
    return arg(storage_->push_to(dev, false));
}

xylem_tensor_arg Tensor::write(Device& dev) {
    if (!storage_) throw Error("write to an undefined tensor");
    xylem_tensor_arg a = arg(storage_->ensure(dev).buffer);
    storage_->set_only(dev.location_bit());
    return a;
}

xylem_tensor_arg Tensor::read_write(Device& dev) {
    xylem_tensor_arg a = read(dev);
    storage_->set_only(dev.location_bit());
    return a;
}

void Tensor::upload(Device& dev) const {
    if (!storage_) throw Error("upload of an undefined tensor");
    storage_->push_to(dev, true);
}

void* Tensor::host_access(Access access) const {
    if (!storage_) throw Error("host access to an undefined tensor");
    Storage& s = *storage_;
    if (access == Access::Write) {
        s.wait_pending_upload();
        if (s.alias_bits) s.copies_alias_dev()->sync();
        s.ensure_host();
        s.set_only(kHostBit);
        return s.host;
    }
    s.pull_to_host(false);
    if (access == Access::ReadWrite) {
        s.wait_pending_upload();
        s.set_only(kHostBit);
    }
    return s.host;
}

std::vector<float> Tensor::to_vector() const {
    storage_->pull_to_host(true);
    std::vector<float> out(static_cast<size_t>(numel()));
    if (dtype_ == DType::F32) {
        std::memcpy(out.data(), storage_->host, bytes());
    } else {
        const int32_t* p = static_cast<const int32_t*>(storage_->host);
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
    std::memcpy(t.host_write<float>(), values.data(), t.bytes());
    return t;
}

Tensor tensor_from_i32(const std::vector<int32_t>& values, Shape shape) {
    Tensor t(std::move(shape), DType::I32);
    if (static_cast<int64_t>(values.size()) != t.numel())
        throw Error("tensor_from_i32: " + std::to_string(values.size()) + " values for shape " + to_string(t.shape()));
    std::memcpy(t.host_write<int32_t>(), values.data(), t.bytes());
    return t;
}

}  // namespace xylem
