/* xylem plugin ABI: the C tables a backend plugin exports. Nothing else crosses the boundary.
 *
 * Rules (see docs/writing-a-plugin.md):
 * - Every table starts with {abi_major, abi_minor, struct_size}. Tables only grow at the end;
 *   the core never reads a member past struct_size, and a NULL member means "not supported".
 * - The core rejects a plugin whose abi_major differs from XYLEM_ABI_MAJOR.
 * - Whoever allocates frees: buffers and streams are freed through the plugin that made them;
 *   strings returned by the plugin stay owned by the plugin.
 * - No C++ exceptions cross this boundary: calls return xylem_status, and last_error() gives
 *   the message of the calling thread's most recent failure. */
#ifndef XYLEM_PLUGIN_API_H
#define XYLEM_PLUGIN_API_H

#include <stddef.h>
#include <stdint.h>

#include "xylem/ops.h"

#ifdef __cplusplus
extern "C" {
#endif

#define XYLEM_ABI_MAJOR 1
#define XYLEM_ABI_MINOR 11

/* The one symbol a plugin exports: returns its static table (never NULL). */
#define XYLEM_PLUGIN_ENTRY_NAME "xylem_plugin_entry"
struct xylem_plugin;
typedef const struct xylem_plugin* (*xylem_plugin_entry_fn)(void);

typedef enum xylem_status {
    XYLEM_OK = 0,
    XYLEM_E_UNSUPPORTED = 1, /* op, dtype or shape the plugin does not implement */
    XYLEM_E_INVALID = 2,     /* bad arguments (shapes, counts, attrs) */
    XYLEM_E_NO_MEMORY = 3,
    XYLEM_E_DEVICE = 4,      /* the driver or library reported an error */
    XYLEM_E_UNAVAILABLE = 5  /* no usable device here */
} xylem_status;

typedef enum xylem_dtype { XYLEM_F32 = 0, XYLEM_I32 = 1 } xylem_dtype;

typedef struct xylem_framework_s* xylem_framework_t; /* the plugin's one framework instance */
typedef struct xylem_stream_s* xylem_stream_t;       /* an in-order queue on one device */
typedef struct xylem_buffer_s* xylem_buffer_t;       /* device memory */
typedef struct xylem_graph_s* xylem_graph_t;         /* recorded work of one stream, replayable (ABI 1.2) */

#define XYLEM_MAX_DIMS 8

/* One tensor operand: a dense row-major view into a buffer. */
typedef struct xylem_tensor_arg {
    xylem_buffer_t buffer;
    uint64_t offset; /* in elements from the buffer start */
    uint32_t dtype;  /* xylem_dtype */
    uint32_t ndim;
    int64_t dims[XYLEM_MAX_DIMS];
} xylem_tensor_arg;

/* An op to run: the op enum value, its operands and its attribute struct (see ops.h). */
typedef struct xylem_op_desc {
    uint32_t op;
    uint32_t n_inputs;
    uint32_t n_outputs;
    uint32_t attrs_size;
    const xylem_tensor_arg* inputs;
    const xylem_tensor_arg* outputs;
    const void* attrs;
} xylem_op_desc;

typedef struct xylem_device_info {
    char name[128];
    char detail[256];       /* free text: platform, driver, library versions */
    uint64_t memory_bytes;
    uint32_t compute_units;
} xylem_device_info;

#define XYLEM_MAX_PROBE_DEVICES 16

/* What kind of device a plugin device is (ABI 1.3, reported by device_kinds): `backend = "auto"`
 * ranks devices by it. A plugin without device_kinds has devices of kind UNKNOWN. */
typedef enum xylem_device_kind {
    XYLEM_DEVICE_KIND_UNKNOWN = 0,
    XYLEM_DEVICE_DISCRETE_GPU = 1,   /* a GPU with its own memory */
    XYLEM_DEVICE_INTEGRATED_GPU = 2, /* a GPU sharing the host's memory */
    XYLEM_DEVICE_ACCELERATOR = 3,    /* another device with its own processor (FPGA, NPU, ...) */
    XYLEM_DEVICE_CPU = 4             /* the host's processor, reached through this backend */
} xylem_device_kind;
#define XYLEM_DEVICE_KIND_COUNT_ 5

/* What probe() found. It must not call into a driver in a way that can crash. */
typedef struct xylem_probe_info {
    int32_t available;     /* 1 when at least one device can run ops */
    char reason[512];      /* why not, when available == 0 */
    char detail[512];      /* backend-wide facts, e.g. BLAS library, core type, threads */
    uint32_t device_count;
    xylem_device_info devices[XYLEM_MAX_PROBE_DEVICES];
} xylem_probe_info;

/* Plugin flags. */
#define XYLEM_PLUGIN_HOST_MEMORY 1u /* buffers live in host memory: buffer_host_ptr is valid */

typedef struct xylem_plugin {
    uint32_t abi_major;   /* XYLEM_ABI_MAJOR the plugin was built against */
    uint32_t abi_minor;   /* XYLEM_ABI_MINOR the plugin was built against */
    uint32_t struct_size; /* sizeof(xylem_plugin) the plugin was built against */
    uint32_t flags;       /* XYLEM_PLUGIN_* */
    const char* name;     /* backend name users select, e.g. "native" */
    const char* version;  /* plugin version string */

    /* Fills *out; never crashes, even with no driver installed. */
    void (*probe)(xylem_probe_info* out);
    /* Returns the plugin's single framework instance, creating it on first call. */
    xylem_status (*framework_get)(xylem_framework_t* out);
    /* Message of the calling thread's last failed call (never NULL). */
    const char* (*last_error)(void);

    xylem_status (*buffer_alloc)(xylem_framework_t, uint32_t device, uint64_t bytes, xylem_buffer_t* out);
    void (*buffer_free)(xylem_framework_t, xylem_buffer_t);
    /* (optional) host address of a buffer; only with XYLEM_PLUGIN_HOST_MEMORY. */
    void* (*buffer_host_ptr)(xylem_framework_t, xylem_buffer_t);

    xylem_status (*stream_create)(xylem_framework_t, uint32_t device, xylem_stream_t* out);
    void (*stream_destroy)(xylem_framework_t, xylem_stream_t);
    /* Blocks until everything enqueued on the stream has finished. */
    xylem_status (*stream_sync)(xylem_framework_t, xylem_stream_t);

    /* Enqueue copies; host memory must stay valid (and unread for d2h) until stream_sync. */
    xylem_status (*copy_h2d)(xylem_framework_t, xylem_stream_t, xylem_buffer_t dst, uint64_t dst_offset_bytes,
                             const void* src, uint64_t bytes);
    xylem_status (*copy_d2h)(xylem_framework_t, xylem_stream_t, void* dst, xylem_buffer_t src,
                             uint64_t src_offset_bytes, uint64_t bytes);

    /* 1 when op_run implements op (a value of xylem_op), else 0. */
    int32_t (*op_supported)(xylem_framework_t, uint32_t op);
    /* Enqueues one op on the stream. */
    xylem_status (*op_run)(xylem_framework_t, xylem_stream_t, const xylem_op_desc* desc);
    /* end of ABI 1.0 (ABI 1.1 added ops only) */

    /* ABI 1.2: whole-step capture, optional (NULL: the backend runs eagerly only).
     * Between capture_begin and capture_end, work enqueued on the stream (op_run, copy_h2d,
     * copy_d2h) is recorded, not run; capture_end returns it as a graph. graph_launch replays the
     * graph on the stream with the same buffers, offsets, attributes and host addresses: a copy
     * reads or writes its host memory at replay time, so the caller keeps those addresses valid
     * and fills them before each launch. Reading results still needs stream_sync. No
     * stream_sync may be called while capturing. graph_destroy frees a graph (NULL is a no-op). */
    xylem_status (*capture_begin)(xylem_framework_t, xylem_stream_t);
    xylem_status (*capture_end)(xylem_framework_t, xylem_stream_t, xylem_graph_t* out);
    xylem_status (*graph_launch)(xylem_framework_t, xylem_stream_t, xylem_graph_t graph);
    void (*graph_destroy)(xylem_framework_t, xylem_graph_t graph);
    /* end of ABI 1.2 */

    /* ABI 1.3: new ops (rmsprop_update, adamw_update, clamp, sum_squares, clip_by_norm), and: */
    /* (optional) Fills kinds[d] with the xylem_device_kind of device d, for d < count: the devices
     * probe() reports, in its order (the index buffer_alloc takes). Called right after probe(),
     * under the same rule: no driver call that can crash. NULL: every device is of kind UNKNOWN.
     * (A member, not a field of xylem_probe_info: plugins clear the probe struct with their own
     * sizeof, so a field appended there would be written past an older core's struct.) */
    void (*device_kinds)(uint32_t* kinds, uint32_t count);
    /* end of ABI 1.3 (ABI 1.4 added the op add only; ABI 1.5 the ops fused_elementwise, reduce and
     * scatter_add_rows) */

    /* ABI 1.6: collectives on the plugin's own device buffers, optional: all four or none (NULL:
     * a data-parallel run reduces this backend's gradients through host memory, one counted copy
     * each way). `mpirun -np N xylem train` uses them when every rank's backend has them (the CUDA
     * plugin: NCCL). One communicator per framework. The processes exchange its id themselves
     * (xylem over MPI); the core opens no connection, and a plugin needs none for the id.
     * Sequence: comm_unique_id on one rank; that id carried to every rank; comm_init on every rank
     * (a collective: it returns when all `size` ranks have joined); then comm_allreduce_sum calls,
     * in the same order with the same counts on every rank; comm_destroy at the end. */
    /* Writes a new communicator id (at most `capacity` bytes; XYLEM_COMM_ID_MAX is enough) and its
     * size in bytes to *size. */
    xylem_status (*comm_unique_id)(xylem_framework_t, void* id, uint32_t capacity, uint32_t* size);
    /* Joins the framework's communicator of `size` ranks as `rank` (0 <= rank < size), reducing
     * buffers of `device`. A second comm_init without comm_destroy is XYLEM_E_INVALID. */
    xylem_status (*comm_init)(xylem_framework_t, uint32_t device, const void* id, uint32_t id_size, int32_t rank,
                              int32_t size);
    /* Enqueues on the stream an in-place sum over the ranks of the operand `data` (f32, dense;
     * XYLEM_E_UNSUPPORTED for another dtype): afterwards every rank holds sum over r of
     * scale_r * data_r, with each rank passing its own `scale` (1/N averages; a rank's share of
     * the global batch weighs uneven shards), the same bits on every rank. Like an op: it runs in
     * stream order, and its failure may surface at the next stream_sync. */
    xylem_status (*comm_allreduce_sum)(xylem_framework_t, xylem_stream_t, const xylem_tensor_arg* data, float scale);
    /* Leaves the communicator and frees it; a no-op when there is none. */
    void (*comm_destroy)(xylem_framework_t);
    /* end of ABI 1.6 */

    /* ABI 1.7: new ops (layer_norm_fwd/bwd, attention_fwd/bwd, gemm_batched, permute, masked_softmax;
     * the GELU activations; fused opcodes erf and gelu), and: */
    /* (optional) 1 when op_run will run this very descriptor (its shapes and attributes), 0 when the
     * plugin declines it, e.g. an attention head size its kernel has no variant for. Asked only for
     * an op that op_supported reports; the core then composes the op from others where ops.h says
     * how (attention_fwd/bwd), or reports it unsupported. Must not run anything or touch buffers.
     * NULL: every descriptor of a supported op is accepted. */
    int32_t (*op_accepts)(xylem_framework_t, const xylem_op_desc* desc);
    /* end of ABI 1.7 */
} xylem_plugin;

/* Capacity of a communicator id that the core reserves for comm_unique_id (NCCL's is 128 bytes). */
#define XYLEM_COMM_ID_MAX 512

#ifdef __cplusplus
}
#endif

/* Plugins export the entry point with default visibility (plugins build with hidden). */
#ifdef __cplusplus
#define XYLEM_EXTERN_C extern "C"
#else
#define XYLEM_EXTERN_C
#endif
#define XYLEM_PLUGIN_EXPORT XYLEM_EXTERN_C __attribute__((visibility("default")))

#endif
