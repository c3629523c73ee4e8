// What `xylem` says about itself: --version, help, help COMMAND, COMMAND --help, and how it
// refuses an unknown command or flag. Help and version go to stdout with exit 0; usage errors to
// stderr with exit 2.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>

#include "cli_run.h"
#include "xylem/plugin_api.h"

using xylem::test::run_cli;

namespace {

const std::vector<std::string> kCommands = {"backends", "train", "eval", "predict", "plot", "run", "import", "help", "version"};

// The flags a command's help lists, in its options section.
std::vector<std::string> listed_flags(const std::string& help) {
    std::vector<std::string> flags;
    const size_t at = help.find("\noptions:\n");
    if (at == std::string::npos) return flags;
    std::istringstream lines(help.substr(at + 10));
    std::string line;
    while (std::getline(lines, line) && !line.empty()) {
        std::smatch m;
        if (std::regex_search(line, m, std::regex("^  (--[a-z-]+)"))) flags.push_back(m[1]);
    }
    return flags;
}

// The project version from the top-level CMakeLists.txt, the one `xylem --version` must show.
std::string project_version() {
    std::ifstream f(std::string(XYLEM_SOURCE_DIR) + "/CMakeLists.txt");
    std::stringstream s;
    s << f.rdbuf();
    std::smatch m;
    const std::string text = s.str();
    return std::regex_search(text, m, std::regex(R"(project\(xylem VERSION ([0-9.]+))")) ? m[1].str() : "?";
}

}  // namespace

TEST(CliHelp, VersionShowsProjectVersionAbiAndBuildType) {
    const auto r = run_cli("--version");
    EXPECT_EQ(r.code, 0);
    EXPECT_EQ(r.err, "");
    const std::string abi = std::to_string(XYLEM_ABI_MAJOR) + "." + std::to_string(XYLEM_ABI_MINOR);
    EXPECT_TRUE(std::regex_match(r.out, std::regex("xylem " + project_version() + " \\(plugin ABI " + abi +
                                                   ", (Release|Debug|RelWithDebInfo|MinSizeRel) build\\)\n")))
        << r.out;
    EXPECT_EQ(run_cli("version").out, r.out);
}

TEST(CliHelp, OverviewListsEveryCommand) {
    for (const std::string how : {"help", "--help", "-h"}) {
        const auto r = run_cli(how);
        EXPECT_EQ(r.code, 0) << how;
        EXPECT_EQ(r.err, "") << how;
        for (const std::string& c : kCommands)
            EXPECT_NE(r.out.find("\n  " + c + " "), std::string::npos) << how << " lacks " << c << ":\n" << r.out;
    }
    // No command at all is a usage error: the overview goes to stderr.
    const auto r = run_cli("");
    EXPECT_EQ(r.code, 2);
    EXPECT_EQ(r.out, "");
    EXPECT_EQ(r.err.rfind("xylem: missing command\n", 0), 0u) << r.err;
    EXPECT_NE(r.err.find("\n  predict "), std::string::npos) << r.err;
}

TEST(CliHelp, HelpCommandEqualsCommandDashDashHelp) {
    for (const std::string& c : kCommands) {
        const auto a = run_cli("help " + c), b = run_cli(c + " --help");
        EXPECT_EQ(a.code, 0) << c;
        EXPECT_EQ(b.code, 0) << c;
        EXPECT_EQ(a.err + b.err, "") << c;
        EXPECT_EQ(a.out, b.out) << c;
        EXPECT_EQ(a.out.rfind("usage: xylem " + c, 0), 0u) << a.out;
    }
    // --help wins over the rest of the line, even a flag the command does not take.
    const auto r = run_cli("train --top 3 --help");
    EXPECT_EQ(r.code, 0);
    EXPECT_EQ(r.out, run_cli("help train").out);
}

TEST(CliHelp, TrainHelpSaysMaxStepsAndResumeCountTheWholeRun) {
    const std::string help = run_cli("train --help").out;
    std::smatch m;
    ASSERT_TRUE(std::regex_search(help, m, std::regex("\n  --max-steps N +([^\n]*)\n"))) << help;
    EXPECT_NE(m[1].str().find("in total over the whole run, not per epoch"), std::string::npos) << m[1];
    ASSERT_TRUE(std::regex_search(help, m, std::regex("\n  --resume \\[RUN_DIR\\] +([^\n]*)\n"))) << help;
    EXPECT_NE(m[1].str().find("continue an interrupted run"), std::string::npos) << m[1];
    ASSERT_TRUE(std::regex_search(help, m, std::regex("\n  --epochs N +([^\n]*)\n"))) << help;
    EXPECT_NE(m[1].str().find("with --resume, counts the whole run"), std::string::npos) << m[1];
}

// Each command's help lists exactly the flags it accepts: every listed flag parses (whatever fails
// after that, it is not "unknown" or "does not take"), and a flag another command takes is refused.
TEST(CliHelp, EveryCommandHelpListsExactlyTheFlagsItTakes) {
    std::set<std::string> all;
    std::map<std::string, std::vector<std::string>> flags;
    for (const std::string& c : kCommands) {
        flags[c] = listed_flags(run_cli(c + " --help").out);
        all.insert(flags[c].begin(), flags[c].end());
    }
    EXPECT_EQ(flags["predict"], (std::vector<std::string>{"--config", "--checkpoint", "--input", "--top", "--out",
                                                           "--backend", "--plugin-path", "--trust-config-plugins"}));
    EXPECT_EQ(flags["plot"], std::vector<std::string>{"--out"});
    EXPECT_EQ(flags["train"].size(), 14u);  // with --init, --accept-changed-data and --trust-config-plugins
    EXPECT_NE(std::find(flags["train"].begin(), flags["train"].end(), "--init"), flags["train"].end());
    for (const std::string c : {"train", "eval", "predict", "plot"}) {
        for (const std::string& f : all) {
            const bool listed = std::find(flags[c].begin(), flags[c].end(), f) != flags[c].end();
            // A value that no check accepts as a real file, so nothing runs for long.
            const auto r = run_cli(c + " " + f + " 1 --backend /nonexistent", "XYLEM_PLUGIN_PATH=/nonexistent");
            const bool refused = r.err.find(c + " does not take " + f) != std::string::npos;
            EXPECT_EQ(refused, !listed) << c << " " << f << ": " << r.err;
            EXPECT_EQ(r.err.find("unknown option"), std::string::npos) << c << " " << f << ": " << r.err;
            if (refused) {
                EXPECT_EQ(r.code, 2);
            }
        }
    }
}

TEST(CliHelp, UnknownCommandOnStderrExitTwo) {
    auto r = run_cli("frobnicate --config x");
    EXPECT_EQ(r.code, 2);
    EXPECT_EQ(r.out, "");
    EXPECT_EQ(r.err, "xylem: unknown command 'frobnicate'\nrun 'xylem help' for the list of commands\n");
    r = run_cli("help frobnicate");
    EXPECT_EQ(r.code, 2);
    EXPECT_EQ(r.out, "");
    EXPECT_EQ(r.err, "xylem: unknown command 'frobnicate'\nrun 'xylem help' for the list of commands\n");
}

TEST(CliHelp, UsageErrorsOnStderrWithTheCommandsUsage) {
    auto r = run_cli("train --epochs");
    EXPECT_EQ(r.code, 2);
    EXPECT_EQ(r.out, "");
    EXPECT_EQ(r.err, "xylem: --epochs needs a value\nusage: xylem train --config FILE [OPTIONS]\n"
                     "       xylem train --resume [RUN_DIR] [OPTIONS]\nrun 'xylem help train' for its options\n");
    r = run_cli("eval --epochs 3");
    EXPECT_EQ(r.code, 2);
    EXPECT_EQ(r.err.rfind("xylem: eval does not take --epochs\nusage: xylem eval ", 0), 0u) << r.err;
    r = run_cli("train --frobnicate");
    EXPECT_EQ(r.code, 2);
    EXPECT_EQ(r.err.rfind("xylem: unknown option '--frobnicate'\n", 0), 0u) << r.err;
    r = run_cli("plot a b");
    EXPECT_EQ(r.code, 2);
    EXPECT_EQ(r.err.rfind("xylem: unexpected argument 'b'\nusage: xylem plot RUN_DIR", 0), 0u) << r.err;
    r = run_cli("train --epochs 3");  // raised by the command itself, after parsing: the same form
    EXPECT_EQ(r.code, 2);
    EXPECT_EQ(r.out, "");
    EXPECT_EQ(r.err.rfind("xylem: train needs --config FILE\nusage: xylem train --config FILE", 0), 0u) << r.err;
    r = run_cli("plot");
    EXPECT_EQ(r.code, 2);
    EXPECT_EQ(r.err.rfind("xylem: plot needs RUN_DIR", 0), 0u) << r.err;
}
