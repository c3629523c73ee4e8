// Test plugin "fake_discrete": memory the core cannot address (like a GPU's), so tests see and
// count real host<->device copies, and a real ABI 1.2 capture: work enqueued while capturing is
// recorded (descriptors deep-copied) and replayed by graph_launch. The arithmetic is borrowed
// from the native plugin (XYLEM_FAKE_NATIVE_PLUGIN): buffers are native buffers whose host
// addresses this plugin never reveals, so results are native's, bit for bit. It reports 1 GiB of
// memory, which the core holds tensors to.
#include <dlfcn.h>

#include <cstdio>
#include <cstring>
#include <mutex>
#include <new>
#include <vector>

#include "xylem/plugin_api.h"

namespace {

const xylem_plugin* g_native = nullptr;  // the native plugin's table
xylem_framework_t g_native_fw = nullptr;
char g_load_error[400] = "";
thread_local char t_error[512] = "no error";
thread_local bool t_error_is_native = false;

xylem_status fail(xylem_status st, const char* msg) {
    std::snprintf(t_error, sizeof t_error, "fake_discrete: %s", msg);
    t_error_is_native = false;
    return st;
}
// A status from the native plugin: its message becomes ours.
xylem_status from_native(xylem_status st) {
    if (st != XYLEM_OK) t_error_is_native = true;
    return st;
}

bool load_native() {
    static std::once_flag once;
    std::call_once(once, [] {
        void* lib = dlopen(XYLEM_FAKE_NATIVE_PLUGIN, RTLD_NOW | RTLD_LOCAL);  // never closed
        auto entry = lib ? reinterpret_cast<xylem_plugin_entry_fn>(dlsym(lib, XYLEM_PLUGIN_ENTRY_NAME)) : nullptr;
        if (!entry) {
            std::snprintf(g_load_error, sizeof g_load_error, "cannot load %s: %s", XYLEM_FAKE_NATIVE_PLUGIN, dlerror());
            return;
        }
        const xylem_plugin* api = entry();
        if (api->framework_get(&g_native_fw) != XYLEM_OK) {
            std::snprintf(g_load_error, sizeof g_load_error, "native framework: %s", api->last_error());
            return;
        }
        g_native = api;
    });
    return g_native != nullptr;
}

// One recorded piece of stream work; pointers inside the caller's descriptor are deep-copied.
struct Item {
    enum Kind { Op, H2D, D2H };
    explicit Item(Kind k) : kind(k) {}
    Kind kind;
    uint32_t op = 0;
    std::vector<xylem_tensor_arg> inputs, outputs;
    std::vector<unsigned char> attrs;
    xylem_buffer_t buffer = nullptr;
    uint64_t offset = 0, bytes = 0;
    const void* src = nullptr;  // h2d: read at every launch (a staging area)
    void* dst = nullptr;        // d2h: written at every launch
};
struct Graph {
    std::vector<Item> items;
};
struct Stream {
    xylem_stream_t native;
    Graph* recording = nullptr;  // non-null between capture_begin and capture_end
};
Stream* as_stream(xylem_stream_t s) { return reinterpret_cast<Stream*>(s); }

void probe(xylem_probe_info* out) {
    std::memset(out, 0, sizeof *out);
    if (!load_native()) {
        std::snprintf(out->reason, sizeof out->reason, "%s", g_load_error);
        return;
    }
    out->available = 1;
    out->device_count = 1;
    std::strcpy(out->devices[0].name, "fake discrete device");
    out->devices[0].memory_bytes = uint64_t{1} << 30;  // a small GPU: the core enforces it (Device::alloc)
}
xylem_status framework_get(xylem_framework_t* out) {
    if (!load_native()) return fail(XYLEM_E_UNAVAILABLE, g_load_error);
    *out = g_native_fw;  // the native framework; only this plugin ever hands it to native calls
    return XYLEM_OK;
}
const char* last_error() { return t_error_is_native && g_native ? g_native->last_error() : t_error; }
xylem_status buffer_alloc(xylem_framework_t fw, uint32_t dev, uint64_t bytes, xylem_buffer_t* out) {
    return from_native(g_native->buffer_alloc(fw, dev, bytes, out));
}
void buffer_free(xylem_framework_t fw, xylem_buffer_t buf) { g_native->buffer_free(fw, buf); }
xylem_status stream_create(xylem_framework_t fw, uint32_t dev, xylem_stream_t* out) {
    auto* s = new (std::nothrow) Stream{};
    if (!s) return fail(XYLEM_E_NO_MEMORY, "out of memory creating a stream");
    if (xylem_status st = g_native->stream_create(fw, dev, &s->native); st != XYLEM_OK) {
        delete s;
        return from_native(st);
    }
    *out = reinterpret_cast<xylem_stream_t>(s);
    return XYLEM_OK;
}
void stream_destroy(xylem_framework_t fw, xylem_stream_t s) {
    g_native->stream_destroy(fw, as_stream(s)->native);
    delete as_stream(s)->recording;
    delete as_stream(s);
}
xylem_status stream_sync(xylem_framework_t fw, xylem_stream_t s) {
    if (as_stream(s)->recording) return fail(XYLEM_E_INVALID, "stream_sync while capturing");
    return from_native(g_native->stream_sync(fw, as_stream(s)->native));
}

xylem_status run_h2d(xylem_framework_t fw, Stream& s, xylem_buffer_t dst, uint64_t off, const void* src, uint64_t n) {
    return from_native(g_native->copy_h2d(fw, s.native, dst, off, src, n));
}
xylem_status run_d2h(xylem_framework_t fw, Stream& s, void* dst, xylem_buffer_t src, uint64_t off, uint64_t n) {
    return from_native(g_native->copy_d2h(fw, s.native, dst, src, off, n));
}
xylem_status copy_h2d(xylem_framework_t fw, xylem_stream_t st, xylem_buffer_t dst, uint64_t off, const void* src,
                      uint64_t n) {
    Stream& s = *as_stream(st);
    if (!s.recording) return run_h2d(fw, s, dst, off, src, n);
    Item it(Item::H2D);
    it.buffer = dst, it.offset = off, it.src = src, it.bytes = n;
    s.recording->items.push_back(std::move(it));
    return XYLEM_OK;
}
xylem_status copy_d2h(xylem_framework_t fw, xylem_stream_t st, void* dst, xylem_buffer_t src, uint64_t off,
                      uint64_t n) {
    Stream& s = *as_stream(st);
    if (!s.recording) return run_d2h(fw, s, dst, src, off, n);
    Item it(Item::D2H);
    it.buffer = src, it.offset = off, it.dst = dst, it.bytes = n;
    s.recording->items.push_back(std::move(it));
    return XYLEM_OK;
}

// The dense-network ops: everything native runs except the convolution family, so tests also
// meet an op this backend lacks.
int32_t op_supported(xylem_framework_t fw, uint32_t op) {
    const bool conv_family = op >= XYLEM_OP_CONV2D_FWD && op <= XYLEM_OP_BATCHNORM_BWD;
    return !conv_family && g_native->op_supported(fw, op);
}
xylem_status op_run(xylem_framework_t fw, xylem_stream_t st, const xylem_op_desc* d) {
    if (!op_supported(fw, d->op)) return fail(XYLEM_E_UNSUPPORTED, "op not supported");
    Stream& s = *as_stream(st);
    if (!s.recording) return from_native(g_native->op_run(fw, s.native, d));
    if ((d->n_inputs && !d->inputs) || (d->n_outputs && !d->outputs) || (d->attrs_size && !d->attrs))
        return fail(XYLEM_E_INVALID, "op descriptor with a NULL array");
    Item it(Item::Op);
    it.op = d->op;
    it.inputs.assign(d->inputs, d->inputs + d->n_inputs);
    it.outputs.assign(d->outputs, d->outputs + d->n_outputs);
    const auto* a = static_cast<const unsigned char*>(d->attrs);
    it.attrs.assign(a, a + d->attrs_size);
    s.recording->items.push_back(std::move(it));
    return XYLEM_OK;
}

// ABI 1.7: declines attention with a head size above 16, as a plugin whose kernel has variants for
// small heads only would: the core must compose those shapes itself (tests/core/attention_fallback_test.cpp).
int32_t op_accepts(xylem_framework_t fw, const xylem_op_desc* d) {
    if (!op_supported(fw, d->op)) return 0;
    if ((d->op == XYLEM_OP_ATTENTION_FWD || d->op == XYLEM_OP_ATTENTION_BWD) && d->n_inputs >= 2) {
        const xylem_tensor_arg& q = d->inputs[1 - (d->op == XYLEM_OP_ATTENTION_FWD)];  // bwd: dO first
        if (q.ndim == 4 && q.dims[3] > 16) return 0;
    }
    return 1;
}

xylem_status capture_begin(xylem_framework_t, xylem_stream_t st) {
    Stream& s = *as_stream(st);
    if (s.recording) return fail(XYLEM_E_INVALID, "capture_begin while already capturing");
    s.recording = new (std::nothrow) Graph;
    return s.recording ? XYLEM_OK : fail(XYLEM_E_NO_MEMORY, "out of memory starting a capture");
}
xylem_status capture_end(xylem_framework_t, xylem_stream_t st, xylem_graph_t* out) {
    Stream& s = *as_stream(st);
    if (!s.recording) return fail(XYLEM_E_INVALID, "capture_end without capture_begin");
    *out = reinterpret_cast<xylem_graph_t>(s.recording);
    s.recording = nullptr;
    return XYLEM_OK;
}
xylem_status graph_launch(xylem_framework_t fw, xylem_stream_t st, xylem_graph_t g) {
    Stream& s = *as_stream(st);
    if (s.recording) return fail(XYLEM_E_INVALID, "graph_launch while capturing");
    for (const Item& it : reinterpret_cast<const Graph*>(g)->items) {
        xylem_status r = XYLEM_OK;
        if (it.kind == Item::H2D) {
            r = run_h2d(fw, s, it.buffer, it.offset, it.src, it.bytes);
        } else if (it.kind == Item::D2H) {
            r = run_d2h(fw, s, it.dst, it.buffer, it.offset, it.bytes);
        } else {
            const xylem_op_desc d{it.op, static_cast<uint32_t>(it.inputs.size()), static_cast<uint32_t>(it.outputs.size()),
                                  static_cast<uint32_t>(it.attrs.size()), it.inputs.data(), it.outputs.data(),
                                  it.attrs.empty() ? nullptr : it.attrs.data()};
            r = from_native(g_native->op_run(fw, s.native, &d));
        }
        if (r != XYLEM_OK) return r;
    }
    return XYLEM_OK;
}
void graph_destroy(xylem_framework_t, xylem_graph_t g) { delete reinterpret_cast<Graph*>(g); }

const xylem_plugin kTable = {
    XYLEM_ABI_MAJOR, XYLEM_ABI_MINOR, sizeof(xylem_plugin), 0, "fake_discrete", "0.0.3", probe, framework_get,
    last_error, buffer_alloc, buffer_free, nullptr, stream_create, stream_destroy, stream_sync, copy_h2d, copy_d2h,
    op_supported, op_run, capture_begin, capture_end, graph_launch, graph_destroy, nullptr /* device_kinds */,
    nullptr, nullptr, nullptr, nullptr /* ABI 1.6 collectives: reduced through host memory */, op_accepts};

}  // namespace

XYLEM_PLUGIN_EXPORT const xylem_plugin* xylem_plugin_entry(void) { return &kTable; }
