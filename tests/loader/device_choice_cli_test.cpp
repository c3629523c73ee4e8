// `backend = "auto"` as a user meets it: `xylem backends` prints each device's kind and marks the
// device auto would pick, saying why; `xylem train` with the example config says which device
// runs and what it passed over; a named backend (--backend opencl) is still exactly that one.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "loader/plugin_corpus.h"
#include "xylem/registry.h"

namespace xylem {
namespace {
namespace fs = std::filesystem;
using test::ScratchDir;

const std::string kPluginDir = XYLEM_TEST_PLUGIN_DIR;
const std::string kMlp = std::string(XYLEM_SOURCE_DIR) + "/examples/fashion_mlp.toml";

// PoCL's kernel cache (a fresh one compiles every kernel again: minutes on two cores).
std::string pocl_cache() {
    if (const char* d = std::getenv("POCL_CACHE_DIR"); d && *d) return d;
    const char* home = std::getenv("HOME");
    return std::string(home ? home : "/tmp") + "/.cache/xylem/pocl";
}

struct Result {
    int code;
    std::string output;
};

Result run(const std::string& args, const std::string& env = "") {
    const std::string cmd = "env -u XYLEM_BACKEND -u XYLEM_PLUGIN_PATH POCL_CACHE_DIR=" + pocl_cache() + " " + env +
                            " " + std::string(XYLEM_BINARY_DIR) + "/bin/xylem " + args + " 2>&1";
    FILE* p = popen(cmd.c_str(), "r");
    Result r{-1, ""};
    if (!p) return r;
    std::array<char, 4096> buf;
    while (size_t n = fread(buf.data(), 1, buf.size(), p)) r.output.append(buf.data(), n);
    const int status = pclose(p);
    r.code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    return r;
}

bool has(const std::string& text, const std::string& needle) { return text.find(needle) != std::string::npos; }

// What the program's own plugin folder offers, probed as the program probes it.
const Registry& installed() {
    static Registry* r = [] {
        auto* reg = new Registry();
        reg->scan({kPluginDir}, Isolation::child);
        return reg;
    }();
    return *r;
}

bool gpu_or_accelerator_here() {
    for (const PluginRecord& p : installed().plugins())
        for (uint32_t k : p.available ? p.device_kinds : std::vector<uint32_t>{})
            if (k == XYLEM_DEVICE_DISCRETE_GPU || k == XYLEM_DEVICE_INTEGRATED_GPU || k == XYLEM_DEVICE_ACCELERATOR)
                return true;
    return false;
}

bool opencl_available() {
    const PluginRecord* p = installed().find("opencl");
    return p && p->available;
}

class DeviceChoiceCli : public ::testing::Test {
protected:
    ScratchDir dir_{"device_choice_cli"};
    std::string out() const { return (dir_.path / "out").string(); }
};

TEST_F(DeviceChoiceCli, BackendsPrintsKindsAndMarksAutosPick) {
    const Result r = run("backends");
    ASSERT_EQ(r.code, 0) << r.output;
    const AutoPick pick = installed().auto_pick();
    ASSERT_NE(pick.record, nullptr);
    // Exactly one device line carries the mark: the pick's, under the pick's record.
    std::istringstream in(r.output);
    std::string line, record, marked_under, marked;
    int marks = 0;
    for (; std::getline(in, line);) {
        if (!line.empty() && line[0] != ' ') record = line.substr(0, line.find(' '));
        if (has(line, "<- auto picks this device")) {
            ++marks;
            marked_under = record;
            marked = line;
        }
    }
    EXPECT_EQ(marks, 1) << r.output;
    EXPECT_EQ(marked_under, pick.record->name) << r.output;
    EXPECT_EQ(marked.rfind("    device " + std::to_string(pick.device) + ": ", 0), 0u) << marked;
    EXPECT_TRUE(has(r.output, "\n" + pick.why + "\n")) << r.output;
    const PluginRecord* native = installed().find("native");
    ASSERT_NE(native, nullptr);
    EXPECT_TRUE(has(r.output, std::string("    device 0: ") + native->probe.devices[0].name + " (CPU), ")) << r.output;
    if (gpu_or_accelerator_here()) return;
    // No GPU here: native, and the reason; an OpenCL CPU is passed over, saying why.
    EXPECT_TRUE(has(r.output, "\nauto picks native device 0 (")) << r.output;
    EXPECT_TRUE(has(r.output, ", CPU): no GPU or accelerator available\n")) << r.output;
    if (opencl_available()) {
        EXPECT_TRUE(has(r.output, "  passed over opencl: device 0 (")) << r.output;
        EXPECT_TRUE(has(r.output, "is a CPU: a CPU runs on the native backend unless this backend is named"))
            << r.output;
    }
}

// The shipped example says backend = "auto": here (no GPU) native trains, and the output says
// why cuda and opencl were not chosen.
TEST_F(DeviceChoiceCli, ExampleConfigTrainsOnAutosPickAndSaysWhatItSkipped) {
    const Result r = run("train --config " + kMlp + " --epochs 1 --max-steps 2 --out " + out());
    ASSERT_EQ(r.code, 0) << r.output;
    const AutoPick pick = installed().auto_pick();
    ASSERT_NE(pick.record, nullptr);
    EXPECT_EQ(r.output.rfind(pick.why + "\n", 0), 0u) << r.output;  // the run's first line
    for (const Skipped& s : pick.skipped) EXPECT_TRUE(has(r.output, "  skipped " + s.text() + "\n")) << r.output;
    EXPECT_TRUE(has(r.output, "backend " + pick.record->name + ", device " + pick.record->name + ":" +
                                  std::to_string(pick.device)))
        << r.output;
    if (gpu_or_accelerator_here()) return;
    EXPECT_TRUE(has(r.output, "backend native, device native:0")) << r.output;
    if (opencl_available()) {
        EXPECT_TRUE(has(r.output, "  skipped opencl: device 0 (")) << r.output;
    }
    if (const PluginRecord* cuda = installed().find("cuda"); cuda && !cuda->available) {
        EXPECT_TRUE(has(r.output, "  skipped cuda: no CUDA device")) << r.output;
    }
}

TEST_F(DeviceChoiceCli, AutoFromTheFlagAndTheEnvironment) {
    const AutoPick pick = installed().auto_pick();
    ASSERT_NE(pick.record, nullptr);
    Result r = run("train --config " + kMlp + " --backend auto --epochs 1 --max-steps 1 --out " + out());
    ASSERT_EQ(r.code, 0) << r.output;
    EXPECT_EQ(r.output.rfind(pick.why + " (--backend auto)\n", 0), 0u) << r.output;
    r = run("train --config " + kMlp + " --epochs 1 --max-steps 1 --out " + out(), "XYLEM_BACKEND=auto");
    ASSERT_EQ(r.code, 0) << r.output;
    EXPECT_EQ(r.output.rfind(pick.why + " (XYLEM_BACKEND=auto)\n", 0), 0u) << r.output;
}

// A list keeps "first available wins", and may end in "auto".
TEST_F(DeviceChoiceCli, ConfigListWithAuto) {
    std::ifstream in(kMlp);
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    const size_t at = text.find("\nbackend = ");
    ASSERT_NE(at, std::string::npos);
    text.replace(at + 1, text.find('\n', at + 1) - at - 1, "backend = [\"tiny\", \"auto\"]");
    const fs::path config = dir_.path / "tiny_then_auto.toml";
    test::write_bytes(config, text.data(), text.size());
    const Result r = run("train --config " + config.string() + " --epochs 1 --max-steps 1 --out " + out());
    ASSERT_EQ(r.code, 0) << r.output;
    const AutoPick pick = installed().auto_pick();
    ASSERT_NE(pick.record, nullptr);
    EXPECT_EQ(r.output.rfind(pick.why + " (entry \"auto\" of the backend list [tiny, auto])\n", 0), 0u) << r.output;
    EXPECT_TRUE(has(r.output, "  skipped tiny: unknown backend 'tiny'")) << r.output;
}

// Named, a backend is exactly that one: --backend opencl runs on the OpenCL CPU device that auto
// passes over, and says it was named.
TEST_F(DeviceChoiceCli, NamedBackendIsNeverReplacedByAutosPick) {
    if (!opencl_available()) GTEST_SKIP() << "no OpenCL platform on this machine";
    const Result r = run("train --config " + kMlp + " --backend opencl --epochs 1 --max-steps 1 --out " + out());
    ASSERT_EQ(r.code, 0) << r.output;
    EXPECT_EQ(r.output.rfind("backend opencl: named by --backend\n", 0), 0u) << r.output;
    EXPECT_TRUE(has(r.output, "backend opencl, device opencl:0")) << r.output;
    // And unavailable, named, it is an error, not auto's pick.
    const Result cuda = run("train --config " + kMlp + " --backend cuda --epochs 1 --max-steps 1 --out " + out());
    if (const PluginRecord* p = installed().find("cuda"); p && !p->available) {
        EXPECT_EQ(cuda.code, 1) << cuda.output;
        EXPECT_EQ(cuda.output.rfind("xylem: error: backend 'cuda' is unavailable: ", 0), 0u) << cuda.output;
    }
}

}  // namespace
}  // namespace xylem
