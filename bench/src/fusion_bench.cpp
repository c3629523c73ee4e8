// Step fusion (xylem/fusion.h) on one backend: the same work issued op by op and inside
// fusion::StepFusion::run, which records the first step and from the second on runs each chain of
// elementwise ops as one fused_elementwise program.
//   (a) an 8-op pointwise chain (mul, add, act_fwd tanh, axpby, act_fwd sigmoid, mul, add, clamp)
//       on 10k and 1M floats;
//   (b) a training step (forward, loss, backward, solver update) of the Fashion-MNIST MLP and LeNet
//       (examples/fashion_mlp.toml, examples/fashion_lenet.toml) at batch 64 on random data.
// Each step is timed with its device sync; the median of --reps after warm-up. Launches are the
// ops a step enqueued on the device (StepFusion::last_step_launches, Device::launches). Until the
// pass fuses, both columns show the same launches. The last lines, one per chain size:
//   fusion BACKEND N floats: fused F ms (L1 launches), unfused U ms (L2 launches), speedup S
// Usage: xylem-bench-fusion BACKEND [--reps N] [--no-models] [--examples DIR]
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "xylem/train/model_builder.h"
#include "xylem/config.h"
#include "xylem/error.h"
#include "xylem/fusion.h"
#include "xylem/layers/loss.h"
#include "xylem/op_calls.h"
#include "xylem/registry.h"

using namespace xylem;
using Clock = std::chrono::steady_clock;

namespace {

struct Timing {
    double ms = 0.0;         // median per step
    uint64_t launches = 0;   // device launches of one step
};

struct Comparison {
    Timing fused, unfused;
    std::string note;  // StepFusion::note() after the fused runs
    double max_diff = 0.0;
};

double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v.empty() ? 0.0 : v[v.size() / 2];
}

// Times `step` run plainly and inside a StepFusion: `warmup` untimed steps each way first (the
// fused side's first one is the recording), then `reps` timed pairs, a plain step then a fused
// one (interleaved, so a change in the machine's load hits both alike), each with its sync.
// `result` (may be null) reads what a step computed: both ways must agree after the warm-up.
Comparison compare(Device& dev, int warmup, int reps, const std::function<void()>& step,
                   const std::function<std::vector<float>()>& result) {
    Comparison c;
    auto timed = [&dev](const std::function<void()>& fn) {
        const auto t0 = Clock::now();
        fn();
        dev.sync();
        return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
    };
    for (int i = 0; i < warmup; ++i) step();
    dev.sync();
    const std::vector<float> plain = result ? result() : std::vector<float>{};
    fusion::StepFusion fusion(dev, true);
    for (int i = 0; i < warmup; ++i) fusion.run(step);
    dev.sync();
    const std::vector<float> fused = result ? result() : std::vector<float>{};
    c.max_diff = plain.size() == fused.size() ? 0.0 : INFINITY;
    for (size_t i = 0; i < plain.size() && i < fused.size(); ++i)
        c.max_diff = std::max(c.max_diff, static_cast<double>(std::fabs(plain[i] - fused[i])));
    std::vector<double> ms_plain, ms_fused;
    for (int i = 0; i < reps; ++i) {
        const uint64_t before = dev.launches();
        ms_plain.push_back(timed(step));
        c.unfused.launches = dev.launches() - before;
        ms_fused.push_back(timed([&] { fusion.run(step); }));
        c.fused.launches = fusion.last_step_launches();
    }
    c.unfused.ms = median(ms_plain);
    c.fused.ms = median(ms_fused);
    c.note = fusion.note();
    return c;
}

Tensor random_tensor(Device& dev, const Shape& shape, std::mt19937& gen, float lo = -1.0f, float hi = 1.0f) {
    Tensor t(shape, DType::F32, dev);
    std::uniform_real_distribution<float> u(lo, hi);
    float* p = t.host_write<float>();
    for (int64_t i = 0; i < t.numel(); ++i) p[i] = u(gen);
    t.upload(dev);
    return t;
}

// (a) The 8-op chain on n floats seen as [n/1000, 1000] (b a row of 1000). Every intermediate has
// its own tensor that nothing else reads, so the pass may keep all of them in registers.
Comparison chain(Device& dev, int64_t n, int reps) {
    constexpr int64_t cols = 1000;
    const Shape shape{n / cols, cols};
    std::mt19937 gen(42);
    Tensor x = random_tensor(dev, shape, gen), y = random_tensor(dev, shape, gen), b = random_tensor(dev, {cols}, gen);
    std::vector<Tensor> t;
    for (int i = 0; i < 6; ++i) t.emplace_back(shape, DType::F32, dev);
    Tensor out(shape, DType::F32, dev);
    auto step = [&] {
        ops::mul(dev, x, y, t[0]);                           // x*y
        ops::add(dev, 1.0f, t[0], 1.0f, b, t[1]);            // + b (a row)
        ops::act_fwd(dev, XYLEM_ACT_TANH, t[1], t[2]);       // tanh
        ops::axpby(dev, 0.5f, t[2], 2.0f, x, t[3]);          // 0.5*t + 2*x
        ops::act_fwd(dev, XYLEM_ACT_SIGMOID, t[3], t[4]);    // sigmoid
        ops::mul(dev, t[4], y, t[5]);                        // *y
        ops::add(dev, 1.0f, t[5], -1.0f, x, out);            // - x
        ops::clamp(dev, out, -0.9f, 0.9f);                   // clamp in place
    };
    return compare(dev, 3, reps, step, [&] { return out.to_vector(); });
}

// (b) One training step of the model in `config`, at its batch size, on random images and labels.
Comparison model_step(Device& dev, const std::string& config_path, int reps, int64_t& batch) {
    const RunConfig c = load_config(config_path);
    batch = c.batch_size;
    auto model = train::build_model(c);
    model->build(dev, {1, 28, 28}, c.seed);
    auto loss = make_loss(c.loss);
    auto solver = train::build_solver(c);
    model->check_ops(dev.backend(), true);
    for (uint32_t op : loss->ops_needed()) dev.backend().require(op, "loss " + c.loss);
    for (uint32_t op : solver->ops_needed()) dev.backend().require(op, "solver " + solver->kind());
    for (Param* p : model->state()) p->value.upload(dev);
    const std::vector<Param*> params = model->params();
    const int64_t classes = model->output_sample_shape().back();
    std::mt19937 gen(7);
    Tensor x = random_tensor(dev, {batch, 1, 28, 28}, gen, 0.0f, 1.0f);
    Tensor labels({batch}, DType::I32, dev);
    int32_t* l = labels.host_write<int32_t>();
    for (int64_t i = 0; i < batch; ++i) l[i] = static_cast<int32_t>(gen() % static_cast<uint32_t>(classes));
    labels.upload(dev);
    Tensor loss_sum({1}, DType::F32, dev);
    ops::fill(dev, loss_sum, 0.0f);
    auto step = [&] {
        const Tensor& logits = model->forward(dev, x, true);
        loss->forward(dev, logits, labels, loss_sum);
        const Tensor& dlogits = loss->backward(dev, logits, labels);
        model->backward(dev, dlogits);
        solver->step(dev, params);
    };
    // The fused side trains on from where the unfused one stopped, so their parameters are not
    // compared (the pass's tests do that); both must keep them finite.
    Comparison result = compare(dev, 5, reps, step, nullptr);
    for (Param* p : params)
        for (float v : p->value.to_vector())
            if (!std::isfinite(v)) throw Error(config_path + ": parameter " + p->name + " became non-finite");
    return result;
}

void print_comparison(const std::string& what, const Comparison& c) {
    std::printf("  %-28s fused %9.3f ms (%4llu launches)  unfused %9.3f ms (%4llu launches)  speedup %5.2f\n",
                what.c_str(), c.fused.ms, static_cast<unsigned long long>(c.fused.launches), c.unfused.ms,
                static_cast<unsigned long long>(c.unfused.launches), c.unfused.ms / c.fused.ms);
    if (!c.note.empty()) std::printf("    note: %s\n", c.note.c_str());
}

}  // namespace

int main(int argc, char** argv) try {
    if (argc < 2 || argv[1][0] == '-') {
        std::fprintf(stderr, "usage: xylem-bench-fusion BACKEND [--reps N] [--no-models] [--examples DIR]\n");
        return 2;
    }
    const std::string name = argv[1];
    int reps = 30;
    bool models = true;
    std::string examples = XYLEM_BENCH_EXAMPLES_DIR;
    for (int i = 2; i < argc; ++i) {
        if (!std::strcmp(argv[i], "--reps") && i + 1 < argc) reps = std::max(1, std::atoi(argv[++i]));
        else if (!std::strcmp(argv[i], "--no-models")) models = false;
        else if (!std::strcmp(argv[i], "--examples") && i + 1 < argc) examples = argv[++i];
        else throw Error(std::string("unknown argument '") + argv[i] + "'");
    }
    Registry registry;
    registry.scan(Registry::search_path({}, {}));
    auto backend = registry.select(name);
    Device& dev = *backend->device(0);
    std::printf("backend %s (%s), fused_elementwise %s; median of %d steps, each with its sync\n", name.c_str(),
                dev.name().c_str(), backend->supports(XYLEM_OP_FUSED_ELEMENTWISE) ? "supported" : "NOT supported", reps);

    const int64_t sizes[] = {10000, 1000000};
    std::vector<Comparison> chains;
    std::printf("8-op pointwise chain (mul, add, tanh, axpby, sigmoid, mul, add, clamp):\n");
    for (int64_t n : sizes) {
        chains.push_back(chain(dev, n, reps));
        print_comparison(std::to_string(n) + " floats", chains.back());
        if (chains.back().max_diff > 1e-5)
            throw Error("the fused chain differs from the unfused one by " + std::to_string(chains.back().max_diff));
    }
    if (models) {
        std::printf("training step (forward, loss, backward, update) on random data:\n");
        for (const char* model : {"fashion_mlp", "fashion_lenet"}) {
            int64_t batch = 0;
            const Comparison c = model_step(dev, examples + "/" + model + ".toml", std::max(5, reps / 3), batch);
            print_comparison(std::string(model) + " batch " + std::to_string(batch), c);
            std::printf("    images/s: fused %.0f, unfused %.0f\n", batch * 1e3 / c.fused.ms, batch * 1e3 / c.unfused.ms);
        }
    }
    for (size_t i = 0; i < chains.size(); ++i)
        std::printf("fusion %s %lld floats: fused %.3f ms (%llu launches), unfused %.3f ms (%llu launches), speedup %.2f\n",
                    name.c_str(), static_cast<long long>(sizes[i]), chains[i].fused.ms,
                    static_cast<unsigned long long>(chains[i].fused.launches), chains[i].unfused.ms,
                    static_cast<unsigned long long>(chains[i].unfused.launches), chains[i].unfused.ms / chains[i].fused.ms);
    return 0;
} catch (const Error& e) {
    std::fprintf(stderr, "xylem-bench-fusion: error: %s\n", e.what());
    return 1;
}
