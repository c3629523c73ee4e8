// ConfigSection over a toml++ table: the config's rules for keys, types, ranges and finite floats.
#include "xylem/config_section.h"

#include <charconv>
#include <cmath>
#include <set>
#include <toml++/toml.h>

#include "xylem/error.h"

namespace xylem {
namespace {

// A number for messages: nan, inf, -inf, or the shortest text that reads back as the value (1e+300).
std::string number_text(const toml::node& n) {
    if (const auto* i = n.as_integer()) return std::to_string(i->get());
    const double v = n.as_floating_point() ? n.as_floating_point()->get() : 0.0;
    if (std::isnan(v)) return "nan";
    char buf[32];
    const auto end = std::to_chars(buf, buf + sizeof buf, v).ptr;  // inf prints as inf, -inf as -inf
    return std::string(buf, end);
}

const toml::node* node_of(const void* table, const std::string& key) {
    return static_cast<const toml::table*>(table)->get(key);
}

template <class T> void get_float(const ConfigSection& s, const toml::node* n, const std::string& key, T& out) {
    if (!n) return;
    double v = 0;
    if (n->is_integer()) v = static_cast<double>(n->as_integer()->get());
    else if (n->is_floating_point()) v = n->as_floating_point()->get();
    else s.fail(key, "must be a number");
    const T narrowed = static_cast<T>(v);
    if (!std::isfinite(narrowed)) s.fail(key, "must be a finite number, got " + number_text(*n));
    out = narrowed;
}

}  // namespace

void ConfigSection::fail(const std::string& key, const std::string& what) const {
    throw Error(source_ + ": key '" + key_path(key) + "' " + what);
}

void ConfigSection::allow(std::initializer_list<const char*> keys) const {
    allow(std::vector<std::string>(keys.begin(), keys.end()));
}

void ConfigSection::allow(const std::vector<std::string>& keys) const {
    const std::set<std::string> ok(keys.begin(), keys.end());
    for (auto&& [k, v] : *static_cast<const toml::table*>(table_)) {
        if (!ok.count(std::string(k.str()))) {
            std::string known;
            for (const std::string& s : ok) known += (known.empty() ? "" : ", ") + s;
            throw Error(source_ + ": unknown key '" + key_path(std::string(k.str())) + "' (known keys here: " + known + ")");
        }
    }
}

bool ConfigSection::has(const std::string& key) const { return node_of(table_, key) != nullptr; }

bool ConfigSection::is_array(const std::string& key) const {
    const toml::node* n = node_of(table_, key);
    return n && n->is_array();
}

bool ConfigSection::is_string(const std::string& key) const {
    const toml::node* n = node_of(table_, key);
    return n && n->is_string();
}

void ConfigSection::get(const std::string& key, bool& out) const {
    const toml::node* n = node_of(table_, key);
    if (!n) return;
    if (!n->is_boolean()) fail(key, "must be a boolean (true or false)");
    out = n->as_boolean()->get();
}

void ConfigSection::get(const std::string& key, std::string& out) const {
    const toml::node* n = node_of(table_, key);
    if (!n) return;
    if (!n->is_string()) fail(key, "must be a string");
    out = n->as_string()->get();
}

void ConfigSection::get(const std::string& key, float& out) const { get_float(*this, node_of(table_, key), key, out); }
void ConfigSection::get(const std::string& key, double& out) const { get_float(*this, node_of(table_, key), key, out); }

std::optional<int64_t> ConfigSection::integer(const std::string& key, IntRange range) const {
    const toml::node* n = node_of(table_, key);
    if (!n) return std::nullopt;
    if (!n->is_integer()) fail(key, "must be an integer");
    return in_range(key, n->as_integer()->get(), range);
}

int64_t ConfigSection::in_range(const std::string& key, int64_t v, IntRange range) const {
    if (v < range.lo || v > range.hi)
        fail(key, "must be in [" + std::to_string(range.lo) + ", " + std::to_string(range.hi) + "], got " +
                      std::to_string(v));
    return v;
}

void ConfigSection::get_list(const std::string& key, std::vector<std::string>& out) const {
    const toml::node* n = node_of(table_, key);
    if (!n) return;
    out.clear();
    if (n->is_string()) {
        out.push_back(n->as_string()->get());
        return;
    }
    if (!n->is_array()) fail(key, "must be a string or an array of strings");
    for (const toml::node& e : *n->as_array()) {
        if (!e.is_string()) fail(key, "must be an array of strings");
        out.push_back(e.as_string()->get());
    }
}

void ConfigSection::get_shape(const std::string& key, Shape& out, IntRange range, bool allow_infer) const {
    const toml::node* n = node_of(table_, key);
    if (!n) return;
    if (!n->is_array()) fail(key, "must be an array of integers");
    out.clear();
    for (const toml::node& e : *n->as_array()) {
        if (!e.is_integer()) fail(key, "must be an array of integers");
        const int64_t v = e.as_integer()->get();
        if (allow_infer && v == -1) {
            out.push_back(v);
            continue;
        }
        if (v < range.lo || v > range.hi)
            fail(key, "entries must be " + std::string(allow_infer ? "-1 or " : "") + "in [" +
                          std::to_string(range.lo) + ", " + std::to_string(range.hi) + "], got " +
                          std::to_string(v));
        out.push_back(v);
    }
}

}  // namespace xylem
