// Backend (one loaded plugin and its single framework instance) and Device (one device of
// a backend with its stream). Layers and solvers only ever see these two types.
#pragma once

#include <atomic>
#include <bitset>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "xylem/plugin_api.h"

namespace xylem {

// True when the plugin's table is long enough to hold `member` and the member is set.
// The core never reads a table member past the plugin's struct_size.
#define XYLEM_TABLE_HAS(table, member)                                                             \
    (offsetof(xylem_plugin, member) + sizeof(((const xylem_plugin*)nullptr)->member) <=            \
         (table)->struct_size &&                                                                   \
     (table)->member != nullptr)

class Device;
namespace fusion {
struct StepState;  // a running StepFusion (xylem/fusion.h)
}
struct CaptureLog;  // what an open capture touched (core internal, core/src/storage.h)

class Backend : public std::enable_shared_from_this<Backend> {
public:
    Backend(const xylem_plugin* api, std::string path);
    Backend(const Backend&) = delete;
    Backend& operator=(const Backend&) = delete;

    const std::string& name() const { return name_; }
    const std::string& path() const { return path_; }
    const xylem_plugin& api() const { return *api_; }
    bool host_memory() const { return (api_->flags & XYLEM_PLUGIN_HOST_MEMORY) != 0; }

    // The plugin's framework instance (created by the plugin on first use, then shared).
    xylem_framework_t framework();
    bool supports(uint32_t op);
    // True when the plugin supports the descriptor's op and accepts these very shapes and attributes
    // (the ABI 1.7 op_accepts; a plugin without it accepts every descriptor of a supported op).
    bool accepts(const xylem_op_desc& desc);
    // Throws Error("<who>: op <name> is not supported by backend '<name>'") unless supported:
    // models check every op they will run at build time, before any work is done.
    void require(uint32_t op, const std::string& who);
    // Device `index`, created on first use and kept for the backend's lifetime.
    std::shared_ptr<Device> device(uint32_t index = 0);

    // Throws Error("<backend>: <what>: <plugin's message>") unless status is XYLEM_OK.
    void check(xylem_status status, const char* what) const;

    // What the registry's probe (in a child process, as a rule) reported about each device: its
    // memory and kind, for Device::capacity(). The core never probes a loaded plugin again in
    // this process (a probe may load and unload driver libraries). Unknown until recorded.
    struct ProbedDevice {
        uint64_t memory_bytes = 0;
        uint32_t kind = XYLEM_DEVICE_KIND_UNKNOWN;
    };
    void record_probe(const xylem_probe_info& info, const std::vector<uint32_t>& kinds);
    ProbedDevice probed_device(uint32_t index) const;

private:
    const xylem_plugin* api_;
    std::string name_, path_;
    std::mutex mutex_;  // guards the device list
    std::once_flag framework_once_;
    xylem_framework_t framework_ = nullptr;
    std::once_flag supported_once_;
    std::bitset<XYLEM_OP_COUNT_> supported_;
    std::vector<std::shared_ptr<Device>> devices_;
    mutable std::mutex probed_mutex_;
    std::vector<ProbedDevice> probed_;
};

class Device {
public:
    Device(std::shared_ptr<Backend> backend, uint32_t index);
    ~Device();
    Device(const Device&) = delete;
    Device& operator=(const Device&) = delete;

    Backend& backend() const { return *backend_; }
    uint32_t index() const { return index_; }
    std::string name() const;         // "native:0"
    uint64_t location_bit() const { return location_bit_; }
    bool host_memory() const { return backend_->host_memory(); }
    // A device whose memory is the host's or whose probe says it is a CPU (native, PoCL): it
    // shares the machine's memory and caches with everything else.
    bool on_host() const;
    xylem_stream_t stream() const { return stream_; }

    // Runs one op (enqueued on this device's stream); errors name the op and backend. While a
    // fusion::StepFusion runs a step on this device, the op goes through it (it may be deferred and
    // run as part of a fused program).
    void run(const xylem_op_desc& desc);
    // Runs one op on the plugin now, bypassing any step fusion (the pass's own launches).
    void launch(const xylem_op_desc& desc);
    // Ops enqueued on the device so far (every launch() counts one): launches per step.
    uint64_t launches() const { return launches_; }
    // Copies and host reads go through the stream in order with ops: ops a fused step holds back
    // are launched first. note_host_read also tells the pass the host reads `buffer`.
    void flush_deferred();
    void note_host_read(xylem_buffer_t buffer);
    // Set by fusion::StepFusion while it runs a step on this device; null otherwise.
    fusion::StepState* fusion_state() const { return fusion_; }
    void set_fusion_state(fusion::StepState* f) { fusion_ = f; }
    // Waits for the stream. Refused while capturing: a host wait cannot be recorded. Throws what
    // the stream reported, or what an earlier sync_quietly() caught.
    void sync();
    // The same where nothing may be thrown (a destructor waiting for an upload of its memory): a
    // failure the stream reports (an op's bad index found on the device) is kept and thrown by the
    // next sync(), not lost.
    void sync_quietly() noexcept;

    // True when the plugin has the ABI 1.2 capture entries (see Graph in xylem/graph.h).
    bool supports_capture() const;
    // Set by Graph::capture while it records this device's stream; null otherwise.
    CaptureLog* capture_log() const { return capture_log_; }
    void set_capture_log(CaptureLog* log) { capture_log_ = log; }

    // Buffers for tensors. alloc() refuses (Error naming both numbers) a buffer that would take
    // xylem's tensors on this device past capacity(): on a host-memory machine the kernel would
    // otherwise kill the process minutes later, when the pages are first touched.
    xylem_buffer_t alloc(uint64_t bytes);
    void free(xylem_buffer_t buffer, uint64_t bytes) noexcept;
    void* host_ptr(xylem_buffer_t buffer);
    // Bytes of tensor buffers allocated on this device now (plugin workspaces not included).
    uint64_t allocated_bytes() const { return allocated_.load(std::memory_order_relaxed); }
    // What tensors on this device may take, in bytes, and where that number comes from. The
    // device's memory as its probe reports it; on a device whose memory is the host's (a
    // host-memory backend, or a CPU device) at most what the machine had available when first
    // asked, plus what xylem had already allocated here. 0: unknown (no limit is enforced).
    struct Capacity {
        uint64_t bytes = 0;
        std::string source;  // "the device's memory", "the machine's available memory"
    };
    const Capacity& capacity();

private:
    std::shared_ptr<Backend> backend_;
    uint32_t index_;
    uint64_t location_bit_;
    xylem_stream_t stream_ = nullptr;
    CaptureLog* capture_log_ = nullptr;
    fusion::StepState* fusion_ = nullptr;
    std::exception_ptr deferred_error_;  // caught by sync_quietly(), thrown by the next sync()
    uint64_t launches_ = 0;
    std::atomic<uint64_t> allocated_{0};
    std::once_flag capacity_once_;
    Capacity capacity_;
};

const char* op_name(uint32_t op);

}  // namespace xylem
