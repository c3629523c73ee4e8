// The 8-op chain of xylem-bench-fusion (bench/src/fusion_bench.cpp), op by op: the time of each
// of the eight ops and of the fused program the step-fusion pass makes of them, on one backend,
// each call followed by its sync, medians of --reps, every variant interleaved in one loop. Where
// a fused chain's time goes, and what the unfused one pays per op.
//   Usage: xylem-bench-fusion-ops BACKEND [--reps N] [--n FLOATS]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "xylem/error.h"
#include "xylem/fusion.h"
#include "xylem/op_calls.h"
#include "xylem/registry.h"

using namespace xylem;
using Clock = std::chrono::steady_clock;

int main(int argc, char** argv) try {
    if (argc < 2 || argv[1][0] == '-') {
        std::fprintf(stderr, "usage: xylem-bench-fusion-ops BACKEND [--reps N] [--n FLOATS]\n");
        return 2;
    }
    int reps = 30;
    int64_t n = 1000000;
    for (int i = 2; i < argc; ++i) {
        if (!std::strcmp(argv[i], "--reps") && i + 1 < argc) reps = std::max(1, std::atoi(argv[++i]));
        else if (!std::strcmp(argv[i], "--n") && i + 1 < argc) n = std::max<int64_t>(1000, std::atoll(argv[++i]));
        else throw Error(std::string("unknown argument '") + argv[i] + "'");
    }
    Registry registry;
    registry.scan(Registry::search_path({}, {}));
    auto backend = registry.select(argv[1]);
    Device& dev = *backend->device(0);
    constexpr int64_t cols = 1000;
    const Shape shape{n / cols, cols};
    std::mt19937 gen(42);
    auto random = [&](const Shape& s) {
        Tensor t(s, DType::F32, dev);
        std::uniform_real_distribution<float> u(-1.0f, 1.0f);
        float* p = t.host_write<float>();
        for (int64_t i = 0; i < t.numel(); ++i) p[i] = u(gen);
        t.upload(dev);
        return t;
    };
    Tensor x = random(shape), y = random(shape), b = random({cols});
    std::vector<Tensor> t;
    for (int i = 0; i < 6; ++i) t.emplace_back(shape, DType::F32, dev);
    Tensor out(shape, DType::F32, dev);
    const std::vector<std::pair<std::string, std::function<void()>>> ops_list = {
        {"mul", [&] { ops::mul(dev, x, y, t[0]); }},
        {"add (row)", [&] { ops::add(dev, 1.0f, t[0], 1.0f, b, t[1]); }},
        {"act_fwd tanh", [&] { ops::act_fwd(dev, XYLEM_ACT_TANH, t[1], t[2]); }},
        {"axpby", [&] { ops::axpby(dev, 0.5f, t[2], 2.0f, x, t[3]); }},
        {"act_fwd sigmoid", [&] { ops::act_fwd(dev, XYLEM_ACT_SIGMOID, t[3], t[4]); }},
        {"mul", [&] { ops::mul(dev, t[4], y, t[5]); }},
        {"add", [&] { ops::add(dev, 1.0f, t[5], -1.0f, x, out); }},
        {"clamp", [&] { ops::clamp(dev, out, -0.9f, 0.9f); }},
    };
    auto step = [&] {
        for (auto& [name, fn] : ops_list) fn();
    };
    fusion::StepFusion fusion(dev, true);
    for (int i = 0; i < 3; ++i) fusion.run(step);
    dev.sync();
    std::vector<std::vector<double>> ms(ops_list.size() + 2);
    auto timed = [&](const std::function<void()>& fn) {
        const auto t0 = Clock::now();
        fn();
        dev.sync();
        return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
    };
    for (int r = 0; r < reps; ++r) {
        for (size_t i = 0; i < ops_list.size(); ++i) ms[i].push_back(timed(ops_list[i].second));
        ms[ops_list.size()].push_back(timed(step));
        ms[ops_list.size() + 1].push_back(timed([&] { fusion.run(step); }));
    }
    auto median = [](std::vector<double> v) {
        std::sort(v.begin(), v.end());
        return v[v.size() / 2];
    };
    auto best = [](const std::vector<double>& v) { return *std::min_element(v.begin(), v.end()); };
    std::printf("%s, %lld floats, medians of %d\n", argv[1], static_cast<long long>(n), reps);
    double sum = 0;
    for (size_t i = 0; i < ops_list.size(); ++i) {
        std::printf("  %-18s %8.3f ms (best %.3f)\n", ops_list[i].first.c_str(), median(ms[i]), best(ms[i]));
        sum += median(ms[i]);
    }
    const size_t u = ops_list.size(), f = u + 1;
    std::printf("  %-18s %8.3f ms (best %.3f; sum of the ops %.3f)\n", "unfused step", median(ms[u]), best(ms[u]), sum);
    std::printf("  %-18s %8.3f ms (best %.3f; %llu launches)\n", "fused step", median(ms[f]), best(ms[f]),
                static_cast<unsigned long long>(fusion.last_step_launches()));
    std::printf("  speedup (medians) %.2f, (best) %.2f\n", median(ms[u]) / median(ms[f]), best(ms[u]) / best(ms[f]));
    for (auto& p : fusion.programs()) std::printf("  program: %s\n", p.text.c_str());
    return 0;
} catch (const std::exception& e) {
    std::fprintf(stderr, "xylem-bench-fusion-ops: %s\n", e.what());
    return 1;
}
