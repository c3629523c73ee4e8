// The ABI 1.6 collectives with NCCL: one communicator for the framework, sums of device buffers
// enqueued on the caller's stream. Built when CMake finds nccl.h. libnccl.so.2 is opened on first
// use rather than linked, so the plugin still loads and runs single-process where NCCL is missing
// (the collectives then fail with the loader's reason, and the run says so).
#include <dlfcn.h>
#include <nccl.h>

#include <mutex>
#include <type_traits>

#include "cuda_plugin.h"

namespace xylem::cuda {
namespace {

// The few NCCL functions used, resolved from libnccl.so.2.
struct Nccl {
    decltype(&ncclGetUniqueId) get_unique_id = nullptr;
    decltype(&ncclCommInitRank) comm_init_rank = nullptr;
    decltype(&ncclAllReduce) all_reduce = nullptr;
    decltype(&ncclRedOpCreatePreMulSum) premul_sum_create = nullptr;
    decltype(&ncclRedOpDestroy) op_destroy = nullptr;
    decltype(&ncclCommDestroy) comm_destroy = nullptr;
    decltype(&ncclGetErrorString) error_string = nullptr;
    decltype(&ncclGetVersion) get_version = nullptr;
    std::string why_not;  // set when the library or a symbol is missing
};

const Nccl& nccl() {
    static const Nccl n = [] {
        Nccl r;
        void* lib = dlopen("libnccl.so.2", RTLD_NOW | RTLD_LOCAL);  // kept for the process
        if (!lib) {
            const char* e = dlerror();
            r.why_not = std::string("NCCL is not installed here (") + (e ? e : "dlopen failed") + ")";
            return r;
        }
        auto sym = [&](auto& fn, const char* name) {
            fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(lib, name));
            if (!fn && r.why_not.empty()) r.why_not = std::string("libnccl.so.2 has no ") + name + " (NCCL 2.11 or newer needed)";
        };
        sym(r.get_unique_id, "ncclGetUniqueId");
        sym(r.comm_init_rank, "ncclCommInitRank");
        sym(r.all_reduce, "ncclAllReduce");
        sym(r.premul_sum_create, "ncclRedOpCreatePreMulSum");
        sym(r.op_destroy, "ncclRedOpDestroy");
        sym(r.comm_destroy, "ncclCommDestroy");
        sym(r.error_string, "ncclGetErrorString");
        sym(r.get_version, "ncclGetVersion");
        return r;
    }();
    return n;
}

// The framework's one communicator (the plugin has one framework, so this is it).
struct Comm {
    std::mutex mutex;
    ncclComm_t comm = nullptr;
    uint32_t device = 0;
    int rank = 0, size = 0;
} g_comm;

// The framework and NCCL, or the status with the reason.
xylem_status ready(xylem_framework_t fw, const char* what) {
    if (xylem_status s = check_framework(fw, what); s != XYLEM_OK) return s;
    if (!nccl().why_not.empty()) return set_error(XYLEM_E_UNAVAILABLE, "cuda: %s: %s", what, nccl().why_not.c_str());
    return XYLEM_OK;
}

xylem_status nccl_failed(const char* what, const char* call, ncclResult_t r) {
    return set_error(XYLEM_E_DEVICE, "cuda: %s: %s failed: %s", what, call, nccl().error_string(r));
}

}  // namespace

xylem_status comm_unique_id(xylem_framework_t fw, void* id, uint32_t capacity, uint32_t* size) {
    if (xylem_status s = ready(fw, "comm_unique_id"); s != XYLEM_OK) return s;
    if (!id || !size || capacity < sizeof(ncclUniqueId))
        return set_error(XYLEM_E_INVALID, "cuda: comm_unique_id: needs room for %zu bytes", sizeof(ncclUniqueId));
    ncclUniqueId u;
    if (ncclResult_t r = nccl().get_unique_id(&u); r != ncclSuccess) return nccl_failed("comm_unique_id", "ncclGetUniqueId", r);
    std::memcpy(id, &u, sizeof u);
    *size = sizeof u;
    return XYLEM_OK;
}

xylem_status comm_init(xylem_framework_t fw, uint32_t device, const void* id, uint32_t id_size, int32_t rank,
                       int32_t size) {
    if (xylem_status s = ready(fw, "comm_init"); s != XYLEM_OK) return s;
    if (!id || id_size != sizeof(ncclUniqueId))
        return set_error(XYLEM_E_INVALID, "cuda: comm_init: an NCCL id has %zu bytes, got %u", sizeof(ncclUniqueId), id_size);
    if (size < 1 || rank < 0 || rank >= size)
        return set_error(XYLEM_E_INVALID, "cuda: comm_init: rank %d of %d", static_cast<int>(rank), static_cast<int>(size));
    if (device >= static_cast<uint32_t>(fw->device_count_))
        return set_error(XYLEM_E_INVALID, "cuda: comm_init: no device %u (%d devices)", device, fw->device_count_);
    std::lock_guard<std::mutex> lock(g_comm.mutex);
    if (g_comm.comm) return set_error(XYLEM_E_INVALID, "cuda: comm_init: the framework has a communicator already");
    if (cudaError_t e = cudaSetDevice(static_cast<int>(device)); e != cudaSuccess)
        return set_error(XYLEM_E_DEVICE, "cuda: comm_init: cudaSetDevice(%u): %s", device, cudaGetErrorString(e));
    ncclUniqueId u;
    std::memcpy(&u, id, sizeof u);
    ncclComm_t c = nullptr;
    if (ncclResult_t r = nccl().comm_init_rank(&c, size, u, rank); r != ncclSuccess)
        return nccl_failed("comm_init", "ncclCommInitRank", r);
    g_comm.comm = c;
    g_comm.device = device;
    g_comm.rank = rank;
    g_comm.size = size;
    return XYLEM_OK;
}

xylem_status comm_allreduce_sum(xylem_framework_t fw, xylem_stream_t stream, const xylem_tensor_arg* data, float scale) {
    if (xylem_status s = ready(fw, "comm_allreduce_sum"); s != XYLEM_OK) return s;
    if (!stream || !data || !data->buffer) return set_error(XYLEM_E_INVALID, "cuda: comm_allreduce_sum: NULL stream or operand");
    if (data->dtype != XYLEM_F32)
        return set_error(XYLEM_E_UNSUPPORTED, "cuda: comm_allreduce_sum: only f32 operands are summed");
    if (data->ndim > XYLEM_MAX_DIMS) return set_error(XYLEM_E_INVALID, "cuda: comm_allreduce_sum: rank %u", data->ndim);
    uint64_t count = 1;
    for (uint32_t d = 0; d < data->ndim; ++d) {
        if (data->dims[d] < 0) return set_error(XYLEM_E_INVALID, "cuda: comm_allreduce_sum: negative dimension");
        count *= static_cast<uint64_t>(data->dims[d]);
    }
    if ((data->offset + count) * 4 > data->buffer->bytes_)
        return set_error(XYLEM_E_INVALID, "cuda: comm_allreduce_sum: elements [%llu, %llu) are outside the buffer",
                         static_cast<unsigned long long>(data->offset),
                         static_cast<unsigned long long>(data->offset + count));
    std::lock_guard<std::mutex> lock(g_comm.mutex);
    if (!g_comm.comm) return set_error(XYLEM_E_INVALID, "cuda: comm_allreduce_sum: comm_init has not been called");
    if (stream->device_ != g_comm.device)
        return set_error(XYLEM_E_INVALID, "cuda: comm_allreduce_sum: the stream is on device %u, the communicator on %u",
                         stream->device_, g_comm.device);
    cudaSetDevice(static_cast<int>(stream->device_));
    float* p = static_cast<float*>(data->buffer->data()) + data->offset;
    // Sum of scale_r * x_r: NCCL's pre-multiplied sum, each rank with its own scalar; a plain sum at 1.
    ncclRedOp_t op = ncclSum;
    if (scale != 1.0f) {
        if (ncclResult_t r = nccl().premul_sum_create(&op, &scale, ncclFloat32, ncclScalarHostImmediate, g_comm.comm);
            r != ncclSuccess)
            return nccl_failed("comm_allreduce_sum", "ncclRedOpCreatePreMulSum", r);
    }
    const ncclResult_t r = nccl().all_reduce(p, p, count, ncclFloat32, op, g_comm.comm, stream->stream_);
    if (op != ncclSum) nccl().op_destroy(op, g_comm.comm);  // allowed once the call using it returned
    if (r != ncclSuccess) return nccl_failed("comm_allreduce_sum", "ncclAllReduce", r);
    return XYLEM_OK;
}

void comm_destroy(xylem_framework_t fw) {
    if (!fw || !nccl().why_not.empty()) return;
    std::lock_guard<std::mutex> lock(g_comm.mutex);
    if (!g_comm.comm) return;
    nccl().comm_destroy(g_comm.comm);
    g_comm.comm = nullptr;
}

void set_collectives(xylem_plugin& t) {
    t.comm_unique_id = comm_unique_id;
    t.comm_init = comm_init;
    t.comm_allreduce_sum = comm_allreduce_sum;
    t.comm_destroy = comm_destroy;
}

}  // namespace xylem::cuda
