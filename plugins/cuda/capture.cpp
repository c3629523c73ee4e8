// ABI 1.2 whole-step capture: CUDA stream capture into a graph, instantiated once, replayed by
// graph_launch. The graph owns what its nodes touch: scratch blocks, cuBLAS workspace, error
// flags, pinned staging and host-copy payloads.
#include <new>

#include "cuda_plugin.h"

namespace xylem::cuda {

namespace {
xylem_status cuda_fail(const char* what, cudaError_t e) {
    cudaGetLastError();
    return set_error(XYLEM_E_DEVICE, "cuda: %s: %s", what, cudaGetErrorString(e));
}
}  // namespace

xylem_status capture_begin(xylem_framework_t fw, xylem_stream_t stream) {
    if (const xylem_status s = check_framework(fw, "capture_begin")) return s;
    if (!stream) return set_error(XYLEM_E_INVALID, "cuda: capture_begin: stream is NULL");
    if (stream->capture_) return set_error(XYLEM_E_INVALID, "cuda: capture_begin: the stream is already capturing");
    auto state = std::make_unique<CaptureState>();
    state->keep.push_back(stream->cublas_workspace_);
    state->keep.push_back(stream->flags_);
    cudaSetDevice(static_cast<int>(stream->device_));
    // Relaxed: the arena may cudaMalloc a larger block and copies cudaMallocHost staging mid-capture.
    const cudaError_t e = cudaStreamBeginCapture(stream->stream_, cudaStreamCaptureModeRelaxed);
    if (e != cudaSuccess) return cuda_fail("capture_begin", e);
    stream->capture_ = std::move(state);
    return XYLEM_OK;
}

xylem_status capture_end(xylem_framework_t fw, xylem_stream_t stream, xylem_graph_t* out) {
    if (!out) return set_error(XYLEM_E_INVALID, "cuda: capture_end: out is NULL");
    *out = nullptr;
    if (const xylem_status s = check_framework(fw, "capture_end")) return s;
    if (!stream || !stream->capture_) return set_error(XYLEM_E_INVALID, "cuda: capture_end: the stream is not capturing");
    std::unique_ptr<CaptureState> state = std::move(stream->capture_);
    cudaSetDevice(static_cast<int>(stream->device_));
    cudaGraph_t graph = nullptr;
    cudaError_t e = cudaStreamEndCapture(stream->stream_, &graph);
    if (e != cudaSuccess) {
        if (graph) cudaGraphDestroy(graph);
        return cuda_fail("capture_end (an op or copy inside the capture was not capturable)", e);
    }
    auto* g = new (std::nothrow) xylem_graph_s();
    if (!g) {
        cudaGraphDestroy(graph);
        return set_error(XYLEM_E_NO_MEMORY, "cuda: capture_end: out of host memory");
    }
    e = cudaGraphInstantiate(&g->exec_, graph, 0);
    cudaGraphDestroy(graph);  // the executable graph is independent of its template
    if (e != cudaSuccess) {
        delete g;
        return cuda_fail("capture_end: cudaGraphInstantiate", e);
    }
    g->device_ = stream->device_;
    g->owned_ = std::move(*state);
    *out = g;
    return XYLEM_OK;
}

xylem_status graph_launch(xylem_framework_t fw, xylem_stream_t stream, xylem_graph_t graph) {
    if (const xylem_status s = check_framework(fw, "graph_launch")) return s;
    if (!stream || !graph) return set_error(XYLEM_E_INVALID, "cuda: graph_launch: NULL stream or graph");
    if (stream->capture_) return set_error(XYLEM_E_INVALID, "cuda: graph_launch: the stream is capturing");
    if (graph->device_ != stream->device_)
        return set_error(XYLEM_E_INVALID, "cuda: graph_launch: the graph was captured on device %u, the stream is on %u",
                         graph->device_, stream->device_);
    const cudaError_t e = cudaGraphLaunch(graph->exec_, stream->stream_);
    return e == cudaSuccess ? XYLEM_OK : cuda_fail("graph_launch", e);
}

// Waits for the graph's last replay: its payloads and blocks may still be in use.
void graph_destroy(xylem_framework_t, xylem_graph_t graph) {
    if (!graph) return;
    cudaSetDevice(static_cast<int>(graph->device_));
    cudaDeviceSynchronize();
    cudaGraphExecDestroy(graph->exec_);
    delete graph;
}

}  // namespace xylem::cuda
