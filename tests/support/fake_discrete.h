// The discrete test plugin (tests/core/plugins/fake_discrete.cpp: memory the core cannot address,
// real capture, 1 GiB reported), for the test areas whose CMake gives them its folder.
#pragma once

#include "xylem/registry.h"

namespace xylem::test {

inline Device& fake_discrete() {
    static Registry* reg = [] {
        auto* r = new Registry();  // plugins are never unloaded
        r->scan({XYLEM_TEST_CORE_PLUGIN_DIR});
        return r;
    }();
    return *reg->select("fake_discrete")->device(0);
}

}  // namespace xylem::test
