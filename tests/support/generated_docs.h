// A docs page's generated section (a table made from the code's own list), checked by a test:
// the text between BEGIN and END in the page must equal `want`; with XYLEM_WRITE_DOCS=1 the test
// rewrites it instead. docs/onnx.md's import table and docs/onnx-export.md's export table use it.
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

namespace xylem::test {

// Returns false (and records a failure naming the page) when the markers are missing.
inline bool check_generated_section(const std::string& path, const std::string& begin, const std::string& end,
                                    const std::string& want, const std::string& test_filter) {
    std::ifstream f(path);
    std::stringstream ss;
    ss << f.rdbuf();
    std::string text = ss.str();
    const size_t b = text.find(begin), e = text.find(end);
    if (b == std::string::npos || e == std::string::npos || e < b) return false;
    const size_t from = b + begin.size();
    if (const char* w = std::getenv("XYLEM_WRITE_DOCS"); w && std::string(w) == "1") {
        text.replace(from, e - from, want);
        std::ofstream(path) << text;
        return true;
    }
    EXPECT_EQ(text.substr(from, e - from), want)
        << path << ": regenerate with XYLEM_WRITE_DOCS=1 test_onnx --gtest_filter=" << test_filter;
    return true;
}

}  // namespace xylem::test
