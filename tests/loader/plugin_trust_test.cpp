// Loading a plugin file runs its code, so a config (or the config a checkpoint embeds) may not make
// xylem load one: its plugin_path is searched only with --trust-config-plugins, never on a resume
// from a checkpoint's config, and a run that names its backend probes only that backend's file.
// The fixtures' constructors append a line to XYLEM_TEST_PLUGIN_MARKER, so the tests see which
// files' code ran (in the probing children too).
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "loader/plugin_corpus.h"

namespace xylem {
namespace {
namespace fs = std::filesystem;
using test::ScratchDir;

const std::string kMarkDir = XYLEM_TEST_MARK_PLUGIN_DIR;  // libxylem_marker.so, libxylem_native.so (a fake)
const char* kData = "/usr/share/datasets/fashion-mnist";

struct Result {
    int code;
    std::string output;
};

class PluginTrust : public ::testing::Test {
protected:
    void SetUp() override {
        if (!fs::exists(kData)) GTEST_SKIP() << "Fashion-MNIST not installed at " << kData;
        ASSERT_TRUE(fs::exists(fs::path(kMarkDir) / "libxylem_marker.so"));
        config_ = (dir_.path / "c.toml").string();
        std::ofstream(config_) << "backend = \"native\"\nplugin_path = [\"" << kMarkDir << "\"]\n[data]\ndir = \""
                               << kData << "\"\n[[model.layers]]\ntype = \"flatten\"\n[[model.layers]]\n"
                               << "type = \"linear\"\nout = 10\n[train]\nbatch_size = 32\nprint_every = 5\n";
    }
    Result run(const std::string& args) {
        const std::string cmd = "env -u XYLEM_BACKEND -u XYLEM_PLUGIN_PATH XYLEM_TEST_PLUGIN_MARKER=" + marker() + " " +
                                std::string(XYLEM_BINARY_DIR) + "/bin/xylem " + args + " 2>&1";
        FILE* p = popen(cmd.c_str(), "r");
        Result r{-1, ""};
        if (!p) return r;
        std::array<char, 4096> buf;
        while (size_t n = fread(buf.data(), 1, buf.size(), p)) r.output.append(buf.data(), n);
        const int status = pclose(p);
        r.code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        return r;
    }
    std::string marker() const { return (dir_.path / "marker.txt").string(); }
    std::string marks() const {
        std::ifstream in(marker());
        std::ostringstream s;
        s << in.rdbuf();
        return s.str();
    }
    std::string out(const std::string& name) const { return (dir_.path / name).string(); }
    ScratchDir dir_{"plugin_trust"};
    std::string config_;
};

bool has(const std::string& text, const std::string& needle) { return text.find(needle) != std::string::npos; }

// A config's plugin_path is not searched by train, eval or a resume (whose config is the
// checkpoint's): no fixture's constructor runs, and the run says what it left out.
TEST_F(PluginTrust, AConfigsPluginPathRunsNoCode) {
    const Result train = run("train --config " + config_ + " --max-steps 10 --out " + out("r"));
    ASSERT_EQ(train.code, 0) << train.output;
    EXPECT_TRUE(has(train.output, "note: the config's plugin_path [" + kMarkDir + "] was not searched")) << train.output;
    const Result eval = run("eval --config " + config_ + " --checkpoint " + out("r/model.safetensors"));
    EXPECT_EQ(eval.code, 0) << eval.output;
    EXPECT_TRUE(has(eval.output, "note: the config's plugin_path [" + kMarkDir + "] was not searched")) << eval.output;
    const Result resumed = run("train --resume " + out("r") + " --max-steps 20");
    EXPECT_EQ(resumed.code, 0) << resumed.output;
    EXPECT_EQ(marks(), "") << "a plugin's code ran from a folder only the config named";
    // The flag that trusts a config's plugin_path is for a config file, never a checkpoint's.
    const Result trusted_resume = run("train --resume " + out("r") + " --max-steps 30 --trust-config-plugins");
    EXPECT_EQ(trusted_resume.code, 2) << trusted_resume.output;
    EXPECT_TRUE(has(trusted_resume.output, "--trust-config-plugins applies to a --config file")) << trusted_resume.output;
    EXPECT_EQ(marks(), "");
}

// Trusted, the config's folder is searched, but a named backend probes only its own file: the
// folder's libxylem_native.so runs (in a probing child), its libxylem_marker.so does not.
TEST_F(PluginTrust, ANamedBackendProbesOnlyItsOwnFile) {
    const Result r = run("train --config " + config_ + " --max-steps 5 --trust-config-plugins --out " + out("t"));
    EXPECT_EQ(r.code, 0) << r.output;
    EXPECT_TRUE(has(marks(), "mark_native constructor ran")) << marks();
    EXPECT_FALSE(has(marks(), "mark_marker")) << marks();
    // The same from the command line's --plugin-path: a folder the user named.
    fs::remove(marker());
    const Result flag = run("backends --plugin-path " + kMarkDir);
    EXPECT_TRUE(has(marks(), "mark_marker constructor ran")) << flag.output;  // `backends` lists every file, as asked
    fs::remove(marker());
    const Result named = run("eval --config " + config_ + " --checkpoint " + out("t/model.safetensors") +
                             " --backend native --plugin-path " + kMarkDir);
    EXPECT_EQ(named.code, 0) << named.output;
    EXPECT_FALSE(has(marks(), "mark_marker")) << marks();
}

}  // namespace
}  // namespace xylem
