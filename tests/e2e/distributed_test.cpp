// Data-parallel training end to end: `mpirun -np 2 --oversubscribe xylem train` on loopback against
// one process with the same global batch and seed (parameters agree within 1e-5 of each tensor's
// largest value; the ranks' own parameters are bit-identical), on native and on opencl, with
// uneven shards, an empty shard, sharded validation, a resume, the refusals at start, and a rank
// killed mid-run. Skipped when mpirun is absent; a build without MPI must refuse a distributed launch.
//
// The runs use a slice of Fashion-MNIST written to a temp folder (7000 training and 1000 test
// images, uncompressed): the same model and steps as on the full set, without each process
// spending a second decompressing 70000 images.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <thread>

#include "support/backends.h"
#include "xylem/io/idx.h"
#include "xylem/io/safetensors.h"

namespace xylem {
namespace {
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

const std::string kXylem = std::string(XYLEM_BINARY_DIR) + "/bin/xylem";
const std::string kFashion = "/usr/share/datasets/fashion-mnist";

bool have_mpirun() { return std::system("command -v mpirun >/dev/null 2>&1") == 0; }

// mpirun with what this machine needs: root must say so (containers run tests as root); no
// core binding (the processes share few cores with the rest of the machine); and no
// single-copy shared memory (CMA needs ptrace rights that containers often lack).
std::string mpirun(int np) {
    std::string s = "mpirun -np " + std::to_string(np) + " --oversubscribe --bind-to none --mca btl_vader_single_copy_mechanism none";
    if (geteuid() == 0) s += " --allow-run-as-root";
#ifdef __SANITIZE_ADDRESS__
    // Open MPI leaves MPI_Init's allocations behind at MPI_Finalize (tests/sanitizers/lsan.supp says
    // which); matching them needs whole stacks, which only the slow unwinder gets through its code.
    s += " -x LSAN_OPTIONS=suppressions=" + std::string(XYLEM_SOURCE_DIR) +
         "/tests/sanitizers/lsan.supp:print_suppressions=0:fast_unwind_on_malloc=0";
#endif
    return s;
}

struct Ran {
    int code = -1;
    std::string out;  // stdout and stderr together
    double seconds = 0;
};

Ran sh(const std::string& cmd) {
    Ran r;
    const Clock::time_point t0 = Clock::now();
    FILE* p = popen((cmd + " 2>&1").c_str(), "r");
    if (!p) return r;
    char buf[4096];
    while (size_t n = fread(buf, 1, sizeof buf, p)) r.out.append(buf, n);
    const int status = pclose(p);
    r.code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    r.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
    return r;
}

bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// `text` with every `from` replaced by `to`.
std::string replaced(std::string text, const std::string& from, const std::string& to) {
    for (size_t at = text.find(from); at != std::string::npos; at = text.find(from, at + to.size()))
        text.replace(at, from.size(), to);
    return text;
}

// The first `count` items of an IDX file, uncompressed, at `to`.
void write_prefix(const std::string& from, const std::string& to, int64_t count) {
    const io::IdxArray a = io::read_idx(from);
    int64_t item = 1;
    for (size_t d = 1; d < a.dims.size(); ++d) item *= a.dims[d];
    std::ofstream f(to, std::ios::binary);
    const unsigned char magic[4] = {0, 0, 0x08, static_cast<unsigned char>(a.dims.size())};
    f.write(reinterpret_cast<const char*>(magic), 4);
    for (size_t d = 0; d < a.dims.size(); ++d) {
        const uint32_t v = static_cast<uint32_t>(d == 0 ? count : a.dims[d]);
        const unsigned char be[4] = {static_cast<unsigned char>(v >> 24), static_cast<unsigned char>(v >> 16),
                                     static_cast<unsigned char>(v >> 8), static_cast<unsigned char>(v)};
        f.write(reinterpret_cast<const char*>(be), 4);
    }
    f.write(reinterpret_cast<const char*>(a.data.data()), static_cast<std::streamsize>(count * item));
}

class Distributed : public ::testing::Test {
protected:
    static void SetUpTestSuite() {
        root_ = fs::temp_directory_path() / ("xylem_distributed_" + std::to_string(getpid()));
        fs::create_directories(root_ / "data");
        write_prefix(kFashion + "/train-images-idx3-ubyte.gz", (root_ / "data/train-images-idx3-ubyte").string(), 7000);
        write_prefix(kFashion + "/train-labels-idx1-ubyte.gz", (root_ / "data/train-labels-idx1-ubyte").string(), 7000);
        write_prefix(kFashion + "/t10k-images-idx3-ubyte.gz", (root_ / "data/t10k-images-idx3-ubyte").string(), 1000);
        write_prefix(kFashion + "/t10k-labels-idx1-ubyte.gz", (root_ / "data/t10k-labels-idx1-ubyte").string(), 1000);
        // A smaller one for LeNet through PoCL, which scores ~200 images/s here.
        fs::create_directories(root_ / "small");
        for (const char* f : {"train-images-idx3-ubyte", "train-labels-idx1-ubyte"})
            write_prefix(kFashion + "/" + f + ".gz", (root_ / "small" / f).string(), 1000);
        for (const char* f : {"t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"})
            write_prefix(kFashion + "/" + f + ".gz", (root_ / "small" / f).string(), 100);
    }
    static void TearDownTestSuite() { fs::remove_all(root_); }
    void SetUp() override {
        if (!have_mpirun()) GTEST_SKIP() << "mpirun not found (Open MPI: openmpi-bin, scripts/install-deps.sh)";
        if (!XYLEM_TEST_HAVE_MPI) GTEST_SKIP() << "xylem was built without MPI: see BuildWithoutMpiRefusesADistributedLaunch";
    }

    // An example config with the data dir pointed at the slice (`folder` "data" or "small"), and
    // lines added to [train] and [data]. `smooth`: tanh for relu and average for max pooling (see
    // MlpMatchesOneProcess).
    static std::string config(const std::string& example, const std::string& name, const std::string& train = "",
                              const std::string& data = "", bool smooth = false, const std::string& folder = "data") {
        std::ifstream in(std::string(XYLEM_SOURCE_DIR) + "/examples/" + example + ".toml");
        std::stringstream text;
        text << in.rdbuf();
        std::string s = replaced(text.str(), "dir = \"" + kFashion + "\"", "dir = \"" + (root_ / folder).string() + "\"");
        if (smooth) s = replaced(replaced(s, "type = \"relu\"", "type = \"tanh\""), "type = \"maxpool2d\"", "type = \"avgpool2d\"");
        if (!train.empty()) s = replaced(s, "[train]\n", "[train]\n" + train + "\n");
        if (!data.empty()) s = replaced(s, "[data]\n", "[data]\n" + data + "\n");
        const fs::path p = root_ / (name + ".toml");
        std::ofstream(p) << s;
        return p.string();
    }
    static std::string out(const std::string& name) { return (root_ / "runs" / name).string(); }

    static std::map<std::string, std::vector<float>> params(const std::string& run) {
        std::map<std::string, std::vector<float>> m;
        for (const auto& [name, t] : io::read_safetensors(run + "/model.safetensors").tensors) {
            std::vector<float> v(t.data.size() / 4);
            std::memcpy(v.data(), t.data.data(), t.data.size());
            m[name] = v;
        }
        return m;
    }
    static nlohmann::json metrics(const std::string& run) { return nlohmann::json::parse(std::ifstream(run + "/metrics.json")); }

    // Each tensor of `got` within `tol` of the largest magnitude of the same tensor in `want`.
    static void expect_close(const std::string& got, const std::string& want, double tol) {
        const auto a = params(got), b = params(want);
        ASSERT_EQ(a.size(), b.size());
        ASSERT_FALSE(a.empty());
        for (const auto& [name, w] : b) {
            const std::vector<float>& g = a.at(name);
            ASSERT_EQ(g.size(), w.size()) << name;
            double largest = 0, worst = 0;
            for (size_t i = 0; i < w.size(); ++i) {
                largest = std::max(largest, std::fabs(static_cast<double>(w[i])));
                worst = std::max(worst, std::fabs(static_cast<double>(g[i]) - w[i]));
            }
            EXPECT_LE(worst, tol * largest) << name << ": largest difference " << worst << " against largest value "
                                            << largest << " (" << worst / largest << " relative)";
        }
    }

    // One process and two ranks on the same config: both must succeed; returns the two run dirs.
    static std::pair<std::string, std::string> one_and_two(const std::string& cfg, const std::string& name,
                                                           const std::string& flags) {
        const std::string one = out(name + "_1"), two = out(name + "_2");
        const Ran r1 = sh(kXylem + " train --config " + cfg + " --out " + one + " " + flags);
        EXPECT_EQ(r1.code, 0) << r1.out;
        const Ran r2 = sh(mpirun(2) + " " + kXylem + " train --config " + cfg + " --out " + two + " " + flags);
        EXPECT_EQ(r2.code, 0) << r2.out;
        // check_identical compared every rank's parameters and buffers bit for bit (their hashes).
        EXPECT_TRUE(has(r2.out, "parameters identical on all 2 ranks")) << r2.out;
        EXPECT_TRUE(has(r2.out, "data parallel: 2 ranks")) << r2.out;
        return {one, two};
    }

    static fs::path root_;
};
fs::path Distributed::root_;

// The examples' models and settings, except for one thing: tanh instead of relu and average instead
// of max pooling. One process and two ranks add the same gradients in different orders, so their
// parameters start 1e-7 apart (relative to each tensor's largest value) and, with smooth layers,
// stay there (measured: at most 3.4e-7 after 100 steps). A relu or a max pool instead makes a
// decision on a value that one order puts a hair above zero (or above its neighbour) and the
// other a hair below: here the example LeNet took such a turn within 100 steps (1.9e-4 apart,
// same loss to 3e-7), the example MLP at lr 0.01 on the full set near step 25 (1e-2 apart by step
// 100). No tolerance tells a bug from that; the smooth models keep the test about the reduction.
// The examples themselves must still agree on the loss (ExampleMlpAgreesOnTheLoss).
//
// The MLP runs a whole epoch of the slice less a validation set of 555: 101 steps of global batch
// 64, the last of 45 images split 22/23, validation scored as 277 + 278 and the test set as 500 + 500.
TEST_F(Distributed, MlpMatchesOneProcess) {
    const std::string cfg = config("fashion_mlp", "mlp", "", "validation = 555", true);
    const auto [one, two] = one_and_two(cfg, "mlp", "--backend native --epochs 1");
    expect_close(two, one, 1e-5);
    const nlohmann::json m1 = metrics(one), m2 = metrics(two);
    const nlohmann::json& e1 = m1["epochs"][0];
    const nlohmann::json& e2 = m2["epochs"][0];
    EXPECT_EQ(e2["steps"], 101);
    EXPECT_NEAR(e2["train_loss"].get<double>(), e1["train_loss"].get<double>(), 1e-5 * e1["train_loss"].get<double>());
    EXPECT_NEAR(e2["val_loss"].get<double>(), e1["val_loss"].get<double>(), 1e-5 * e1["val_loss"].get<double>());
    EXPECT_NEAR(e2["val_accuracy"].get<double>(), e1["val_accuracy"].get<double>(), 1.5 / 555);
    EXPECT_NEAR(e2["test_accuracy"].get<double>(), e1["test_accuracy"].get<double>(), 1.5 / 1000);
    // Native buffers are host memory: the sums read and write them in place, no copy at all.
    EXPECT_EQ(e2["transfers_per_step"].get<double>(), 0.0);
}

TEST_F(Distributed, LenetMatchesOneProcess) {
    const std::string cfg = config("fashion_lenet", "lenet", "", "", true);
    const auto [one, two] = one_and_two(cfg, "lenet", "--backend native --max-steps 100");
    expect_close(two, one, 1e-5);
    EXPECT_EQ(metrics(two)["epochs"][0]["steps"], 100);
}

TEST_F(Distributed, ExampleMlpAgreesOnTheLoss) {
    const std::string cfg = config("fashion_mlp", "mlp_relu");
    const auto [one, two] = one_and_two(cfg, "mlp_relu", "--backend native --max-steps 100");
    const double l1 = metrics(one)["epochs"][0]["train_loss"], l2 = metrics(two)["epochs"][0]["train_loss"];
    EXPECT_NEAR(l2, l1, 1e-4 * l1);
}

// OpenCL's buffers are device memory: each bucket goes down and back up once per step.
TEST_F(Distributed, OnOpenclMatchesOneProcessWithOneCopyPerBucketEachWay) {
    const auto names = test::available_backends();
    if (std::find(names.begin(), names.end(), "opencl") == names.end()) GTEST_SKIP() << "no OpenCL device here";
    setenv("POCL_CACHE_DIR", (std::string(std::getenv("HOME") ? std::getenv("HOME") : "/tmp") + "/.cache/xylem/pocl").c_str(), 0);
    {
        const std::string cfg = config("fashion_mlp", "mlp_cl", "", "", true);
        const auto [one, two] = one_and_two(cfg, "mlp_cl", "--backend opencl --max-steps 100");
        expect_close(two, one, 1e-5);
        const double t1 = metrics(one)["epochs"][0]["transfers_per_step"], t2 = metrics(two)["epochs"][0]["transfers_per_step"];
        // One bucket (427 KiB): one download and one upload per step. (Each extra read of the loss,
        // when a slow step makes a terminal's progress line due, adds 0.01.)
        EXPECT_NEAR(t2 - t1, 2.0, 0.05) << "transfers per step: " << t1 << " alone, " << t2 << " on two ranks";
    }
    {
        // LeNet through PoCL trains at ~200 images/s on two cores: a few steps, a small test set.
        const std::string cfg = config("fashion_lenet", "lenet_cl", "", "", true, "small");
        const auto [one, two] = one_and_two(cfg, "lenet_cl", "--backend opencl --max-steps 4 --batch-size 32");
        expect_close(two, one, 1e-5);
    }
}

// Batch norm's running statistics are buffers, not gradients: each rank tracks its own half of
// every global batch and the ranks average them. The running mean is linear in the batches, so
// the average of the two ranks' equals one process's on the same global batches, within float
// noise while the parameters stay alike (a rate of 1e-30, so they stay put: normalising by half
// batches changes the gradients, and at 1e-3 the weights drift enough in 60 steps to move the
// means by 0.7%); the
// running variance of a half batch differs from the whole's by the spread of the half means (a
// few percent). Summed instead of averaged, both would be twice as large; one rank's alone would
// leave the ranks different (check_identical).
TEST_F(Distributed, BatchNormRunningStatisticsMatchOneProcess) {
    const std::string cfg = (root_ / "bn.toml").string();
    std::ofstream(cfg) << "[data]\ndir = \"" << (root_ / "data").string() << "\"\n"
                       << "[[model.layers]]\ntype = \"flatten\"\n[[model.layers]]\ntype = \"linear\"\nout = 32\n"
                       << "[[model.layers]]\ntype = \"batchnorm\"\n[[model.layers]]\ntype = \"tanh\"\n"
                       << "[[model.layers]]\ntype = \"linear\"\nout = 10\n[loss]\ntype = \"cross_entropy\"\n"
                       << "[solver]\ntype = \"sgd\"\nlr = 1e-30\n[train]\nbatch_size = 64\nseed = 1\n";
    const auto [one, two] = one_and_two(cfg, "bn", "--backend native --max-steps 60");
    const auto p1 = params(one), p2 = params(two);
    for (const char* stat : {"2.running_mean", "2.running_var"}) {
        ASSERT_TRUE(p1.count(stat) && p2.count(stat)) << stat;
        const std::vector<float>&a = p1.at(stat), &b = p2.at(stat);
        const bool mean = std::string(stat).find("mean") != std::string::npos;
        double largest = 0, worst = 0, moved = 0;
        for (size_t i = 0; i < a.size(); ++i) {
            largest = std::max(largest, std::fabs(double(a[i])));
            worst = std::max(worst, std::fabs(double(b[i]) - a[i]) / (mean ? 1.0 : std::fabs(double(a[i]))));
            moved = std::max(moved, std::fabs(double(a[i]) - (mean ? 0.0 : 1.0)));  // from the initial 0 and 1
        }
        EXPECT_GT(moved, 0.05) << stat << " hardly moved from its initial value: the check would be empty";
        if (mean) {
            EXPECT_LE(worst, 1e-5 * largest) << stat << ": 2 ranks vs 1 process, largest " << largest;
        } else {
            EXPECT_LE(worst, 0.08) << stat << ": 2 ranks vs 1 process, relative";
        }
    }
}

// A tail batch of one image: rank 1's shard is empty, and it adds zero gradients to the sum.
// Several buckets (XYLEM_BUCKET_KB=64), each started while backward continues.
TEST_F(Distributed, EmptyShardAndSeveralBuckets) {
    const std::string cfg = config("fashion_mlp", "tail", "", "validation = 6935", true);
    const std::string one = out("tail_1"), two = out("tail_2");
    const std::string flags = " --backend native --epochs 2";  // 65 images: steps of 64 and 1
    const Ran r1 = sh(kXylem + " train --config " + cfg + " --out " + one + flags);
    ASSERT_EQ(r1.code, 0) << r1.out;
    const Ran r2 = sh(mpirun(2) + " -x XYLEM_BUCKET_KB=64 " + kXylem + " train --config " + cfg + " --out " + two + flags);
    ASSERT_EQ(r2.code, 0) << r2.out;
    // 64 KiB buckets: [5.bias, 5.weight, 3.bias, 3.weight, 1.bias] (36.5 KiB), then 1.weight alone.
    EXPECT_TRUE(has(r2.out, "gradients in 2 buckets")) << r2.out;
    EXPECT_TRUE(has(r2.out, "global batch 64 = 32 per rank")) << r2.out;
    expect_close(two, one, 1e-5);
}

// Rank 0 alone writes; a resumed distributed run continues bit-identically.
TEST_F(Distributed, ResumesBitIdentically) {
    const std::string cfg = config("fashion_mlp", "resume", "steps_per_epoch = 15");
    const std::string whole = out("resume_whole"), split = out("resume_split");
    const Ran a = sh(mpirun(2) + " " + kXylem + " train --config " + cfg + " --backend native --epochs 2 --out " + whole);
    ASSERT_EQ(a.code, 0) << a.out;
    const Ran b1 = sh(mpirun(2) + " " + kXylem + " train --config " + cfg + " --backend native --epochs 1 --out " + split);
    ASSERT_EQ(b1.code, 0) << b1.out;
    const Ran b2 = sh(mpirun(2) + " " + kXylem + " train --resume " + split + " --backend native --epochs 2");
    ASSERT_EQ(b2.code, 0) << b2.out;
    EXPECT_TRUE(has(b2.out, "resuming")) << b2.out;
    EXPECT_EQ(params(split), params(whole));
    // One log, rank 0's: a header, and per epoch one interval row (print_every 100 > 15 steps) and one epoch row.
    std::ifstream log(whole + "/log.csv");
    int lines = 0;
    for (std::string line; std::getline(log, line);) ++lines;
    EXPECT_EQ(lines, 1 + 2 * 2);
}

// The residual example (batch norm on each rank's shard, a model graph with shortcuts) trains on
// two ranks and resumes bit-identically.
TEST_F(Distributed, ResidualNetworkResumesBitIdentically) {
    const std::string cfg = config("fashion_resnet", "resnet", "steps_per_epoch = 4");
    const std::string whole = out("resnet_whole"), split = out("resnet_split");
    const Ran a = sh(mpirun(2) + " " + kXylem + " train --config " + cfg + " --backend native --epochs 2 --out " + whole);
    ASSERT_EQ(a.code, 0) << a.out;
    EXPECT_TRUE(has(a.out, "parameters identical on all 2 ranks")) << a.out;
    const Ran b1 = sh(mpirun(2) + " " + kXylem + " train --config " + cfg + " --backend native --epochs 1 --out " + split);
    ASSERT_EQ(b1.code, 0) << b1.out;
    const Ran b2 = sh(mpirun(2) + " " + kXylem + " train --resume " + split + " --backend native --epochs 2");
    ASSERT_EQ(b2.code, 0) << b2.out;
    EXPECT_TRUE(has(b2.out, "resuming")) << b2.out;
    EXPECT_EQ(params(split), params(whole));
}

// Text sampled as windows (data.sampling = "windows") is sharded like images: each rank gathers
// its part of the global batch's windows and scores its part of the held-out windows. A bigram
// model (one_hot -> linear, smooth) matches one process; two ranks resume bit-identically. Text
// streams are still refused.
TEST_F(Distributed, TextWindowsMatchOneProcessAndResumeBitIdentically) {
    std::string text;
    std::mt19937 rng(5);
    const char* words[] = {"the ", "cat ", "sat ", "on ", "a ", "mat ", "and ", "dog ", "ran\n"};
    while (text.size() < 6000) text += words[rng() % 9];
    std::ofstream(root_ / "corpus.txt", std::ios::binary) << text;
    const std::string model = "[[model.layers]]\ntype = \"one_hot\"\n[[model.layers]]\ntype = \"linear\"\nout = \"vocab\"\n"
                              "[solver]\ntype = \"sgd\"\nlr = 0.5\nmomentum = 0.9\n"
                              "[train]\nbatch_size = 16\nsteps_per_epoch = 15\nseed = 11\nprint_every = 5\n";
    const std::string data = "[data]\ntext = \"" + (root_ / "corpus.txt").string() + "\"\nvalidation = 0.1\n";
    const std::string cfg = (root_ / "windows.toml").string();
    std::ofstream(cfg) << data + "sampling = \"windows\"\nblock_size = 8\n" + model;
    const auto [one, two] = one_and_two(cfg, "windows", "--backend native --epochs 2");
    expect_close(two, one, 1e-5);
    const nlohmann::json m1 = metrics(one), m2 = metrics(two);
    for (int e = 0; e < 2; ++e) {
        const nlohmann::json& e1 = m1["epochs"][e];
        const nlohmann::json& e2 = m2["epochs"][e];
        EXPECT_EQ(e2["steps"], 15);
        EXPECT_NEAR(e2["train_loss"].get<double>(), e1["train_loss"].get<double>(), 1e-5 * e1["train_loss"].get<double>());
        // 74 validation windows, 37 per rank: the same loss, and the same accuracy over 592 characters.
        EXPECT_NEAR(e2["val_loss"].get<double>(), e1["val_loss"].get<double>(), 1e-5 * e1["val_loss"].get<double>());
        EXPECT_NEAR(e2["val_accuracy"].get<double>(), e1["val_accuracy"].get<double>(), 1.5 / 592);
    }
    EXPECT_LT(m1["epochs"][1]["val_loss"].get<double>(), 0.8 * std::log(14.0));  // it learned (uniform: log 14)

    const std::string whole = out("windows_whole"), split = out("windows_split");
    const Ran a = sh(mpirun(2) + " " + kXylem + " train --config " + cfg + " --backend native --epochs 2 --out " + whole);
    ASSERT_EQ(a.code, 0) << a.out;
    const Ran b1 = sh(mpirun(2) + " " + kXylem + " train --config " + cfg + " --backend native --max-steps 22 --out " + split);
    ASSERT_EQ(b1.code, 0) << b1.out;
    const Ran b2 = sh(mpirun(2) + " " + kXylem + " train --resume " + split + " --backend native --max-steps 0 --epochs 2");
    ASSERT_EQ(b2.code, 0) << b2.out;
    EXPECT_TRUE(has(b2.out, "resuming")) << b2.out;
    EXPECT_EQ(params(split), params(whole));

    const std::string streams = (root_ / "streams.toml").string();
    std::ofstream(streams) << data + "seq_len = 8\n" + model;
    const Ran refused = sh(mpirun(2) + " " + kXylem + " train --config " + streams + " --backend native --out " + out("streams"));
    EXPECT_NE(refused.code, 0) << refused.out;
    EXPECT_TRUE(has(refused.out, "does not shard text streams yet")) << refused.out;
}

// Ranks that would not train the same thing are refused before any step, naming the rank.
TEST_F(Distributed, RefusesRanksThatDisagree) {
    const std::string base = config("fashion_mlp", "agree");
    std::stringstream s;
    s << std::ifstream(base).rdbuf();
    const std::string wider = (root_ / "wider.toml").string(), other_lr = (root_ / "other_lr.toml").string();
    std::ofstream(wider) << replaced(s.str(), "out = 128", "out = 100");
    std::ofstream(other_lr) << replaced(s.str(), "lr = 0.01", "lr = 0.02");
    auto mpmd = [&](const std::string& second) {
        const std::string args = " train --backend native --max-steps 5 --out " + out("agree");
        return sh(mpirun(1) + " " + kXylem + args + " --config " + base + " : -np 1 " + kXylem + args + " --config " + second);
    };
    const Ran model = mpmd(wider);
    EXPECT_EQ(model.code, 1) << model.out;
    EXPECT_TRUE(has(model.out, "xylem: error: distributed run refused: rank 1's model differs from rank 0's")) << model.out;
    const Ran conf = mpmd(other_lr);
    EXPECT_EQ(conf.code, 1) << conf.out;
    EXPECT_TRUE(has(conf.out, "rank 1 loaded another config than rank 0")) << conf.out;
    // A rank on another backend is refused at start, naming the backend (it used to train and fail
    // at the end with "parameters differ").
    const std::vector<std::string> names = test::available_backends();
    if (std::find(names.begin(), names.end(), "opencl") != names.end()) {
        const std::string args = " train --config " + base + " --max-steps 5 --out " + out("agree");
        const Ran backend = sh(mpirun(1) + " " + kXylem + args + " --backend native : -np 1 " + kXylem + args +
                               " --backend opencl");
        EXPECT_EQ(backend.code, 1) << backend.out;
        EXPECT_TRUE(has(backend.out, "xylem: error: distributed run refused: rank 1 runs on another backend than rank "
                                     "0's native")) << backend.out;
        EXPECT_FALSE(has(backend.out, "step 1/")) << backend.out;  // before any training
    }

    const Ran tiny = sh(mpirun(2) + " " + kXylem + " train --config " + base + " --backend native --batch-size 1 --out " + out("agree"));
    EXPECT_EQ(tiny.code, 1) << tiny.out;
    EXPECT_TRUE(has(tiny.out, "train.batch_size 1 is smaller than the 2 ranks")) << tiny.out;

    const std::string capture = config("fashion_mlp", "capture", "capture = true");
    const Ran cap = sh(mpirun(2) + " " + kXylem + " train --config " + capture + " --backend native --out " + out("agree"));
    EXPECT_NE(cap.code, 0) << cap.out;
    EXPECT_TRUE(has(cap.out, "train.capture = true is not supported in a distributed run")) << cap.out;
}

// A rank killed mid-run: the job ends within 30 s, non-zero, with a message naming the dead rank.
TEST_F(Distributed, KilledRankEndsTheRunQuickly) {
    const std::string cfg = config("fashion_mlp", "kill");
    const std::string tag = "xylem_kill_test_" + std::to_string(getpid());
    const std::string cmd = mpirun(2) + " -x XYLEM_TEST_TAG=" + tag + " " + kXylem + " train --config " + cfg +
                            " --backend native --epochs 1000 --out " + out("kill");
    FILE* p = popen((cmd + " 2>&1").c_str(), "r");
    ASSERT_NE(p, nullptr);
    std::string text;
    char buf[4096];
    while (!has(text, "step ")) {  // the first progress line: both ranks are training
        const size_t n = fread(buf, 1, 1, p);
        if (n == 0) break;
        text.append(buf, n);
    }
    ASSERT_TRUE(has(text, "step ")) << text;
    // Rank 1: the process whose environment has this test's tag and rank 1.
    pid_t victim = 0;
    for (const fs::directory_entry& e : fs::directory_iterator("/proc")) {
        const std::string name = e.path().filename();
        if (name.find_first_not_of("0123456789") != std::string::npos) continue;
        std::ifstream env(e.path() / "environ", std::ios::binary);
        std::stringstream ss;
        ss << env.rdbuf();
        const std::string vars = ss.str();
        if (has(vars, "XYLEM_TEST_TAG=" + tag + std::string(1, '\0')) && has(vars, std::string(1, '\0') + "OMPI_COMM_WORLD_RANK=1" + std::string(1, '\0')))
            victim = static_cast<pid_t>(std::stoi(name));
    }
    ASSERT_NE(victim, 0) << "rank 1's process not found";
    const Clock::time_point killed = Clock::now();
    ASSERT_EQ(kill(victim, SIGKILL), 0);
    while (size_t n = fread(buf, 1, sizeof buf, p)) text.append(buf, n);
    const int status = pclose(p);
    const double seconds = std::chrono::duration<double>(Clock::now() - killed).count();
    EXPECT_LT(seconds, 30.0);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) != 0) << text;
    // mpirun's own words: "mpirun noticed that process rank 1 with PID ... exited on signal 9 (Killed)".
    EXPECT_TRUE(has(text, "process rank 1 ") && (has(text, "exited") || has(text, "Killed"))) << text;
}

// Without mpirun: a malformed launch environment is an error naming the variable.
TEST(DistributedLaunch, MalformedEnvironmentIsAnError) {
    const Ran r = sh("OMPI_COMM_WORLD_SIZE=two " + kXylem + " train --config " + std::string(XYLEM_SOURCE_DIR) +
                     "/examples/fashion_mlp.toml --max-steps 1 --out /tmp/xylem_never_written");
    EXPECT_EQ(r.code, 1) << r.out;
    EXPECT_TRUE(has(r.out, "OMPI_COMM_WORLD_SIZE='two' is not a number")) << r.out;
    EXPECT_FALSE(fs::exists("/tmp/xylem_never_written"));
}

// A build without MPI refuses a distributed launch, saying how to get MPI.
TEST(DistributedLaunch, BuildWithoutMpiRefusesADistributedLaunch) {
    if (XYLEM_TEST_HAVE_MPI) GTEST_SKIP() << "this build has MPI";
    if (!have_mpirun()) GTEST_SKIP() << "mpirun not found";
    const Ran r = sh(mpirun(2) + " " + kXylem + " train --config " + std::string(XYLEM_SOURCE_DIR) +
                     "/examples/fashion_mlp.toml --max-steps 1 --out /tmp/xylem_never_written");
    EXPECT_NE(r.code, 0) << r.out;
    EXPECT_TRUE(has(r.out, "xylem: error: this xylem was built without MPI, but mpirun started it as rank ")) << r.out;
}

}  // namespace
}  // namespace xylem
