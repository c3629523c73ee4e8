// fused_elementwise on a backend against the two ways it could be done instead: the same 8-op
// chain as 8 separate ops (8 passes over memory, 8 launches), and a naive interpreter that runs
// the program per element, switching on every instruction of every element (here, on the host,
// one thread). Prints the median and best milliseconds of each at two sizes and the largest
// difference between their results.
//   Usage: xylem-bench-native-fused [backend] [reps at 1M]   (XYLEM_NUM_THREADS=1 for one thread)
// The chain, over a [rows, 1000] space with inputs a, b, c and a bias row:
//   t = a*b; t += c; t = tanh t; t = 0.5 t + a; t = sigmoid t; t *= b; t = relu t; out = t + bias
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
#include "xylem/plugin_kit/fused.h"
#include "xylem/registry.h"

using namespace xylem;
using Clock = std::chrono::steady_clock;

namespace {

constexpr int64_t kCols = 1000;

struct Operands {
    Tensor a, b, c, bias, t1, t2, out;
};

xylem_fused_attrs chain_program() {
    FusedBuilder f;
    const auto a = f.input(0), b = f.input(1), c = f.input(2), bias = f.input(3);
    auto t = f.apply(XYLEM_FUSED_MUL, a, b);
    t = f.apply(XYLEM_FUSED_ADD, t, c);
    t = f.apply(XYLEM_FUSED_TANH, t);
    t = f.apply(XYLEM_FUSED_FMA, t, f.constant(0.5f), a);
    t = f.apply(XYLEM_FUSED_SIGMOID, t);
    t = f.apply(XYLEM_FUSED_MUL, t, b);
    t = f.apply(XYLEM_FUSED_RELU, t);
    f.output(0, f.apply(XYLEM_FUSED_ADD, t, bias));
    return f.finish({XYLEM_FUSED_FULL, XYLEM_FUSED_FULL, XYLEM_FUSED_FULL, XYLEM_FUSED_ROW});
}

void separate_ops(Device& dev, Operands& o) {
    ops::mul(dev, o.a, o.b, o.t1);
    ops::add(dev, 1.0f, o.t1, 1.0f, o.c, o.t2);
    ops::act_fwd(dev, XYLEM_ACT_TANH, o.t2, o.t1);
    ops::axpby(dev, 0.5f, o.t1, 1.0f, o.a, o.t2);
    ops::act_fwd(dev, XYLEM_ACT_SIGMOID, o.t2, o.t1);
    ops::mul(dev, o.t1, o.b, o.t2);
    ops::act_fwd(dev, XYLEM_ACT_RELU, o.t2, o.t1);
    ops::add(dev, 1.0f, o.t1, 1.0f, o.bias, o.out);  // bias [cols]: a row added to every row
}

// The program per element: the switch runs for every instruction of every element.
void interpret(const xylem_fused_attrs& at, const float* const* in, float* out, int64_t rows, int64_t cols) {
    float reg[XYLEM_FUSED_MAX_REGS];
    for (int64_t e = 0; e < rows * cols; ++e)
        for (uint32_t k = 0; k < at.n_instrs; ++k) {
            const xylem_fused_instr& ins = at.code[k];
            switch (ins.op) {
            case XYLEM_FUSED_INPUT: {
                const uint8_t m = at.input_modes[ins.a];
                reg[ins.dst] = in[ins.a][m == XYLEM_FUSED_FULL  ? e
                                         : m == XYLEM_FUSED_ROW ? e % cols
                                         : m == XYLEM_FUSED_COL ? e / cols
                                                                : 0];
                break;
            }
            case XYLEM_FUSED_PARAM: reg[ins.dst] = at.params[ins.a]; break;
            case XYLEM_FUSED_CONST: reg[ins.dst] = ins.imm; break;
            case XYLEM_FUSED_OUTPUT: out[e] = reg[ins.a]; break;  // one output in this program
            default: reg[ins.dst] = plugin_kit::fused_apply<float>(ins.op, reg[ins.a], reg[ins.b], reg[ins.c]);
            }
        }
}

// Median and best milliseconds of `reps` runs of f (each followed by a sync); on a shared machine
// the best is the run that was not preempted.
struct Time {
    double median, best;
};
template <class F>
Time time_ms(Device& dev, int reps, F f) {
    f();  // warm-up: scratch grown, pool started
    dev.sync();
    std::vector<double> ms;
    for (int r = 0; r < reps; ++r) {
        const auto t0 = Clock::now();
        f();
        dev.sync();
        ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
    }
    std::sort(ms.begin(), ms.end());
    return {ms[ms.size() / 2], ms[0]};
}

double max_diff(const std::vector<float>& x, const std::vector<float>& y) {
    double d = 0;
    for (size_t i = 0; i < x.size(); ++i) d = std::max(d, static_cast<double>(std::fabs(x[i] - y[i])));
    return d;
}

void run_size(Device& dev, int64_t n, int reps) {
    const int64_t rows = n / kCols;
    std::mt19937 gen(42);
    std::uniform_real_distribution<float> u(-2.0f, 2.0f);
    auto random = [&](const Shape& s) {
        Tensor t(s, DType::F32, dev);
        float* p = t.host_write<float>();
        for (int64_t i = 0; i < t.numel(); ++i) p[i] = u(gen);
        t.upload(dev);
        return t;
    };
    const Shape s{rows, kCols};
    Operands o{random(s), random(s), random(s), random({kCols}), Tensor(s, DType::F32, dev), Tensor(s, DType::F32, dev),
               Tensor(s, DType::F32, dev)};
    Tensor fused_out(s, DType::F32, dev);
    const xylem_fused_attrs at = chain_program();

    const Time fused =
        time_ms(dev, reps, [&] { ops::fused_elementwise(dev, at, {&o.a, &o.b, &o.c, &o.bias}, {&fused_out}); });
    const Time separate = time_ms(dev, reps, [&] { separate_ops(dev, o); });
    const float* in[4] = {o.a.host_read<float>(), o.b.host_read<float>(), o.c.host_read<float>(),
                          o.bias.host_read<float>()};
    std::vector<float> interp(static_cast<size_t>(n));
    const Time interpreted = time_ms(dev, std::max(3, reps / 4), [&] { interpret(at, in, interp.data(), rows, kCols); });

    const std::vector<float> f = fused_out.to_vector(), sep = o.out.to_vector();
    std::printf("%8lld floats, ms median (best):  fused %7.3f (%7.3f)  per-element interpreter %7.3f (%7.3f)  "
                "8 ops %7.3f (%7.3f);  max|diff| from fused: interpreter %.2g, 8 ops %.2g\n",
                static_cast<long long>(n), fused.median, fused.best, interpreted.median, interpreted.best,
                separate.median, separate.best, max_diff(f, interp), max_diff(f, sep));
}

}  // namespace

int main(int argc, char** argv) try {
    const std::string name = argc > 1 ? argv[1] : "native";
    const int reps = argc > 2 ? std::atoi(argv[2]) : 30;
    Registry registry;
    registry.scan(Registry::search_path({}, {}));
    Device& dev = *registry.select(name)->device(0);
    const char* threads = std::getenv("XYLEM_NUM_THREADS");
    std::printf("backend %s, XYLEM_NUM_THREADS=%s; 8-op chain, %d runs (%d at 10k; the interpreter a quarter)\n", name.c_str(),
                threads ? threads : "unset", reps, reps * 50);
    run_size(dev, 1000 * kCols, reps);
    run_size(dev, 10 * kCols, reps * 50);
    return 0;
} catch (const Error& e) {
    std::fprintf(stderr, "xylem-bench-native-fused: error: %s\n", e.what());
    return 1;
}
