// The error parse_config gives for a config text (read as "test.toml"), or "(no error)": the
// config, layer-registry and layer tests check messages that name the key.
#pragma once

#include <string>

#include "xylem/config.h"
#include "xylem/error.h"

namespace xylem::test {

inline std::string config_error_of(const std::string& text) {
    try {
        parse_config(text, "test.toml");
    } catch (const Error& e) {
        return e.what();
    }
    return "(no error)";
}

}  // namespace xylem::test
