// Device kinds and `backend = "auto"`: the ranking over synthetic records (every order of kinds,
// ties, unknown kinds, nothing available), lists that contain "auto", and the kinds the real
// plugins and the ABI fixtures report (an ABI 1.1 or 1.2 plugin: every device of unknown kind).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <list>
#include <ostream>
#include <string>
#include <vector>

#include "xylem/error.h"
#include "xylem/registry.h"

namespace xylem {
// For test names: "child" / "in_process" rather than the enum's bytes.
void PrintTo(Isolation i, std::ostream* os) { *os << (i == Isolation::child ? "child" : "in_process"); }

namespace {
namespace fs = std::filesystem;

const std::string kFixtureDir = XYLEM_TEST_FIXTURE_PLUGIN_DIR;
const std::string kPluginDir = XYLEM_TEST_PLUGIN_DIR;

std::string fixture_file(const std::string& stem) { return kFixtureDir + "/libxylem_" + stem + ".so"; }

bool has(const std::string& text, const std::string& needle) { return text.find(needle) != std::string::npos; }

std::string error_of(const std::function<void()>& f) {
    try {
        f();
    } catch (const Error& e) {
        return e.what();
    }
    ADD_FAILURE() << "expected a xylem::Error";
    return {};
}

// A record as a scan leaves it: an available plugin `name` with one device per kind.
PluginRecord available(const std::string& name, const std::vector<uint32_t>& kinds) {
    PluginRecord r;
    r.name = name;
    r.path = "/plugins/libxylem_" + name + ".so";
    r.abi = "1.3";
    r.loaded = r.available = true;
    r.probe.available = 1;
    r.probe.device_count = static_cast<uint32_t>(kinds.size());
    for (size_t d = 0; d < kinds.size(); ++d)
        std::snprintf(r.probe.devices[d].name, sizeof r.probe.devices[d].name, "%s dev%zu", name.c_str(), d);
    r.device_kinds = kinds;
    return r;
}

PluginRecord unavailable(const std::string& name, const std::string& reason) {
    PluginRecord r;
    r.name = name;
    r.path = "/plugins/libxylem_" + name + ".so";
    r.loaded = true;
    r.reason = reason;
    return r;
}

constexpr uint32_t kGpu = XYLEM_DEVICE_DISCRETE_GPU, kIgpu = XYLEM_DEVICE_INTEGRATED_GPU,
                   kAccel = XYLEM_DEVICE_ACCELERATOR, kCpu = XYLEM_DEVICE_CPU, kUnknown = XYLEM_DEVICE_KIND_UNKNOWN;

// rank_devices() points into the records it ranks: keep every test's records alive.
AutoPick rank(std::vector<PluginRecord> records) {
    static std::list<std::vector<PluginRecord>> kept;
    kept.push_back(std::move(records));
    return rank_devices(kept.back());
}

std::string picked(const AutoPick& p) {
    return p.record ? p.record->name + ":" + std::to_string(p.device) : "none";
}

// One candidate per rank, best first: the order auto must follow whatever the search order.
TEST(AutoRanking, EveryOrderAndEverySubsetOfKindsPicksTheBestRank) {
    const std::vector<PluginRecord> by_rank = {available("cuda", {kGpu}), available("igpu", {kIgpu}),
                                               available("native", {kCpu}), available("opencl", {kCpu}),
                                               available("tiny", {kUnknown})};
    const size_t n = by_rank.size();
    int cases = 0;
    for (unsigned subset = 1; subset < (1u << n); ++subset) {
        std::vector<size_t> order;
        for (size_t i = 0; i < n; ++i)
            if (subset & (1u << i)) order.push_back(i);
        const size_t best = order.front();  // the lowest index is the best rank
        do {
            std::vector<PluginRecord> records;
            std::string names;
            for (size_t i : order) {
                records.push_back(by_rank[i]);
                names += by_rank[i].name + " ";
            }
            const AutoPick p = rank_devices(records);
            ASSERT_EQ(picked(p), by_rank[best].name + ":0") << "search order: " << names;
            ASSERT_EQ(p.skipped.size(), records.size() - 1) << names;
            for (const Skipped& s : p.skipped) EXPECT_TRUE(s.available) << s.text();
            ++cases;
        } while (std::next_permutation(order.begin(), order.end()));
    }
    EXPECT_EQ(cases, 325);  // sum over k of C(5,k) * k!
}

TEST(AutoRanking, TiesKeepTheSearchOrder) {
    EXPECT_EQ(picked(rank({available("a", {kIgpu}), available("b", {kAccel})})), "a:0");
    EXPECT_EQ(picked(rank({available("b", {kAccel}), available("a", {kIgpu})})), "b:0");
    EXPECT_EQ(picked(rank({available("cuda", {kGpu}), available("opencl", {kGpu})})), "cuda:0");
    EXPECT_EQ(picked(rank({available("opencl", {kGpu}), available("cuda", {kGpu})})), "opencl:0");
    // Two other CPU backends, two unknown ones: the first found.
    EXPECT_EQ(picked(rank({available("opencl", {kCpu}), available("tiny", {kCpu})})), "opencl:0");
    EXPECT_EQ(picked(rank({available("x", {kUnknown}), available("y", {kUnknown})})), "x:0");
    const AutoPick tie = rank({available("cuda", {kGpu}), available("opencl", {kGpu})});
    ASSERT_EQ(tie.skipped.size(), 1u);
    EXPECT_EQ(tie.skipped[0].text(),
              "opencl: device 0 (opencl dev0, discrete GPU) ranks with cuda's discrete GPU and comes later in the "
              "plugin search order");
}

// Devices are ranked one by one, not by a plugin's first device.
TEST(AutoRanking, PicksTheBestDeviceInsideAPlugin) {
    EXPECT_EQ(picked(rank({available("native", {kCpu}), available("opencl", {kCpu, kIgpu, kGpu, kGpu})})),
              "opencl:2");
    const AutoPick p = rank({available("opencl", {kCpu, kGpu}), available("native", {kCpu})});
    EXPECT_EQ(picked(p), "opencl:1");
    EXPECT_EQ(p.why, "auto picks opencl device 1 (opencl dev1, discrete GPU)");
    ASSERT_EQ(p.skipped.size(), 1u);
    EXPECT_EQ(p.skipped[0].text(), "native: device 0 (native dev0, CPU) ranks below opencl's discrete GPU");
}

// A CPU through OpenCL (PoCL) never beats the native backend; the reason says why.
TEST(AutoRanking, NativeBeatsACpuThroughAnotherBackend) {
    const AutoPick p = rank({unavailable("cuda", "no CUDA device: cudaGetDeviceCount found 0 devices"),
                                     available("native", {kCpu}), available("opencl", {kCpu})});
    EXPECT_EQ(picked(p), "native:0");
    EXPECT_EQ(p.why, "auto picks native device 0 (native dev0, CPU): no GPU or accelerator available");
    ASSERT_EQ(p.skipped.size(), 2u);
    EXPECT_EQ(p.skipped[0].text(), "cuda: no CUDA device: cudaGetDeviceCount found 0 devices");
    EXPECT_FALSE(p.skipped[0].available);
    EXPECT_EQ(p.skipped[1].text(),
              "opencl: device 0 (opencl dev0, CPU) is a CPU: a CPU runs on the native backend unless this backend is "
              "named");
    EXPECT_TRUE(p.skipped[1].available);
    // Without native, the OpenCL CPU is the best there is.
    EXPECT_EQ(picked(rank({available("opencl", {kCpu}), available("tiny", {kUnknown})})), "opencl:0");
}

TEST(AutoRanking, UnknownKindsRankLastButStillRun) {
    const AutoPick below = rank({available("old", {kUnknown, kUnknown}), available("tiny", {kCpu})});
    EXPECT_EQ(picked(below), "tiny:0");
    ASSERT_EQ(below.skipped.size(), 1u);
    EXPECT_TRUE(has(below.skipped[0].text(), "old: device 0 (old dev0, unknown kind)")) << below.skipped[0].text();
    EXPECT_TRUE(has(below.skipped[0].text(), "ranks last")) << below.skipped[0].text();

    const AutoPick only = rank({available("old", {kUnknown})});
    EXPECT_EQ(picked(only), "old:0");
    EXPECT_EQ(only.why, "auto picks old device 0 (old dev0, unknown kind): no device of a known kind available");
    // A plugin that says it is available but lists no device still has device 0, of unknown kind.
    EXPECT_EQ(picked(rank({available("empty", {})})), "empty:0");
}

TEST(AutoRanking, UnavailableRecordsAreNeverPickedAndEachReasonIsKept) {
    const AutoPick none = rank({unavailable("cuda", "no CUDA device"), unavailable("opencl", "no OpenCL platform")});
    EXPECT_EQ(none.record, nullptr);
    EXPECT_TRUE(none.why.empty());
    ASSERT_EQ(none.skipped.size(), 2u);
    EXPECT_EQ(none.skipped[0].text(), "cuda: no CUDA device");
    EXPECT_EQ(none.skipped[1].text(), "opencl: no OpenCL platform");
    // A file that never loaded has no backend name: its file name stands in.
    PluginRecord junk;
    junk.path = "/plugins/libxylem_junk.so";
    junk.reason = "not an ELF file";
    const AutoPick p = rank({junk, available("native", {kCpu})});
    ASSERT_EQ(p.skipped.size(), 1u);
    EXPECT_EQ(p.skipped[0].text(), "libxylem_junk.so: not an ELF file");
    EXPECT_EQ(picked(rank({})), "none");
}

TEST(AutoRanking, KindNames) {
    EXPECT_STREQ(device_kind_name(kGpu), "discrete GPU");
    EXPECT_STREQ(device_kind_name(kIgpu), "integrated GPU");
    EXPECT_STREQ(device_kind_name(kAccel), "accelerator");
    EXPECT_STREQ(device_kind_name(kCpu), "CPU");
    EXPECT_STREQ(device_kind_name(kUnknown), "unknown kind");
    EXPECT_STREQ(device_kind_name(99), "unknown kind");
}

// ---- real plugin files ----------------------------------------------------------------------

const PluginRecord& record_of(const Registry& r, const std::string& stem) {
    for (const PluginRecord& p : r.plugins())
        if (fs::path(p.path).filename() == "libxylem_" + stem + ".so") return p;
    throw std::runtime_error("no record for libxylem_" + stem + ".so");
}

class KindsFromPlugins : public ::testing::TestWithParam<Isolation> {
protected:
    void SetUp() override { registry_.scan({kFixtureDir, kPluginDir}, GetParam()); }
    Registry registry_;
};

// ABI 1.1 and 1.2 tables end before device_kinds (the fixtures set it past the end to a trap that
// would report discrete GPUs): their devices are of unknown kind and the trap is never called.
TEST_P(KindsFromPlugins, OlderMinorVersionsHaveDevicesOfUnknownKind) {
    for (const std::string stem : {"abi_1_1", "abi_1_2"}) {
        const PluginRecord& old = record_of(registry_, stem);
        ASSERT_TRUE(old.available) << stem << ": " << old.reason;
        EXPECT_EQ(old.abi, "1." + stem.substr(6)) << stem;
        ASSERT_EQ(old.device_kinds.size(), 2u) << stem;
        for (uint32_t k : old.device_kinds) EXPECT_EQ(k, kUnknown) << stem;  // the trap would say discrete GPU
        if (old.backend) {  // loaded here: its call counter must still be zero
            xylem_probe_info info{};
            old.backend->api().probe(&info);
            EXPECT_TRUE(has(info.detail, "past_end_calls=0")) << stem << ": " << info.detail;
        }
    }
    // The current ABI with device_kinds left NULL: unknown too.
    EXPECT_EQ(record_of(registry_, "fixture").device_kinds, (std::vector<uint32_t>{kUnknown, kUnknown}));
}

TEST_P(KindsFromPlugins, ReportedKindsAreRecordedAndUnknownValuesRead) {
    // FIXTURE_KIND0=99 (no such kind) and FIXTURE_KIND1=integrated GPU.
    EXPECT_EQ(record_of(registry_, "fixture_kinds").device_kinds, (std::vector<uint32_t>{kUnknown, kIgpu}));
    EXPECT_EQ(record_of(registry_, "native").device_kinds, (std::vector<uint32_t>{kCpu}));
    const PluginRecord* opencl = registry_.find("opencl");
    if (opencl && opencl->available) {
        ASSERT_EQ(opencl->device_kinds.size(), opencl->probe.device_count);
        for (uint32_t d = 0; d < opencl->probe.device_count; ++d) {
            EXPECT_NE(opencl->device_kinds[d], kUnknown) << opencl->probe.devices[d].name;
            if (has(opencl->probe.devices[d].detail, "Portable Computing Language")) {  // PoCL's host device
                EXPECT_EQ(opencl->device_kinds[d], kCpu) << opencl->probe.devices[d].name;
            }
        }
    }
}

// Over the fixture folder and the real plugins, auto picks fixture_kinds' integrated GPU (device
// 1); lists keep "first available wins", with "auto" as one of the entries. On a machine with a
// discrete GPU (cuda, or opencl over NVIDIA's driver: the H100 run of issue 30) a real plugin
// rightly outranks the fixture, so there the test has nothing to check; AutoChoice's tests over
// fixtures alone rank discrete GPUs.
TEST_P(KindsFromPlugins, ListsMayContainAuto) {
    for (const PluginRecord& r : registry_.plugins())
        for (uint32_t kind : r.available ? r.device_kinds : std::vector<uint32_t>{})
            if (kind == kGpu) GTEST_SKIP() << r.name << " has a discrete GPU here: it outranks the fixture";
    const AutoPick pick = registry_.auto_pick();
    ASSERT_NE(pick.record, nullptr);
    EXPECT_EQ(picked(pick), "fixture_kinds:1");

    BackendChoice c = registry_.choose({"auto"});
    EXPECT_EQ(c.backend->name(), "fixture_kinds");
    EXPECT_EQ(c.device, 1u);
    EXPECT_EQ(c.why, "auto picks fixture_kinds device 1 (fixture device 1, integrated GPU): no discrete GPU available");

    c = registry_.choose({"fixture_offline", "auto"});
    EXPECT_EQ(c.backend->name(), "fixture_kinds");
    EXPECT_EQ(c.device, 1u);
    EXPECT_TRUE(has(c.why, "(entry \"auto\" of the backend list [fixture_offline, auto])")) << c.why;
    ASSERT_FALSE(c.skipped.empty());
    EXPECT_EQ(c.skipped[0].backend, "fixture_offline");
    EXPECT_TRUE(has(c.skipped[0].why, "no fixture device (simulated)")) << c.skipped[0].why;

    c = registry_.choose({"native", "auto"});  // a named entry first: it wins, on device 0
    EXPECT_EQ(c.backend->name(), "native");
    EXPECT_EQ(c.device, 0u);
    EXPECT_EQ(c.why, "backend native: the first available of the backend list [native, auto]");
    EXPECT_TRUE(c.skipped.empty());

    c = registry_.choose({"auto", "native"});
    EXPECT_EQ(c.backend->name(), "fixture_kinds");

    c = registry_.choose({"fixture"});  // a name alone: exactly that backend, device 0
    EXPECT_EQ(c.backend->name(), "fixture");
    EXPECT_EQ(c.device, 0u);
    EXPECT_EQ(registry_.select_first({"nope", "auto"})->name(), "fixture_kinds");
}

INSTANTIATE_TEST_SUITE_P(Isolation, KindsFromPlugins, ::testing::Values(Isolation::in_process, Isolation::child),
                         [](const auto& info) { return info.param == Isolation::child ? "child" : "in_process"; });

// Nothing available: one line naming every file and its reason.
TEST(AutoChoice, NoAvailableDeviceIsOneLineWithEveryReason) {
    Registry r;
    r.load_file(fixture_file("fixture_offline"));
    r.load_file(fixture_file("needs_dep"));
    r.load_file(fixture_file("garbage"));
    const std::string msg = error_of([&] { r.choose({"auto"}); });
    EXPECT_EQ(msg.rfind("backend \"auto\" found no available device: ", 0), 0u) << msg;
    EXPECT_TRUE(has(msg, "fixture_offline: no fixture device (simulated)")) << msg;
    EXPECT_TRUE(has(msg, "libxylem_needs_dep.so: cannot load: ")) << msg;
    EXPECT_TRUE(has(msg, "libxylem_garbage.so: not an ELF file")) << msg;
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;

    // Inside a longer list the same reasons come under the entry "auto".
    const std::string list = error_of([&] { r.choose({"nope", "auto"}); });
    EXPECT_EQ(list.rfind("no backend of the preference list is available: ", 0), 0u) << list;
    EXPECT_TRUE(has(list, "'nope'")) << list;
    EXPECT_TRUE(has(list, "no available device (fixture_offline: no fixture device (simulated)")) << list;

    Registry empty;
    EXPECT_TRUE(has(error_of([&] { empty.choose({"auto"}); }), "no plugin file was found")) << "empty registry";
}

}  // namespace
}  // namespace xylem
