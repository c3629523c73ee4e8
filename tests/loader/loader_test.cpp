// Plugin loader tests: every way a plugin file can fail is recorded (never aborts), good plugins
// still run ops, a plugin file maps to one Backend and one framework, and loading is thread-safe.
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "xylem/collective.h"
#include "xylem/error.h"
#include "xylem/graph.h"
#include "xylem/op_calls.h"
#include "xylem/registry.h"
#include "xylem/tensor.h"

namespace xylem {
namespace {
namespace fs = std::filesystem;

const std::string kFixtureDir = XYLEM_TEST_FIXTURE_PLUGIN_DIR;
const std::string kPluginDir = XYLEM_TEST_PLUGIN_DIR;

std::string fixture_file(const std::string& stem) {
    return kFixtureDir + "/libxylem_" + stem + ".so";
}
std::string native_file() {
    return kPluginDir + "/libxylem_native.so";
}
std::string canonical(const std::string& path) {
    return fs::canonical(path).string();
}

// The record of the file libxylem_<stem>.so (a failed file has no backend name to look up by).
const PluginRecord& record_of(const Registry& r, const std::string& stem) {
    for (const PluginRecord& p : r.plugins())
        if (fs::path(p.path).filename() == "libxylem_" + stem + ".so") return p;
    throw std::runtime_error("no record for libxylem_" + stem + ".so");
}

// The message of the xylem::Error that f throws ("" and a test failure when it throws none).
std::string error_of(const std::function<void()>& f) {
    try {
        f();
    } catch (const Error& e) {
        return e.what();
    }
    ADD_FAILURE() << "expected a xylem::Error";
    return {};
}

// A counter the fixture plugin publishes in its probe detail as "key=N".
int fixture_counter(Backend& b, const std::string& key) {
    xylem_probe_info info{};
    b.api().probe(&info);
    const std::string detail = info.detail;
    const size_t at = detail.find(key + "=");
    if (at == std::string::npos) throw std::runtime_error("no " + key + " in probe detail '" + detail + "'");
    return std::atoi(detail.c_str() + at + key.size() + 1);
}

// Fills a tensor on one of the backend's devices and reads it back on the host.
void expect_fill_runs(Backend& b, float value, uint32_t device = 0) {
    Device& dev = *b.device(device);
    Tensor t({3, 5}, DType::F32);
    ops::fill(dev, t, value);
    const float* p = t.host_read<float>();
    for (int64_t i = 0; i < t.numel(); ++i) ASSERT_EQ(p[i], value) << b.name() << " element " << i;
}

// A scratch folder, removed at the end of the test.
struct TempDir {
    fs::path path = fs::temp_directory_path() / ("xylem_loader_test_" + std::to_string(getpid()));
    TempDir() { fs::create_directories(path); }
    ~TempDir() {
        std::error_code ec;
        fs::remove_all(path, ec);
    }
};

class ScannedRegistry : public ::testing::Test {
protected:
    void SetUp() override { registry_.scan({kFixtureDir, kPluginDir}); }
    Registry registry_;
};

TEST_F(ScannedRegistry, RecordsWhyEachBadFileFailed) {
    const PluginRecord& garbage = record_of(registry_, "garbage");
    EXPECT_FALSE(garbage.loaded);
    EXPECT_EQ(garbage.reason, "not an ELF file (77 bytes, no ELF magic number at its start)");

    const PluginRecord& noentry = record_of(registry_, "noentry");
    EXPECT_FALSE(noentry.loaded);
    EXPECT_NE(noentry.reason.find("xylem_plugin_entry"), std::string::npos) << noentry.reason;

    const PluginRecord& future = record_of(registry_, "abi_future");
    const std::string ours = std::to_string(XYLEM_ABI_MAJOR) + "." + std::to_string(XYLEM_ABI_MINOR);
    const std::string theirs = std::to_string(XYLEM_ABI_MAJOR + 1) + ".3";
    EXPECT_FALSE(future.loaded);
    EXPECT_EQ(future.abi, theirs);
    EXPECT_NE(future.reason.find(theirs), std::string::npos) << future.reason;
    EXPECT_NE(future.reason.find(ours), std::string::npos) << future.reason;

    const PluginRecord& needs_dep = record_of(registry_, "needs_dep");
    EXPECT_FALSE(needs_dep.loaded);
    EXPECT_NE(needs_dep.reason.find("libxylem_fixture_dep.so"), std::string::npos) << needs_dep.reason;
    EXPECT_NE(needs_dep.reason.find("cannot open shared object file"), std::string::npos) << needs_dep.reason;

    const PluginRecord& offline = record_of(registry_, "fixture_offline");
    EXPECT_TRUE(offline.loaded);
    EXPECT_FALSE(offline.available);
    EXPECT_EQ(offline.reason, "no fixture device (simulated)");

    const PluginRecord& short_table = record_of(registry_, "short_table");
    EXPECT_FALSE(short_table.loaded);
    EXPECT_FALSE(short_table.backend);
    EXPECT_NE(short_table.reason.find("lacks required member 'op_run'"), std::string::npos) << short_table.reason;

    for (const PluginRecord& p : registry_.plugins()) {
        EXPECT_TRUE(fs::path(p.path).is_absolute()) << p.path;
        if (!p.loaded) {
            EXPECT_FALSE(p.reason.empty()) << p.path;
        }
    }
}

// ABI stability: a plugin built against ABI 1.1 (its table ends before the 1.2 capture members)
// loads and runs, and the core never calls the members past its struct_size, which the fixture
// sets to counting traps. Training-step capture must see "no capture" through XYLEM_TABLE_HAS.
TEST_F(ScannedRegistry, OlderMinorVersionLoadsAndIsNeverReadPastStructSize) {
    const PluginRecord& old = record_of(registry_, "abi_1_1");
    ASSERT_TRUE(old.loaded) << old.reason;
    EXPECT_TRUE(old.available) << old.reason;
    EXPECT_EQ(old.abi, std::to_string(XYLEM_ABI_MAJOR) + ".1");
    const xylem_plugin& api = old.backend->api();
    EXPECT_EQ(api.struct_size, offsetof(xylem_plugin, capture_begin));
    EXPECT_TRUE(XYLEM_TABLE_HAS(&api, op_run));
    EXPECT_FALSE(XYLEM_TABLE_HAS(&api, capture_begin)) << "the member is set, but past struct_size";
    EXPECT_FALSE(XYLEM_TABLE_HAS(&api, graph_destroy));
    EXPECT_NE(api.capture_begin, nullptr) << "test bug: the fixture must set its trap members";

    expect_fill_runs(*old.backend, 2.5f);
    Device& dev = *old.backend->device(0);
    Tensor big({1000}, DType::F32, dev);
    ops::fill(dev, big, -1.0f);
    EXPECT_EQ(big.to_vector(), std::vector<float>(1000, -1.0f));
    // Whole-step capture is ABI 1.2: refused for this plugin from its struct_size alone.
    EXPECT_THROW(Graph::capture(dev, [&] { ops::fill(dev, big, 1.0f); }), Error);
    EXPECT_EQ(fixture_counter(*old.backend, "past_end_calls"), 0);
}

// ABI 1.6: the collective members are read only when struct_size covers them. A plugin built
// against ABI 1.5 (counting traps set past its end) has none, asking for them is an Error naming
// the backend, and a data-parallel run reduces its buffers through host memory instead.
TEST_F(ScannedRegistry, CollectivesPastStructSizeAreNeverRead) {
    const PluginRecord& old = record_of(registry_, "abi_1_5");
    ASSERT_TRUE(old.loaded) << old.reason;
    EXPECT_EQ(old.abi, std::to_string(XYLEM_ABI_MAJOR) + ".5");
    const xylem_plugin& api = old.backend->api();
    EXPECT_EQ(api.struct_size, offsetof(xylem_plugin, comm_unique_id));
    EXPECT_TRUE(XYLEM_TABLE_HAS(&api, op_run));
    EXPECT_NE(api.comm_init, nullptr) << "test bug: the fixture must set its trap members";
    EXPECT_FALSE(has_device_collectives(*old.backend));
    try {
        device_comm_id(*old.backend);
        ADD_FAILURE() << "device_comm_id read a member past struct_size";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("backend 'abi_1_5' has no device collectives"), std::string::npos) << e.what();
    }
    device_comm_destroy(*old.backend);  // nothing to leave: never calls the trap
    expect_fill_runs(*old.backend, 1.5f);
    EXPECT_EQ(fixture_counter(*old.backend, "past_end_calls"), 0);
    // Built against 1.6 with the members NULL: no collectives either.
    const PluginRecord& current = record_of(registry_, "fixture");
    ASSERT_TRUE(current.backend);
    EXPECT_FALSE(has_device_collectives(*current.backend));
}

TEST_F(ScannedRegistry, GoodPluginsLoadAndRunOps) {
    for (const std::string name : {"fixture", "native"}) {
        const PluginRecord* rec = registry_.find(name);
        ASSERT_NE(rec, nullptr) << name << " did not load";
        EXPECT_TRUE(rec->loaded && rec->available) << name << ": " << rec->reason;
        EXPECT_EQ(rec->abi, std::to_string(XYLEM_ABI_MAJOR) + "." + std::to_string(XYLEM_ABI_MINOR));
        EXPECT_GE(rec->probe.device_count, 1u);
        ASSERT_TRUE(rec->backend);
        expect_fill_runs(*rec->backend, 2.5f);
        expect_fill_runs(*rec->backend, -1.0f);
    }
}

TEST_F(ScannedRegistry, ScanningAgainAddsNoDuplicates) {
    const size_t before = registry_.plugins().size();
    registry_.scan({kFixtureDir, kPluginDir, kFixtureDir + "/."});
    EXPECT_EQ(registry_.plugins().size(), before);
}

TEST_F(ScannedRegistry, FixtureRunsOnlyWhatItSupports) {
    std::shared_ptr<Backend> b = registry_.select("fixture");
    EXPECT_TRUE(b->supports(XYLEM_OP_FILL));
    EXPECT_FALSE(b->supports(XYLEM_OP_COPY));
    EXPECT_FALSE(b->supports(XYLEM_OP_COUNT_));

    Device& dev = *b->device(0);
    Tensor src({4}, DType::F32), dst({4}, DType::F32);
    ops::fill(dev, src, 1.0f);
    const std::string msg = error_of([&] { ops::copy(dev, src, dst); });
    EXPECT_NE(msg.find("copy"), std::string::npos) << msg;
    EXPECT_NE(msg.find("fixture"), std::string::npos) << msg;

    // op_run itself is truthful too: an op it does not implement is XYLEM_E_UNSUPPORTED with a message.
    xylem_op_desc desc{};
    desc.op = XYLEM_OP_COPY;
    EXPECT_EQ(b->api().op_run(b->framework(), dev.stream(), &desc), XYLEM_E_UNSUPPORTED);
    EXPECT_NE(std::string(b->api().last_error()).find("not supported"), std::string::npos);
}

TEST_F(ScannedRegistry, SelectExplainsEveryRefusal) {
    std::string msg = error_of([&] { registry_.select("fixture_offline"); });
    EXPECT_NE(msg.find("no fixture device (simulated)"), std::string::npos) << msg;

    msg = error_of([&] { registry_.select("nope"); });
    EXPECT_NE(msg.find("'nope'"), std::string::npos) << msg;
    EXPECT_NE(msg.find("unknown"), std::string::npos) << msg;

    msg = error_of([&] { registry_.select("garbage"); });
    EXPECT_NE(msg.find("libxylem_garbage.so"), std::string::npos) << msg;
    EXPECT_NE(msg.find("not an ELF file"), std::string::npos) << msg;

    msg = error_of([&] { registry_.select("needs_dep"); });
    EXPECT_NE(msg.find("libxylem_fixture_dep.so"), std::string::npos) << msg;

    msg = error_of([&] { registry_.select("abi_future"); });
    EXPECT_NE(msg.find("ABI"), std::string::npos) << msg;

    EXPECT_EQ(registry_.select_first({"fixture_offline", "native"})->name(), "native");
    EXPECT_EQ(registry_.select_first({"nope", "fixture"})->name(), "fixture");
    msg = error_of([&] { registry_.select_first({"nope", "fixture_offline"}); });
    EXPECT_NE(msg.find("'nope'"), std::string::npos) << msg;
    EXPECT_NE(msg.find("no fixture device (simulated)"), std::string::npos) << msg;
    msg = error_of([&] { registry_.select_first({}); });
    EXPECT_NE(msg.find("empty"), std::string::npos) << msg;
}

TEST(Loader, MissingFilesAndFoldersAreRecordedNotFatal) {
    Registry r;
    r.scan({kFixtureDir + "/no-such-folder"});
    EXPECT_TRUE(r.plugins().empty());

    const PluginRecord& missing = r.load_file(kFixtureDir + "/libxylem_does_not_exist.so");
    EXPECT_FALSE(missing.loaded);
    EXPECT_NE(missing.reason.find("No such file"), std::string::npos) << missing.reason;

    const PluginRecord& folder = r.load_file(kFixtureDir);
    EXPECT_FALSE(folder.loaded);
    EXPECT_FALSE(folder.reason.empty());
}

TEST(Loader, TwoRegistriesShareOneBackendAndFramework) {
    Registry a, b;
    const PluginRecord& ra = a.load_file(fixture_file("fixture"));
    const PluginRecord& rb = b.load_file(fixture_file("fixture"));
    ASSERT_TRUE(ra.available && rb.available) << ra.reason << rb.reason;
    EXPECT_EQ(ra.backend.get(), rb.backend.get());
    EXPECT_EQ(ra.backend->framework(), rb.backend->framework());
    EXPECT_EQ(ra.backend->device(0).get(), rb.backend->device(0).get());

    Backend& fixture = *ra.backend;
    fixture.device(1);  // each Device holds one stream for the backend's lifetime
    const int streams_before = fixture_counter(fixture, "streams_live");
    for (int i = 0; i < 100; ++i) {
        xylem_framework_t fw = fixture.framework();
        ASSERT_EQ(fw, rb.backend->framework());
        ASSERT_EQ(fixture.device(i % 2).get(), rb.backend->device(i % 2).get());
        // The plugin's own entry returns the same instance on every later call.
        xylem_framework_t again = nullptr;
        ASSERT_EQ(fixture.api().framework_get(&again), XYLEM_OK);
        ASSERT_EQ(again, fw);
        xylem_stream_t s = nullptr;
        ASSERT_EQ(fixture.api().stream_create(fw, i % 2, &s), XYLEM_OK);
        fixture.api().stream_destroy(fw, s);
    }
    EXPECT_EQ(fixture_counter(fixture, "frameworks_created"), 1);
    EXPECT_EQ(fixture_counter(fixture, "streams_live"), streams_before);
    expect_fill_runs(fixture, 7.0f, 1);
}

TEST(Loader, OtherSpellingsOfOnePathAreOnePlugin) {
    Registry first;
    std::shared_ptr<Backend> fixture = first.load_file(fixture_file("fixture")).backend;
    ASSERT_TRUE(fixture);
    xylem_framework_t framework = fixture->framework();

    TempDir tmp;
    fs::create_symlink(fixture_file("fixture"), tmp.path / "libxylem_fixture_link.so");
    const std::vector<std::string> spellings = {
        kFixtureDir + "/./libxylem_fixture.so",
        kFixtureDir + "/../" + fs::path(kFixtureDir).filename().string() + "/libxylem_fixture.so",
        kFixtureDir + "//libxylem_fixture.so",
        fs::relative(fixture_file("fixture")).string(),
        (tmp.path / "libxylem_fixture_link.so").string(),
    };
    for (const std::string& spelling : spellings) {
        Registry r;
        const PluginRecord& rec = r.load_file(spelling);
        EXPECT_EQ(rec.path, canonical(fixture_file("fixture"))) << spelling;
        ASSERT_EQ(rec.backend.get(), fixture.get()) << spelling;
        EXPECT_EQ(rec.backend->framework(), framework) << spelling;
    }
    EXPECT_EQ(fixture_counter(*fixture, "frameworks_created"), 1);
}

TEST(Loader, SecondFileWithTheSameNameIsShadowed) {
    TempDir tmp;
    const fs::path copy = tmp.path / "libxylem_fixture.so";
    fs::copy_file(fixture_file("fixture"), copy);
    Registry r;
    r.load_file(fixture_file("fixture"));
    const PluginRecord& shadowed = r.load_file(copy.string());
    EXPECT_FALSE(shadowed.loaded);
    EXPECT_NE(shadowed.reason.find("shadowed"), std::string::npos) << shadowed.reason;
    EXPECT_EQ(r.select("fixture")->path(), canonical(fixture_file("fixture")));
}

TEST(LoaderThreads, ConcurrentLoadsGiveOneBackend) {
    constexpr int kThreads = 8;
    std::vector<Backend*> backends(kThreads);
    std::vector<xylem_framework_t> frameworks(kThreads);
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t)
        threads.emplace_back([&, t] {
            Registry r;
            r.load_file(t % 2 ? fixture_file("fixture") : kFixtureDir + "/./libxylem_fixture.so");
            std::shared_ptr<Backend> b = r.select("fixture");
            backends[t] = b.get();
            frameworks[t] = b->framework();
            b->device(t % 2);
        });
    for (std::thread& th : threads) th.join();
    EXPECT_EQ(std::set<Backend*>(backends.begin(), backends.end()).size(), 1u);
    EXPECT_EQ(std::set<xylem_framework_t>(frameworks.begin(), frameworks.end()).size(), 1u);
    EXPECT_EQ(fixture_counter(*backends[0], "frameworks_created"), 1);
}

TEST(LoaderThreads, TwoThreadsRunOpsThroughOneNativeDevice) {
    Registry r;
    r.load_file(native_file());
    std::shared_ptr<Backend> native = r.select("native");
    std::shared_ptr<Device> dev = native->device(0);

    constexpr int kOps = 1000;
    std::atomic<int> wrong{0};
    std::mutex error_mutex;
    std::string first_error;
    auto worker = [&](float base) {
        try {
            Tensor t({64}, DType::F32);
            for (int i = 0; i < kOps; ++i) {
                const float value = base + static_cast<float>(i);
                ops::fill(*dev, t, value);
                const float* p = t.host_read<float>();
                if (p[0] != value || p[63] != value) ++wrong;
            }
        } catch (const std::exception& e) {
            std::lock_guard lock(error_mutex);
            if (first_error.empty()) first_error = e.what();
        }
    };
    std::thread a(worker, 0.0f), b(worker, 100000.0f);
    a.join();
    b.join();
    EXPECT_EQ(first_error, "");
    EXPECT_EQ(wrong.load(), 0);
}

}  // namespace
}  // namespace xylem
