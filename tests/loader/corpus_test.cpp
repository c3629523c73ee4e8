// The broken-plugin corpus through the xylem program: truncated copies of every plugin this
// build made, plugins whose constructor, dependency or probe crashes, one that exits, a
// missing dependency, a wrong ABI, junk, a folder and a file for another machine, all in
// XYLEM_PLUGIN_PATH. `xylem backends` lists each with its reason and exits 0, and training on
// native works beside them, also when the preference list names crashing plugins first.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <map>
#include <sstream>

#include "loader/plugin_corpus.h"

namespace xylem {
namespace {
namespace fs = std::filesystem;
using test::ScratchDir;

const std::string kFixtureDir = XYLEM_TEST_FIXTURE_PLUGIN_DIR;
// Canonical, as the loader reports and loads plugins: the build folder may be reached through a
// symbolic link (scripts/gpu-run.sh recreates the build's path as one on the GPU machine).
const std::string kPluginDir = fs::weakly_canonical(XYLEM_TEST_PLUGIN_DIR).string();
const std::string kCrashDir = XYLEM_TEST_CRASH_PLUGIN_DIR;
const std::string kMlp = std::string(XYLEM_SOURCE_DIR) + "/examples/fashion_mlp.toml";

struct Result {
    int code;
    std::string output;
};

Result run(const std::string& args, const std::string& env) {
    const std::string cmd = "env " + env + " " + std::string(XYLEM_BINARY_DIR) + "/bin/xylem " + args + " 2>&1";
    FILE* p = popen(cmd.c_str(), "r");
    Result r{-1, ""};
    if (!p) return r;
    std::array<char, 4096> buf;
    while (size_t n = fread(buf.data(), 1, buf.size(), p)) r.output.append(buf.data(), n);
    const int status = pclose(p);
    r.code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    return r;
}

class Corpus : public ::testing::Test {
protected:
    void SetUp() override {
        const fs::path d = dir_.path;
        for (const fs::path& plugin : test::real_plugins(kPluginDir))
            for (const test::CutFile& cut : test::write_cut_copies(plugin, d))
                expect(cut.path, cut.length == 0 ? "not an ELF file" : "truncated: ");
        for (const test::CutFile& cut : test::write_cut_copies(kFixtureDir + "/libxylem_fixture.so", d))
            expect(cut.path, cut.length == 0 ? "not an ELF file" : "truncated: ");
        const std::map<std::string, std::string> crashing = {
            {"crash_ctor", "crashed while loading: signal 11 (SIGSEGV)"},
            {"abort_ctor", "crashed while loading: signal 6 (SIGABRT)"},
            {"exit_ctor", "exited while loading with status 3"},
            {"crash_dep", "crashed while loading: signal 11 (SIGSEGV)"},
            {"crash_probe", "crashed in its probe: signal 11 (SIGSEGV)"},
        };
        for (const auto& [stem, why] : crashing) {
            fs::copy_file(kCrashDir + "/libxylem_" + stem + ".so", d / ("libxylem_" + stem + ".so"));
            expect(d / ("libxylem_" + stem + ".so"), why);
        }
        fs::copy_file(kFixtureDir + "/libxylem_needs_dep.so", d / "libxylem_needs_dep.so");
        expect(d / "libxylem_needs_dep.so",
               "cannot load: libxylem_fixture_dep.so: cannot open shared object file: No such file or directory");
        fs::copy_file(kFixtureDir + "/libxylem_abi_future.so", d / "libxylem_abi_future.so");
        expect(d / "libxylem_abi_future.so", "ABI mismatch: plugin built for ABI ");
        test::write_bytes(d / "libxylem_junk.so", "junk junk junk junk junk junk junk junk junk junk junk junk\n", 60);
        expect(d / "libxylem_junk.so", "not an ELF file (60 bytes");
        fs::create_directory(d / "libxylem_x.so");
        expect(d / "libxylem_x.so", "not a regular file (a directory)");
        const uint16_t machine = test::foreign_machine();
        test::write_patched(kFixtureDir + "/libxylem_fixture.so", d / "libxylem_foreign.so",
                            offsetof(ElfW(Ehdr), e_machine), &machine, sizeof machine);
        expect(d / "libxylem_foreign.so", "built for another machine: ");
        env_ = "XYLEM_PLUGIN_PATH=" + d.string();
    }
    void expect(const fs::path& p, const std::string& reason_start) { expected_[p.string()] = reason_start; }

    ScratchDir dir_{"corpus"};
    std::map<std::string, std::string> expected_;  // path -> how its reason starts
    std::string env_;
};

TEST_F(Corpus, BackendsListsEveryFileWithItsReason) {
    const Result r = run("backends", env_);
    ASSERT_EQ(r.code, 0) << r.output;
    std::istringstream in(r.output);
    std::vector<std::string> lines;
    for (std::string line; std::getline(in, line);) lines.push_back(line);
    std::map<std::string, std::string> reasons;  // path -> reason line
    bool native_available = false;
    for (size_t i = 0; i < lines.size(); ++i) {
        const std::string& line = lines[i];
        if (line.rfind("    ", 0) == 0 || line.rfind("name ", 0) == 0) continue;
        const std::string path = line.substr(line.rfind(' ') + 1);
        if (path == kPluginDir + "/libxylem_native.so" && line.rfind("native ", 0) == 0 &&
            line.find(" available ") != std::string::npos)
            native_available = true;
        if (!expected_.count(path)) continue;
        EXPECT_NE(line.find(" unavailable "), std::string::npos) << line;
        ASSERT_LT(i + 1, lines.size());
        ASSERT_EQ(lines[i + 1].rfind("    reason: ", 0), 0u) << lines[i + 1];
        reasons[path] = lines[i + 1].substr(12);
    }
    for (const auto& [path, start] : expected_) {
        ASSERT_TRUE(reasons.count(path)) << path << " is not listed:\n" << r.output;
        EXPECT_EQ(reasons[path].rfind(start, 0), 0u) << path << ": " << reasons[path];
    }
    EXPECT_TRUE(native_available) << r.output;
    // What the plugins print in the probing child is not xylem's output.
    EXPECT_EQ(r.output.find("must not reach xylem's output"), std::string::npos) << r.output;
}

TEST_F(Corpus, NativeTrainsBesideTheCorpus) {
    const Result r = run(
        "train --config " + kMlp + " --backend native --epochs 1 --max-steps 20 --out " + (dir_.path / "out").string(),
        env_);
    ASSERT_EQ(r.code, 0) << r.output;
    EXPECT_NE(r.output.find("backend native"), std::string::npos) << r.output;
    EXPECT_NE(r.output.find("test accuracy"), std::string::npos) << r.output;
}

// The plugin files whose initialisers ran in the xylem process, from the dynamic loader's own
// log (LD_DEBUG=files, written by this process only: the probing children's output is captured).
std::vector<std::string> plugins_initialised(const std::string& output) {
    std::istringstream lines(output);
    std::vector<std::string> initialised;
    for (std::string line; std::getline(lines, line);) {
        const size_t init = line.find("calling init: ");
        if (init == std::string::npos) continue;
        const std::string path = line.substr(init + 14);
        if (fs::path(path).filename().string().rfind("libxylem_", 0) == 0 &&
            path.find("libxylem_core") == std::string::npos)
            initialised.push_back(path);
    }
    return initialised;
}

// The config's preference list names crashing plugins first: they are skipped, native trains,
// and no plugin but native was initialised in the training process.
TEST_F(Corpus, PreferenceListSkipsCrashingPluginsAndLoadsOnlyTheChosenOne) {
    std::ifstream in(kMlp);
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    const size_t at = text.find("\nbackend = ");
    ASSERT_NE(at, std::string::npos);
    text.replace(at + 1, text.find('\n', at + 1) - at - 1,
                 "backend = [\"crash_ctor\", \"abort_ctor\", \"crash_probe\", \"native\"]");
    const fs::path config = dir_.path / "prefer_crashing.toml";
    test::write_bytes(config, text.data(), text.size());

    const Result r =
        run("train --config " + config.string() + " --epochs 1 --max-steps 20 --out " + (dir_.path / "out").string(),
            env_ + " LD_DEBUG=files");
    ASSERT_EQ(r.code, 0) << r.output;
    EXPECT_NE(r.output.find("backend native"), std::string::npos) << r.output;
    EXPECT_NE(r.output.find("skipped crash_ctor: backend 'crash_ctor' is unavailable: "), std::string::npos)
        << r.output.substr(0, 4000);
    EXPECT_EQ(plugins_initialised(r.output), std::vector<std::string>{kPluginDir + "/libxylem_native.so"})
        << r.output.substr(0, 4000);
}

// The example's backend = "auto" ranks the devices of every file in the corpus in probing children:
// the crashing and broken files are passed over with their reasons, and only the pick is loaded.
TEST_F(Corpus, AutoRanksBesideTheCorpusAndLoadsOnlyItsPick) {
    const Result r =
        run("train --config " + kMlp + " --epochs 1 --max-steps 5 --out " + (dir_.path / "out").string(),
            env_ + " LD_DEBUG=files");
    ASSERT_EQ(r.code, 0) << r.output.substr(0, 4000);
    const size_t at = r.output.find("auto picks ");
    ASSERT_NE(at, std::string::npos) << r.output.substr(0, 4000);
    const std::string pick = r.output.substr(at + 11, r.output.find(' ', at + 11) - at - 11);
    EXPECT_NE(r.output.find("skipped crash_probe: crashed in its probe: signal 11 (SIGSEGV)"), std::string::npos)
        << r.output.substr(0, 4000);
    EXPECT_NE(r.output.find("skipped libxylem_abi_future.so: ABI mismatch"), std::string::npos) << r.output.substr(0, 4000);
    EXPECT_EQ(plugins_initialised(r.output), std::vector<std::string>{kPluginDir + "/libxylem_" + pick + ".so"})
        << r.output.substr(0, 4000);
}

}  // namespace
}  // namespace xylem
