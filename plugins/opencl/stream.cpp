// Streams: one in-order command queue each, with its kernel objects, scratch blocks and the
// device-side error word; stream_sync is the only place the host waits.
#include <cstdio>
#include <new>

#include "opencl.h"

xylem_stream_s::~xylem_stream_s() {
    for (auto& [name, k] : kernels_) clReleaseKernel(k);
    for (auto& [key, k] : fused_kernels_) clReleaseKernel(k.kernel);
    if (scratch_) clReleaseMemObject(scratch_);
    if (gemm_temp_) clReleaseMemObject(gemm_temp_);
    if (error_word_) clReleaseMemObject(error_word_);
    if (queue_) clReleaseCommandQueue(queue_);
}

namespace xylem::opencl {

namespace {
// Error word layout, written by kernels (kernels/*.cl: record_error) for the first bad value.
enum ErrorWord { kFlag, kOp, kPosition, kValue, kBound, kWords };

const char* what_of(int op) {
    return op == XYLEM_OP_GATHER_ROWS || op == XYLEM_OP_SCATTER_ADD_ROWS ? "index" : "label";
}

cl_mem grow(xylem_stream_s& s, cl_mem& block, size_t& have, size_t need, const char* what) {
    if (need <= have && block) return block;
    if (block) clReleaseMemObject(block);  // freed by the runtime once enqueued users finish
    block = nullptr;
    have = 0;
    cl_int err = CL_SUCCESS;
    block = clCreateBuffer(s.dev_->context, CL_MEM_READ_WRITE, need ? need : 4, nullptr, &err);
    check_cl(err, what);
    have = need;
    return block;
}
}  // namespace


cl_mem stream_scratch(xylem_stream_s& s, size_t bytes) { return grow(s, s.scratch_, s.scratch_bytes_, bytes, "scratch allocation"); }
cl_mem stream_gemm_temp(xylem_stream_s& s, size_t bytes) {
    return grow(s, s.gemm_temp_, s.gemm_temp_bytes_, bytes, "GEMM temporary allocation");
}

xylem_status stream_create(xylem_framework_t fw, uint32_t device, xylem_stream_t* out) {
    if (!out || !fw) return set_error(XYLEM_E_INVALID, "opencl: stream_create: NULL framework or out");
    *out = nullptr;
    if (device >= fw->devices_.size())
        return set_error(XYLEM_E_INVALID, "opencl: stream_create: no device %u (%zu device(s))", device,
                         fw->devices_.size());
    auto* s = new (std::nothrow) xylem_stream_s;
    if (!s) return set_error(XYLEM_E_NO_MEMORY, "opencl: stream_create: out of host memory");
    s->device_ = device;
    s->dev_ = fw->devices_[device].get();
    cl_int err = CL_SUCCESS;
    s->queue_ = clCreateCommandQueue(s->dev_->context, s->dev_->id, 0, &err);  // in order, no profiling
    if (err == CL_SUCCESS) {
        const cl_int zero[kWords] = {};
        s->error_word_ = clCreateBuffer(s->dev_->context, CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR, sizeof zero,
                                        const_cast<cl_int*>(zero), &err);
    }
    if (err != CL_SUCCESS) {
        delete s;
        return set_error(XYLEM_E_DEVICE, "opencl: stream_create on %s: %s (%d)", fw->devices_[device]->name.c_str(),
                         cl_error_name(err), err);
    }
    *out = s;
    return XYLEM_OK;
}

void stream_destroy(xylem_framework_t, xylem_stream_t stream) {
    if (!stream) return;
    clFinish(stream->queue_);  // kernels may still use its scratch
    delete stream;
}

xylem_status stream_sync(xylem_framework_t, xylem_stream_t s) {
    if (!s) return set_error(XYLEM_E_INVALID, "opencl: stream_sync: stream is NULL");
    cl_int word[kWords] = {};
    // A blocking read on an in-order queue: waits for everything enqueued before it.
    cl_int err = clEnqueueReadBuffer(s->queue_, s->error_word_, CL_TRUE, 0, sizeof word, word, 0, nullptr, nullptr);
    if (err != CL_SUCCESS) return set_error(XYLEM_E_DEVICE, "opencl: stream_sync: %s (%d)", cl_error_name(err), err);
    if (!word[kFlag]) return XYLEM_OK;
    const cl_int zero[kWords] = {};
    err = clEnqueueWriteBuffer(s->queue_, s->error_word_, CL_TRUE, 0, sizeof zero, zero, 0, nullptr, nullptr);
    if (err != CL_SUCCESS) return set_error(XYLEM_E_DEVICE, "opencl: stream_sync: %s (%d)", cl_error_name(err), err);
    return set_error(XYLEM_E_INVALID,
                     "opencl: %s: %s %d at row %d is out of range [0, %d) (found on the device; the op skipped that row)",
                     xylem_op_name(static_cast<uint32_t>(word[kOp])), what_of(word[kOp]), word[kValue], word[kPosition],
                     word[kBound]);
}

}  // namespace xylem::opencl
