// The conformance kit's record of every case (gtest listener) and its per-op report.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

namespace xylem::kit {

enum class Status { Pass, Fail, Skip };

struct CaseResult {
    std::string suite, name;        // "GemmConformance", "EveryTransposeAndScaling"
    std::string backend;            // "" for cases that run once, not per backend
    Status status = Status::Pass;
    std::string message;            // first failure, or the skip reason; one line
    std::vector<uint32_t> tested;   // ops named by XYLEM_REQUIRE_OP
};

// Records each finished case; prints failures as they happen.
class Recorder : public ::testing::EmptyTestEventListener {
public:
    explicit Recorder(std::vector<std::string> backends) : backends_(std::move(backends)) {}
    const std::vector<CaseResult>& results() const { return results_; }

private:
    void OnTestStart(const ::testing::TestInfo& info) override;
    void OnTestPartResult(const ::testing::TestPartResult& part) override;
    void OnTestEnd(const ::testing::TestInfo& info) override;

    std::vector<std::string> backends_;
    std::vector<CaseResult> results_;
    CaseResult current_;
};

// One backend's column: its name and whether it implements each op.
struct Column {
    std::string backend;
    std::vector<bool> supported;  // indexed by op
};

// Prints the per-op table (op conformance cases), then every other check (layer gradients,
// lifecycle), then the failures in full. Returns the number of failed cases.
int print_text(std::ostream& out, const std::vector<Column>& columns, const std::vector<CaseResult>& results,
               const std::string& plugin_failures = "");
// The op x backend table in Markdown, for docs/ops.md.
int print_markdown(std::ostream& out, const std::vector<Column>& columns, const std::vector<CaseResult>& results);

}  // namespace xylem::kit
