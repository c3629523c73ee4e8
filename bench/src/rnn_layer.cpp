// One lstm or gru layer's forward + backward on random data: milliseconds per iteration and ops
// launched per iteration (the number the step fusion pass reduces). Usage:
//   xylem-bench-rnn [backend] [lstm|gru] [hidden] [layers] [batch] [time] [features] [iterations]
// Defaults: native lstm 128 2 50 50 65 20 (char-rnn's 2x128 over 65 one-hot characters).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "xylem/error.h"
#include "xylem/layers/gru.h"
#include "xylem/layers/lstm.h"
#include "xylem/registry.h"

using namespace xylem;
using Clock = std::chrono::steady_clock;

int main(int argc, char** argv) try {
    auto arg = [&](int i, const char* fallback) { return std::string(argc > i ? argv[i] : fallback); };
    const std::string backend = arg(1, "native"), cell = arg(2, "lstm");
    const int64_t hidden = std::stoll(arg(3, "128")), layers = std::stoll(arg(4, "2")), batch = std::stoll(arg(5, "50")),
                  time = std::stoll(arg(6, "50")), features = std::stoll(arg(7, "65"));
    const int iterations = std::stoi(arg(8, "20"));
    Registry registry;
    registry.scan(Registry::search_path({}, {}));
    Device& dev = *registry.select(backend)->device(0);
    RecurrentOptions o;
    o.hidden = hidden;
    o.layers = layers;
    std::unique_ptr<Recurrent> layer;
    if (cell == "lstm") layer = std::make_unique<Lstm>(o, 1);
    else if (cell == "gru") layer = std::make_unique<Gru>(o, 1);
    else throw Error("cell must be lstm or gru, got '" + cell + "'");
    std::mt19937_64 rng(1);
    layer->bind(dev, {time, features}, rng);
    Tensor x({batch, time, features}, DType::F32, dev), dy({batch, time, hidden}, DType::F32, dev);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    for (Tensor* t : {&x, &dy}) {
        float* p = t->host_write<float>();
        for (int64_t i = 0; i < t->numel(); ++i) p[i] = u(rng);
        t->upload(dev);
    }
    std::vector<double> ms;
    uint64_t forward_launches = 0, backward_launches = 0;
    for (int i = 0; i < iterations + 2; ++i) {  // two warm-up iterations: buffers, indices, kernels
        dev.sync();
        const auto t0 = Clock::now();
        const uint64_t l0 = dev.launches();
        layer->forward(dev, x, true);
        const uint64_t l1 = dev.launches();
        layer->backward(dev, dy, true);
        dev.sync();
        forward_launches = l1 - l0;
        backward_launches = dev.launches() - l1;
        if (i >= 2) ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
    }
    std::sort(ms.begin(), ms.end());
    std::printf("%s %s: hidden %lld, layers %lld, batch %lld, time %lld, features %lld on %s\n", cell.c_str(),
                "forward + backward", static_cast<long long>(hidden), static_cast<long long>(layers),
                static_cast<long long>(batch), static_cast<long long>(time), static_cast<long long>(features),
                backend.c_str());
    std::printf("  ms per iteration: median %.3f, min %.3f (%d iterations)\n", ms[ms.size() / 2], ms.front(), iterations);
    std::printf("  launches per iteration: %llu forward + %llu backward = %llu\n",
                static_cast<unsigned long long>(forward_launches), static_cast<unsigned long long>(backward_launches),
                static_cast<unsigned long long>(forward_launches + backward_launches));
    return 0;
} catch (const Error& e) {
    std::fprintf(stderr, "xylem-bench-rnn: error: %s\n", e.what());
    return 1;
}
