// Test plugin "fake_discrete": memory the core cannot address (like a GPU's), with FILL, COPY
// and AXPBY, so tests can count the copies the residency tracking makes.
#include <cstdlib>
#include <cstring>
#include <new>

#include "xylem/plugin_api.h"

namespace {

struct Buffer {
    float* data;
    uint64_t bytes;
};
struct Framework {
    int dummy;
};
Framework g_framework;
thread_local const char* t_error = "";

float* at(const xylem_tensor_arg& a) { return reinterpret_cast<Buffer*>(a.buffer)->data + a.offset; }
uint64_t count(const xylem_tensor_arg& a) {
    uint64_t n = 1;
    for (uint32_t i = 0; i < a.ndim; ++i) n *= static_cast<uint64_t>(a.dims[i]);
    return n;
}

void probe(xylem_probe_info* out) {
    std::memset(out, 0, sizeof *out);
    out->available = 1;
    out->device_count = 1;
    std::strcpy(out->devices[0].name, "fake discrete device");
}
xylem_status framework_get(xylem_framework_t* out) {
    *out = reinterpret_cast<xylem_framework_t>(&g_framework);
    return XYLEM_OK;
}
const char* last_error() { return t_error; }
xylem_status buffer_alloc(xylem_framework_t, uint32_t, uint64_t bytes, xylem_buffer_t* out) {
    auto* b = new (std::nothrow) Buffer{static_cast<float*>(std::calloc(bytes / 4 + 1, 4)), bytes};
    if (!b || !b->data) return XYLEM_E_NO_MEMORY;
    *out = reinterpret_cast<xylem_buffer_t>(b);
    return XYLEM_OK;
}
void buffer_free(xylem_framework_t, xylem_buffer_t buf) {
    auto* b = reinterpret_cast<Buffer*>(buf);
    std::free(b->data);
    delete b;
}
xylem_status stream_create(xylem_framework_t, uint32_t, xylem_stream_t* out) {
    *out = reinterpret_cast<xylem_stream_t>(new int(0));
    return XYLEM_OK;
}
void stream_destroy(xylem_framework_t, xylem_stream_t s) { delete reinterpret_cast<int*>(s); }
xylem_status stream_sync(xylem_framework_t, xylem_stream_t) { return XYLEM_OK; }
xylem_status copy_h2d(xylem_framework_t, xylem_stream_t, xylem_buffer_t dst, uint64_t off, const void* src, uint64_t n) {
    std::memcpy(reinterpret_cast<char*>(reinterpret_cast<Buffer*>(dst)->data) + off, src, n);
    return XYLEM_OK;
}
xylem_status copy_d2h(xylem_framework_t, xylem_stream_t, void* dst, xylem_buffer_t src, uint64_t off, uint64_t n) {
    std::memcpy(dst, reinterpret_cast<char*>(reinterpret_cast<Buffer*>(src)->data) + off, n);
    return XYLEM_OK;
}
int32_t op_supported(xylem_framework_t, uint32_t op) {
    return op == XYLEM_OP_FILL || op == XYLEM_OP_COPY || op == XYLEM_OP_AXPBY;
}
xylem_status op_run(xylem_framework_t, xylem_stream_t, const xylem_op_desc* d) {
    const xylem_tensor_arg& out = d->outputs[0];
    float* y = at(out);
    const uint64_t n = count(out);
    switch (d->op) {
        case XYLEM_OP_FILL: {
            const float v = static_cast<const xylem_fill_attrs*>(d->attrs)->value;
            for (uint64_t i = 0; i < n; ++i) y[i] = v;
            return XYLEM_OK;
        }
        case XYLEM_OP_COPY:
            std::memcpy(y, at(d->inputs[0]), n * 4);
            return XYLEM_OK;
        case XYLEM_OP_AXPBY: {
            const auto* a = static_cast<const xylem_axpby_attrs*>(d->attrs);
            const float* x = at(d->inputs[0]);
            const float* b = d->n_inputs > 1 ? at(d->inputs[1]) : y;
            for (uint64_t i = 0; i < n; ++i) y[i] = a->alpha * x[i] + a->beta * b[i];
            return XYLEM_OK;
        }
        default:
            t_error = "fake_discrete: op not supported";
            return XYLEM_E_UNSUPPORTED;
    }
}

const xylem_plugin kTable = {
    XYLEM_ABI_MAJOR, XYLEM_ABI_MINOR, sizeof(xylem_plugin), 0, "fake_discrete", "0.0.1", probe, framework_get,
    last_error, buffer_alloc, buffer_free, nullptr, stream_create, stream_destroy, stream_sync, copy_h2d, copy_d2h,
    op_supported, op_run, nullptr, nullptr, nullptr, nullptr};

}  // namespace

XYLEM_PLUGIN_EXPORT const xylem_plugin* xylem_plugin_entry(void) { return &kTable; }
