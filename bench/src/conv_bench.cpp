// Per-call time of the convolutions of ResNet-20 on 28x28 Fashion-MNIST at batch 128
// (examples/fashion_resnet.toml) and of LeNet at batch 64 (examples/fashion_lenet.toml): forward,
// data gradient and filter gradient of each distinct shape, medians of `reps` timed calls (each
// synced; XYLEM_BENCH_MIN=1: the fastest, for a busy machine), and the ResNet step's conv total
// (each shape times its count in the model). "+db": what the filter gradient's op takes longer
// when it also writes the bias gradient (ABI 1.9: the Flux #558 reduction inside the op).
// Usage: xylem-bench-conv [backend] [reps] [filter]   (filter: run only shapes whose name holds it)
// A/B of two native plugin builds, alternating: XYLEM_PLUGIN_PATH=DIR picks the one in DIR; one
// core: XYLEM_NUM_THREADS=1; a level: XYLEM_NATIVE_ISA=avx2 (docs/benchmarks.md). On a machine
// others load, XYLEM_BENCH_CPU=1 times the process's CPU time instead of the wall clock (with one
// thread: the time the op ran, not the time it waited for a CPU). Then ResNet-20's batch norms
// (training forward and backward) and ReLUs, timed alike.
#include <algorithm>
#include <chrono>
#include <ctime>
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
    Shape x, w;
    int stride, pad;
    int count;  // how many convs of this shape one step runs (ResNet-20), 1 for LeNet
    bool data_grad;  // the model needs dX (not for the first layer)
    bool forward_only = false;  // an inference shape (ImageNet models imported from ONNX): no gradients
    int groups = 1;
};

const Case kCases[] = {
    {"resnet stem 1->16 28x28", {128, 1, 28, 28}, {16, 1, 3, 3}, 1, 1, 1, false},
    {"resnet 16->16 28x28", {128, 16, 28, 28}, {16, 16, 3, 3}, 1, 1, 6, true},
    {"resnet 16->32 s2 28->14", {128, 16, 28, 28}, {32, 16, 3, 3}, 2, 1, 1, true},
    {"resnet 1x1 16->32 s2", {128, 16, 28, 28}, {32, 16, 1, 1}, 2, 0, 1, true},
    {"resnet 32->32 14x14", {128, 32, 14, 14}, {32, 32, 3, 3}, 1, 1, 5, true},
    {"resnet 32->64 s2 14->7", {128, 32, 14, 14}, {64, 32, 3, 3}, 2, 1, 1, true},
    {"resnet 1x1 32->64 s2", {128, 32, 14, 14}, {64, 32, 1, 1}, 2, 0, 1, true},
    {"resnet 64->64 7x7", {128, 64, 7, 7}, {64, 64, 3, 3}, 1, 1, 5, true},
    {"lenet conv1 1->20 5x5", {64, 1, 28, 28}, {20, 1, 5, 5}, 1, 0, 1, false},
    {"lenet conv2 20->50 5x5", {64, 20, 12, 12}, {50, 20, 5, 5}, 1, 0, 1, true},
    // Inference at 224x224, batch 1 (ONNX import vs ONNX Runtime, docs/benchmarks.md): ResNet-18's
    // distinct 3x3 shapes and stem, and MobileNetV2's depthwise 3x3s (groups = channels).
    {"r18 stem 3->64 7x7 s2 b1", {1, 3, 224, 224}, {64, 3, 7, 7}, 2, 3, 1, false, true},
    {"r18 64->64 56x56 b1", {1, 64, 56, 56}, {64, 64, 3, 3}, 1, 1, 4, false, true},
    {"r18 128->128 28x28 b1", {1, 128, 28, 28}, {128, 128, 3, 3}, 1, 1, 3, false, true},
    {"r18 256->256 14x14 b1", {1, 256, 14, 14}, {256, 256, 3, 3}, 1, 1, 3, false, true},
    {"r18 512->512 7x7 b1", {1, 512, 7, 7}, {512, 512, 3, 3}, 1, 1, 3, false, true},
    {"r18 256->512 s2 14->7 b1", {1, 256, 14, 14}, {512, 256, 3, 3}, 2, 1, 1, false, true},
    {"r18 64->64 56x56 b16", {16, 64, 56, 56}, {64, 64, 3, 3}, 1, 1, 4, false, true},
    {"r18 128->128 28x28 b16", {16, 128, 28, 28}, {128, 128, 3, 3}, 1, 1, 3, false, true},
    {"r18 256->256 14x14 b16", {16, 256, 14, 14}, {256, 256, 3, 3}, 1, 1, 3, false, true},
    {"r18 512->512 7x7 b16", {16, 512, 7, 7}, {512, 512, 3, 3}, 1, 1, 3, false, true},
    {"mbv2 stem 3->32 s2 b1", {1, 3, 224, 224}, {32, 3, 3, 3}, 2, 1, 1, false, true},
    {"mbv2 stem 3->32 s2 b16", {16, 3, 224, 224}, {32, 3, 3, 3}, 2, 1, 1, false, true},
    {"mbv2 dw 32 112x112 b1", {1, 32, 112, 112}, {32, 1, 3, 3}, 1, 1, 1, false, true, 32},
    {"mbv2 dw 144 56x56 s2 b1", {1, 144, 56, 56}, {144, 1, 3, 3}, 2, 1, 1, false, true, 144},
    {"mbv2 dw 576 14x14 b1", {1, 576, 14, 14}, {576, 1, 3, 3}, 1, 1, 1, false, true, 576},
    {"mbv2 dw 960 7x7 b1", {1, 960, 7, 7}, {960, 1, 3, 3}, 1, 1, 1, false, true, 960},
    {"mbv2 dw 144 56x56 b16", {16, 144, 56, 56}, {144, 1, 3, 3}, 1, 1, 1, false, true, 144},
    {"mbv2 dw 96 112x112 s2 b16", {16, 96, 112, 112}, {96, 1, 3, 3}, 2, 1, 1, false, true, 96},
    {"mbv2 dw 192 28x28 b16", {16, 192, 28, 28}, {192, 1, 3, 3}, 1, 1, 1, false, true, 192},
    {"mbv2 dw 384 14x14 b16", {16, 384, 14, 14}, {384, 1, 3, 3}, 1, 1, 1, false, true, 384},
    // and its pointwise (1x1) convolutions, expanding and projecting
    {"mbv2 pw 16->96 112x112 b1", {1, 16, 112, 112}, {96, 16, 1, 1}, 1, 0, 1, false, true},
    {"mbv2 pw 144->24 56x56 b1", {1, 144, 56, 56}, {24, 144, 1, 1}, 1, 0, 1, false, true},
    {"mbv2 pw 32->192 28x28 b1", {1, 32, 28, 28}, {192, 32, 1, 1}, 1, 0, 1, false, true},
    {"mbv2 pw 576->96 14x14 b1", {1, 576, 14, 14}, {96, 576, 1, 1}, 1, 0, 1, false, true},
    {"mbv2 pw 160->960 7x7 b1", {1, 160, 7, 7}, {960, 160, 1, 1}, 1, 0, 1, false, true},
    {"mbv2 pw 960->160 7x7 b1", {1, 960, 7, 7}, {160, 960, 1, 1}, 1, 0, 1, false, true},
    {"mbv2 pw 320->1280 7x7 b1", {1, 320, 7, 7}, {1280, 320, 1, 1}, 1, 0, 1, false, true},
    {"mbv2 pw 16->96 112x112 b16", {16, 16, 112, 112}, {96, 16, 1, 1}, 1, 0, 1, false, true},
    {"mbv2 pw 24->144 56x56 b16", {16, 24, 56, 56}, {144, 24, 1, 1}, 1, 0, 1, false, true},
    {"mbv2 pw 144->24 56x56 b16", {16, 144, 56, 56}, {24, 144, 1, 1}, 1, 0, 1, false, true},
    {"mbv2 pw 32->192 28x28 b16", {16, 32, 28, 28}, {192, 32, 1, 1}, 1, 0, 1, false, true},
    {"mbv2 pw 192->32 28x28 b16", {16, 192, 28, 28}, {32, 192, 1, 1}, 1, 0, 1, false, true},
    {"mbv2 pw 32->16 112x112 b16", {16, 32, 112, 112}, {16, 32, 1, 1}, 1, 0, 1, false, true},
    {"r50 pw 64->256 56x56 b1", {1, 64, 56, 56}, {256, 64, 1, 1}, 1, 0, 1, false, true},
    {"r50 pw 256->64 56x56 b1", {1, 256, 56, 56}, {64, 256, 1, 1}, 1, 0, 1, false, true},
    {"r50 pw 128->512 28x28 b1", {1, 128, 28, 28}, {512, 128, 1, 1}, 1, 0, 1, false, true},
};

Tensor random_tensor(Device& dev, const Shape& s, std::mt19937& rng) {
    Tensor t(s, DType::F32, dev);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    float* p = t.host_write<float>();
    for (int64_t i = 0; i < t.numel(); ++i) p[i] = u(rng);
    return t;
}

bool use_min = false;  // XYLEM_BENCH_MIN=1: the fastest call instead of the median (a loaded machine)
bool use_cpu = false;  // XYLEM_BENCH_CPU=1: process CPU time instead of wall time

double now_us() {
    if (!use_cpu) return std::chrono::duration<double, std::micro>(Clock::now().time_since_epoch()).count();
    timespec ts{};
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return static_cast<double>(ts.tv_sec) * 1e6 + static_cast<double>(ts.tv_nsec) / 1e3;
}

template <class F>
double median_us(Device& dev, int reps, F f) {
    f();  // warm-up: scratch grown, pages touched
    dev.sync();
    std::vector<double> t;
    for (int i = 0; i < reps; ++i) {
        const double t0 = now_us();
        f();
        dev.sync();
        t.push_back(now_us() - t0);
    }
    std::sort(t.begin(), t.end());
    return use_min ? t[0] : t[t.size() / 2];
}

}  // namespace

int main(int argc, char** argv) try {
    const std::string name = argc > 1 ? argv[1] : "native";
    const int reps = argc > 2 ? std::atoi(argv[2]) : 15;
    const std::string filter = argc > 3 ? argv[3] : "";
    use_min = std::getenv("XYLEM_BENCH_MIN") && std::strcmp(std::getenv("XYLEM_BENCH_MIN"), "1") == 0;
    use_cpu = std::getenv("XYLEM_BENCH_CPU") && std::strcmp(std::getenv("XYLEM_BENCH_CPU"), "1") == 0;
    Registry registry;
    registry.scan(Registry::search_path({}, {}));
    Device& dev = *registry.select(name)->device(0);
    std::mt19937 rng(1);
    double resnet_ms = 0;
    const bool with_db = ops::conv2d_bwd_filter_takes_bias(dev.backend());
    std::printf("%-26s %10s %10s %10s %10s   (us per call, %s of %d)\n", "shape", "fwd", "bwd_data", "bwd_filter",
                with_db ? "+db" : "", use_min ? "fastest" : "median", reps);
    for (const Case& c : kCases) {
        if (!filter.empty() && std::string(c.name).find(filter) == std::string::npos) continue;
        // The inference shapes as the imported models run them: batch norm folded into a bias, the
        // activation fused (MobileNetV2's ReLU6, ResNet-18's ReLU).
        const int act = !c.forward_only                      ? XYLEM_ACT_NONE
                        : std::strncmp(c.name, "mbv2", 4) == 0 ? XYLEM_ACT_RELU6
                                                               : XYLEM_ACT_RELU;
        const xylem_conv2d_attrs at{c.stride, c.stride, c.pad, c.pad, 1, 1, c.groups, act, 0.0f};
        const Shape ys = ops::conv2d_output_shape(c.x, c.w, at);
        Tensor x = random_tensor(dev, c.x, rng), w = random_tensor(dev, c.w, rng), dy = random_tensor(dev, ys, rng);
        Tensor y(ys, DType::F32, dev), dx(c.x, DType::F32, dev), dw(c.w, DType::F32, dev);
        Tensor bias = random_tensor(dev, Shape{c.w[0]}, rng);
        const Tensor* b = c.forward_only ? &bias : nullptr;
        const double f = median_us(dev, reps, [&] { ops::conv2d_fwd(dev, x, w, b, y, at); });
        const double d = c.data_grad ? median_us(dev, reps, [&] { ops::conv2d_bwd_data(dev, dy, w, dx, at); }) : 0.0;
        const double g =
            c.forward_only ? 0.0 : median_us(dev, reps, [&] { ops::conv2d_bwd_filter(dev, x, dy, dw, at); });
        Tensor db(Shape{c.w[0]}, DType::F32, dev);
        const double gb = c.forward_only || !with_db
                              ? 0.0
                              : median_us(dev, reps, [&] { ops::conv2d_bwd_filter(dev, x, dy, dw, at, &db); });
        if (gb > 0) std::printf("%-26s %10.0f %10.0f %10.0f %10.0f\n", c.name, f, d, g, gb - g);
        else std::printf("%-26s %10.0f %10.0f %10.0f\n", c.name, f, d, g);
        if (std::strncmp(c.name, "resnet", 6) == 0) resnet_ms += c.count * (f + d + g) / 1000.0;
    }
    if (filter.empty()) std::printf("resnet-20 step, convs only: %.1f ms\n", resnet_ms);
    // ResNet-20's batch norms and ReLUs at batch 128: 7, 7 and 7 of each shape per step (with the
    // projections' batch norms), 7, 6 and 6 ReLUs outside the fused residual adds.
    struct Map {
        const char* name;
        Shape x;
        int bn, relu;
    };
    const Map kMaps[] = {{"16x28x28", {128, 16, 28, 28}, 7, 7},
                         {"32x14x14", {128, 32, 14, 14}, 7, 6},
                         {"64x7x7", {128, 64, 7, 7}, 7, 6}};
    if (filter.empty() || filter == "pool") {  // ResNet-18's max pool (3x3 stride 2 pad 1) at 112x112, batch 1 and 16
        const xylem_pool2d_attrs at{XYLEM_POOL_MAX, 3, 3, 2, 2, 1, 1, 1};
        for (const int64_t n : {1, 16}) {
            const Shape xs{n, 64, 112, 112};
            Tensor x = random_tensor(dev, xs, rng), y(ops::pool2d_output_shape(xs, at), DType::F32, dev);
            const double f = median_us(dev, reps, [&] { ops::pool2d_fwd(dev, x, y, at); });
            std::printf("%-26s %10.0f\n", n == 1 ? "r18 maxpool 3x3 s2 b1" : "r18 maxpool 3x3 s2 b16", f);
        }
    }
    if (filter.empty() || filter == "bn") {
        double step_ms = 0;
        std::printf("%-26s %10s %10s %10s %10s\n", "batch norm / relu", "bn_fwd", "bn_bwd", "relu_fwd", "relu_bwd");
        for (const Map& m : kMaps) {
            const Shape c{m.x[1]};
            Tensor x = random_tensor(dev, m.x, rng), dy = random_tensor(dev, m.x, rng);
            Tensor y(m.x, DType::F32, dev), dx(m.x, DType::F32, dev);
            Tensor g = random_tensor(dev, c, rng), b = random_tensor(dev, c, rng), rm = random_tensor(dev, c, rng);
            Tensor rv = random_tensor(dev, c, rng), sm(c, DType::F32, dev), si(c, DType::F32, dev);
            Tensor dg(c, DType::F32, dev), db(c, DType::F32, dev);
            const xylem_batchnorm_attrs at{1e-5f, 0.1f, 1, XYLEM_ACT_NONE};
            const double bf = median_us(dev, reps, [&] { ops::batchnorm_fwd(dev, x, g, b, y, rm, rv, sm, si, at); });
            const double bb =
                median_us(dev, reps, [&] { ops::batchnorm_bwd(dev, dy, x, g, sm, si, dx, dg, db, at); });
            const double rf = median_us(dev, reps, [&] { ops::act_fwd(dev, XYLEM_ACT_RELU, x, y); });
            const double rb = median_us(dev, reps, [&] { ops::act_bwd(dev, XYLEM_ACT_RELU, dy, y, dx); });
            std::printf("%-26s %10.0f %10.0f %10.0f %10.0f\n", m.name, bf, bb, rf, rb);
            step_ms += (m.bn * (bf + bb) + m.relu * (rf + rb)) / 1000.0;
        }
        std::printf("resnet-20 step, batch norms and relus: %.1f ms\n", step_ms);
    }
    return 0;
} catch (const Error& e) {
    std::fprintf(stderr, "xylem-bench-conv: error: %s\n", e.what());
    return 1;
}
