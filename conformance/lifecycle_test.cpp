// Lifecycle checks of the conformance kit: what a plugin must do besides computing ops right.
// One framework per plugin however often it is loaded; many streams; two threads at once; the
// core's refusal of another ABI major version naming both versions; and a training step that
// moves no more data than its input batch.
#include <cstring>
#include <thread>

#include "support/backends.h"
#include "xylem/layers/elementwise.h"
#include "xylem/layers/linear.h"
#include "xylem/layers/loss.h"
#include "xylem/layers/net.h"
#include "xylem/op_calls.h"
#include "xylem/registry.h"
#include "xylem/solvers/solver.h"
#include "xylem/transfer.h"

namespace xylem::test {
namespace {

class Lifecycle : public BackendTest {
protected:
    const xylem_plugin& api() { return backend().api(); }
    xylem_framework_t fw() { return backend().framework(); }

    // Runs FILL on a raw stream when the plugin has it, else copies in; returns what d2h reads back.
    std::vector<float> round_trip(xylem_stream_t s, float value, int64_t n, std::string* error) {
        const uint64_t bytes = static_cast<uint64_t>(n) * sizeof(float);
        xylem_buffer_t buf = nullptr;
        std::vector<float> in(static_cast<size_t>(n), value), out(static_cast<size_t>(n), -1.0f);
        auto ok = [&](xylem_status st, const char* what) {
            if (st != XYLEM_OK && error->empty()) *error = std::string(what) + ": " + api().last_error();
            return st == XYLEM_OK;
        };
        if (!ok(api().buffer_alloc(fw(), 0, bytes, &buf), "buffer_alloc")) return out;
        if (backend().supports(XYLEM_OP_FILL)) {
            xylem_tensor_arg t{buf, 0, XYLEM_F32, 1, {n}};
            xylem_fill_attrs a{value};
            xylem_op_desc d{XYLEM_OP_FILL, 0, 1, sizeof a, nullptr, &t, &a};
            ok(api().op_run(fw(), s, &d), "op_run(fill)");
        } else {
            ok(api().copy_h2d(fw(), s, buf, 0, in.data(), bytes), "copy_h2d");
        }
        ok(api().copy_d2h(fw(), s, out.data(), buf, 0, bytes), "copy_d2h");
        ok(api().stream_sync(fw(), s), "stream_sync");
        api().buffer_free(fw(), buf);
        return out;
    }
};
XYLEM_INSTANTIATE_OVER_BACKENDS(Lifecycle);

// The plugin file loaded by two registries is one Backend, and framework_get keeps returning
// the one instance (the Leaf #88 "cannot instantiate the framework twice" scenario).
TEST_P(Lifecycle, LoadingTwiceGivesOneFramework) {
    Registry a, b;
    const PluginRecord& ra = a.load_file(backend().path());
    const PluginRecord& rb = b.load_file(backend().path());
    ASSERT_TRUE(ra.loaded && rb.loaded) << ra.reason << " / " << rb.reason;
    EXPECT_EQ(ra.backend.get(), rb.backend.get());
    xylem_framework_t f1 = nullptr, f2 = nullptr;
    ASSERT_EQ(api().framework_get(&f1), XYLEM_OK) << api().last_error();
    ASSERT_EQ(api().framework_get(&f2), XYLEM_OK) << api().last_error();
    EXPECT_EQ(f1, f2) << "framework_get created a second framework instance";
    EXPECT_EQ(f1, fw());
}

// Many streams live at once, each usable, all destroyed again.
TEST_P(Lifecycle, ManyStreams) {
    std::vector<xylem_stream_t> streams(64, nullptr);
    for (xylem_stream_t& s : streams) ASSERT_EQ(api().stream_create(fw(), 0, &s), XYLEM_OK) << api().last_error();
    for (size_t i = 0; i < streams.size(); ++i) {
        std::string error;
        const std::vector<float> got = round_trip(streams[i], static_cast<float>(i), 33, &error);
        EXPECT_EQ(error, "") << "stream " << i;
        EXPECT_EQ(got, std::vector<float>(33, static_cast<float>(i))) << "stream " << i;
    }
    for (xylem_stream_t s : streams) api().stream_destroy(fw(), s);
}

// Two threads, each with its own stream, use the plugin at the same time.
TEST_P(Lifecycle, TwoThreadsConcurrently) {
    std::string errors[2];
    int wrong[2] = {0, 0};
    auto work = [&](int t) {
        xylem_stream_t s = nullptr;
        if (api().stream_create(fw(), 0, &s) != XYLEM_OK) {
            errors[t] = std::string("stream_create: ") + api().last_error();
            return;
        }
        for (int i = 0; i < 200 && errors[t].empty(); ++i) {
            const float v = static_cast<float>(t * 1000 + i);
            if (round_trip(s, v, 1000 + t, &errors[t]) != std::vector<float>(1000 + t, v)) ++wrong[t];
        }
        api().stream_destroy(fw(), s);
    };
    std::thread a(work, 0), b(work, 1);
    a.join();
    b.join();
    for (int t = 0; t < 2; ++t) {
        EXPECT_EQ(errors[t], "") << "thread " << t;
        EXPECT_EQ(wrong[t], 0) << "thread " << t << " read back wrong values";
    }
}

// The plugin's own table is accepted; the same table claiming the next major version is refused
// with a message naming both versions; struct_size covers the minor version it claims.
TEST_P(Lifecycle, AbiVersionChecks) {
    const xylem_plugin& t = api();
    EXPECT_EQ(Registry::check_table(&t), "");
    EXPECT_EQ(t.abi_major, static_cast<uint32_t>(XYLEM_ABI_MAJOR));
    // The table's length at each minor: the members a minor added end where the next minor's begin.
    const size_t size_for_minor = t.abi_minor >= 7   ? sizeof(xylem_plugin)
                                  : t.abi_minor == 6 ? offsetof(xylem_plugin, op_accepts)
                                  : t.abi_minor >= 3 ? offsetof(xylem_plugin, comm_unique_id)
                                  : t.abi_minor == 2 ? offsetof(xylem_plugin, device_kinds)
                                                     : offsetof(xylem_plugin, capture_begin);
    EXPECT_GE(t.struct_size, size_for_minor) << "struct_size is too small for ABI " << t.abi_major << "." << t.abi_minor;

    xylem_plugin future{};
    std::memcpy(&future, &t, std::min<size_t>(t.struct_size, sizeof future));
    future.abi_major = XYLEM_ABI_MAJOR + 1;
    const std::string msg = Registry::check_table(&future);
    const std::string theirs = std::to_string(XYLEM_ABI_MAJOR + 1) + "." + std::to_string(t.abi_minor);
    const std::string ours = std::to_string(XYLEM_ABI_MAJOR) + "." + std::to_string(XYLEM_ABI_MINOR);
    EXPECT_TRUE(contains(msg, "ABI " + theirs));
    EXPECT_TRUE(contains(msg, "ABI " + ours));
}

// An MLP training step (forward, loss, backward, SGD) moves at most its input batch: images and
// labels host->device, nothing back; on a host-memory plugin, nothing at all.
TEST_P(Lifecycle, TransfersPerTrainingStepWithinBudget) {
    for (uint32_t op : {XYLEM_OP_FILL, XYLEM_OP_LINEAR_FWD, XYLEM_OP_GEMM, XYLEM_OP_BIAS_GRAD, XYLEM_OP_ACT_FWD, XYLEM_OP_ACT_BWD,
                        XYLEM_OP_XENT_FWD, XYLEM_OP_XENT_BWD, XYLEM_OP_SGD_UPDATE})
        XYLEM_REQUIRE_OP(op);
    Net model;
    model.add(std::make_unique<Linear>(32, true));
    model.add(std::make_unique<Activation>(XYLEM_ACT_RELU));
    model.add(std::make_unique<Linear>(10, true));
    model.build(dev(), {20}, 1);
    for (Param* p : model.state()) p->value.upload(dev());
    CrossEntropyLoss loss;
    Sgd sgd(SgdOptions{0.01f, 0.9f, 0.0f, 0.0f, false});
    Tensor x({16, 20}, DType::F32, dev()), y({16}, DType::I32, dev()), loss_sum({1}, DType::F32, dev());
    ops::fill(dev(), loss_sum, 0.0f);
    Rng rng;
    constexpr int kSteps = 5;
    TransferCounts moved{};
    for (int step = 0; step < kSteps; ++step) {
        const auto xs = rng.uniform(16 * 20);
        const auto ys = rng.labels(16, 10);
        std::memcpy(x.host_write<float>(), xs.data(), xs.size() * sizeof(float));
        std::memcpy(y.host_write<int32_t>(), ys.data(), ys.size() * sizeof(int32_t));
        const TransferCounts before = transfer_counts();
        x.upload(dev());
        y.upload(dev());
        {
            StrictTransfers strict;  // an implicit copy inside the step throws and fails the check
            const Tensor& out = model.forward(dev(), x, true);
            loss.forward(dev(), out, y, loss_sum);
            model.backward(dev(), loss.backward(dev(), out, y));
            sgd.step(dev(), model.params());
        }
        dev().sync();
        const TransferCounts d = transfer_counts() - before;
        moved.h2d_count += d.h2d_count;
        moved.d2h_count += d.d2h_count;
    }
    EXPECT_LE(moved.h2d_count, 2u * kSteps) << "host->device copies in " << kSteps << " steps";
    EXPECT_EQ(moved.d2h_count, 0u) << "device->host copies in " << kSteps << " steps";
    if (dev().host_memory()) {
        EXPECT_EQ(moved.count(), 0u) << "a host-memory plugin needs no copies";
    }
    EXPECT_TRUE(std::isfinite(loss_sum.to_vector()[0]));
}

}  // namespace
}  // namespace xylem::test
