// CUDA plugin tests that need no GPU: the built plugin loads through the registry, reports why it
// cannot run (with the CUDA runtime's own error text), `xylem backends` shows that, and every entry
// point fails cleanly. On a machine with a GPU the same tests check the device listing and the one
// framework instead; the op conformance suite and gradient checks then run on cuda as well.
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdio>
#include <string>

#include "cuda/cuda_test_util.h"
#include "support/backends.h"
#include "xylem/error.h"
#include "xylem/plugin_api.h"
#include "xylem/registry.h"

namespace xylem {
namespace {

using cuda_test::have_gpu;
using cuda_test::kPluginFile;
using cuda_test::runtime_view;
using cuda_test::RuntimeView;
using cuda_test::table;

const PluginRecord& cuda_record() {
    const PluginRecord* r = test::test_registry().find("cuda");
    if (!r) throw std::runtime_error("the registry has no cuda plugin from " + std::string(XYLEM_TEST_PLUGIN_DIR));
    return *r;
}

// Runs a command; returns its exit status and fills out with stdout + stderr.
int run(const std::string& cmd, std::string& out) {
    FILE* p = popen((cmd + " 2>&1").c_str(), "r");
    if (!p) return -1;
    char buf[512];
    while (size_t n = fread(buf, 1, sizeof buf, p)) out.append(buf, n);
    const int status = pclose(p);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

TEST(CudaPlugin, LoadsThroughTheRegistryWithItsNameAndAbi) {
    const PluginRecord& r = cuda_record();
    EXPECT_TRUE(r.loaded) << r.reason;
    EXPECT_EQ(r.name, "cuda");
    EXPECT_EQ(r.abi, std::to_string(XYLEM_ABI_MAJOR) + "." + std::to_string(XYLEM_ABI_MINOR));
    EXPECT_NE(std::string(r.probe.detail).find("cuDNN"), std::string::npos) << r.probe.detail;
}

TEST(CudaPlugin, ProbeReportsNoDeviceWithTheRuntimeErrorText) {
    if (have_gpu()) GTEST_SKIP() << "this machine has a GPU: see ProbeListsEveryDevice";
    const PluginRecord& r = cuda_record();
    const RuntimeView rt = runtime_view();
    EXPECT_FALSE(r.available);
    EXPECT_EQ(r.probe.available, 0);
    EXPECT_EQ(r.probe.device_count, 0u);
    EXPECT_EQ(r.reason.rfind("no CUDA device", 0), 0u) << r.reason;
    if (rt.error != cudaSuccess) {
        EXPECT_TRUE(test::contains(r.reason, cudaGetErrorString(rt.error)));
    }
}

TEST(CudaPlugin, ProbeListsEveryDevice) {
    if (!have_gpu()) GTEST_SKIP() << "no GPU here";
    const PluginRecord& r = cuda_record();
    ASSERT_TRUE(r.available) << r.reason;
    EXPECT_EQ(r.probe.device_count, static_cast<uint32_t>(runtime_view().devices));
    for (uint32_t d = 0; d < r.probe.device_count; ++d) {
        EXPECT_TRUE(test::contains(r.probe.devices[d].detail, "compute capability"));
        EXPECT_GT(r.probe.devices[d].memory_bytes, 0u);
        EXPECT_GT(r.probe.devices[d].compute_units, 0u);
    }
}

// Device kinds (ABI 1.3): a discrete GPU, or an integrated one where the runtime says so; without
// a device the member answers nothing and leaves the array alone.
TEST(CudaPlugin, DeviceKindsFollowTheRuntimesIntegratedFlag) {
    const xylem_plugin& t = table();
    ASSERT_TRUE(XYLEM_TABLE_HAS(&t, device_kinds));
    uint32_t kinds[XYLEM_MAX_PROBE_DEVICES] = {};
    t.device_kinds(kinds, XYLEM_MAX_PROBE_DEVICES);
    const int n = runtime_view().devices;
    for (int d = 0; d < XYLEM_MAX_PROBE_DEVICES; ++d) {
        uint32_t expected = XYLEM_DEVICE_KIND_UNKNOWN;
        cudaDeviceProp p{};
        if (d < n && cudaGetDeviceProperties(&p, d) == cudaSuccess)
            expected = p.integrated ? XYLEM_DEVICE_INTEGRATED_GPU : XYLEM_DEVICE_DISCRETE_GPU;
        EXPECT_EQ(kinds[d], expected) << "device " << d;
    }
    EXPECT_EQ(cuda_record().device_kinds.size(), cuda_record().probe.device_count);
}

TEST(CudaPlugin, BackendsCommandListsCudaAndExitsZero) {
    std::string out;
    const int rc = run(std::string(XYLEM_BINARY_DIR) + "/bin/xylem backends --plugin-path " + XYLEM_TEST_PLUGIN_DIR, out);
    EXPECT_EQ(rc, 0) << out;
    EXPECT_TRUE(test::contains(out, "cuda")) << out;
    EXPECT_TRUE(test::contains(out, "libxylem_cuda.so"));
    const char* expected = have_gpu() ? "compute capability" : "reason: no CUDA device";
    EXPECT_TRUE(test::contains(out, expected));
}

TEST(CudaPlugin, SelectingItWithoutADeviceSaysWhy) {
    if (have_gpu()) GTEST_SKIP() << "this machine has a GPU";
    try {
        test::test_registry().select("cuda");
        ADD_FAILURE() << "select(\"cuda\") succeeded without a device";
    } catch (const Error& e) {
        EXPECT_TRUE(test::contains(e.what(), "no CUDA device"));
    }
}

// Every entry point answers XYLEM_E_UNAVAILABLE with the reason; nothing crashes.
TEST(CudaPlugin, EntryPointsFailCleanlyWithoutADevice) {
    if (have_gpu()) GTEST_SKIP() << "this machine has a GPU";
    const xylem_plugin& t = table();
    xylem_framework_t fw = reinterpret_cast<xylem_framework_t>(0x1);
    ASSERT_EQ(t.framework_get(&fw), XYLEM_E_UNAVAILABLE);
    EXPECT_EQ(fw, nullptr);
    EXPECT_TRUE(test::contains(t.last_error(), "framework_get: no CUDA device"));
    ASSERT_EQ(t.framework_get(&fw), XYLEM_E_UNAVAILABLE) << "a second call must fail the same way";

    xylem_buffer_t buf = reinterpret_cast<xylem_buffer_t>(0x1);
    EXPECT_EQ(t.buffer_alloc(nullptr, 0, 1024, &buf), XYLEM_E_UNAVAILABLE);
    EXPECT_EQ(buf, nullptr);
    EXPECT_TRUE(test::contains(t.last_error(), "buffer_alloc: the CUDA backend is unavailable (no CUDA device"));
    xylem_stream_t stream = nullptr;
    EXPECT_EQ(t.stream_create(nullptr, 0, &stream), XYLEM_E_UNAVAILABLE);
    EXPECT_TRUE(test::contains(t.last_error(), "stream_create"));
    EXPECT_EQ(t.stream_sync(nullptr, nullptr), XYLEM_E_UNAVAILABLE);
    float host[4] = {};
    EXPECT_EQ(t.copy_h2d(nullptr, nullptr, nullptr, 0, host, sizeof host), XYLEM_E_UNAVAILABLE);
    EXPECT_EQ(t.copy_d2h(nullptr, nullptr, host, nullptr, 0, sizeof host), XYLEM_E_UNAVAILABLE);
    const xylem_fill_attrs fill{1.0f};
    const xylem_op_desc desc{XYLEM_OP_FILL, 0, 0, sizeof fill, nullptr, nullptr, &fill};
    EXPECT_EQ(t.op_run(nullptr, nullptr, &desc), XYLEM_E_UNAVAILABLE);
    EXPECT_TRUE(test::contains(t.last_error(), "op_run"));
    const xylem_fused_attrs program{};  // refused before the program is read: no NVRTC, no crash
    const xylem_op_desc fused{XYLEM_OP_FUSED_ELEMENTWISE, 0, 0, sizeof program, nullptr, nullptr, &program};
    EXPECT_EQ(t.op_run(nullptr, nullptr, &fused), XYLEM_E_UNAVAILABLE);
    EXPECT_TRUE(test::contains(t.last_error(), "the CUDA backend is unavailable")) << t.last_error();
    EXPECT_EQ(t.capture_begin(nullptr, nullptr), XYLEM_E_UNAVAILABLE);
    xylem_graph_t graph = nullptr;
    EXPECT_EQ(t.capture_end(nullptr, nullptr, &graph), XYLEM_E_UNAVAILABLE);
    EXPECT_EQ(t.graph_launch(nullptr, nullptr, nullptr), XYLEM_E_UNAVAILABLE);
    t.buffer_free(nullptr, nullptr);  // NULL frees are no-ops
    t.stream_destroy(nullptr, nullptr);
    t.graph_destroy(nullptr, nullptr);
}

// Leaf #88: however often and through however many loads it is asked, there is one framework.
TEST(CudaPlugin, OneFrameworkAcrossLoadsAndCalls) {
    const xylem_plugin& direct = table();
    const xylem_plugin& via_registry = cuda_record().backend ? cuda_record().backend->api() : direct;
    EXPECT_EQ(&direct, &via_registry) << "two loads of one file must share the plugin";
    xylem_framework_t first = nullptr;
    const xylem_status s = direct.framework_get(&first);
    for (int i = 0; i < 100; ++i) {
        xylem_framework_t again = nullptr;
        ASSERT_EQ(via_registry.framework_get(&again), s);
        ASSERT_EQ(again, first);
    }
    EXPECT_EQ(s, have_gpu() ? XYLEM_OK : XYLEM_E_UNAVAILABLE);
}

// Every op of the header: add (ABI 1.4) joined last, after the first GPU run (issue 30) ran the
// conformance kit's add cases and the models that need it on an H100 (docs/gpu-results.md).
TEST(CudaPlugin, SupportsEveryOpOfTheHeader) {
    const xylem_plugin& t = table();
    for (uint32_t op = 0; op < XYLEM_OP_COUNT_; ++op) EXPECT_EQ(t.op_supported(nullptr, op), 1) << op_name(op);
    EXPECT_EQ(t.op_supported(nullptr, XYLEM_OP_COUNT_), 0);
}

// ABI 1.7 op_accepts: attention with a head size past the kernels' variants (128) is declined, so
// the core composes it; every head size up to 128 and every other op's descriptor is accepted. It
// reads the descriptor's shapes only: no framework, no device, no buffers.
TEST(CudaPlugin, OpAcceptsDeclinesAttentionHeadSizesPast128) {
    const xylem_plugin& t = table();
    ASSERT_TRUE(XYLEM_TABLE_HAS(&t, op_accepts));
    auto tensor = [](std::initializer_list<int64_t> dims) {
        xylem_tensor_arg a{};
        a.dtype = XYLEM_F32;
        for (int64_t d : dims) a.dims[a.ndim++] = d;
        return a;
    };
    const xylem_attention_attrs at{0.125f, 1, 0.0f, 0, 0};
    auto accepts = [&](uint32_t op, int64_t dk, int64_t dv) {
        const xylem_tensor_arg q = tensor({2, 4, 16, dk}), k = tensor({2, 4, 16, dk}), v = tensor({2, 4, 16, dv});
        const xylem_tensor_arg o = tensor({2, 4, 16, dv}), lse = tensor({2, 4, 16});
        const xylem_tensor_arg fwd_in[] = {q, k, v}, fwd_out[] = {o, lse};
        const xylem_tensor_arg bwd_in[] = {o, q, k, v, o, lse}, bwd_out[] = {q, k, v};
        const bool fwd = op == XYLEM_OP_ATTENTION_FWD;
        const xylem_op_desc d{op, fwd ? 3u : 6u, fwd ? 2u : 3u, sizeof at, fwd ? fwd_in : bwd_in, fwd ? fwd_out : bwd_out, &at};
        return t.op_accepts(nullptr, &d);
    };
    for (uint32_t op : {XYLEM_OP_ATTENTION_FWD, XYLEM_OP_ATTENTION_BWD}) {
        SCOPED_TRACE(op_name(op));
        for (int64_t d : {1, 8, 32, 33, 64, 100, 128}) EXPECT_EQ(accepts(op, d, d), 1) << "head_dim " << d;
        EXPECT_EQ(accepts(op, 512, 512), 0);
        EXPECT_EQ(accepts(op, 129, 64), 0) << "Dk past 128";
        EXPECT_EQ(accepts(op, 64, 256), 0) << "Dv past 128";
    }
    const xylem_gemm_attrs g{0, 1, 1.0f, 0.0f};
    const xylem_tensor_arg a = tensor({8, 16, 512}), c = tensor({8, 16, 16});
    const xylem_tensor_arg in[] = {a, a};
    const xylem_op_desc gemm{XYLEM_OP_GEMM_BATCHED, 2, 1, sizeof g, in, &c, &g};
    EXPECT_EQ(t.op_accepts(nullptr, &gemm), 1);
}

// The ABI 1.7 ops are in the op list; without a device op_run refuses them with the reason before
// reading the descriptor.
TEST(CudaPlugin, TransformerOpsAreListedAndFailCleanlyWithoutADevice) {
    const xylem_plugin& t = table();
    for (uint32_t op : {XYLEM_OP_LAYER_NORM_FWD, XYLEM_OP_LAYER_NORM_BWD, XYLEM_OP_ATTENTION_FWD, XYLEM_OP_ATTENTION_BWD,
                        XYLEM_OP_GEMM_BATCHED, XYLEM_OP_PERMUTE, XYLEM_OP_MASKED_SOFTMAX}) {
        EXPECT_EQ(t.op_supported(nullptr, op), 1) << op_name(op);
        if (have_gpu()) continue;
        const xylem_attention_attrs at{1.0f, 0, 0.0f, 0, 0};
        const xylem_op_desc d{op, 0, 0, sizeof at, nullptr, nullptr, &at};
        EXPECT_EQ(t.op_run(nullptr, nullptr, &d), XYLEM_E_UNAVAILABLE) << op_name(op);
        EXPECT_TRUE(test::contains(t.last_error(), "op_run")) << t.last_error();
    }
}

TEST(CudaPlugin, IsInTheAvailableBackendListExactlyWhenAGpuIsPresent) {
    const auto names = test::available_backends();
    const bool listed = std::find(names.begin(), names.end(), "cuda") != names.end();
    EXPECT_EQ(listed, have_gpu()) << "conformance and gradient suites run over this list";
}

}  // namespace
}  // namespace xylem
