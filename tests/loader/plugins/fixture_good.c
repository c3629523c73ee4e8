/* A tiny but real xylem plugin in plain C for the loader tests: host memory, synchronous
 * streams, only XYLEM_OP_FILL. CMake builds it several times with FIXTURE_* definitions to
 * make the broken variants (future ABI, offline, truncated table, missing dependency). */
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "xylem/plugin_api.h"

#ifndef FIXTURE_NAME
#define FIXTURE_NAME "fixture"
#endif
#ifndef FIXTURE_ABI_MAJOR
#define FIXTURE_ABI_MAJOR XYLEM_ABI_MAJOR
#endif
#ifndef FIXTURE_ABI_MINOR
#define FIXTURE_ABI_MINOR XYLEM_ABI_MINOR
#endif
/* FIXTURE_OFFLINE: the probe finds no device. FIXTURE_SHORT_TABLE: struct_size ends before op_run.
 * FIXTURE_NEEDS_DEP: the probe calls into libxylem_fixture_dep.so. FIXTURE_WRONG_FILL: fill gets
 * the last element wrong (the conformance kit must catch it). FIXTURE_ABI_MINOR < 2: a plugin
 * built against ABI 1.1, whose table ends before the 1.2 capture members; the members past its
 * struct_size are set anyway, to functions that count calls, so a core that reads past
 * struct_size is caught (counter past_end_calls). FIXTURE_ABI_MINOR == 2: a table that ends before
 * the ABI 1.3 device_kinds member, which is set past the end the same way (and would report
 * discrete GPUs). FIXTURE_KIND0 / FIXTURE_KIND1: the current table's device_kinds reports these
 * values for devices 0 and 1; without them device_kinds is NULL (every device of unknown kind).
 * FIXTURE_ABI_MINOR < 6: the ABI 1.6 collective members lie past struct_size, set to counting
 * traps (a core that reads them would also believe this plugin reduces device buffers). */
#ifdef FIXTURE_NEEDS_DEP
int xylem_fixture_dep_answer(void);
#endif

/* Plugins that fail in their own code, for the probe-in-a-child tests (never loaded in-process):
 * FIXTURE_CRASH_IN_CONSTRUCTOR segfaults, FIXTURE_ABORT_IN_CONSTRUCTOR aborts,
 * FIXTURE_EXIT_IN_CONSTRUCTOR calls exit(3), FIXTURE_HANG_IN_CONSTRUCTOR never returns (each
 * says so on stderr first, as real code would), and FIXTURE_CRASH_IN_PROBE segfaults in probe. */
#if defined(FIXTURE_CRASH_IN_CONSTRUCTOR) || defined(FIXTURE_CRASH_IN_PROBE)
/* A store through a pointer the compiler cannot see is NULL: a real SIGSEGV, not a trap. */
static void segfault(void) {
    volatile int* volatile p = NULL;
    *p = 1;
}
#endif
#if defined(FIXTURE_CRASH_IN_CONSTRUCTOR) || defined(FIXTURE_ABORT_IN_CONSTRUCTOR) || \
    defined(FIXTURE_EXIT_IN_CONSTRUCTOR) || defined(FIXTURE_HANG_IN_CONSTRUCTOR)
#include <unistd.h>
__attribute__((constructor)) static void fail_while_loading(void) {
    printf(FIXTURE_NAME ": this line is on stdout and must not reach xylem's output\n");
    fflush(stdout);
    fprintf(stderr, FIXTURE_NAME ": failing in my constructor\n");
#if defined(FIXTURE_CRASH_IN_CONSTRUCTOR)
    segfault();
#elif defined(FIXTURE_ABORT_IN_CONSTRUCTOR)
    abort();
#elif defined(FIXTURE_EXIT_IN_CONSTRUCTOR)
    exit(3);
#else
    for (;;) pause();
#endif
}
#endif

/* FIXTURE_MARK_IN_CONSTRUCTOR: a plugin whose constructor leaves a trace, appending its name to the
 * file XYLEM_TEST_PLUGIN_MARKER names: what any plugin file's code could do once it is loaded (or
 * probed, in a child). The security tests check which files a run loads from where. */
#if defined(FIXTURE_MARK_IN_CONSTRUCTOR)
__attribute__((constructor)) static void mark_while_loading(void) {
    const char* path = getenv("XYLEM_TEST_PLUGIN_MARKER");
    if (!path) return;
    FILE* f = fopen(path, "a");
    if (!f) return;
    fprintf(f, FIXTURE_NAME " constructor ran\n");
    fclose(f);
}
#endif

#define FIXTURE_DEVICES 2u

struct xylem_framework_s {
    int devices;
};
struct xylem_stream_s {
    uint32_t device;
};
/* One allocation: this header, then the data (max_align_t keeps the data aligned). */
struct xylem_buffer_s {
    union {
        uint64_t bytes;
        max_align_t align_;
    } h;
};

static _Thread_local char g_error[256] = "no error";
static atomic_int g_frameworks_created, g_framework_get_calls, g_streams_live, g_past_end_calls;

static xylem_status fail(xylem_status status, const char* fmt, ...) {
    va_list args;
    va_start(args, fmt);
    vsnprintf(g_error, sizeof g_error, fmt, args);
    va_end(args);
    return status;
}

static const char* last_error(void) {
    return g_error;
}

/* The counters the tests read back through the probe: no extra exported symbols needed. */
static void counters(char* out, size_t size) {
    snprintf(out, size, "frameworks_created=%d framework_get_calls=%d streams_live=%d past_end_calls=%d",
             atomic_load(&g_frameworks_created), atomic_load(&g_framework_get_calls), atomic_load(&g_streams_live),
             atomic_load(&g_past_end_calls));
}

static void probe(xylem_probe_info* out) {
    if (!out) return;
    memset(out, 0, sizeof *out);
    counters(out->detail, sizeof out->detail);
#ifdef FIXTURE_CRASH_IN_PROBE
    segfault();
#endif
#ifdef FIXTURE_NEEDS_DEP
    if (xylem_fixture_dep_answer() != 42) return;
#endif
#ifdef FIXTURE_OFFLINE
    snprintf(out->reason, sizeof out->reason, "no fixture device (simulated)");
    return;
#else
    out->available = 1;
    out->device_count = FIXTURE_DEVICES;
    for (uint32_t i = 0; i < FIXTURE_DEVICES; ++i) {
        snprintf(out->devices[i].name, sizeof out->devices[i].name, "fixture device %u", i);
        counters(out->devices[i].detail, sizeof out->devices[i].detail);
        out->devices[i].memory_bytes = 1u << 20;
        out->devices[i].compute_units = 1;
    }
#endif
}

#ifndef FIXTURE_OFFLINE
/* The one framework instance; pthread_once creates it once even when threads race on first use. */
static struct xylem_framework_s g_framework;
static pthread_once_t g_framework_once = PTHREAD_ONCE_INIT;

static void framework_create(void) {
    g_framework.devices = (int)FIXTURE_DEVICES;
    atomic_fetch_add(&g_frameworks_created, 1);
}
#endif

static xylem_status framework_get(xylem_framework_t* out) {
    atomic_fetch_add(&g_framework_get_calls, 1);
    if (!out) return fail(XYLEM_E_INVALID, FIXTURE_NAME ": framework_get: out is NULL");
#ifdef FIXTURE_OFFLINE
    *out = NULL;
    return fail(XYLEM_E_UNAVAILABLE, FIXTURE_NAME ": no fixture device (simulated)");
#else
    pthread_once(&g_framework_once, framework_create);
    *out = &g_framework;
    return XYLEM_OK;
#endif
}

static xylem_status buffer_alloc(xylem_framework_t fw, uint32_t device, uint64_t bytes, xylem_buffer_t* out) {
    if (!fw || !out) return fail(XYLEM_E_INVALID, FIXTURE_NAME ": buffer_alloc: NULL argument");
    *out = NULL;
    if (device >= FIXTURE_DEVICES) return fail(XYLEM_E_INVALID, FIXTURE_NAME ": buffer_alloc: no device %u", device);
    if (bytes > ((uint64_t)1 << 40)) return fail(XYLEM_E_NO_MEMORY, FIXTURE_NAME ": buffer_alloc: too large");
    struct xylem_buffer_s* b = malloc(sizeof *b + (size_t)bytes);
    if (!b) return fail(XYLEM_E_NO_MEMORY, FIXTURE_NAME ": buffer_alloc: out of memory");
    b->h.bytes = bytes;
    *out = b;
    return XYLEM_OK;
}

static void buffer_free(xylem_framework_t fw, xylem_buffer_t buffer) {
    (void)fw;
    free(buffer);
}

static void* buffer_host_ptr(xylem_framework_t fw, xylem_buffer_t buffer) {
    (void)fw;
    return buffer ? (void*)(buffer + 1) : NULL;
}

static xylem_status stream_create(xylem_framework_t fw, uint32_t device, xylem_stream_t* out) {
    if (!fw || !out) return fail(XYLEM_E_INVALID, FIXTURE_NAME ": stream_create: NULL argument");
    *out = NULL;
    if (device >= FIXTURE_DEVICES) return fail(XYLEM_E_INVALID, FIXTURE_NAME ": stream_create: no device %u", device);
    struct xylem_stream_s* s = malloc(sizeof *s);
    if (!s) return fail(XYLEM_E_NO_MEMORY, FIXTURE_NAME ": stream_create: out of memory");
    s->device = device;
    atomic_fetch_add(&g_streams_live, 1);
    *out = s;
    return XYLEM_OK;
}

static void stream_destroy(xylem_framework_t fw, xylem_stream_t stream) {
    (void)fw;
    if (!stream) return;
    atomic_fetch_sub(&g_streams_live, 1);
    free(stream);
}

/* Every call below finishes before it returns, so there is nothing to wait for. */
static xylem_status stream_sync(xylem_framework_t fw, xylem_stream_t stream) {
    (void)fw;
    (void)stream;
    return XYLEM_OK;
}

static int in_range(xylem_buffer_t b, uint64_t offset, uint64_t bytes) {
    return offset <= b->h.bytes && bytes <= b->h.bytes - offset;
}

static xylem_status copy_h2d(xylem_framework_t fw, xylem_stream_t s, xylem_buffer_t dst, uint64_t dst_offset,
                             const void* src, uint64_t bytes) {
    (void)fw;
    (void)s;
    if (!dst || (!src && bytes) || !in_range(dst, dst_offset, bytes))
        return fail(XYLEM_E_INVALID, FIXTURE_NAME ": copy_h2d: bad buffer, source or range");
    if (bytes) memcpy((char*)(dst + 1) + dst_offset, src, (size_t)bytes);
    return XYLEM_OK;
}

static xylem_status copy_d2h(xylem_framework_t fw, xylem_stream_t s, void* dst, xylem_buffer_t src, uint64_t src_offset,
                             uint64_t bytes) {
    (void)fw;
    (void)s;
    if (!src || (!dst && bytes) || !in_range(src, src_offset, bytes))
        return fail(XYLEM_E_INVALID, FIXTURE_NAME ": copy_d2h: bad buffer, destination or range");
    if (bytes) memcpy(dst, (const char*)(src + 1) + src_offset, (size_t)bytes);
    return XYLEM_OK;
}

static int32_t op_supported(xylem_framework_t fw, uint32_t op) {
    (void)fw;
#ifdef FIXTURE_NO_OPS /* loads and finds a device but implements nothing: the kit must fail it */
    (void)op;
    return 0;
#else
    return op == XYLEM_OP_FILL;
#endif
}

static xylem_status op_run(xylem_framework_t fw, xylem_stream_t s, const xylem_op_desc* d) {
    (void)fw;
    if (!s || !d) return fail(XYLEM_E_INVALID, FIXTURE_NAME ": op_run: NULL stream or descriptor");
    if (d->op != XYLEM_OP_FILL)
        return fail(XYLEM_E_UNSUPPORTED, FIXTURE_NAME ": op %u is not supported (only fill)", d->op);
    if (d->n_inputs != 0 || d->n_outputs != 1 || !d->outputs || !d->attrs || d->attrs_size < sizeof(xylem_fill_attrs))
        return fail(XYLEM_E_INVALID, FIXTURE_NAME ": fill: expects one output and xylem_fill_attrs");
    const xylem_tensor_arg* out = &d->outputs[0];
    if (out->dtype != XYLEM_F32 || !out->buffer || out->ndim > XYLEM_MAX_DIMS)
        return fail(XYLEM_E_INVALID, FIXTURE_NAME ": fill: output must be a f32 tensor");
    uint64_t n = 1;
    for (uint32_t i = 0; i < out->ndim; ++i) n *= (uint64_t)out->dims[i];
    if (out->offset > UINT64_MAX / 4 || n > UINT64_MAX / 4 || !in_range(out->buffer, out->offset * 4, n * 4))
        return fail(XYLEM_E_INVALID, FIXTURE_NAME ": fill: output lies outside its buffer");
    xylem_fill_attrs a;
    memcpy(&a, d->attrs, sizeof a);
    float* p = (float*)(out->buffer + 1) + out->offset;
    for (uint64_t i = 0; i < n; ++i) p[i] = a.value;
#ifdef FIXTURE_WRONG_FILL
    if (n > 1) p[n - 1] = a.value + 0.5f;
#endif
    return XYLEM_OK;
}

#if FIXTURE_ABI_MINOR < 3
/* Stand-in for the ABI 1.3 member, placed past this table's struct_size: never to be called. */
static void past_end_device_kinds(uint32_t* kinds, uint32_t count) {
    atomic_fetch_add(&g_past_end_calls, 1);
    for (uint32_t i = 0; i < count; ++i) kinds[i] = XYLEM_DEVICE_DISCRETE_GPU;
}
#elif defined(FIXTURE_KIND0)
static void device_kinds(uint32_t* kinds, uint32_t count) {
    const uint32_t mine[FIXTURE_DEVICES] = {FIXTURE_KIND0, FIXTURE_KIND1};
    for (uint32_t i = 0; i < count && i < FIXTURE_DEVICES; ++i) kinds[i] = mine[i];
}
#endif

#if FIXTURE_ABI_MINOR < 2
/* Stand-ins for the ABI 1.2 members, placed past this table's struct_size: never to be called. */
static xylem_status past_end_stream_call(xylem_framework_t fw, xylem_stream_t s) {
    (void)fw;
    (void)s;
    atomic_fetch_add(&g_past_end_calls, 1);
    return fail(XYLEM_E_UNSUPPORTED, FIXTURE_NAME ": the core called a member past struct_size");
}
static xylem_status past_end_capture_end(xylem_framework_t fw, xylem_stream_t s, xylem_graph_t* out) {
    (void)out;
    return past_end_stream_call(fw, s);
}
static xylem_status past_end_launch(xylem_framework_t fw, xylem_stream_t s, xylem_graph_t g) {
    (void)g;
    return past_end_stream_call(fw, s);
}
static void past_end_destroy(xylem_framework_t fw, xylem_graph_t g) {
    (void)fw;
    (void)g;
    atomic_fetch_add(&g_past_end_calls, 1);
}
#endif

#if FIXTURE_ABI_MINOR < 6
/* Stand-ins for the ABI 1.6 members, placed past this table's struct_size: never to be called. */
static xylem_status past_end_comm_unique_id(xylem_framework_t fw, void* id, uint32_t capacity, uint32_t* size) {
    (void)fw, (void)id, (void)capacity, (void)size;
    atomic_fetch_add(&g_past_end_calls, 1);
    return fail(XYLEM_E_UNSUPPORTED, FIXTURE_NAME ": the core called a member past struct_size");
}
static xylem_status past_end_comm_init(xylem_framework_t fw, uint32_t device, const void* id, uint32_t id_size,
                                       int32_t rank, int32_t size) {
    (void)device, (void)id_size, (void)rank, (void)size;
    return past_end_comm_unique_id(fw, (void*)id, 0, NULL);
}
static xylem_status past_end_comm_allreduce(xylem_framework_t fw, xylem_stream_t s, const xylem_tensor_arg* data,
                                            float scale) {
    (void)s, (void)data, (void)scale;
    return past_end_comm_unique_id(fw, NULL, 0, NULL);
}
static void past_end_comm_destroy(xylem_framework_t fw) {
    (void)fw;
    atomic_fetch_add(&g_past_end_calls, 1);
}
#endif

#if FIXTURE_ABI_MINOR < 7
/* Stand-in for the ABI 1.7 member, past this table's struct_size: never to be called (a call would
 * decline every descriptor, which the core would take for "compose it"). */
static int32_t past_end_op_accepts(xylem_framework_t fw, const xylem_op_desc* desc) {
    (void)fw, (void)desc;
    atomic_fetch_add(&g_past_end_calls, 1);
    return 0;
}
#endif

XYLEM_PLUGIN_EXPORT const xylem_plugin* xylem_plugin_entry(void) {
    static const xylem_plugin table = {
        FIXTURE_ABI_MAJOR,
        FIXTURE_ABI_MINOR,
#ifdef FIXTURE_SHORT_TABLE
        /* A plugin built against a table that ended before op_run; the member is still set here,
         * so only the struct_size check can reject it. */
        offsetof(xylem_plugin, op_run),
#elif FIXTURE_ABI_MINOR < 2
        offsetof(xylem_plugin, capture_begin), /* sizeof(xylem_plugin) in the ABI 1.1 header */
#elif FIXTURE_ABI_MINOR < 3
        offsetof(xylem_plugin, device_kinds), /* sizeof(xylem_plugin) in the ABI 1.2 header */
#elif FIXTURE_ABI_MINOR < 6
        offsetof(xylem_plugin, comm_unique_id), /* sizeof(xylem_plugin) in the ABI 1.3 to 1.5 headers */
#elif FIXTURE_ABI_MINOR < 7
        offsetof(xylem_plugin, op_accepts), /* sizeof(xylem_plugin) in the ABI 1.6 header */
#else
        sizeof(xylem_plugin),
#endif
        XYLEM_PLUGIN_HOST_MEMORY,
        FIXTURE_NAME,
        "0.0.1-test",
        probe,
        framework_get,
        last_error,
        buffer_alloc,
        buffer_free,
        buffer_host_ptr,
        stream_create,
        stream_destroy,
        stream_sync,
        copy_h2d,
        copy_d2h,
        op_supported,
        op_run,
#if FIXTURE_ABI_MINOR < 2
        past_end_stream_call,
        past_end_capture_end,
        past_end_launch,
        past_end_destroy,
#else
        NULL, /* capture_begin: this fixture runs eagerly only */
        NULL,
        NULL,
        NULL,
#endif
#if FIXTURE_ABI_MINOR < 3
        past_end_device_kinds,
#elif defined(FIXTURE_KIND0)
        device_kinds,
#else
        NULL, /* device_kinds: every device of unknown kind */
#endif
#if FIXTURE_ABI_MINOR < 6
        past_end_comm_unique_id,
        past_end_comm_init,
        past_end_comm_allreduce,
        past_end_comm_destroy,
#else
        NULL, /* comm_*: no device collectives (a data-parallel run reduces through host memory) */
        NULL,
        NULL,
        NULL,
#endif
#if FIXTURE_ABI_MINOR < 7
        past_end_op_accepts,
#else
        NULL, /* op_accepts: every descriptor of a supported op */
#endif
    };
    return &table;
}
