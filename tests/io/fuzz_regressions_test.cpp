// Inputs the fuzzers (fuzz/, scripts/fuzz.sh) found, replayed through the parser that choked on
// them: tests/data/fuzz-regressions/<parser>/ holds one file per finding. Each must parse or fail
// with a one-line xylem::Error; a crash, another exception type or (in the sanitizer build,
// build-asan/) a sanitizer report fails the test. docs/testing.md says how to add one.
#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <string>
#include <vector>

#include "support/files.h"
#include "xylem/config.h"
#include "xylem/error.h"
#include "xylem/io/idx.h"
#include "xylem/io/safetensors.h"

namespace fs = std::filesystem;
using xylem::test::read_file;

namespace {

const fs::path kDir = fs::path(XYLEM_SOURCE_DIR) / "tests/data/fuzz-regressions";

// Runs `parse` on every input in kDir/<parser>; returns the error message per file ("" = parsed).
std::vector<std::pair<fs::path, std::string>> replay(const std::string& parser,
                                                     const std::function<void(const std::string&, const std::string&)>& parse) {
    std::vector<std::pair<fs::path, std::string>> results;
    if (!fs::exists(kDir / parser)) return results;
    for (const auto& entry : fs::directory_iterator(kDir / parser)) {
        const std::string bytes = read_file(entry.path());
        std::string error;
        try {
            parse(bytes, entry.path().string());
        } catch (const xylem::Error& e) {
            error = e.what();
            EXPECT_EQ(error.find('\n'), std::string::npos) << entry.path() << ": a multi-line error: " << error;
        } catch (const std::exception& e) {
            ADD_FAILURE() << entry.path() << ": threw an exception other than xylem::Error: " << e.what();
        }
        results.emplace_back(entry.path(), error);
    }
    return results;
}

const uint8_t* bytes_of(const std::string& s) { return reinterpret_cast<const uint8_t*>(s.data()); }

void parse_as(const std::string& parser, const std::string& b, const std::string& name) {
    if (parser == "idx") xylem::io::parse_idx(bytes_of(b), b.size(), name);
    else if (parser == "safetensors") xylem::io::parse_safetensors(bytes_of(b), b.size(), name);
    else if (parser == "config") xylem::parse_config(b, name);
    else FAIL() << "no parser for " << kDir / parser << " (known: idx, safetensors, config)";
}

// Every input in every folder: dropping a new finding into its parser's folder is enough.
TEST(FuzzRegressions, EveryInputParsesOrFailsCleanly) {
    size_t count = 0;
    for (const auto& dir : fs::directory_iterator(kDir)) {
        const std::string parser = dir.path().filename().string();
        count += replay(parser, [&](const std::string& b, const std::string& name) { parse_as(parser, b, name); }).size();
    }
    EXPECT_GE(count, 3u);
}

// toml++ 3.3.0 (Debian 12) reaches __builtin_unreachable() on a non-ASCII character where it looks
// for whitespace (upstream marzer/tomlplusplus#190, #295; found here by fuzz/config_fuzz.cpp). The
// fuzz build compiles toml++ itself and excludes that one check (core/CMakeLists.txt); the build
// users run links Debian's library, and this pins that it answers with a clean error.
TEST(FuzzRegressions, TomlNonAsciiWhereWhitespaceIsExpected) {
    auto results = replay("config", [](const std::string& b, const std::string& name) { xylem::parse_config(b, name); });
    size_t checked = 0;
    for (const auto& [path, error] : results) {
        SCOPED_TRACE(path.string());
        const std::string name = path.filename().string();
        if (name == "toml-nonascii-value-min.toml") {
            EXPECT_EQ(error, path.string() + ":3:10: Error while parsing value: could not determine value type");
        } else if (name == "toml-nonascii-value.toml") {
            EXPECT_EQ(error, path.string() + ":10:10: Error while parsing value: could not determine value type");
        } else if (name == "toml-nonascii-after-line-ending-backslash.toml") {
            EXPECT_EQ(error, "");  // valid: the backslash trims the line break, the backend is "§native"
        } else {
            continue;
        }
        ++checked;
    }
    EXPECT_EQ(checked, 3u) << "the toml++ inputs are missing from " << kDir / "config";
}

// A 50,000-part dotted key or [table] header crashed toml++ (stack overflow, issue 26): the depth
// pre-scan (core/src/config_depth.cpp) refuses it before toml++ reads it, naming file and line.
TEST(FuzzRegressions, DeepDottedKeysAreRefusedBeforeToml) {
    auto results = replay("config", [](const std::string& b, const std::string& name) { xylem::parse_config(b, name); });
    const std::string why = ": the config nests deeper than 256 levels (dotted key parts, [table] header parts, arrays "
                            "and inline tables together)";
    size_t checked = 0;
    for (const auto& [path, error] : results) {
        const std::string name = path.filename().string();
        if (name == "deep-dotted-key.toml") EXPECT_EQ(error, path.string() + ":2" + why);
        else if (name == "deep-table-header.toml") EXPECT_EQ(error, path.string() + ":1" + why);
        else continue;
        ++checked;
    }
    EXPECT_EQ(checked, 2u) << "the deep-key inputs are missing from " << kDir / "config";
}

}  // namespace
