// What tensors may take on a device: Device::alloc counts xylem's buffers and refuses one that
// would take them past the device's capacity (fake_discrete reports 1 GiB; native, the machine's
// available memory), naming both numbers, and gives the bytes back when a tensor is freed.
#include <gtest/gtest.h>

#include <optional>

#include "xylem/error.h"
#include "xylem/memory.h"
#include "xylem/registry.h"
#include "xylem/tensor.h"

using namespace xylem;

namespace {

std::shared_ptr<Device> open(const std::string& dir, const std::string& name) {
    static Registry registry;
    if (!registry.find(name)) registry.scan({dir});
    return registry.select(name)->device(0);
}

constexpr int64_t kMiB = 1024 * 1024;

}  // namespace

TEST(DeviceMemory, DiscreteDeviceRefusesTensorsThatFitAloneButNotTogether) {
    Device& dev = *open(XYLEM_TEST_CORE_PLUGIN_DIR, "fake_discrete");
    EXPECT_EQ(dev.capacity().bytes, uint64_t{1} << 30);
    EXPECT_EQ(dev.capacity().source, "the device's memory");
    const uint64_t base = dev.allocated_bytes();
    std::optional<Tensor> a(Tensor({600 * kMiB / 4}, DType::F32, dev));  // buffers are not touched: no real memory
    EXPECT_EQ(dev.allocated_bytes(), base + 600 * kMiB);
    try {
        Tensor b({600 * kMiB / 4}, DType::F32, dev);
        FAIL() << "a second 600 MiB tensor fit in 1 GiB";
    } catch (const Error& e) {
        const std::string m = e.what();
        EXPECT_NE(m.find("out of memory on fake_discrete:0"), std::string::npos) << m;
        EXPECT_NE(m.find("600.00 MiB"), std::string::npos) << m;
        EXPECT_NE(m.find("the device's memory is 1.00 GiB"), std::string::npos) << m;
    }
    EXPECT_EQ(dev.allocated_bytes(), base + 600 * kMiB);  // the refused one counts nothing
    a.reset();
    EXPECT_EQ(dev.allocated_bytes(), base);
    Tensor c({600 * kMiB / 4}, DType::F32, dev);  // the freed bytes are back
    EXPECT_EQ(dev.allocated_bytes(), base + 600 * kMiB);
}

TEST(DeviceMemory, HostMemoryDeviceIsHeldToTheMachinesAvailableMemory) {
    Device& dev = *open(XYLEM_TEST_PLUGIN_DIR, "native");
    const Device::Capacity& cap = dev.capacity();
    EXPECT_EQ(cap.source, "the machine's available memory");
    ASSERT_GT(cap.bytes, 0u);
    EXPECT_LE(cap.bytes, host_available_bytes() + dev.allocated_bytes() + (uint64_t{1} << 30));  // a snapshot
    // One tensor larger than all of it: refused before the plugin is asked.
    const int64_t floats = static_cast<int64_t>(cap.bytes / 4 + 1024);
    try {
        Tensor t({floats}, DType::F32, dev);
        FAIL() << "a tensor larger than the machine's available memory was allocated";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("the machine's available memory is"), std::string::npos) << e.what();
    }
}

TEST(DeviceMemory, BytesAsPeopleReadThem) {
    EXPECT_EQ(bytes_text(1536), "1.5 KiB");
    EXPECT_EQ(bytes_text(2.0 * kMiB), "2.00 MiB");
    EXPECT_EQ(bytes_text(9.5 * 1024 * kMiB), "9.50 GiB");
}
