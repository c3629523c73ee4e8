// Backend and Device: the core's side of the plugin tables.
#include "xylem/backend.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <utility>

#include "fusion_internal.h"
#include "xylem/error.h"
#include "xylem/memory.h"
#include "xylem/profiler.h"

namespace xylem {

Backend::Backend(const xylem_plugin* api, std::string path)
    : api_(api), name_(api->name ? api->name : "?"), path_(std::move(path)) {}

void Backend::record_probe(const xylem_probe_info& info, const std::vector<uint32_t>& kinds) {
    std::lock_guard lock(probed_mutex_);
    probed_.assign(std::min<uint32_t>(info.device_count, XYLEM_MAX_PROBE_DEVICES), ProbedDevice{});
    for (size_t d = 0; d < probed_.size(); ++d)
        probed_[d] = {info.devices[d].memory_bytes, d < kinds.size() ? kinds[d] : uint32_t{XYLEM_DEVICE_KIND_UNKNOWN}};
}

Backend::ProbedDevice Backend::probed_device(uint32_t index) const {
    std::lock_guard lock(probed_mutex_);
    return index < probed_.size() ? probed_[index] : ProbedDevice{};
}

void Backend::check(xylem_status status, const char* what) const {
    if (status == XYLEM_OK) return;
    const char* msg = api_->last_error ? api_->last_error() : nullptr;
    const std::string text = msg && *msg ? msg : "error " + std::to_string(status);
    // Plugins usually say who and what themselves ("opencl: xent_fwd: label 5 ..."): do not
    // repeat it as "opencl: xent_fwd: opencl: xent_fwd: ...".
    const std::string prefix = name_ + ": ";
    if (text.rfind(prefix, 0) == 0) throw Error(text);
    throw Error(prefix + what + ": " + text);
}

xylem_framework_t Backend::framework() {
    // call_once: the plugin is asked once even under concurrency; a failure may be retried.
    std::call_once(framework_once_, [this] { check(api_->framework_get(&framework_), "framework init"); });
    return framework_;
}

void Backend::require(uint32_t op, const std::string& who) {
    if (!supports(op))
        throw Error(who + ": op " + op_name(op) + " is not supported by backend '" + name_ + "'");
}

bool Backend::supports(uint32_t op) {
    // Asked once per op at first use; Device::run consults the cache on every op, lock-free.
    std::call_once(supported_once_, [this] {
        xylem_framework_t fw = framework();
        for (uint32_t o = 0; o < XYLEM_OP_COUNT_; ++o) supported_[o] = api_->op_supported(fw, o) != 0;
    });
    return op < XYLEM_OP_COUNT_ && supported_[op];
}

bool Backend::accepts(const xylem_op_desc& desc) {
    if (!supports(desc.op)) return false;
    if (!XYLEM_TABLE_HAS(api_, op_accepts)) return true;
    return api_->op_accepts(framework(), &desc) != 0;
}

std::shared_ptr<Device> Backend::device(uint32_t index) {
    framework();
    std::lock_guard lock(mutex_);
    if (devices_.size() <= index) devices_.resize(index + 1);
    if (!devices_[index]) devices_[index] = std::make_shared<Device>(shared_from_this(), index);
    return devices_[index];
}

namespace {
// Bit 0 is the host; each Device gets its own bit for the residency masks.
std::atomic<uint32_t> g_next_location{1};
}  // namespace

Device::Device(std::shared_ptr<Backend> backend, uint32_t index) : backend_(std::move(backend)), index_(index) {
    uint32_t loc = g_next_location.fetch_add(1);
    if (loc >= 64) throw Error("too many devices opened in one process (64 residency slots)");
    location_bit_ = uint64_t{1} << loc;
    backend_->check(backend_->api().stream_create(backend_->framework(), index_, &stream_), "stream create");
}

Device::~Device() {
    if (stream_) backend_->api().stream_destroy(backend_->framework(), stream_);
}

std::string Device::name() const { return backend_->name() + ":" + std::to_string(index_); }

void Device::run(const xylem_op_desc& desc) {
    if (fusion_) return fusion::submit(*fusion_, *this, desc);
    launch(desc);
}

void Device::launch(const xylem_op_desc& desc) {
    if (!backend_->supports(desc.op))
        throw Error(std::string("op ") + op_name(desc.op) + " is not supported by backend '" + backend_->name() + "'");
    const xylem_plugin& api = backend_->api();
    xylem_framework_t fw = backend_->framework();
    ++launches_;
    if (!profiler::enabled()) {
        xylem_status st = api.op_run(fw, stream_, &desc);
        if (st != XYLEM_OK) backend_->check(st, op_name(desc.op));
        return;
    }
    auto t0 = std::chrono::steady_clock::now();
    backend_->check(api.op_run(fw, stream_, &desc), op_name(desc.op));
    sync();
    profiler::record(desc.op, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
}

void Device::flush_deferred() {
    if (fusion_) fusion::flush(*fusion_);
}

void Device::note_host_read(xylem_buffer_t buffer) {
    if (fusion_) fusion::note_host_read(*fusion_, buffer);
}

void Device::sync() {
    if (fusion_) fusion::flush(*fusion_);  // deferred ops run before the host waits for them
    if (capture_log_)
        throw Error(name() + ": a host read or device sync inside a captured step cannot be recorded (it would run "
                             "once, at capture, not at every launch)");
    backend_->check(backend_->api().stream_sync(backend_->framework(), stream_), "stream sync");
    if (deferred_error_) std::rethrow_exception(std::exchange(deferred_error_, nullptr));
}

void Device::sync_quietly() noexcept {
    try {
        sync();
    } catch (...) {
        if (!deferred_error_) deferred_error_ = std::current_exception();
    }
}

bool Device::supports_capture() const {
    const xylem_plugin* api = &backend_->api();
    return XYLEM_TABLE_HAS(api, capture_begin) && XYLEM_TABLE_HAS(api, capture_end) &&
           XYLEM_TABLE_HAS(api, graph_launch) && XYLEM_TABLE_HAS(api, graph_destroy);
}

xylem_buffer_t Device::alloc(uint64_t bytes) {
    const Capacity& cap = capacity();
    const uint64_t before = allocated_bytes();
    if (cap.bytes && (bytes > cap.bytes || before > cap.bytes - bytes))
        throw Error("out of memory on " + name() + ": a tensor of " + bytes_text(static_cast<double>(bytes)) +
                    " would bring xylem's tensors there to " + bytes_text(static_cast<double>(before) + bytes) +
                    ", and " + cap.source + " is " + bytes_text(static_cast<double>(cap.bytes)));
    xylem_buffer_t buf = nullptr;
    backend_->check(backend_->api().buffer_alloc(backend_->framework(), index_, bytes, &buf),
                    ("allocating " + std::to_string(bytes) + " bytes on " + name()).c_str());
    allocated_.fetch_add(bytes, std::memory_order_relaxed);
    return buf;
}

void Device::free(xylem_buffer_t buffer, uint64_t bytes) noexcept {
    if (!buffer) return;
    backend_->api().buffer_free(backend_->framework(), buffer);
    allocated_.fetch_sub(bytes, std::memory_order_relaxed);
}

bool Device::on_host() const { return host_memory() || backend_->probed_device(index_).kind == XYLEM_DEVICE_CPU; }

const Device::Capacity& Device::capacity() {
    std::call_once(capacity_once_, [&] {
        capacity_ = {backend_->probed_device(index_).memory_bytes, "the device's memory"};
        // A device whose memory is the host's shares it with everything else on the machine: what
        // is available now (plus what xylem already holds there) is the limit, not the RAM size.
        if (on_host()) {
            const uint64_t available = host_available_bytes();
            if (available && (!capacity_.bytes || available + allocated_bytes() < capacity_.bytes))
                capacity_ = {available + allocated_bytes(), "the machine's available memory"};
        }
    });
    return capacity_;
}

void* Device::host_ptr(xylem_buffer_t buffer) {
    const xylem_plugin& api = backend_->api();
    if (!host_memory() || !XYLEM_TABLE_HAS(&api, buffer_host_ptr)) return nullptr;
    return api.buffer_host_ptr(backend_->framework(), buffer);
}

const char* op_name(uint32_t op) { return xylem_op_name(op); }

}  // namespace xylem
