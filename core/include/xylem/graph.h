// Graph: work recorded once from one device's stream (ABI 1.2 capture, e.g. a CUDA graph) and
// replayed by launch() with the same buffers, attributes and host staging addresses.
#pragma once

#include <functional>
#include <memory>

#include "xylem/backend.h"

namespace xylem {

class Graph {
public:
    Graph();
    ~Graph();
    Graph(Graph&&) noexcept;
    Graph& operator=(Graph&&) noexcept;

    // Records what `body` enqueues on `dev` without running it; throws an Error naming the
    // backend when it cannot capture. Tensors are left as if `body` had run: launch() before
    // reading any of them. The graph pins every storage it touched, so its buffers outlive
    // the tensors that made them. Host reads and syncs inside `body` are refused.
    static Graph capture(Device& dev, const std::function<void()>& body);

    bool defined() const { return state_ != nullptr; }
    // Replays the recorded work. Storages the graph reads are made current on the device first
    // (an implicit copy, refused in strict mode, if the host changed them); the ones it writes
    // are current only on the device afterwards; the recorded copies are counted again.
    void launch();

private:
    struct State;
    std::unique_ptr<State> state_;
};

}  // namespace xylem
