// ConfigSection: a strict reader of one TOML table of a run's config, for the core's own sections
// and for code outside the core that owns a part of the schema (each layer type reads its own
// [[model.layers]] table, layers/include/xylem/layers/registry.h). Every rule of the config lives
// here once: an unknown key is named with its full path (model.layers[3].bogus) and the keys that
// are known there, a wrong type names the key and the type it needs, an integer is range-checked
// before it is narrowed, a float must be finite once narrowed to its field.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "xylem/shape.h"

namespace xylem {

// The allowed range of an integer setting, shared by its TOML key and its CLI flag: a value
// outside it is an error naming the key or flag and the range, never a value that wraps when
// narrowed to its field (batch_size = 4294967360 used to train at 64).
struct IntRange {
    int64_t lo, hi;
};

class ConfigSection {
public:
    const std::string& path() const { return path_; }      // "model.layers[3]"; "" for the top level
    const std::string& source() const { return source_; }  // the config file, for messages
    std::string key_path(const std::string& key) const { return path_.empty() ? key : path_ + "." + key; }

    // "<source>: key '<path>.<key>' <what>".
    [[noreturn]] void fail(const std::string& key, const std::string& what) const;
    // Refuses any key of the table not in `keys`, naming it and listing the known ones.
    void allow(std::initializer_list<const char*> keys) const;
    void allow(const std::vector<std::string>& keys) const;

    bool has(const std::string& key) const;
    bool is_array(const std::string& key) const;  // present and an array
    bool is_string(const std::string& key) const;  // present and a string

    // Each leaves `out` as it is when the key is absent. Floats must be finite once narrowed:
    // TOML's nan and inf, or 1e300 for a float, are an error naming the key, not a NaN in training.
    void get(const std::string& key, bool& out) const;
    void get(const std::string& key, std::string& out) const;
    void get(const std::string& key, float& out) const;
    void get(const std::string& key, double& out) const;
    template <class T> void get(const std::string&, T&) const {
        static_assert(!sizeof(T*), "integer keys take a range: get(key, out, range)");
    }
    // Integer keys: the one place their range is checked, before the value is narrowed.
    template <class T> void get(const std::string& key, T& out, IntRange range) const {
        static_assert(std::is_integral_v<T> && !std::is_same_v<T, bool>);
        if (const std::optional<int64_t> v = integer(key, range)) out = static_cast<T>(*v);
    }
    std::optional<int64_t> integer(const std::string& key, IntRange range) const;
    int64_t in_range(const std::string& key, int64_t v, IntRange range) const;

    // A string or an array of strings.
    void get_list(const std::string& key, std::vector<std::string>& out) const;
    // An array of integers, each in `range` (or -1 where allow_infer: reshape's inferred axis).
    void get_shape(const std::string& key, Shape& out, IntRange range, bool allow_infer = false) const;

protected:
    // `table` is a toml::table (toml++ is private to the core, so the header does not name it).
    ConfigSection(const void* table, std::string path, std::string source)
        : table_(table), path_(std::move(path)), source_(std::move(source)) {}
    const void* table_;

private:
    std::string path_, source_;
};

}  // namespace xylem
