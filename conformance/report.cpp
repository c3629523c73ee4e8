// The conformance kit's report: a gtest listener that records each case, and the tables.
#include "report.h"

#include <algorithm>
#include <cstdio>
#include <iomanip>
#include <map>

#include "support/backends.h"
#include "xylem/ops.h"

namespace xylem::kit {
namespace {

std::string first_line(const std::string& s) {
    std::string line = s.substr(0, s.find('\n'));
    return line.size() > 160 ? line.substr(0, 157) + "..." : line;
}

// Op conformance suites are named "<Family>Conformance"; their XYLEM_REQUIRE_OP ops are the ops under test.
bool is_op_case(const CaseResult& r) {
    const std::string tail = "Conformance";
    return r.suite.size() > tail.size() && r.suite.compare(r.suite.size() - tail.size(), tail.size(), tail) == 0;
}

struct Cell {
    std::string word, detail;
};

Cell op_cell(uint32_t op, const Column& col, const std::vector<CaseResult>& results) {
    if (!col.supported[op]) return {"unsupported", ""};
    int pass = 0, fail = 0, skip = 0;
    std::string fail_msg, skip_msg;
    for (const CaseResult& r : results) {
        if (r.backend != col.backend || !is_op_case(r)) continue;
        if (std::find(r.tested.begin(), r.tested.end(), op) == r.tested.end()) continue;
        if (r.status == Status::Fail && !fail++) fail_msg = r.suite + "." + r.name + ": " + r.message;
        if (r.status == Status::Skip && !skip++) skip_msg = r.message;
        pass += r.status == Status::Pass;
    }
    if (fail) return {"FAIL", fail_msg};
    if (pass) return {"pass", std::to_string(pass) + " case" + (pass > 1 ? "s" : "") + (skip ? ", " + std::to_string(skip) + " skipped" : "")};
    if (skip) return {"skipped", skip_msg};
    return {"no case", "supported, but the kit has no case for it yet"};
}

const char* word(Status s) {
    return s == Status::Pass ? "pass" : s == Status::Fail ? "FAIL" : "skipped";
}

// Rows of every non-op case ("Suite.Name"), in first-seen order, with one status per backend.
std::vector<std::pair<std::string, std::map<std::string, const CaseResult*>>> other_rows(
    const std::vector<CaseResult>& results) {
    std::vector<std::pair<std::string, std::map<std::string, const CaseResult*>>> rows;
    for (const CaseResult& r : results) {
        if (is_op_case(r)) continue;
        const std::string key = r.suite + "." + r.name;
        auto it = std::find_if(rows.begin(), rows.end(), [&](const auto& row) { return row.first == key; });
        if (it == rows.end()) it = rows.insert(rows.end(), {key, {}});
        it->second[r.backend] = &r;
    }
    return rows;
}

}  // namespace

void Recorder::OnTestStart(const ::testing::TestInfo& info) {
    test::required_ops() = {};
    current_ = {};
    current_.suite = info.test_suite_name();
    current_.name = info.name();
    // Parameterized cases are "Backends/Suite" and "Name/<backend>"; strip both decorations.
    if (auto slash = current_.suite.find('/'); slash != std::string::npos) current_.suite.erase(0, slash + 1);
    if (auto slash = current_.name.rfind('/'); slash != std::string::npos && info.value_param()) {
        const std::string param = current_.name.substr(slash + 1);
        current_.name.erase(slash);
        for (const std::string& b : backends_)
            if (test::backend_param_name({b, 0}) == param) current_.backend = b;
    }
}

void Recorder::OnTestPartResult(const ::testing::TestPartResult& part) {
    if (part.skipped()) {
        if (current_.message.empty()) current_.message = first_line(part.message());
        return;
    }
    if (!part.failed()) return;
    // The message stands alone: the case's name and what it checked, not a line of a test source
    // file that the installed kit does not ship. EXPECT_TRUE(near(...)) puts the numbers on its
    // "Actual:" line; that line says more than the expression.
    const std::string summary = part.summary();
    const size_t actual = summary.find("Actual: ");
    if (current_.status != Status::Fail)
        current_.message = first_line(actual == std::string::npos ? summary : summary.substr(actual));
    current_.status = Status::Fail;
    std::fprintf(stderr, "FAIL %s.%s%s%s\n%s\n", current_.suite.c_str(), current_.name.c_str(),
                current_.backend.empty() ? "" : " on ", current_.backend.c_str(), part.message());
}

void Recorder::OnTestEnd(const ::testing::TestInfo& info) {
    if (current_.status != Status::Fail && info.result()->Skipped()) current_.status = Status::Skip;
    current_.tested = test::required_ops().tested;
    results_.push_back(current_);
}

int print_text(std::ostream& out, const std::vector<Column>& columns, const std::vector<CaseResult>& results,
               const std::string& plugin_failures) {
    constexpr int kFirst = 62, kCell = 14;
    out << std::left << "\n" << std::setw(kFirst) << "op";
    for (const Column& c : columns) out << std::setw(kCell) << c.backend;
    out << (columns.size() == 1 ? "detail" : "") << "\n";
    for (uint32_t op = 0; op < XYLEM_OP_COUNT_; ++op) {
        out << std::setw(kFirst) << xylem_op_name(op);
        for (const Column& c : columns) out << std::setw(kCell) << op_cell(op, c, results).word;
        if (columns.size() == 1) out << op_cell(op, columns[0], results).detail;
        out << "\n";
    }
    out << "\n" << std::setw(kFirst) << "check (layer gradients, lifecycle, ...)";
    for (const Column& c : columns) out << std::setw(kCell) << c.backend;
    out << "\n";
    for (const auto& [key, by_backend] : other_rows(results)) {
        out << std::setw(kFirst) << key;
        for (const Column& c : columns) {
            auto it = by_backend.find(c.backend);
            if (it == by_backend.end()) it = by_backend.find("");  // a case that runs once covers every column
            out << std::setw(kCell) << (it == by_backend.end() ? "-" : word(it->second->status));
        }
        out << "\n";
    }
    int failed = 0, passed = 0, skipped = 0;
    for (const CaseResult& r : results) {
        failed += r.status == Status::Fail;
        passed += r.status == Status::Pass;
        skipped += r.status == Status::Skip;
    }
    if (failed) out << "\nfailures:\n";
    for (const CaseResult& r : results)
        if (r.status == Status::Fail)
            out << "  " << r.suite << "." << r.name << (r.backend.empty() ? "" : " on " + r.backend) << ": " << r.message
                << "\n";
    if (!plugin_failures.empty()) out << "\n" << plugin_failures;
    out << "\nresult: " << (failed || !plugin_failures.empty() ? "FAIL" : "PASS") << " (" << passed
        << " cases passed, " << failed << " failed, " << skipped << " skipped as unsupported)\n";
    return failed;
}

int print_markdown(std::ostream& out, const std::vector<Column>& columns, const std::vector<CaseResult>& results) {
    out << "| op |";
    for (const Column& c : columns) out << " " << c.backend << " |";
    out << "\n|---|";
    for (size_t i = 0; i < columns.size(); ++i) out << "---|";
    out << "\n";
    int failed = 0;
    for (uint32_t op = 0; op < XYLEM_OP_COUNT_; ++op) {
        out << "| `" << xylem_op_name(op) << "` |";
        for (const Column& c : columns) {
            const Cell cell = op_cell(op, c, results);
            failed += cell.word == "FAIL";
            out << " " << (cell.word == "pass" ? "yes" : cell.word == "unsupported" ? "-" : cell.word) << " |";
        }
        out << "\n";
    }
    for (const CaseResult& r : results) failed += r.status == Status::Fail && !is_op_case(r);
    return failed;
}

}  // namespace xylem::kit
