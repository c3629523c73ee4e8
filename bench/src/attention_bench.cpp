// Per-call time of attention_fwd and attention_bwd, the backend's fused op against the core's
// composition (gemm_batched + masked_softmax + dropout_fwd, which holds P [B, H, Tq, L]), on
// char-GPT-sized shapes (B 12, H 4, T 64, D 32) and longer sequences; then layer_norm_fwd/bwd.
// Medians of `reps` synced calls (XYLEM_BENCH_MIN=1: the fastest, for a busy machine;
// XYLEM_BENCH_FUSED_ONLY=1: skip the composition, e.g. to profile the fused op alone).
// Usage: xylem-bench-attention [backend] [reps] [filter]   (filter: run only shapes whose name holds it)
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "xylem/error.h"
#include "xylem/op_calls.h"
#include "xylem/registry.h"

using namespace xylem;
using Clock = std::chrono::steady_clock;

namespace {

struct Case {
    const char* name;
    int64_t b, h, t, d;
    bool causal;
    float dropout;
    bool composed;  // also time the composition (it holds P: skipped where that is gigabytes)
};

const Case kCases[] = {
    {"gpt B12 H4 T64 D32 causal", 12, 4, 64, 32, true, 0.0f, true},
    {"gpt B12 H4 T64 D32 causal dropout 0.1", 12, 4, 64, 32, true, 0.1f, true},
    {"B4 H4 T256 D64 causal", 4, 4, 256, 64, true, 0.0f, true},
    {"B1 H8 T1024 D64 causal", 1, 8, 1024, 64, true, 0.0f, true},
    {"B1 H2 T1024 D64 full", 1, 2, 1024, 64, false, 0.0f, false},
};

Tensor random_tensor(Device& dev, const Shape& s, std::mt19937& rng) {
    Tensor t(s, DType::F32, dev);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    float* p = t.host_write<float>();
    for (int64_t i = 0; i < t.numel(); ++i) p[i] = u(rng);
    return t;
}

bool use_min = false;

template <class F>
double median_ms(Device& dev, int reps, F f) {
    f();  // warm-up: scratch grown, pages touched
    dev.sync();
    std::vector<double> t;
    for (int i = 0; i < reps; ++i) {
        const auto t0 = Clock::now();
        f();
        dev.sync();
        t.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
    }
    std::sort(t.begin(), t.end());
    return use_min ? t.front() : t[t.size() / 2];
}

}  // namespace

int main(int argc, char** argv) try {
    const std::string name = argc > 1 ? argv[1] : "native";
    const int reps = argc > 2 ? std::atoi(argv[2]) : 20;
    const char* filter = argc > 3 ? argv[3] : "";
    use_min = std::getenv("XYLEM_BENCH_MIN") != nullptr;
    Registry registry;
    registry.scan(Registry::search_path({}, {}));
    Device& dev = *registry.select(name)->device(0);
    std::mt19937 rng(7);
    std::printf("%-40s %10s %10s %12s %12s\n", "attention (ms per call)", "fwd", "bwd", "fwd composed",
                "bwd composed");
    for (const Case& c : kCases) {
        if (!std::strstr(c.name, filter)) continue;
        const Shape qs{c.b, c.h, c.t, c.d}, ls{c.b, c.h, c.t};
        Tensor q = random_tensor(dev, qs, rng), k = random_tensor(dev, qs, rng), v = random_tensor(dev, qs, rng);
        Tensor dout = random_tensor(dev, qs, rng);
        Tensor o(qs, DType::F32, dev), lse(ls, DType::F32, dev), dq(qs, DType::F32, dev), dk(qs, DType::F32, dev),
                dv(qs, DType::F32, dev);
        const xylem_attention_attrs at{1.0f / std::sqrt(static_cast<float>(c.d)), c.causal ? 1 : 0, c.dropout, 0, 42};
        const double fwd = median_ms(dev, reps, [&] { ops::attention_fwd(dev, q, k, v, nullptr, o, lse, at); });
        const double bwd =
                median_ms(dev, reps, [&] { ops::attention_bwd(dev, dout, q, k, v, o, lse, nullptr, dq, dk, dv, at); });
        double cf = 0.0, cb = 0.0;
        if (c.composed && !std::getenv("XYLEM_BENCH_FUSED_ONLY")) {
            cf = median_ms(dev, reps, [&] { ops::attention_fwd_composed(dev, q, k, v, nullptr, o, lse, at); });
            cb = median_ms(dev, reps,
                           [&] { ops::attention_bwd_composed(dev, dout, q, k, v, o, lse, nullptr, dq, dk, dv, at); });
        }
        std::printf("%-40s %10.3f %10.3f %12.3f %12.3f\n", c.name, fwd, bwd, cf, cb);
    }
    std::printf("\n%-40s %10s %10s\n", "layer_norm (ms per call)", "fwd", "bwd");
    for (const int64_t rows : {int64_t{768}, int64_t{8192}}) {
        const int64_t d = 128;
        const std::string label = "rows " + std::to_string(rows) + " D " + std::to_string(d);
        if (!std::strstr(label.c_str(), filter)) continue;
        Tensor x = random_tensor(dev, {rows, d}, rng), g = random_tensor(dev, {d}, rng), b = random_tensor(dev, {d}, rng);
        Tensor y({rows, d}, DType::F32, dev), m({rows}, DType::F32, dev), r({rows}, DType::F32, dev);
        Tensor dy = random_tensor(dev, {rows, d}, rng), dx({rows, d}, DType::F32, dev), dg({d}, DType::F32, dev),
               db({d}, DType::F32, dev);
        const double fwd = median_ms(dev, reps, [&] { ops::layer_norm_fwd(dev, x, g, &b, y, m, r, 1e-5f); });
        const double bwd =
                median_ms(dev, reps, [&] { ops::layer_norm_bwd(dev, dy, x, g, m, r, dx, dg, &db, 1e-5f, 0.0f); });
        std::printf("%-40s %10.3f %10.3f\n", label.c_str(), fwd, bwd);
    }
    return 0;
} catch (const Error& e) {
    std::fprintf(stderr, "xylem-bench-attention: %s\n", e.what());
    return 1;
}
