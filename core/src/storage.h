// Tensor::Storage (core internal): one buffer per device that has held the data, a bitmask of
// current copies, and the lazy copies between them. Shared by tensor.cpp and graph.cpp.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <memory>
#include <vector>

#include "xylem/error.h"
#include "xylem/tensor.h"
#include "xylem/transfer.h"

namespace xylem {

constexpr uint64_t kHostBit = 1;

// What an open capture (Graph::capture) touched: the storages it pins and whose residency a
// launch replays, and the copies it recorded (counted again at every launch).
struct CaptureLog {
    struct Use {
        std::shared_ptr<Tensor::Storage> storage;
        bool read_first = false;  // read before any write: must be current on the device at launch
        bool written = false;     // only the device copy is current after a launch
    };
    struct Copy {
        bool to_device;
        uint64_t bytes;
    };
    std::vector<Use> uses;
    std::vector<Copy> copies;

    void note(const std::shared_ptr<Tensor::Storage>& s, bool read, bool write) {
        for (Use& u : uses)
            if (u.storage == s) {
                u.written = u.written || write;
                return;
            }
        uses.push_back({s, read, write});
    }
};

// Counts a copy now, or, while `dev` is capturing, once per launch of the graph.
inline void count_transfer(const Device& dev, bool to_device, uint64_t bytes) {
    if (CaptureLog* log = dev.capture_log()) log->copies.push_back({to_device, bytes});
    else record_transfer(to_device, bytes);
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
        // An asynchronous upload may still be reading `host` (a temporary uploaded and dropped
        // at once): wait for it before freeing. The device is alive: `copies` holds it.
        // A failure it reports is the next sync's to throw.
        if (pending_upload && host_owned) pending_upload->sync_quietly();
        for (Copy& c : copies) c.dev->free(c.buffer, bytes);
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

    Device* copies_alias_dev() {
        for (Copy& c : copies)
            if (c.dev->location_bit() & alias_bits) return c.dev.get();
        return nullptr;
    }

    // The host is about to read the data: a fused step launches the ops it holds back, and its plan
    // keeps every value of these buffers (Device::note_host_read).
    void note_host_read() {
        for (Copy& c : copies) c.dev->note_host_read(c.buffer);
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
            c.dev->flush_deferred();  // held-back ops that write this buffer run before the copy reads it
            b.check(b.api().copy_d2h(b.framework(), c.dev->stream(), host, c.buffer, 0, bytes), "device->host copy");
            c.dev->sync();
            count_transfer(*c.dev, false, bytes);
            add(kHostBit);
            return;
        }
        ensure_host();  // never written: contents are undefined, nothing to copy
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
        dev.flush_deferred();  // held-back ops that read this buffer run before the copy overwrites it
        b.check(b.api().copy_h2d(b.framework(), dev.stream(), c.buffer, 0, host, bytes), "host->device copy");
        pending_upload = &dev;
        count_transfer(dev, true, bytes);
        add(bit);
        return c.buffer;
    }
};

}  // namespace xylem
