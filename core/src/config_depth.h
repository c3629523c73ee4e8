// How deep a TOML text nests, checked before toml++ reads it (config_depth.cpp).
#pragma once

#include <string>

namespace xylem {

// toml++'s own limit for nested arrays and inline tables (TOML_MAX_NESTED_VALUES); the key paths
// of dotted keys and [table] headers are held to the same depth.
inline constexpr int kMaxTomlDepth = 256;

// Throws Error naming `source`, the line and the limit when a value of `text` would sit deeper than
// kMaxTomlDepth levels: toml++ 3.3 recurses once per dotted-key part and crashes (stack overflow)
// on a key of some 30,000 parts. Anything else is left for toml++ to judge.
void check_toml_depth(const std::string& text, const std::string& source);

}  // namespace xylem
