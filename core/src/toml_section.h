// The core's view of a TOML table: ConfigSection (config_section.h) plus the toml++ node access
// that only the core's own config readers use (toml++ stays private to the core).
#pragma once

#include <string>
#include <toml++/toml.h>

#include "xylem/config_section.h"

namespace xylem {

// ConfigSection (config_section.h) plus the toml++ view the core's own sections use.
class Section : public ConfigSection {
public:
    Section(const toml::table& t, std::string path, std::string source)
        : ConfigSection(&t, std::move(path), std::move(source)) {}

    const toml::node* node(const std::string& key) const { return table().get(key); }

    Section sub(const std::string& key) const {
        const toml::node* n = node(key);
        static const toml::table empty;
        if (!n) return Section(empty, key_path(key), source());
        if (!n->is_table()) fail(key, "must be a table");
        return Section(*n->as_table(), key_path(key), source());
    }

    const toml::table& table() const { return *static_cast<const toml::table*>(table_); }
};

}  // namespace xylem
