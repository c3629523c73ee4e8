// Tensor residency and transfer accounting, on a plugin with non-host memory and on native.
#include <gtest/gtest.h>

#include "xylem/error.h"
#include "xylem/op_calls.h"
#include "xylem/registry.h"
#include "xylem/transfer.h"

using namespace xylem;

namespace {

std::shared_ptr<Device> open(const std::string& dir, const std::string& name) {
    static Registry registry;  // one registry for the whole test program
    if (!registry.find(name)) registry.scan({dir});
    return registry.select(name)->device(0);
}

Device& discrete() { return *open(XYLEM_TEST_CORE_PLUGIN_DIR, "fake_discrete"); }
Device& native() { return *open(XYLEM_TEST_PLUGIN_DIR, "native"); }

}  // namespace

TEST(Shape, NumelAndFormatting) {
    EXPECT_EQ(numel({2, 3, 4}), 24);
    EXPECT_EQ(numel({}), 1);
    EXPECT_EQ(numel({5, 0}), 0);
    EXPECT_EQ(to_string({64, 784}), "[64, 784]");
    EXPECT_EQ(to_string({}), "[]");
    EXPECT_THROW(Tensor({2, -1}), Error);
}

TEST(Residency, HostWriteThenDeviceReadCopiesOnce) {
    Device& dev = discrete();
    Tensor t = tensor_from({1, 2, 3, 4}, {4});
    const TransferCounts before = transfer_counts();
    Tensor out({4});
    ops::axpby_inplace(dev, 1.0f, t, 0.0f, out);  // reads t on the device: one upload
    ops::axpby_inplace(dev, 1.0f, t, 0.0f, out);  // t is current there now: none
    TransferCounts d = transfer_counts() - before;
    EXPECT_EQ(d.h2d_count, 1u);
    EXPECT_EQ(d.h2d_bytes, 16u);
    EXPECT_EQ(d.d2h_count, 0u);
    EXPECT_TRUE(t.current_on(dev));
    EXPECT_TRUE(t.current_on_host());
}

TEST(Residency, DeviceWriteThenHostReadCopiesOnceAndInvalidatesHost) {
    Device& dev = discrete();
    Tensor t({3});
    t.host_write<float>()[0] = 9;  // host copy valid, device stale
    ops::fill(dev, t, 2.5f);        // write: discards the host copy without copying it up
    EXPECT_FALSE(t.current_on_host());
    const TransferCounts before = transfer_counts();
    const float* p = t.host_read<float>();
    EXPECT_EQ(p[0], 2.5f);
    EXPECT_EQ(p[2], 2.5f);
    t.host_read<float>();  // already current
    TransferCounts d = transfer_counts() - before;
    EXPECT_EQ(d.d2h_count, 1u);
    EXPECT_EQ(d.d2h_bytes, 12u);
    EXPECT_EQ(d.h2d_count, 0u);
}

TEST(Residency, HostWriteInvalidatesDeviceCopy) {
    Device& dev = discrete();
    Tensor t({2});
    ops::fill(dev, t, 1.0f);
    float* h = t.host_write<float>();
    h[0] = 5;
    h[1] = 6;
    EXPECT_FALSE(t.current_on(dev));
    Tensor out({2});
    ops::copy(dev, t, out);
    EXPECT_EQ(out.to_vector(), (std::vector<float>{5, 6}));
}

TEST(Residency, StrictModeRejectsImplicitTransfersButAllowsExplicitUpload) {
    Device& dev = discrete();
    Tensor t = tensor_from({1, 2}, {2});
    Tensor out({2});
    {
        StrictTransfers strict;
        EXPECT_THROW(ops::copy(dev, t, out), Error);
    }
    t = tensor_from({3, 4}, {2});
    {
        StrictTransfers strict;
        t.upload(dev);  // explicit: allowed
        ops::copy(dev, t, out);
        try {
            out.host_read<float>();
            FAIL() << "implicit device->host read in strict mode did not throw";
        } catch (const Error& e) {
            EXPECT_NE(std::string(e.what()).find("strict transfer mode"), std::string::npos) << e.what();
        }
    }
    EXPECT_EQ(out.to_vector(), (std::vector<float>{3, 4}));
}

TEST(Residency, ReshapedViewsShareStorage) {
    Device& dev = discrete();
    Tensor t({2, 3});
    ops::fill(dev, t, 7.0f);
    Tensor v = t.reshaped({6});
    EXPECT_EQ(v.to_vector(), std::vector<float>(6, 7.0f));
    EXPECT_THROW(t.reshaped({4}), Error);
}

TEST(Residency, HostMemoryBackendNeverCopies) {
    Device& dev = native();
    const TransferCounts before = transfer_counts();
    Tensor t({1000}, DType::F32, dev);
    float* h = t.host_write<float>();
    for (int i = 0; i < 1000; ++i) h[i] = static_cast<float>(i);
    Tensor out({1000}, DType::F32, dev);
    ops::axpby(dev, 2.0f, t, 0.0f, t, out);
    EXPECT_EQ(out.host_read<float>()[999], 1998.0f);
    TransferCounts d = transfer_counts() - before;
    EXPECT_EQ(d.count(), 0u);
    EXPECT_TRUE(out.current_on(dev));
    EXPECT_TRUE(out.current_on_host());
}

TEST(Residency, UnsupportedOpNamesOpAndBackend) {
    Device& dev = discrete();  // fake_discrete lacks the convolution family
    Tensor x({1, 1, 4, 4}), y({1, 1, 2, 2});
    ops::fill(dev, x, 1.0f);
    const xylem_pool2d_attrs attrs{XYLEM_POOL_MAX, 2, 2, 2, 2, 0, 0, 1};
    try {
        ops::pool2d_fwd(dev, x, y, attrs);
        FAIL() << "pool2d_fwd on fake_discrete did not throw";
    } catch (const Error& e) {
        EXPECT_STREQ(e.what(), "op pool2d_fwd is not supported by backend 'fake_discrete'");
    }
}
