// Per-op launch overhead of a backend: the wall time of N tiny ops enqueued back to back with one
// sync at the end (what a training step pays per op), next to the same ops with a sync after
// each (what a backend that waits per op would pay). Usage: xylem-bench-overhead [backend] [ops]
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "xylem/error.h"
#include "xylem/op_calls.h"
#include "xylem/registry.h"

using namespace xylem;
using Clock = std::chrono::steady_clock;

namespace {

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// Microseconds per op for `ops` axpby calls on a 1024-float tensor.
double per_op_us(Device& dev, Tensor& a, Tensor& y, int ops, bool sync_each) {
    dev.sync();
    const auto t0 = Clock::now();
    for (int i = 0; i < ops; ++i) {
        ops::axpby_inplace(dev, 1e-3f, a, 1.0f, y);
        if (sync_each) dev.sync();
    }
    dev.sync();
    return seconds_since(t0) * 1e6 / ops;
}

}  // namespace

int main(int argc, char** argv) try {
    const std::string name = argc > 1 ? argv[1] : "native";
    const int ops = argc > 2 ? std::atoi(argv[2]) : 2000;
    Registry registry;
    registry.scan(Registry::search_path({}, {}));
    Device& dev = *registry.select(name)->device(0);
    Tensor a({1024}, DType::F32, dev), y({1024}, DType::F32, dev);
    ops::fill(dev, a, 1.0f);
    ops::fill(dev, y, 0.0f);
    per_op_us(dev, a, y, 100, false);  // warm-up: programs built, buffers resident
    const double queued = per_op_us(dev, a, y, ops, false);
    const double synced = per_op_us(dev, a, y, ops / 4, true);
    std::printf("backend %s: %d axpby ops on 1024 floats\n", name.c_str(), ops);
    std::printf("  enqueued, one sync at the end: %8.2f us/op\n", queued);
    std::printf("  sync after every op:           %8.2f us/op\n", synced);
    return 0;
} catch (const Error& e) {
    std::fprintf(stderr, "xylem-bench-overhead: error: %s\n", e.what());
    return 1;
}
