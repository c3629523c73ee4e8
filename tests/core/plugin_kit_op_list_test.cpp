// The plugin kit's op lists and tables (xylem/plugin_kit/op_list.h): the kit's list is generated
// from ops.h's one op list, and a plugin's table holds exactly the ops its own list names.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "xylem/plugin_kit/op_list.h"

TEST(PluginKitOpList, NamesEveryOpInEnumOrder) {
#define XYLEM_NAME_OF(name) #name,
    const std::vector<std::string> listed = {XYLEM_PLUGIN_KIT_OPS(XYLEM_NAME_OF)};
#undef XYLEM_NAME_OF
    ASSERT_EQ(listed.size(), static_cast<size_t>(XYLEM_OP_COUNT_));
    for (uint32_t op = 0; op < XYLEM_OP_COUNT_; ++op) EXPECT_EQ(listed[op], xylem_op_name(op)) << "op " << op;
    EXPECT_STREQ(xylem_op_name(XYLEM_OP_COUNT_), "unknown_op");
}

TEST(PluginKitOpList, OpIdsAreTheEnumValues) {
    namespace id = xylem::plugin_kit::op_id;
    EXPECT_EQ(id::fill, XYLEM_OP_FILL);
    EXPECT_EQ(id::linear_fwd, XYLEM_OP_LINEAR_FWD);
    EXPECT_EQ(id::clip_by_norm, XYLEM_OP_CLIP_BY_NORM);
    EXPECT_EQ(id::add, XYLEM_OP_ADD);
}

namespace {
// Kernels of a plugin that implements three ops; nothing else is defined (nor needs to be).
int calls = 0;
void op_fill(int v) { calls += v; }
void op_gemm(int v) { calls += 10 * v; }
void op_add(int v) { calls += 100 * v; }
using Fn = void (*)(int);
#define SUBSET_OPS(X) X(gemm) X(fill) X(add)  // any order
constexpr auto kOps = xylem::plugin_kit::op_table<Fn>({SUBSET_OPS(XYLEM_PLUGIN_KIT_OP_ENTRY)});
}  // namespace

TEST(PluginKitOpList, ATableHoldsExactlyTheListedOps) {
    static_assert(kOps.count == 3);
    for (uint32_t op = 0; op <= XYLEM_OP_COUNT_; ++op) {
        const bool listed = op == XYLEM_OP_FILL || op == XYLEM_OP_GEMM || op == XYLEM_OP_ADD;
        EXPECT_EQ(kOps.supports(op), listed ? 1 : 0) << xylem_op_name(op);
    }
    kOps.fn[XYLEM_OP_FILL](1);
    kOps.fn[XYLEM_OP_GEMM](1);
    kOps.fn[XYLEM_OP_ADD](1);
    EXPECT_EQ(calls, 111);
}
