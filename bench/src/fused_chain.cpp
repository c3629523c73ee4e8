// An 8-op elementwise chain run as 8 ops and as one fused_elementwise program: milliseconds per
// chain, each timed with its sync, median over repetitions, on 10k and 1M floats. Checks that both
// give the same result first. Usage: xylem-bench-fused [backend] [reps]
//
//   t = relu(x*y + b)          mul, add (b a row vector), act_fwd relu
//   t = tanh(0.5*t + 2*x)      axpby, act_fwd tanh
//   out = clamp(t*y - x, -1, 1) mul, add (beta = -1), clamp
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "xylem/error.h"
#include "xylem/fused_builder.h"
#include "xylem/op_calls.h"
#include "xylem/registry.h"

using namespace xylem;
using Clock = std::chrono::steady_clock;

namespace {

void chain_ops(Device& dev, const Tensor& x, const Tensor& y, const Tensor& b, Tensor& t, Tensor& out) {
    ops::mul(dev, x, y, t);
    ops::add(dev, 1.0f, t, 1.0f, b, t);
    ops::act_fwd(dev, XYLEM_ACT_RELU, t, t);
    ops::axpby(dev, 0.5f, t, 2.0f, x, t);
    ops::act_fwd(dev, XYLEM_ACT_TANH, t, t);
    ops::mul(dev, t, y, out);
    ops::add(dev, 1.0f, out, -1.0f, x, out);
    ops::clamp(dev, out, -1.0f, 1.0f);
}

xylem_fused_attrs chain_program() {
    FusedBuilder fb;
    const auto x = fb.input(0), y = fb.input(1), b = fb.input(2);
    auto t = fb.apply(XYLEM_FUSED_RELU, fb.apply(XYLEM_FUSED_ADD, fb.apply(XYLEM_FUSED_MUL, x, y), b));
    const auto half = fb.param(0.5f), two = fb.param(2.0f);
    t = fb.apply(XYLEM_FUSED_ADD, fb.apply(XYLEM_FUSED_MUL, half, t), fb.apply(XYLEM_FUSED_MUL, two, x));
    t = fb.apply(XYLEM_FUSED_TANH, t);
    t = fb.apply(XYLEM_FUSED_SUB, fb.apply(XYLEM_FUSED_MUL, t, y), x);
    const auto lo = fb.constant(-1.0f), hi = fb.constant(1.0f);
    fb.output(0, fb.apply(XYLEM_FUSED_MIN, fb.apply(XYLEM_FUSED_MAX, t, lo), hi));
    return fb.finish({XYLEM_FUSED_FULL, XYLEM_FUSED_FULL, XYLEM_FUSED_ROW});
}

template <class Fn>
double median_ms(Device& dev, int reps, Fn&& chain) {
    std::vector<double> ms;
    for (int r = 0; r < reps; ++r) {
        const auto t0 = Clock::now();
        chain();
        dev.sync();
        ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
    }
    std::sort(ms.begin(), ms.end());
    return ms[ms.size() / 2];
}

}  // namespace

int main(int argc, char** argv) try {
    const std::string name = argc > 1 ? argv[1] : "native";
    const int reps = argc > 2 ? std::atoi(argv[2]) : 50;
    Registry registry;
    registry.scan(Registry::search_path({}, {}));
    auto backend = registry.select(name);
    if (!backend->supports(XYLEM_OP_FUSED_ELEMENTWISE)) throw Error("backend " + name + " lacks fused_elementwise");
    Device& dev = *backend->device(0);
    const xylem_fused_attrs program = chain_program();
    std::printf("backend %s (%s): 8-op chain, median of %d, each with its sync\n", name.c_str(), dev.name().c_str(),
                reps);
    std::printf("%10s %12s %12s %8s %10s\n", "elements", "8 ops ms", "fused ms", "speedup", "max diff");
    const int64_t cols = 1000;
    for (int64_t n : {int64_t{10000}, int64_t{1000000}}) {
        std::mt19937 gen(42);
        std::uniform_real_distribution<float> u(-1.0f, 1.0f);
        auto random = [&](Shape shape) {
            Tensor t(shape, DType::F32, dev);
            float* p = t.host_write<float>();
            for (int64_t i = 0; i < t.numel(); ++i) p[i] = u(gen);
            return t;
        };
        const Shape shape{n / cols, cols};
        Tensor x = random(shape), y = random(shape), b = random({cols});
        Tensor t(shape, DType::F32, dev), out_ops(shape, DType::F32, dev), out_fused(shape, DType::F32, dev);
        auto unfused = [&] { chain_ops(dev, x, y, b, t, out_ops); };
        auto fused = [&] { ops::fused_elementwise(dev, program, {&x, &y, &b}, {&out_fused}); };
        unfused();  // warm-up: programs built, buffers resident
        fused();
        const std::vector<float> a = out_ops.to_vector(), f = out_fused.to_vector();
        double diff = 0.0;
        for (size_t i = 0; i < a.size(); ++i) diff = std::max(diff, static_cast<double>(std::fabs(a[i] - f[i])));
        const double ms_ops = median_ms(dev, reps, unfused), ms_fused = median_ms(dev, reps, fused);
        std::printf("%10lld %12.3f %12.3f %7.2fx %10.2g\n", static_cast<long long>(n), ms_ops, ms_fused,
                    ms_ops / ms_fused, diff);
    }
    return 0;
} catch (const Error& e) {
    std::fprintf(stderr, "xylem-bench-fused: error: %s\n", e.what());
    return 1;
}
