// The plugin kit's op list (xylem/plugin_kit/op_list.h), which the plugins' kernel declarations and
// dispatch tables are generated from, names every op of ops.h in enum order.
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
}
