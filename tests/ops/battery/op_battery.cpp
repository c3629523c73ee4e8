// xylem-test-op-battery OUT: runs a fixed battery of ops on the native backend, on fixed random
// inputs, and writes every result to OUT (one record per result: name, element count, floats).
// tests/ops/native_determinism_test.cpp runs it under several XYLEM_NUM_THREADS and
// XYLEM_NATIVE_ISA values and compares the files: the same bits for every thread count on one
// instruction-set level, agreement within tolerance across levels.
//
// The shapes are the ones the plugin splits over its workers (GEMMs cut by rows, by columns and
// narrow ones, the conv paths, long reductions, big gathers and scatters, fused programs over
// many tiles, chunked xent) and a few it does not; each is big enough to be split on any
// machine, since the splits are sized by work, not by CPUs.
#include <cstdio>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "support/backends.h"
#include "xylem/fused_builder.h"
#include "xylem/op_calls.h"

using namespace xylem;
using test::upload;
using test::upload_i32;

namespace {

std::mt19937 rng(20261125);

std::vector<float> random(int64_t n, float lo = -1.0f, float hi = 1.0f) {
    std::uniform_real_distribution<float> u(lo, hi);
    std::vector<float> v(static_cast<size_t>(n));
    for (float& x : v) x = u(rng);
    return v;
}

Tensor random_tensor(Device& dev, const Shape& s, float lo = -1.0f, float hi = 1.0f) {
    return upload(dev, s, random(numel(s), lo, hi));
}

std::vector<int32_t> random_labels(int64_t n, int32_t classes) {
    std::uniform_int_distribution<int32_t> u(0, classes - 1);
    std::vector<int32_t> v(static_cast<size_t>(n));
    for (int32_t& x : v) x = u(rng);
    return v;
}

class Writer {
public:
    explicit Writer(const char* path) : out_(path, std::ios::binary) {}
    void add(const std::string& name, const Tensor& t) {
        const std::vector<float> v = t.to_vector();
        const uint64_t len = name.size(), n = v.size();
        out_.write(reinterpret_cast<const char*>(&len), sizeof len);
        out_.write(name.data(), static_cast<std::streamsize>(len));
        out_.write(reinterpret_cast<const char*>(&n), sizeof n);
        out_.write(reinterpret_cast<const char*>(v.data()), static_cast<std::streamsize>(n * sizeof(float)));
    }
    bool ok() { return static_cast<bool>(out_.flush()); }

private:
    std::ofstream out_;
};

struct GemmCase {
    bool ta, tb;
    int64_t m, n, k;
    float beta;
};

void gemms(Device& dev, Writer& w) {
    // Cut by rows (taller than wide), by columns (wider, >= 1e8 FLOPs), narrow (the AVX-512
    // kernel's shapes: the LSTM's per-step products), and small ones that are never cut.
    for (const GemmCase& c : {GemmCase{false, false, 512, 304, 400, 0.0f}, GemmCase{false, true, 400, 2500, 64, 1.0f},
                              GemmCase{true, false, 160, 2000, 256, 0.5f}, GemmCase{true, true, 600, 300, 300, 0.0f},
                              GemmCase{false, false, 64, 3000, 600, 0.0f}, GemmCase{false, false, 512, 50, 128, 1.0f},
                              GemmCase{true, false, 128, 50, 512, 0.0f}, GemmCase{false, false, 300, 47, 200, 0.0f},
                              GemmCase{false, false, 1000, 100, 128, 0.0f}, GemmCase{false, true, 37, 33, 100, 0.0f},
                              GemmCase{true, true, 2500, 96, 130, 1.0f}}) {
        const Tensor a = random_tensor(dev, c.ta ? Shape{c.k, c.m} : Shape{c.m, c.k});
        const Tensor b = random_tensor(dev, c.tb ? Shape{c.n, c.k} : Shape{c.k, c.n});
        Tensor out = random_tensor(dev, {c.m, c.n});
        ops::gemm(dev, c.ta, c.tb, 1.0f, a, b, c.beta, out);
        w.add("gemm " + std::to_string(c.m) + "x" + std::to_string(c.n) + "x" + std::to_string(c.k) +
                  (c.ta ? " A^T" : "") + (c.tb ? " B^T" : ""),
              out);
    }
    const Tensor x = random_tensor(dev, {256, 784}), wt = random_tensor(dev, {300, 784});
    const Tensor bias = random_tensor(dev, {300});
    Tensor y({256, 300}, DType::F32, dev);
    ops::linear_fwd(dev, x, wt, &bias, y, XYLEM_ACT_TANH);
    w.add("linear_fwd 256x784 -> 300 tanh", y);
}

struct ConvCase {
    const char* what;
    Shape x, w;
    int32_t stride, pad;
};

void convs(Device& dev, Writer& w) {
    // LeNet's two layers (direct kernels; conv2's data gradient by im2col), a padded strided one
    // (direct; data gradient by im2col), ResNet-20's 3x3 on 28x28 and 14x14 (Winograd, 7 images
    // in chunks of 3), on 7x7 (Winograd at avx2 and baseline, else direct: the filter gradient
    // in chunks of 6 images, 19 images in slices) and its 1x1 stride-2 projection (direct), a
    // pointwise one on a big plane (a GEMM per image), one image whose forward pass is shared out by
    // blocks of filters, and one whose kernel covers the input (a Linear layer).
    for (const ConvCase& c : {ConvCase{"lenet conv1", {64, 1, 28, 28}, {6, 1, 5, 5}, 1, 0},
                              ConvCase{"lenet conv2", {64, 6, 12, 12}, {16, 6, 5, 5}, 1, 0},
                              ConvCase{"3x3 stride 2 pad 1", {32, 8, 17, 17}, {12, 8, 3, 3}, 2, 1},
                              ConvCase{"resnet 3x3 16ch 28x28", {24, 16, 28, 28}, {16, 16, 3, 3}, 1, 1},
                              ConvCase{"resnet 3x3 32ch 14x14", {7, 32, 14, 14}, {32, 32, 3, 3}, 1, 1},
                              ConvCase{"resnet 3x3 64ch 7x7", {19, 64, 7, 7}, {64, 64, 3, 3}, 1, 1},
                              ConvCase{"resnet 1x1 stride 2", {32, 16, 28, 28}, {32, 16, 1, 1}, 2, 0},
                              ConvCase{"one image, blocks of filters", {1, 128, 7, 7}, {128, 128, 3, 3}, 1, 1},
                              ConvCase{"1x1 on 32x32", {16, 16, 32, 32}, {24, 16, 1, 1}, 1, 0},
                              ConvCase{"kernel covers the input", {128, 4, 6, 6}, {32, 4, 6, 6}, 1, 0}}) {
        xylem_conv2d_attrs at{c.stride, c.stride, c.pad, c.pad, 1, 1, 1, XYLEM_ACT_RELU, 0.0f};
        const Tensor x = random_tensor(dev, c.x), wt = random_tensor(dev, c.w), bias = random_tensor(dev, {c.w[0]});
        const Shape ys = ops::conv2d_output_shape(c.x, c.w, at);
        Tensor y(ys, DType::F32, dev);
        ops::conv2d_fwd(dev, x, wt, &bias, y, at);
        w.add(std::string("conv2d_fwd ") + c.what, y);
        at.activation = XYLEM_ACT_NONE;
        const Tensor dy = random_tensor(dev, ys);
        Tensor dx(c.x, DType::F32, dev), dw(c.w, DType::F32, dev);
        ops::conv2d_bwd_data(dev, dy, wt, dx, at);
        ops::conv2d_bwd_filter(dev, x, dy, dw, at);
        w.add(std::string("conv2d_bwd_data ") + c.what, dx);
        w.add(std::string("conv2d_bwd_filter ") + c.what, dw);
    }
}

void reductions(Device& dev, Writer& w) {
    const Tensor big = random_tensor(dev, {1 << 21});
    Tensor total({1}, DType::F32, dev);
    ops::reduce(dev, big, total, XYLEM_REDUCE_SUM, -1);
    w.add("reduce sum of 2^21", total);
    const Tensor tall = random_tensor(dev, {8192, 300});
    Tensor cols({300}, DType::F32, dev), rows({8192}, DType::F32, dev);
    ops::reduce(dev, tall, cols, XYLEM_REDUCE_SUM, 0);
    ops::reduce(dev, tall, rows, XYLEM_REDUCE_MEAN, 1);
    w.add("reduce sum over 8192 rows", cols);
    w.add("reduce mean over 300 columns", rows);
    const Tensor dy = random_tensor(dev, {64, 32, 24, 24});
    Tensor db({32}, DType::F32, dev);
    ops::bias_grad(dev, dy, db);
    w.add("bias_grad [64,32,24,24]", db);
    Tensor sumsq({1}, DType::F32, dev);
    ops::sum_squares(dev, big, sumsq, 0.0f);
    w.add("sum_squares of 2^21", sumsq);
    Tensor clipped = random_tensor(dev, {1 << 21});
    ops::clip_by_norm(dev, sumsq, clipped, 1.0f);
    w.add("clip_by_norm of 2^21", clipped);
}

void rows_and_losses(Device& dev, Writer& w) {
    const int64_t n = 20000, c = 100;
    const Tensor logits = random_tensor(dev, {n, c}, -4.0f, 4.0f);
    const Tensor labels = upload_i32(dev, {n}, random_labels(n, static_cast<int32_t>(c)));
    Tensor loss({1}, DType::F32, dev), dlogits({n, c}, DType::F32, dev), p({n, c}, DType::F32, dev);
    ops::fill(dev, loss, 0.0f);
    ops::xent_fwd(dev, logits, labels, loss, 1.0f / static_cast<float>(n), false);
    ops::xent_bwd(dev, logits, labels, dlogits, 1.0f / static_cast<float>(n));
    ops::softmax_fwd(dev, true, logits, p);
    w.add("xent_fwd 20000x100", loss);
    w.add("xent_bwd 20000x100", dlogits);
    w.add("log_softmax 20000x100", p);

    // Gathers (a random index and a transposing one) and the scatter that is their gradient.
    const int64_t src_rows = 50000, width = 24;
    const Tensor src = random_tensor(dev, {src_rows, width});
    const Tensor idx = upload_i32(dev, {200000}, random_labels(200000, static_cast<int32_t>(src_rows)));
    Tensor gathered({200000, width}, DType::F32, dev);
    ops::gather_rows(dev, src, idx, gathered);
    w.add("gather_rows 200000 of 50000x24", gathered);
    std::vector<int32_t> transpose(static_cast<size_t>(src_rows));
    for (int64_t i = 0; i < src_rows; ++i)
        transpose[static_cast<size_t>(i)] = static_cast<int32_t>((i % 250) * 200 + i / 250);
    Tensor swapped({src_rows, width}, DType::F32, dev);
    ops::gather_rows(dev, src, upload_i32(dev, {src_rows}, transpose), swapped);
    w.add("gather_rows transposing 250x200 rows", swapped);
    Tensor scattered({src_rows, width}, DType::F32, dev);
    ops::fill(dev, scattered, 0.0f);
    ops::scatter_add_rows(dev, gathered, idx, scattered);
    w.add("scatter_add_rows 200000 into 50000x24", scattered);
}

void elementwise(Device& dev, Writer& w) {
    const int64_t n = 1 << 20;
    const Tensor a = random_tensor(dev, {1024, 1024}), b = random_tensor(dev, {1024, 1024});
    const Tensor row = random_tensor(dev, {1024});
    FusedBuilder fb;
    const auto t = fb.apply(XYLEM_FUSED_TANH, fb.apply(XYLEM_FUSED_MUL, fb.input(0), fb.param(1.5f)));
    const auto e = fb.apply(XYLEM_FUSED_EXP, fb.apply(XYLEM_FUSED_MUL, fb.input(1), fb.constant(0.5f)));
    fb.output(0, fb.apply(XYLEM_FUSED_ADD, fb.apply(XYLEM_FUSED_MUL, t, e), fb.input(2)));
    fb.output(1, fb.apply(XYLEM_FUSED_SIGMOID, fb.apply(XYLEM_FUSED_SUB, e, t)));
    const xylem_fused_attrs at = fb.finish({XYLEM_FUSED_FULL, XYLEM_FUSED_FULL, XYLEM_FUSED_ROW});
    Tensor o0({1024, 1024}, DType::F32, dev), o1({1024, 1024}, DType::F32, dev);
    ops::fused_elementwise(dev, at, {&a, &b, &row}, {&o0, &o1});
    w.add("fused tanh/exp/sigmoid program over 2^20", o0);
    w.add("fused program's second output", o1);
    Tensor act({n}, DType::F32, dev);
    ops::act_fwd(dev, XYLEM_ACT_TANH, a.reshaped({n}), act);
    w.add("tanh over 2^20", act);

    // An Adam step over a layer's worth of parameters.
    Tensor param = random_tensor(dev, {n}), m = random_tensor(dev, {n}, -0.1f, 0.1f);
    Tensor v = random_tensor(dev, {n}, 0.0f, 0.1f);
    const xylem_adam_attrs adam{1e-3f, 0.9f, 0.999f, 1e-8f, 0.01f, 0.1f, 0.001f};
    ops::adam_update(dev, param, m, v, b.reshaped({n}), adam);
    w.add("adam_update of 2^20", param);

    const Tensor x = random_tensor(dev, {128, 16, 10, 10});
    const Tensor gamma = random_tensor(dev, {16}), beta = random_tensor(dev, {16});
    Tensor y({128, 16, 10, 10}, DType::F32, dev), rm({16}, DType::F32, dev), rv({16}, DType::F32, dev);
    Tensor sm({16}, DType::F32, dev), si({16}, DType::F32, dev);
    ops::fill(dev, rm, 0.0f);
    ops::fill(dev, rv, 1.0f);
    const xylem_batchnorm_attrs bn{1e-5f, 0.1f, 1, XYLEM_ACT_NONE};
    ops::batchnorm_fwd(dev, x, gamma, beta, y, rm, rv, sm, si, bn);
    const Tensor dy = random_tensor(dev, {128, 16, 10, 10});
    Tensor dx({128, 16, 10, 10}, DType::F32, dev), dg({16}, DType::F32, dev), dbeta({16}, DType::F32, dev);
    ops::batchnorm_bwd(dev, dy, x, gamma, sm, si, dx, dg, dbeta, bn);
    w.add("batchnorm_fwd", y);
    w.add("batchnorm running_var", rv);
    w.add("batchnorm_bwd dx", dx);
    w.add("batchnorm_bwd dgamma", dg);

    // Rows of 256: training's batch norm channel by channel (ops/norm.cpp), then a ReLU's
    // gradient over 2^20 split among the workers.
    const Tensor x2 = random_tensor(dev, {64, 12, 16, 16}), dy2 = random_tensor(dev, {64, 12, 16, 16});
    const Tensor g2 = random_tensor(dev, {12}), b2 = random_tensor(dev, {12});
    Tensor y2({64, 12, 16, 16}, DType::F32, dev), dx2({64, 12, 16, 16}, DType::F32, dev);
    Tensor rm2({12}, DType::F32, dev), rv2({12}, DType::F32, dev), sm2({12}, DType::F32, dev);
    Tensor si2({12}, DType::F32, dev), dg2({12}, DType::F32, dev), db2({12}, DType::F32, dev);
    ops::fill(dev, rm2, 0.0f);
    ops::fill(dev, rv2, 1.0f);
    ops::batchnorm_fwd(dev, x2, g2, b2, y2, rm2, rv2, sm2, si2, bn);
    ops::batchnorm_bwd(dev, dy2, x2, g2, sm2, si2, dx2, dg2, db2, bn);
    w.add("batchnorm_fwd, rows of 256", y2);
    w.add("batchnorm_bwd dx, rows of 256", dx2);
    w.add("batchnorm_bwd dbeta, rows of 256", db2);
    Tensor relu_dx({n}, DType::F32, dev);
    ops::act_bwd(dev, XYLEM_ACT_RELU, b.reshaped({n}), a.reshaped({n}), relu_dx);
    w.add("relu gradient over 2^20", relu_dx);
}

// ABI 1.7. Attention's backward runs in one pass per head when the heads keep the CPUs busy and
// in two (key blocks, then query blocks) when they do not: 2 heads take the one pass at one
// thread and the two at more, 12 heads switch at 8 threads; both must give the same bits. Layer
// norm's parameter gradients come from chunks of rows, gemm_batched shares out its matrices.
void transformer(Device& dev, Writer& w) {
    struct Case {
        const char* name;
        int64_t b, h, t, d;
        bool causal, mask;
        float dropout;
    };
    for (const Case& c : {Case{"2 heads, T 150, masked, dropout", 1, 2, 150, 24, true, true, 0.1f},
                          Case{"12 heads, T 70", 3, 4, 70, 16, true, false, 0.0f},
                          Case{"4 heads, T 200, D 64, full", 2, 2, 200, 64, false, false, 0.0f}}) {
        const Shape qs{c.b, c.h, c.t, c.d}, ls{c.b, c.h, c.t};
        const Tensor q = random_tensor(dev, qs), k = random_tensor(dev, qs), v = random_tensor(dev, qs);
        const Tensor mask = random_tensor(dev, {c.t, c.t}), dout = random_tensor(dev, qs);
        const xylem_attention_attrs at{0.25f, c.causal ? 1 : 0, c.dropout, 0, 99};
        Tensor o(qs, DType::F32, dev), lse(ls, DType::F32, dev);
        Tensor dq(qs, DType::F32, dev), dk(qs, DType::F32, dev), dv(qs, DType::F32, dev);
        ops::attention_fwd(dev, q, k, v, c.mask ? &mask : nullptr, o, lse, at);
        ops::attention_bwd(dev, dout, q, k, v, o, lse, c.mask ? &mask : nullptr, dq, dk, dv, at);
        const std::string name = std::string("attention ") + c.name;
        w.add(name + " O", o);
        w.add(name + " LSE", lse);
        w.add(name + " dQ", dq);
        w.add(name + " dK", dk);
        w.add(name + " dV", dv);
    }
    const Tensor x = random_tensor(dev, {3000, 96}), dy = random_tensor(dev, {3000, 96});
    const Tensor gamma = random_tensor(dev, {96}), beta = random_tensor(dev, {96});
    Tensor y({3000, 96}, DType::F32, dev), mean({3000}, DType::F32, dev), rstd({3000}, DType::F32, dev);
    Tensor dx({3000, 96}, DType::F32, dev), dg({96}, DType::F32, dev), db({96}, DType::F32, dev);
    ops::layer_norm_fwd(dev, x, gamma, &beta, y, mean, rstd, 1e-5f);
    ops::layer_norm_bwd(dev, dy, x, gamma, mean, rstd, dx, dg, &db, 1e-5f, 0.0f);
    w.add("layer_norm_fwd", y);
    w.add("layer_norm_bwd dx", dx);
    w.add("layer_norm_bwd dgamma", dg);
    w.add("layer_norm_bwd dbeta", db);
    const Tensor a = random_tensor(dev, {8, 96, 64}), b = random_tensor(dev, {64, 80});
    Tensor cb({8, 96, 80}, DType::F32, dev);
    ops::gemm_batched(dev, false, false, 1.0f, a, b, 0.0f, cb);
    w.add("gemm_batched of 8 with B broadcast", cb);
    Tensor ms({8, 96, 64}, DType::F32, dev);
    ops::masked_softmax(dev, a, nullptr, ms, nullptr, 0.5f, true);
    w.add("masked_softmax causal", ms);
}

}  // namespace

int main(int argc, char** argv) {
    if (argc != 2) {
        std::fprintf(stderr, "usage: xylem-test-op-battery OUT\n");
        return 2;
    }
    try {
        auto backend = test::backend_named("native");
        if (!backend) {
            std::fprintf(stderr, "xylem-test-op-battery: no native backend in %s\n", XYLEM_TEST_PLUGIN_DIR);
            return 3;
        }
        Device& dev = *backend->device(0);
        Writer w(argv[1]);
        gemms(dev, w);
        convs(dev, w);
        reductions(dev, w);
        rows_and_losses(dev, w);
        elementwise(dev, w);
        transformer(dev, w);
        if (!w.ok()) {
            std::fprintf(stderr, "xylem-test-op-battery: cannot write %s\n", argv[1]);
            return 1;
        }
    } catch (const std::exception& e) {
        std::fprintf(stderr, "xylem-test-op-battery: %s\n", e.what());
        return 1;
    }
    return 0;
}
