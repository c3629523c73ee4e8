// The CUDA plugin's ABI 1.6 collectives (NCCL). Without a GPU: the members are in the table exactly
// when the build found nccl.h, and each fails cleanly naming why. With a GPU: a communicator of one
// rank sums in place, applies each rank's scale (NCCL's pre-multiplied sum), and refuses a second
// init, through the core's wrappers (xylem/collective.h) as a data-parallel run uses them.
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <string>

#include "cuda/cuda_test_util.h"
#include "support/backends.h"
#include "xylem/collective.h"
#include "xylem/error.h"
#include "xylem/registry.h"
#include "xylem/tensor.h"

namespace xylem {
namespace {

using cuda_test::have_gpu;
using cuda_test::table;

TEST(CudaCollectives, InTheTableExactlyWhenBuiltWithNccl) {
    const xylem_plugin& t = table();
    EXPECT_EQ(t.abi_minor, static_cast<uint32_t>(XYLEM_ABI_MINOR));
    const bool all = XYLEM_TABLE_HAS(&t, comm_unique_id) && XYLEM_TABLE_HAS(&t, comm_init) &&
                     XYLEM_TABLE_HAS(&t, comm_allreduce_sum) && XYLEM_TABLE_HAS(&t, comm_destroy);
    const bool any = t.comm_unique_id || t.comm_init || t.comm_allreduce_sum || t.comm_destroy;
    EXPECT_EQ(all, XYLEM_TEST_CUDA_NCCL != 0);
    EXPECT_EQ(any, all) << "all four members or none";
}

// No device: every member answers XYLEM_E_UNAVAILABLE naming itself and the reason; nothing crashes.
TEST(CudaCollectives, FailCleanlyWithoutADevice) {
    if (have_gpu()) GTEST_SKIP() << "this machine has a GPU: see SumsInPlaceWithEachRanksScale";
    if (!XYLEM_TEST_CUDA_NCCL) GTEST_SKIP() << "the cuda plugin was built without nccl.h";
    const xylem_plugin& t = table();
    unsigned char id[XYLEM_COMM_ID_MAX] = {};
    uint32_t size = 7;
    EXPECT_EQ(t.comm_unique_id(nullptr, id, sizeof id, &size), XYLEM_E_UNAVAILABLE);
    EXPECT_TRUE(test::contains(t.last_error(), "comm_unique_id: the CUDA backend is unavailable (no CUDA device"))
        << t.last_error();
    EXPECT_EQ(size, 7u) << "nothing written on failure";
    EXPECT_EQ(t.comm_init(nullptr, 0, id, 128, 0, 1), XYLEM_E_UNAVAILABLE);
    EXPECT_TRUE(test::contains(t.last_error(), "comm_init")) << t.last_error();
    xylem_tensor_arg arg{};
    EXPECT_EQ(t.comm_allreduce_sum(nullptr, nullptr, &arg, 1.0f), XYLEM_E_UNAVAILABLE);
    EXPECT_TRUE(test::contains(t.last_error(), "comm_allreduce_sum")) << t.last_error();
    t.comm_destroy(nullptr);  // no communicator: a no-op
}

// One rank on a GPU: the communicator a data-parallel run builds, summing a gradient-like buffer
// at an element offset, with and without a scale.
TEST(CudaCollectives, SumsInPlaceWithEachRanksScale) {
    if (!have_gpu()) GTEST_SKIP() << "no GPU here";
    if (!XYLEM_TEST_CUDA_NCCL) GTEST_SKIP() << "the cuda plugin was built without nccl.h";
    std::shared_ptr<Backend> b = test::test_registry().select("cuda");
    ASSERT_TRUE(has_device_collectives(*b));
    Device& dev = *b->device(0);
    const std::vector<uint8_t> id = device_comm_id(*b);
    ASSERT_FALSE(id.empty());
    device_comm_init(dev, id, 0, 1);
    EXPECT_THROW(device_comm_init(dev, id, 0, 1), Error) << "one communicator per framework";

    std::vector<float> values(1000);
    for (size_t i = 0; i < values.size(); ++i) values[i] = static_cast<float>(i) - 300.5f;
    Tensor flat = tensor_from(values, {1000});
    Tensor part = flat.rows(100, 500);  // a bucket's slice: the operand's offset must be honoured
    device_allreduce_sum(dev, part, 1.0f);
    EXPECT_EQ(flat.to_vector(), values) << "one rank's sum is itself";
    device_allreduce_sum(dev, part, 0.5f);
    const std::vector<float> got = flat.to_vector();
    for (size_t i = 0; i < values.size(); ++i)
        ASSERT_EQ(got[i], i >= 100 && i < 600 ? values[i] * 0.5f : values[i]) << "element " << i;
    device_comm_destroy(*b);
    EXPECT_THROW(device_allreduce_sum(dev, part, 1.0f), Error) << "no communicator after destroy";
}

}  // namespace
}  // namespace xylem
