// Row views and Graph (ABI 1.2 capture) on the discrete test plugin: replay, staging, residency
// at launch, pinned storages, and the errors for what a capture cannot record.
#include <gtest/gtest.h>

#include "xylem/error.h"
#include "xylem/graph.h"
#include "xylem/op_calls.h"
#include "xylem/registry.h"
#include "xylem/transfer.h"

using namespace xylem;

namespace {

std::shared_ptr<Device> open(const std::string& dir, const std::string& name) {
    static Registry* registry = new Registry();  // plugins are never unloaded
    if (!registry->find(name)) registry->scan({dir});
    return registry->select(name)->device(0);
}
Device& discrete() { return *open(XYLEM_TEST_CORE_PLUGIN_DIR, "fake_discrete"); }
Device& native() { return *open(XYLEM_TEST_PLUGIN_DIR, "native"); }

std::string error_of(const std::function<void()>& fn) {
    try {
        fn();
    } catch (const Error& e) {
        return e.what();
    }
    return "<no error>";
}

}  // namespace

TEST(RowView, ReadsWritesAndUploadsOnlyItsRows) {
    Device& dev = discrete();
    Tensor t = tensor_from({0, 1, 2, 3, 4, 5, 6, 7}, {4, 2});
    Tensor mid = t.rows(1, 2);
    EXPECT_EQ(mid.shape(), (Shape{2, 2}));
    EXPECT_TRUE(mid.partial());
    EXPECT_FALSE(t.partial());
    EXPECT_EQ(mid.to_vector(), (std::vector<float>{2, 3, 4, 5}));
    // A device write through the view keeps the rows around it.
    ops::fill(dev, mid, 9.0f);
    EXPECT_EQ(t.to_vector(), (std::vector<float>{0, 1, 9, 9, 9, 9, 6, 7}));
    // So does a host write, and an upload from caller memory.
    t.rows(3, 1).host_write<float>()[1] = -1;
    const float src[2] = {5, 5};
    t.rows(0, 1).upload_from(dev, src);
    dev.sync();
    EXPECT_EQ(t.to_vector(), (std::vector<float>{5, 5, 9, 9, 9, 9, 6, -1}));
    EXPECT_EQ(t.rows(2, 2).reshaped({4}).to_vector(), (std::vector<float>{9, 9, 6, -1}));
    EXPECT_THROW(t.rows(3, 2), Error);
    EXPECT_THROW(t.rows(-1, 1), Error);
}

TEST(RowView, GatherWithAViewOfIndices) {
    Device& dev = discrete();
    Tensor table = tensor_from({10, 11, 20, 21, 30, 31}, {3, 2});
    Tensor idx = tensor_from_i32({2, 0, 1, 1}, {4});
    Tensor out({2, 2});
    ops::gather_rows(dev, table, idx.rows(1, 2), out);  // indices 0, 1
    EXPECT_EQ(out.to_vector(), (std::vector<float>{10, 11, 20, 21}));
}

TEST(Graph, NativeCannotCaptureAndSaysSo) {
    Device& dev = native();
    EXPECT_FALSE(dev.supports_capture());
    const std::string msg = error_of([&] { Graph::capture(dev, [] {}); });
    EXPECT_NE(msg.find("backend 'native' cannot capture"), std::string::npos) << msg;
}

TEST(Graph, ReplaysRecordedOpsAndKeepsHostReadsFresh) {
    Device& dev = discrete();
    ASSERT_TRUE(dev.supports_capture());
    Tensor one({3}, DType::F32, dev), acc({3}, DType::F32, dev);
    ops::fill(dev, one, 1.0f);
    ops::fill(dev, acc, 0.0f);
    Graph g = Graph::capture(dev, [&] { ops::axpby_inplace(dev, 1.0f, one, 1.0f, acc); });  // acc += one
    EXPECT_EQ(acc.to_vector(), (std::vector<float>{0, 0, 0})) << "capture must record, not run";
    for (float want : {1.0f, 2.0f, 3.0f}) {
        g.launch();
        // Each launch leaves only the device copy current, so this read copies again.
        EXPECT_EQ(acc.to_vector(), std::vector<float>(3, want));
    }
}

TEST(Graph, StagedCopiesReadHostMemoryAtEveryLaunchAndAreCounted) {
    Device& dev = discrete();
    std::vector<float> staging(4, 0.0f);
    Tensor x({4}, DType::F32, dev), y({4}, DType::F32, dev);
    Graph g = Graph::capture(dev, [&] {
        x.upload_from(dev, staging.data());
        ops::axpby(dev, 2.0f, x, 0.0f, x, y);
    });
    for (float v : {1.0f, -3.0f}) {
        std::fill(staging.begin(), staging.end(), v);
        const TransferCounts before = transfer_counts();
        {
            StrictTransfers strict;  // the staged copy is explicit
            g.launch();
        }
        const TransferCounts d = transfer_counts() - before;
        EXPECT_EQ(d.h2d_count, 1u);
        EXPECT_EQ(d.h2d_bytes, 16u);
        EXPECT_EQ(y.to_vector(), std::vector<float>(4, 2 * v));
    }
}

TEST(Graph, InputsChangedOnTheHostAreUploadedBeforeLaunch) {
    Device& dev = discrete();
    Tensor w = tensor_from({1, 2}, {2}), y({2}, DType::F32, dev);
    w.upload(dev);
    Graph g = Graph::capture(dev, [&] { ops::copy(dev, w, y); });
    g.launch();
    EXPECT_EQ(y.to_vector(), (std::vector<float>{1, 2}));
    w.host_write<float>()[0] = 7;  // the device copy is stale now
    {
        StrictTransfers strict;  // bringing it over is an implicit copy
        EXPECT_NE(error_of([&] { g.launch(); }).find("strict transfer mode"), std::string::npos);
    }
    w.host_write<float>()[0] = 7;
    g.launch();
    EXPECT_EQ(y.to_vector(), (std::vector<float>{7, 2}));
}

TEST(Graph, PinsStoragesThatTheirTensorsDropped) {
    Device& dev = discrete();
    Tensor out({2}, DType::F32, dev);
    Graph g;
    {
        Tensor tmp({2}, DType::F32, dev);  // dies before the launches
        g = Graph::capture(dev, [&] {
            ops::fill(dev, tmp, 4.0f);
            ops::axpby(dev, 1.0f, tmp, 0.5f, tmp, out);
        });
    }
    g.launch();
    g.launch();
    EXPECT_EQ(out.to_vector(), (std::vector<float>{6, 6}));
}

TEST(Graph, HostReadInsideCaptureIsRefusedAndTheStreamRecovers) {
    Device& dev = discrete();
    Tensor t({2}, DType::F32, dev);
    const std::string msg = error_of([&] {
        Graph::capture(dev, [&] {
            ops::fill(dev, t, 3.0f);
            t.to_vector();  // needs a sync: cannot be recorded
        });
    });
    EXPECT_NE(msg.find("inside a captured step"), std::string::npos) << msg;
    EXPECT_EQ(dev.capture_log(), nullptr);
    ops::fill(dev, t, 5.0f);  // eager again
    EXPECT_EQ(t.to_vector(), (std::vector<float>{5, 5}));
}
