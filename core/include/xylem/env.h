// The XYLEM_* environment variables, each read by one rule with its range, like a config key
// (docs/training.md, "Environment variables", lists them all). Header-only: the plugins, which
// never link the core, read theirs with the same rules and report the error as their probe reason.
#pragma once

#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <initializer_list>
#include <string>

#include "xylem/error.h"

namespace xylem::env {

// A variable's value: unset, a value, or why its text is none (a sentence that names the variable
// and what it may hold). A set but empty variable with a range is an error, not "unset".
template <class T> struct Value {
    bool set = false;
    T value{};
    std::string error;
};

namespace detail {

inline const char* raw(const char* name) { return std::getenv(name); }

inline std::string quoted(const char* name, const char* text) { return std::string(name) + "='" + text + "'"; }

}  // namespace detail

// A whole decimal number in [lo, hi] (`unit` says what it counts).
inline Value<int64_t> integer(const char* name, int64_t lo, int64_t hi, const char* unit) {
    Value<int64_t> v;
    const char* s = detail::raw(name);
    if (!s) return v;
    v.set = true;
    char* end = nullptr;
    errno = 0;
    const long long x = std::strtoll(s, &end, 10);
    const bool whole = *s && end && *end == '\0' && errno == 0 && *s != ' ' && *s != '+';
    if (!whole || x < lo || x > hi)
        v.error = detail::quoted(name, s) + ": must be a whole number of " + unit + " in [" + std::to_string(lo) + ", " +
                  std::to_string(hi) + "] (or unset)";
    else v.value = x;
    return v;
}

// A finite number in (0, hi].
inline Value<double> positive(const char* name, double hi, const char* unit) {
    Value<double> v;
    const char* s = detail::raw(name);
    if (!s) return v;
    v.set = true;
    char* end = nullptr;
    const double x = std::strtod(s, &end);
    if (!*s || !end || *end != '\0' || !(x > 0) || !(x <= hi) || *s == ' ')
        v.error = detail::quoted(name, s) + ": must be a number of " + unit + " in (0, " +
                  std::to_string(static_cast<int64_t>(hi)) + "] (or unset)";
    else v.value = x;
    return v;
}

// One of `choices`, exactly as written.
inline Value<std::string> choice(const char* name, std::initializer_list<const char*> choices) {
    Value<std::string> v;
    const char* s = detail::raw(name);
    if (!s) return v;
    v.set = true;
    std::string list;
    for (const char* c : choices) {
        if (std::string(s) == c) {
            v.value = c;
            return v;
        }
        list += (list.empty() ? "" : ", ") + std::string(c);
    }
    v.error = detail::quoted(name, s) + ": must be one of " + list + " (or unset)";
    return v;
}

// A switch: 1, true, on, yes or 0, false, off, no.
inline Value<bool> boolean(const char* name) {
    Value<std::string> c = choice(name, {"1", "true", "on", "yes", "0", "false", "off", "no"});
    Value<bool> v;
    v.set = c.set;
    v.error = c.error;
    v.value = c.value == "1" || c.value == "true" || c.value == "on" || c.value == "yes";
    return v;
}

// Free text (a name, a path list, compiler options): empty counts as unset.
inline Value<std::string> text(const char* name) {
    Value<std::string> v;
    const char* s = detail::raw(name);
    if (!s || !*s) return v;
    v.set = true;
    v.value = s;
    return v;
}

// The value, `fallback` when unset; throws Error with the variable's sentence when its text is
// none (the core, train and the CLI; a plugin reports v.error as its probe reason instead).
template <class T> T value_or(const Value<T>& v, T fallback) {
    if (!v.error.empty()) throw Error(v.error);
    return v.set ? v.value : fallback;
}

// Every variable with a range, read by the one function that knows the range. (Free-text ones:
// XYLEM_BACKEND, XYLEM_PLUGIN_PATH, XYLEM_PYTHON, XYLEM_OPENCL_BUILD_OPTIONS: text().)
inline constexpr int64_t kMaxThreads = 1024;  // as the config key `threads`
inline Value<int64_t> num_threads() { return integer("XYLEM_NUM_THREADS", 1, kMaxThreads, "CPUs"); }
inline Value<std::string> native_isa() { return choice("XYLEM_NATIVE_ISA", {"avx512", "avx2", "baseline"}); }
inline Value<bool> fusion() { return boolean("XYLEM_FUSION"); }
inline Value<int64_t> bucket_kb() { return integer("XYLEM_BUCKET_KB", 1, int64_t{1} << 30, "KiB"); }
inline Value<std::string> dist_reduce() { return choice("XYLEM_DIST_REDUCE", {"auto", "host"}); }
inline Value<double> dist_timeout() { return positive("XYLEM_DIST_TIMEOUT", 1e9, "seconds"); }
inline Value<std::string> opencl_kernels() { return choice("XYLEM_OPENCL_KERNELS", {"auto", "cpu", "gpu"}); }

}  // namespace xylem::env
