// The Theano "shared variable" scenario: 500 iterations of y = m @ x + b with every operand
// resident on the device, timed next to the same number of bare GEMMs of the same shape, with
// strict transfers on inside the loop (any host<->device copy would throw) and the transfer
// counters read around it. Usage: xylem-bench-theano [backend] [iterations] [n]
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "xylem/error.h"
#include "xylem/op_calls.h"
#include "xylem/registry.h"
#include "xylem/transfer.h"

using namespace xylem;
using Clock = std::chrono::steady_clock;

namespace {

Tensor random_tensor(Device& dev, Shape shape, uint32_t seed) {
    Tensor t(std::move(shape), DType::F32, dev);
    float* p = t.host_write<float>();
    uint32_t s = seed;
    for (int64_t i = 0; i < t.numel(); ++i) {
        s = s * 1664525u + 1013904223u;  // LCG: fixed data, no <random> cost in a benchmark
        p[i] = static_cast<float>(s >> 8) / 16777216.0f - 0.5f;
    }
    t.upload(dev);
    return t;
}

// Seconds for `iters` calls of `body`, synced once at the end; transfers must stay at zero.
template <class Body>
double timed(Device& dev, int iters, Body body, TransferCounts& moved) {
    dev.sync();
    const TransferCounts before = transfer_counts();
    const auto t0 = Clock::now();
    {
        StrictTransfers strict;
        for (int i = 0; i < iters; ++i) body();
    }
    dev.sync();
    const double s = std::chrono::duration<double>(Clock::now() - t0).count();
    moved = transfer_counts() - before;
    return s;
}

}  // namespace

int main(int argc, char** argv) try {
    const std::string name = argc > 1 ? argv[1] : "native";
    const int iters = argc > 2 ? std::atoi(argv[2]) : 500;
    const int64_t n = argc > 3 ? std::atoll(argv[3]) : 1000;
    Registry registry;
    registry.scan(Registry::search_path({}, {}));
    Device& dev = *registry.select(name)->device(0);
    // y = m @ x + b as linear_fwd(X = m, W = x^T, b): the bias is added in the same op.
    Tensor m = random_tensor(dev, {n, n}, 1), xt = random_tensor(dev, {n, n}, 2), b = random_tensor(dev, {n}, 3);
    Tensor y({n, n}, DType::F32, dev), g({n, n}, DType::F32, dev);
    ops::linear_fwd(dev, m, xt, &b, y, XYLEM_ACT_NONE);  // warm-up: kernels built, buffers allocated
    ops::gemm(dev, false, true, 1.0f, m, xt, 0.0f, g);
    TransferCounts moved_loop, moved_gemm;
    const double loop = timed(dev, iters, [&] { ops::linear_fwd(dev, m, xt, &b, y, XYLEM_ACT_NONE); }, moved_loop);
    const double gemm = timed(dev, iters, [&] { ops::gemm(dev, false, true, 1.0f, m, xt, 0.0f, g); }, moved_gemm);
    const double gflop = 2.0 * static_cast<double>(n) * n * n * iters / 1e9;
    std::printf("backend %s: %d iterations of y = m @ x + b, %lldx%lld float32, operands resident\n", name.c_str(),
                iters, static_cast<long long>(n), static_cast<long long>(n));
    std::printf("  y = m @ x + b: %8.3f s (%.1f GFLOP/s), transfers in the loop: %llu\n", loop, gflop / loop,
                static_cast<unsigned long long>(moved_loop.count()));
    std::printf("  GEMM alone:    %8.3f s (%.1f GFLOP/s), transfers in the loop: %llu\n", gemm, gflop / gemm,
                static_cast<unsigned long long>(moved_gemm.count()));
    std::printf("  loop / GEMM alone: %.3f (bar: <= 1.10)\n", loop / gemm);
    return moved_loop.count() || moved_gemm.count() ? 1 : 0;
} catch (const Error& e) {
    std::fprintf(stderr, "xylem-bench-theano: error: %s\n", e.what());
    return 1;
}
