// Graph: the core's side of the ABI 1.2 capture entries, with residency replayed at launch.
#include "xylem/graph.h"

#include "storage.h"
#include "xylem/error.h"

namespace xylem {

struct Graph::State {
    std::shared_ptr<Device> dev;
    xylem_graph_t graph = nullptr;
    CaptureLog log;

    ~State() {
        if (graph) dev->backend().api().graph_destroy(dev->backend().framework(), graph);
    }
};

Graph::Graph() = default;
Graph::~Graph() = default;
Graph::Graph(Graph&&) noexcept = default;
Graph& Graph::operator=(Graph&&) noexcept = default;

Graph Graph::capture(Device& dev, const std::function<void()>& body) {
    Backend& b = dev.backend();
    if (!dev.supports_capture())
        throw Error("backend '" + b.name() + "' cannot capture work: its plugin has no capture entries (ABI 1.2)");
    if (dev.capture_log()) throw Error(dev.name() + ": a capture is already open on this device");
    auto state = std::make_unique<State>();
    state->dev = b.device(dev.index());
    xylem_framework_t fw = b.framework();
    b.check(b.api().capture_begin(fw, dev.stream()), "capture begin");
    dev.set_capture_log(&state->log);
    try {
        body();
    } catch (...) {
        dev.set_capture_log(nullptr);
        xylem_graph_t abandoned = nullptr;  // end the capture so the stream runs eagerly again
        if (b.api().capture_end(fw, dev.stream(), &abandoned) == XYLEM_OK) b.api().graph_destroy(fw, abandoned);
        throw;
    }
    dev.set_capture_log(nullptr);
    b.check(b.api().capture_end(fw, dev.stream(), &state->graph), "capture end");
    Graph g;
    g.state_ = std::move(state);
    return g;
}

void Graph::launch() {
    if (!state_) throw Error("launch of an empty graph");
    Device& dev = *state_->dev;
    for (const CaptureLog::Use& u : state_->log.uses)
        if (u.read_first) u.storage->push_to(dev, false);
    Backend& b = dev.backend();
    b.check(b.api().graph_launch(b.framework(), dev.stream(), state_->graph), "graph launch");
    for (const CaptureLog::Use& u : state_->log.uses)
        if (u.written) u.storage->set_only(dev.location_bit());
    for (const CaptureLog::Copy& c : state_->log.copies) record_transfer(c.to_device, c.bytes);
}

}  // namespace xylem
