// Nothing a user does loses finished work: checkpoints every epoch and every N steps, an
// interrupted run resumes bit-identically, a kill mid-write leaves the last checkpoint loadable,
// and the out dir, the log and a diverging loss are handled before they cost anything.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <map>
#include <random>
#include <sstream>
#include <thread>

#include "xylem/train/checkpoint.h"
#include "xylem/train/model_builder.h"
#include "xylem/train/run.h"
#include "support/backends.h"
#include "xylem/error.h"
#include "xylem/io/idx.h"
#include "xylem/io/safetensors.h"
#include "xylem/train/run_folder.h"

using namespace xylem;
namespace fs = std::filesystem;

namespace {

const char* kData = "/usr/share/datasets/fashion-mnist";
const std::string kXylem = std::string(XYLEM_BINARY_DIR) + "/bin/xylem";

// A small MLP with dropout and Adam: every kind of state a resume must restore (parameters,
// Adam moments and step count, the dropout mask counter, the shuffle order and RNG).
std::string mlp_config(const std::string& extra_train = "", const std::string& extra_data = "",
                       const std::string& solver = "type = \"adam\"\nlr = 0.001") {
    return std::string("backend = \"native\"\n[data]\ndir = \"") + kData + "\"\n" + extra_data +
           "\n[[model.layers]]\ntype = \"flatten\"\n[[model.layers]]\ntype = \"linear\"\nout = 64\n"
           "[[model.layers]]\ntype = \"relu\"\n[[model.layers]]\ntype = \"dropout\"\np = 0.2\n"
           "[[model.layers]]\ntype = \"linear\"\nout = 10\n[solver]\n" +
           solver + "\n[train]\nbatch_size = 32\nprint_every = 10\n" +
           (extra_train.find("steps_per_epoch") == std::string::npos ? "steps_per_epoch = 400\n" : "") + extra_train;
}

// A small residual network (blocks, a projection shortcut, batch norm, global average pooling)
// with SGD momentum and weight decay: the model graph's state (running statistics, shared input
// gradients) must resume as exactly as a chain's.
std::string residual_config(const std::string& extra_train = "") {
    return std::string("backend = \"native\"\n[data]\ndir = \"") + kData + "\"\n" + R"(
[model.blocks.basic]
args = { channels = 4, stride = 1, project = false }
layers = [
  { name = "conv1", type = "conv2d", out = "$channels", kernel = 3, stride = "$stride", padding = 1, bias = false },
  { name = "bn1", type = "batchnorm" },
  { name = "relu1", type = "relu" },
  { name = "conv2", type = "conv2d", out = "$channels", kernel = 3, padding = 1, bias = false },
  { name = "bn2", type = "batchnorm" },
  { name = "shortcut", type = "conv2d", out = "$channels", kernel = 1, stride = "$stride", bias = false, inputs = ["input"], enabled = "$project" },
  { name = "add", type = "add", inputs = ["bn2", "shortcut"] },
  { name = "relu2", type = "relu" },
]
[model]
layers = [
  { name = "conv1", type = "conv2d", out = 4, kernel = 3, padding = 1 },
  { name = "layer1", type = "block", block = "basic", count = 2 },
  { name = "layer2", type = "block", block = "basic", args = { channels = 8, stride = 2, project = true } },
  { name = "pool", type = "global_avgpool" },
  { name = "fc", type = "linear", out = 10 },
]
[solver]
type = "sgd"
lr = 0.05
momentum = 0.9
weight_decay = 0.0005
[train]
batch_size = 32
print_every = 5
steps_per_epoch = 40
)" + extra_train;
}

struct Outcome {
    int code = -1;
    std::string out;
};

// Runs xylem with `args`; `on_line` sees each stdout line and may signal the child (its pid).
Outcome run_xylem(const std::vector<std::string>& args, const std::function<void(const std::string&, pid_t)>& on_line = {}) {
    int pipe_fd[2];
    if (pipe(pipe_fd) != 0) return {};
    const pid_t pid = fork();
    if (pid == 0) {
        dup2(pipe_fd[1], STDOUT_FILENO);
        dup2(pipe_fd[1], STDERR_FILENO);
        close(pipe_fd[0]);
        close(pipe_fd[1]);
        std::vector<char*> argv{const_cast<char*>(kXylem.c_str())};
        for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
        argv.push_back(nullptr);
        execv(kXylem.c_str(), argv.data());
        _exit(127);
    }
    close(pipe_fd[1]);
    Outcome r;
    std::string line;
    char ch;
    while (read(pipe_fd[0], &ch, 1) == 1) {
        r.out += ch;
        if (ch != '\n') {
            line += ch;
            continue;
        }
        if (on_line) on_line(line, pid);
        line.clear();
    }
    close(pipe_fd[0]);
    int status = 0;
    waitpid(pid, &status, 0);
    r.code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    return r;
}

bool has(const std::string& s, const std::string& needle) { return s.find(needle) != std::string::npos; }

// Every tensor of two safetensors files, byte for byte.
void expect_same_tensors(const std::string& a, const std::string& b) {
    const io::Safetensors x = io::read_safetensors(a), y = io::read_safetensors(b);
    ASSERT_EQ(x.tensors.size(), y.tensors.size());
    for (const auto& [name, t] : x.tensors) {
        ASSERT_TRUE(y.tensors.count(name)) << name;
        EXPECT_EQ(t.shape, y.tensors.at(name).shape) << name;
        EXPECT_TRUE(t.data == y.tensors.at(name).data) << name << " differs between " << a << " and " << b;
    }
}


// The loss each progress line shows, by "epoch E/N  step S/M".
std::map<std::string, std::string> progress_losses(const std::string& out) {
    std::map<std::string, std::string> losses;
    std::istringstream lines(out);
    for (std::string line; std::getline(lines, line);) {
        const size_t at = line.find("  loss ");
        if (line.rfind("epoch ", 0) != 0 || at == std::string::npos) continue;
        const size_t from = at + 7, to = line.find(' ', from);
        losses[line.substr(0, at)] = line.substr(from, to == std::string::npos ? std::string::npos : to - from);
    }
    return losses;
}

// Every figure a user sees of a finished run, but wall-clock ones: every log.csv column (but
// images_per_second and elapsed_seconds) and every metrics.json field (but seconds and
// images_per_second) of two run folders must be equal: a resumed run reports what the
// uninterrupted one did.
void expect_same_figures(const std::string& a, const std::string& b) {
    auto rows = [](const std::string& dir) {
        std::vector<std::vector<std::string>> out;
        std::ifstream in(fs::path(dir) / "log.csv");
        std::string line;
        std::vector<std::string> header;
        while (std::getline(in, line)) {
            std::vector<std::string> cells;
            std::stringstream ss(line);
            for (std::string cell; std::getline(ss, cell, ',');) cells.push_back(cell);
            if (header.empty()) header = cells;
            for (size_t i = 0; i < header.size() && i < cells.size(); ++i)
                if (header[i] == "images_per_second" || header[i] == "elapsed_seconds") cells[i].clear();
            out.push_back(cells);
        }
        return out;
    };
    const auto ra = rows(a), rb = rows(b);
    ASSERT_GT(ra.size(), 2u) << fs::path(a) / "log.csv";
    EXPECT_EQ(ra, rb) << "log.csv rows differ";
    auto figures = [](const std::string& dir) {
        nlohmann::json j = nlohmann::json::parse(std::ifstream(fs::path(dir) / "metrics.json"));
        for (auto& e : j["epochs"]) {
            e.erase("seconds");
            e.erase("images_per_second");
        }
        j.erase("config");  // the path of the config a run was started with
        if (j.contains("best")) j["best"].erase("checkpoint");  // in the run's own folder
        return j;
    };
    EXPECT_EQ(figures(a).dump(1), figures(b).dump(1)) << "metrics.json differs";
}

std::vector<std::string> temp_files(const fs::path& dir) {
    std::vector<std::string> out;
    for (const auto& e : fs::directory_iterator(dir))
        if (has(e.path().filename().string(), ".tmp.")) out.push_back(e.path().string());
    return out;
}

class Resume : public ::testing::Test {
protected:
    void SetUp() override {
        if (!fs::exists(kData)) GTEST_SKIP() << "Fashion-MNIST not installed at " << kData;
        dir_ = fs::temp_directory_path() / ("xylem_resume_" + std::to_string(::getpid()));
        fs::remove_all(dir_);
        fs::create_directories(dir_);
    }
    void TearDown() override { fs::remove_all(dir_); }
    std::string write(const std::string& name, const std::string& text) {
        std::ofstream(dir_ / name) << text;
        return (dir_ / name).string();
    }
    std::string path(const std::string& name) const { return (dir_ / name).string(); }
    fs::path dir_;
};

}  // namespace

// 3 epochs in one go == 2 epochs, then --resume --epochs 3 into the same folder (in process).
TEST_F(Resume, TwoEpochsThenResumeEqualsThreeEpochs) {
    RunConfig c = parse_config(mlp_config(), path("mlp.toml"));
    auto dev = test::backend_named("native")->device(0);
    std::ostringstream log;
    c.epochs = 3;
    c.out_dir = path("whole");
    const train::RunResult whole = train::run(c, *dev, log, train::RunOptions::quiet());
    c.epochs = 2;
    c.out_dir = path("split");
    train::run(c, *dev, log, train::RunOptions::quiet());
    c.epochs = 3;
    train::RunOptions resume = train::RunOptions::quiet();
    resume.resume_from = path("split/last.safetensors");
    const train::RunResult split = train::run(c, *dev, log, resume);
    expect_same_tensors(path("whole/model.safetensors"), path("split/model.safetensors"));
    expect_same_tensors(path("whole/last.safetensors"), path("split/last.safetensors"));
    ASSERT_EQ(split.epochs.size(), 3u);  // the metrics of the first process's epochs carry over
    for (size_t i = 0; i < 3; ++i) EXPECT_EQ(split.epochs[i].train_loss, whole.epochs[i].train_loss) << i;
    // Resuming a finished run trains nothing.
    const train::RunResult again = train::run(c, *dev, log, resume);
    EXPECT_TRUE(again.already_complete);
}

// SIGINT mid-epoch: the step finishes, a checkpoint is written, exit 130 with the resume command;
// resuming gives the parameters of a run that was never interrupted.
TEST_F(Resume, SigintThenResumeEqualsUninterruptedRun) {
    const std::string cfg = write("mlp.toml", mlp_config("epochs = 2"));
    const Outcome whole = run_xylem({"train", "--config", cfg, "--out", path("whole")});
    ASSERT_EQ(whole.code, 0) << whole.out;
    bool sent = false;
    const Outcome stopped = run_xylem({"train", "--config", cfg, "--out", path("cut")}, [&](const std::string& line, pid_t pid) {
        if (!sent && has(line, "epoch 1/2  step 150/")) {
            kill(pid, SIGINT);
            sent = true;
        }
    });
    ASSERT_TRUE(sent) << stopped.out;
    EXPECT_EQ(stopped.code, 130) << stopped.out;
    EXPECT_TRUE(has(stopped.out, "resume with: xylem train --resume " + path("cut"))) << stopped.out;
    EXPECT_FALSE(fs::exists(path("cut/model.safetensors")));  // the run is not finished
    EXPECT_TRUE(temp_files(dir_ / "cut").empty());
    const train::TrainingState st = train::read_training_state(path("cut/last.safetensors"));
    EXPECT_EQ(st.epoch, 1);
    EXPECT_GT(st.step, 149);
    EXPECT_LT(st.step, 400);  // stopped mid-epoch, not at its end

    const Outcome resumed = run_xylem({"train", "--resume", path("cut")});
    ASSERT_EQ(resumed.code, 0) << resumed.out;
    expect_same_tensors(path("whole/model.safetensors"), path("cut/model.safetensors"));
    expect_same_figures(path("whole"), path("cut"));
    // The progress lines the resumed run printed show the uninterrupted run's losses.
    // (The resumed run also prints where it starts, a step the other did not show.)
    const auto whole_losses = progress_losses(whole.out), resumed_losses = progress_losses(resumed.out);
    int compared = 0;
    for (const auto& [where, loss] : resumed_losses) {
        if (!whole_losses.count(where)) continue;
        EXPECT_EQ(loss, whole_losses.at(where)) << "progress line at " << where;
        ++compared;
    }
    EXPECT_GE(compared, 20) << resumed.out;
}

// The same for a residual network: SIGINT mid-epoch, then --resume, gives the uninterrupted run's bits.
TEST_F(Resume, ResidualNetworkResumesBitIdentically) {
    const std::string cfg = write("resnet.toml", residual_config("epochs = 2\n"));
    const Outcome whole = run_xylem({"train", "--config", cfg, "--out", path("whole")});
    ASSERT_EQ(whole.code, 0) << whole.out;
    bool sent = false;
    const Outcome stopped = run_xylem({"train", "--config", cfg, "--out", path("cut")}, [&](const std::string& line, pid_t pid) {
        if (!sent && has(line, "epoch 1/2  step 15/")) {
            kill(pid, SIGINT);
            sent = true;
        }
    });
    ASSERT_TRUE(sent) << stopped.out;
    ASSERT_EQ(stopped.code, 130) << stopped.out;
    const train::TrainingState st = train::read_training_state(path("cut/last.safetensors"));
    EXPECT_EQ(st.epoch, 1);
    EXPECT_LT(st.step, 40);
    const Outcome resumed = run_xylem({"train", "--resume", path("cut")});
    ASSERT_EQ(resumed.code, 0) << resumed.out;
    expect_same_tensors(path("whole/model.safetensors"), path("cut/model.safetensors"));
    expect_same_figures(path("whole"), path("cut"));
    EXPECT_TRUE(has(whole.out, "layer2.shortcut")) << whole.out;  // the summary lists the graph's nodes
}

// SIGTERM is the same as SIGINT, with exit 143.
TEST_F(Resume, SigtermCheckpointsAndExits143) {
    const std::string cfg = write("mlp.toml", mlp_config("epochs = 1"));
    bool sent = false;
    const Outcome r = run_xylem({"train", "--config", cfg, "--out", path("t")}, [&](const std::string& line, pid_t pid) {
        if (!sent && has(line, "step 100/")) {
            kill(pid, SIGTERM);
            sent = true;
        }
    });
    EXPECT_EQ(r.code, 143) << r.out;
    EXPECT_TRUE(has(r.out, "stopped by SIGTERM")) << r.out;
    EXPECT_NO_THROW(train::read_training_state(path("t/last.safetensors")));
}

// A second Ctrl-C exits at once: nothing under a final name is half-written and no temp file stays.
TEST_F(Resume, SecondSigintExitsAtOnceWithoutTempFiles) {
    // A bigger model makes each checkpoint write long enough to land the second signal inside one.
    std::string cfg = mlp_config("epochs = 1\ncheckpoint_every = 1");
    const std::string from = "out = 64\n";
    cfg.replace(cfg.find(from), from.size(), "out = 2048\n");
    const std::string file = write("big.toml", cfg);
    int lines = 0;
    const Outcome r = run_xylem({"train", "--config", file, "--out", path("b")}, [&](const std::string& line, pid_t pid) {
        if (has(line, "step ") && ++lines == 2) {
            kill(pid, SIGINT);
            std::this_thread::sleep_for(std::chrono::milliseconds(5));
            kill(pid, SIGINT);
        }
    });
    EXPECT_EQ(r.code, 130) << r.out;
    EXPECT_TRUE(temp_files(dir_ / "b").empty());
    EXPECT_NO_THROW(train::read_training_state(path("b/last.safetensors")));
}

// kill -9 at random moments of a run that checkpoints every step: the last checkpoint is always
// complete and resumable, and the next run in the folder removes the dead run's temp file.
TEST_F(Resume, KillDuringCheckpointWritingKeepsThePreviousOne) {
    std::string cfg = mlp_config("epochs = 1\ncheckpoint_every = 1");
    cfg.replace(cfg.find("out = 64\n"), 9, "out = 1024\n");
    const std::string file = write("kill.toml", cfg);
    std::mt19937 rng(7);
    int killed_mid_write = 0;
    bool last_left_temp = false;
    for (int attempt = 0; attempt < 6; ++attempt) {
        int lines = 0;
        const int when = 2 + static_cast<int>(rng() % 4);
        const Outcome r = run_xylem({"train", "--config", file, "--out", path("k")}, [&](const std::string& line, pid_t pid) {
            if (has(line, "step ") && ++lines == when) {
                std::this_thread::sleep_for(std::chrono::microseconds(rng() % 20000));
                kill(pid, SIGKILL);
            }
        });
        EXPECT_EQ(r.code, 128 + SIGKILL) << r.out;
        last_left_temp = !temp_files(dir_ / "k").empty();
        killed_mid_write += last_left_temp;
        const train::TrainingState st = train::read_training_state(path("k/last.safetensors"));
        EXPECT_GT(st.step, 0);
        auto model = train::build_model(parse_config(cfg, file));
        model->build(*test::backend_named("native")->device(0), {1, 28, 28}, 1);
        EXPECT_NO_THROW(train::load_checkpoint(path("k/last.safetensors"), *model));
    }
    // The resumed run cleans what the killed ones left and finishes.
    const Outcome resumed = run_xylem({"train", "--resume", path("k")});
    EXPECT_EQ(resumed.code, 0) << resumed.out;
    EXPECT_TRUE(temp_files(dir_ / "k").empty());
    if (last_left_temp) {
        EXPECT_TRUE(has(resumed.out, "removed a temp file left by a killed run")) << resumed.out;
    }
    std::printf("kill -9 landed inside a checkpoint write %d of 6 times\n", killed_mid_write);
}

// train.checkpoint_every = 50: a run killed after step 120 has its step-100 checkpoint.
TEST_F(Resume, CheckpointEveryStepsWritesMidEpoch) {
    const std::string cfg = write("c.toml", mlp_config("epochs = 1\ncheckpoint_every = 50"));
    const Outcome r = run_xylem({"train", "--config", cfg, "--out", path("c")}, [&](const std::string& line, pid_t pid) {
        if (has(line, "step 120/")) kill(pid, SIGKILL);
    });
    EXPECT_EQ(r.code, 128 + SIGKILL) << r.out;
    const train::TrainingState st = train::read_training_state(path("c/last.safetensors"));
    EXPECT_EQ(st.epoch, 1);
    EXPECT_GE(st.step, 100);
    EXPECT_EQ(st.step % 50, 0);
    EXPECT_EQ(st.global_step, static_cast<uint64_t>(st.step));
}

TEST_F(Resume, ResumeRefusesAChangedBatchSizeNamingTheKey) {
    const std::string cfg = write("mlp.toml", mlp_config("epochs = 1"));
    ASSERT_EQ(run_xylem({"train", "--config", cfg, "--out", path("r"), "--max-steps", "20"}).code, 0);
    const Outcome r = run_xylem({"train", "--resume", path("r"), "--epochs", "2", "--batch-size", "16"});
    EXPECT_EQ(r.code, 1) << r.out;
    EXPECT_TRUE(has(r.out, "train.batch_size")) << r.out;
    // The original run's --max-steps (a total over the run) is remembered: a plain resume has
    // nothing left to do, and a larger one continues the epoch where it stopped.
    const Outcome done = run_xylem({"train", "--resume", path("r"), "--epochs", "2"});
    EXPECT_EQ(done.code, 0) << done.out;
    EXPECT_TRUE(has(done.out, "nothing to train")) << done.out;
    const Outcome more = run_xylem({"train", "--resume", path("r"), "--max-steps", "50"});
    EXPECT_EQ(more.code, 0) << more.out;
    EXPECT_TRUE(has(more.out, "resuming")) << more.out;
    EXPECT_TRUE(has(more.out, "at epoch 1 step 20")) << more.out;
    EXPECT_TRUE(has(more.out, "step 50/400")) << more.out;
}

// The model graph may not change either: a renamed layer (its parameters' names) or a rewired one
// is refused naming the first layer that differs, not only a changed layer type.
TEST_F(Resume, ResumeRefusesARenamedLayerNamingIt) {
    const std::string cfg = write("mlp.toml", mlp_config("epochs = 2"));
    ASSERT_EQ(run_xylem({"train", "--config", cfg, "--out", path("g"), "--max-steps", "20"}).code, 0);
    std::string renamed = mlp_config("epochs = 2");
    renamed.replace(renamed.find("type = \"relu\""), 13, "type = \"relu\"\nname = \"act\"");
    const Outcome r = run_xylem({"train", "--resume", path("g"), "--config", write("renamed.toml", renamed)});
    EXPECT_EQ(r.code, 1) << r.out;
    EXPECT_TRUE(has(r.out, "key 'model.layers' differs at layer 2: it was relu '2' <- [1] in the run being resumed "
                           "and is relu 'act' <- [1] now")) << r.out;
}

TEST_F(Resume, ResumeWithoutACheckpointIsOneLine) {
    const Outcome r = run_xylem({"train", "--resume", path("nothing")});
    EXPECT_EQ(r.code, 1) << r.out;
    EXPECT_TRUE(has(r.out, "no run to resume here")) << r.out;
    EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 1) << r.out;
    // A model-only checkpoint is not a training checkpoint.
    fs::create_directories(dir_ / "model_only");
    io::write_safetensors(path("model_only/last.safetensors"), {}, {});
    const Outcome m = run_xylem({"train", "--resume", path("model_only")});
    EXPECT_EQ(m.code, 1) << m.out;
    EXPECT_TRUE(has(m.out, "not a training checkpoint")) << m.out;
}

// The out dir is checked before any work: a folder that cannot be created fails at once.
TEST_F(Resume, UnwritableOutDirFailsBeforeTraining) {
    write("a_file", "x");
    const std::string cfg = write("mlp.toml", mlp_config("epochs = 1"));
    const Outcome r = run_xylem({"train", "--config", cfg, "--out", path("a_file/run")});
    EXPECT_EQ(r.code, 1) << r.out;
    EXPECT_TRUE(has(r.out, "out dir " + path("a_file/run"))) << r.out;
    EXPECT_FALSE(has(r.out, "step ")) << r.out;  // no training happened
}

// A new run into an old run's folder keeps the old log (earlier.1/log.csv, with the run's other
// files) and writes its own.
TEST_F(Resume, NewRunKeepsTheEarlierLog) {
    const std::string cfg = write("mlp.toml", mlp_config("epochs = 1"));
    ASSERT_EQ(run_xylem({"train", "--config", cfg, "--out", path("l"), "--max-steps", "20"}).code, 0);
    std::ifstream first(path("l/log.csv"));
    const std::string old_log((std::istreambuf_iterator<char>(first)), std::istreambuf_iterator<char>());
    ASSERT_FALSE(old_log.empty());
    // A run that fails before its first row leaves the log alone.
    EXPECT_EQ(run_xylem({"train", "--config", cfg, "--out", path("l"), "--backend", "nosuch"}).code, 1);
    EXPECT_FALSE(fs::exists(path("l/earlier.1")));
    ASSERT_EQ(run_xylem({"train", "--config", cfg, "--out", path("l"), "--max-steps", "30"}).code, 0);
    std::ifstream kept(path("l/earlier.1/log.csv"));
    EXPECT_EQ(std::string((std::istreambuf_iterator<char>(kept)), std::istreambuf_iterator<char>()), old_log);
    std::ifstream now(path("l/log.csv"));
    std::string header, row;
    std::getline(now, header);
    EXPECT_EQ(header, "epoch,step,loss,images_per_second,elapsed_seconds,lr,val_loss,val_accuracy,kind");
    std::vector<std::string> rows;
    while (std::getline(now, row)) rows.push_back(row);
    ASSERT_EQ(rows.size(), 4u);  // steps 10, 20, 30 and the epoch's row
    EXPECT_EQ(rows[2].rfind("1,30,", 0), 0u) << rows[2];
    EXPECT_EQ(rows[2].substr(rows[2].size() - 9), ",interval") << rows[2];
    EXPECT_EQ(rows[3].rfind("1,30,", 0), 0u) << rows[3];
    EXPECT_EQ(rows[3].substr(rows[3].size() - 6), ",epoch") << rows[3];
}

// A loss that overflows stops training with the step and the last good checkpoint named.
TEST_F(Resume, NonFiniteLossStopsNamingStepAndCheckpoint) {
    const std::string cfg = write("nan.toml", mlp_config("epochs = 3\nsteps_per_epoch = 60", "", "type = \"sgd\"\nlr = 1e30"));
    const Outcome r = run_xylem({"train", "--config", cfg, "--out", path("n")});
    EXPECT_EQ(r.code, 1) << r.out;
    EXPECT_TRUE(has(r.out, "xylem: error: training stopped: the loss became")) << r.out;
    EXPECT_TRUE(has(r.out, "by epoch 1 step 10")) << r.out;
    EXPECT_TRUE(has(r.out, "no checkpoint had been written yet")) << r.out;
    EXPECT_FALSE(fs::exists(path("n/model.safetensors")));

    // With on_nonfinite = "continue" the run goes on to the end.
    const std::string go_on =
        write("go_on.toml", mlp_config("epochs = 1\nsteps_per_epoch = 30\non_nonfinite = \"continue\"", "", "type = \"sgd\"\nlr = 1e30"));
    EXPECT_EQ(run_xylem({"train", "--config", go_on, "--out", path("c")}).code, 0);
}

// The best checkpoint is the epoch with the lowest validation loss, and resumes like last.
TEST_F(Resume, BestCheckpointIsTheBestByValidationLoss) {
    RunConfig c = parse_config(mlp_config("epochs = 4\nsteps_per_epoch = 60", "validation = 0.1"), path("v.toml"));
    EXPECT_EQ(c.best_metric, "val_loss");
    c.out_dir = path("v");
    auto dev = test::backend_named("native")->device(0);
    std::ostringstream log;
    const train::RunResult r = train::run(c, *dev, log, train::RunOptions::quiet());
    ASSERT_EQ(r.epochs.size(), 4u);
    size_t best = 0;
    for (size_t i = 0; i < r.epochs.size(); ++i) {
        EXPECT_TRUE(r.epochs[i].has_validation);
        EXPECT_GT(r.epochs[i].val_accuracy, 0.3);
        if (r.epochs[i].val_loss < r.epochs[best].val_loss) best = i;
    }
    const train::TrainingState st = train::read_training_state(path("v/best.safetensors"));
    EXPECT_EQ(st.epoch, static_cast<int>(best) + 2);  // written after epoch best+1: resumes at the next
    EXPECT_TRUE(st.has_best);
    EXPECT_DOUBLE_EQ(st.best_value, r.epochs[best].val_loss);
    const nlohmann::json metrics = nlohmann::json::parse(std::ifstream(path("v/metrics.json")));
    EXPECT_EQ(metrics.at("best").at("metric"), "val_loss");
    EXPECT_TRUE(metrics.at("epochs").at(0).contains("val_loss"));
}

TEST(ResumeConfig, NewKeysAreCheckedNamingTheKey) {
    auto error_of = [](const std::string& text) {
        try {
            parse_config(text, "c.toml");
        } catch (const Error& e) {
            return std::string(e.what());
        }
        return std::string();
    };
    EXPECT_TRUE(has(error_of("[train]\non_nonfinite = \"ignore\""), "train.on_nonfinite"));
    EXPECT_TRUE(has(error_of("[train]\nbest_metric = \"val_loss\""), "no validation set"));
    EXPECT_TRUE(has(error_of("[train]\nbest_metric = \"loss\""), "train.best_metric"));
    EXPECT_TRUE(has(error_of("[data]\nvalidation = 1.5"), "data.validation"));
    EXPECT_TRUE(has(error_of("[data]\nvalidation = \"10%\""), "data.validation"));
    EXPECT_TRUE(has(error_of("[train]\ncheckpoint_every = -1"), "train.checkpoint_every"));
    EXPECT_EQ(parse_config("[data]\nvalidation = 5000", "c.toml").validation_count, 5000);
    EXPECT_EQ(parse_config("[data]\nvalidation = 0.25", "c.toml").validation_fraction, 0.25);
}

// --- A run folder belongs to one run (issue 26) ---

// Two runs in one folder: the second is refused naming the first's pid, whether it is a new run
// or a resume; the first is not disturbed. A run killed with -9 leaves no stale lock.
TEST_F(Resume, ASecondRunInTheFolderIsRefusedNamingThePid) {
    const std::string cfg = write("mlp.toml", mlp_config("epochs = 1\ncheckpoint_every = 20"));
    ASSERT_EQ(run_xylem({"train", "--config", cfg, "--out", path("f"), "--max-steps", "20"}).code, 0);
    Outcome second, resumed;
    bool tried = false;
    const Outcome first = run_xylem({"train", "--config", cfg, "--out", path("f")}, [&](const std::string& line, pid_t pid) {
        if (tried || !has(line, "step 40/")) return;
        tried = true;
        second = run_xylem({"train", "--config", cfg, "--out", path("f"), "--max-steps", "5"});
        resumed = run_xylem({"train", "--resume", path("f")});
        EXPECT_TRUE(has(second.out, "out dir " + path("f") + " is in use by another xylem run (pid " +
                                        std::to_string(pid) + ")")) << second.out;
        kill(pid, SIGKILL);
    });
    ASSERT_TRUE(tried) << first.out;
    EXPECT_EQ(first.code, 128 + SIGKILL) << first.out;
    EXPECT_EQ(second.code, 1) << second.out;
    EXPECT_EQ(resumed.code, 1) << resumed.out;
    EXPECT_TRUE(has(resumed.out, "is in use by another xylem run")) << resumed.out;
    EXPECT_FALSE(has(second.out, "step ")) << second.out;  // refused before any work
    EXPECT_FALSE(fs::exists(path("f/earlier.2")));         // and before moving anything
    // The killed run's lock went with it: its folder resumes.
    const Outcome after = run_xylem({"train", "--resume", path("f")});
    EXPECT_EQ(after.code, 0) << after.out;
}

// A new run into a finished run's folder moves the earlier run's files to earlier.N (where it still
// resumes) and never names the earlier run's best checkpoint as its own.
TEST_F(Resume, ANewRunMovesTheEarlierRunAsideAndNeverNamesItsBest) {
    const std::string cfg = write("mlp.toml", mlp_config("epochs = 1\nsteps_per_epoch = 40"));
    const Outcome finished = run_xylem({"train", "--config", cfg, "--out", path("o")});
    ASSERT_EQ(finished.code, 0) << finished.out;
    ASSERT_TRUE(has(finished.out, "best (by train_loss): " + path("o/best.safetensors"))) << finished.out;
    const Outcome partial = run_xylem({"train", "--config", cfg, "--out", path("o"), "--max-steps", "10"});
    ASSERT_EQ(partial.code, 0) << partial.out;
    EXPECT_TRUE(has(partial.out, "moved the earlier run's files in " + path("o") + " to " + path("o/earlier.1") +
                                     " (xylem train --resume " + path("o/earlier.1") + " continues that run)")) << partial.out;
    EXPECT_FALSE(has(partial.out, "best (by")) << partial.out;  // a run cut inside its first epoch has no best epoch
    EXPECT_FALSE(fs::exists(path("o/best.safetensors")));
    for (const char* f : {"best.safetensors", "last.safetensors", "model.safetensors", "log.csv", "metrics.json", "run.json"})
        EXPECT_TRUE(fs::exists(dir_ / "o/earlier.1" / f)) << f;
    EXPECT_EQ(train::read_training_state(path("o/earlier.1/last.safetensors")).epoch, 2);
    // Each folder's run.json names its own run, and each run's checkpoints carry the same id.
    auto id = [](const fs::path& p) { return nlohmann::json::parse(std::ifstream(p)).at("run_id").get<std::string>(); };
    EXPECT_NE(id(dir_ / "o/run.json"), id(dir_ / "o/earlier.1/run.json"));
    EXPECT_EQ(train::read_training_state(path("o/last.safetensors")).run_record.at("run_id"), id(dir_ / "o/run.json"));
}

// A checkpoint of another run copied into a folder does not resume there: it would train that
// other model into this folder's log.
TEST_F(Resume, ACheckpointOfAnotherRunIsRefused) {
    const std::string cfg = write("mlp.toml", mlp_config("epochs = 1"));
    std::string wider = mlp_config("epochs = 1");
    wider.replace(wider.find("out = 64\n"), 9, "out = 32\n");
    ASSERT_EQ(run_xylem({"train", "--config", cfg, "--out", path("a"), "--max-steps", "10"}).code, 0);
    ASSERT_EQ(run_xylem({"train", "--config", write("w.toml", wider), "--out", path("b"), "--max-steps", "10"}).code, 0);
    fs::copy_file(path("b/last.safetensors"), path("a/last.safetensors"), fs::copy_options::overwrite_existing);
    const Outcome r = run_xylem({"train", "--resume", path("a"), "--max-steps", "20"});
    EXPECT_EQ(r.code, 1) << r.out;
    EXPECT_TRUE(has(r.out, "cannot resume " + path("a") + ": " + path("a/last.safetensors") + " belongs to run ")) << r.out;
    EXPECT_TRUE(has(r.out, "a checkpoint copied in from another run's folder?")) << r.out;
}

// Resuming cuts log.csv back to the checkpoint's step: rows a killed run logged after its last
// checkpoint, and a row cut short, are gone, so the log is the uninterrupted run's (and plots).
TEST_F(Resume, ResumeRewritesTheLogToTheCheckpointsStep) {
    const std::string cfg = write("c.toml", mlp_config("epochs = 1\ncheckpoint_every = 50"));
    ASSERT_EQ(run_xylem({"train", "--config", cfg, "--out", path("whole")}).code, 0);
    const Outcome r = run_xylem({"train", "--config", cfg, "--out", path("cut")}, [&](const std::string& line, pid_t pid) {
        if (has(line, "step 130/")) kill(pid, SIGKILL);
    });
    ASSERT_EQ(r.code, 128 + SIGKILL) << r.out;
    std::ofstream(path("cut/log.csv"), std::ios::app) << "1,140,2.3";  // what a kill mid-write or a full disk leaves
    ASSERT_LT(train::read_training_state(path("cut/last.safetensors")).step, 130);
    const Outcome resumed = run_xylem({"train", "--resume", path("cut")});
    ASSERT_EQ(resumed.code, 0) << resumed.out;
    expect_same_figures(path("whole"), path("cut"));  // every row once, none partial
}

// A data file that changed since the checkpoint (same size) is an error naming it; the flag
// accepts it and says so. A checkpoint whose bytes were damaged is an error naming the tensor.
TEST_F(Resume, ChangedDataAndADamagedCheckpointAreRefused) {
    fs::create_directories(dir_ / "data");
    for (const char* f : {"train-images-idx3-ubyte.gz", "t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz"})
        fs::copy_file(std::string(kData) + "/" + f, dir_ / "data" / f);
    const io::IdxArray labels = io::read_idx(std::string(kData) + "/train-labels-idx1-ubyte.gz");
    auto write_labels = [&](bool swapped) {  // uncompressed, two labels swapped: same size, same values
        std::vector<uint8_t> data = labels.data;
        if (swapped) std::swap(data[0], data[1]);
        ASSERT_NE(data[0], data[1]);
        std::ofstream f(dir_ / "data/train-labels-idx1-ubyte", std::ios::binary);
        const unsigned char head[8] = {0, 0, 8, 1, 0, 0, 0xea, 0x60};  // 60000 labels
        f.write(reinterpret_cast<const char*>(head), 8);
        f.write(reinterpret_cast<const char*>(data.data()), static_cast<std::streamsize>(data.size()));
    };
    write_labels(false);
    std::string cfg = mlp_config("epochs = 1");
    cfg.replace(cfg.find(kData), std::strlen(kData), path("data"));
    const std::string file = write("d.toml", cfg);
    ASSERT_EQ(run_xylem({"train", "--config", file, "--out", path("d"), "--max-steps", "10"}).code, 0);
    write_labels(true);
    const Outcome changed = run_xylem({"train", "--resume", path("d"), "--max-steps", "20"});
    EXPECT_EQ(changed.code, 1) << changed.out;
    EXPECT_TRUE(has(changed.out, "cannot resume " + path("d") + ": the data changed since " + path("d/last.safetensors") +
                                     " was written: " + path("data/train-labels-idx1-ubyte") + " (its content changed: ")) << changed.out;
    EXPECT_TRUE(has(changed.out, "pass --accept-changed-data")) << changed.out;
    const Outcome accepted = run_xylem({"train", "--resume", path("d"), "--max-steps", "20", "--accept-changed-data"});
    EXPECT_EQ(accepted.code, 0) << accepted.out;
    EXPECT_TRUE(has(accepted.out, "note: training on changed data (--accept-changed-data): " +
                                      path("data/train-labels-idx1-ubyte"))) << accepted.out;
    // The folder now records the data as it is: a plain resume goes on.
    EXPECT_EQ(run_xylem({"train", "--resume", path("d"), "--max-steps", "25"}).code, 0);

    // One flipped bit in a weight: the checksum names the tensor.
    const io::Safetensors st = io::read_safetensors(path("d/last.safetensors"));
    EXPECT_TRUE(st.checksummed);
    std::string bytes;
    {
        std::ifstream in(path("d/last.safetensors"), std::ios::binary);
        bytes.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    }
    uint64_t header = 0;
    std::memcpy(&header, bytes.data(), 8);
    const nlohmann::json h = nlohmann::json::parse(bytes.substr(8, header));
    bytes[8 + header + h.at("1.weight").at("data_offsets").at(0).get<uint64_t>() + 17] ^= 0x10;
    std::ofstream(path("d/last.safetensors"), std::ios::binary | std::ios::trunc) << bytes;
    const Outcome damaged = run_xylem({"train", "--resume", path("d"), "--max-steps", "30"});
    EXPECT_EQ(damaged.code, 1) << damaged.out;
    EXPECT_TRUE(has(damaged.out, path("d/last.safetensors") + ": tensor '1.weight' does not match its checksum: the file "
                                     "is damaged")) << damaged.out;
}

// A training state that was edited or damaged (the metadata carries no checksum) is refused as
// "corrupt training state", naming the field, before anything runs: a malformed epoch record, a
// missing solver or counters entry, was an uncaught nlohmann exception ("failed unexpectedly ...
// please report it"); a negative global_step or solver.steps wrapped to 2^64 - n (a --max-steps
// limit then let the run go on), an epoch of 1e30 was cast to int unchecked; an order holding a
// sample twice trained on it twice and skipped another.
TEST_F(Resume, AnEditedTrainingStateIsRefusedNamingTheField) {
    const std::string cfg = write("mlp.toml", mlp_config("epochs = 1"));
    ASSERT_EQ(run_xylem({"train", "--config", cfg, "--out", path("r"), "--max-steps", "10"}).code, 0);
    const io::Safetensors good = io::read_safetensors(path("r/last.safetensors"));
    const nlohmann::json state = nlohmann::json::parse(good.metadata.at("xylem.training_state"));
    auto write_edited = [&](const std::string& name, const std::function<void(nlohmann::json&)>& edit,
                            const std::function<void(std::vector<uint8_t>&)>& edit_order = {}) {
        nlohmann::json j = state;
        edit(j);
        std::map<std::string, std::string> meta = good.metadata;
        meta["xylem.training_state"] = j.dump();
        std::vector<uint8_t> order = good.tensors.at("xylem.train.order").data;
        if (edit_order) edit_order(order);
        std::vector<io::TensorView> views;
        for (const auto& [n, t] : good.tensors)
            views.push_back({n, t.dtype, t.shape, n == "xylem.train.order" ? order.data() : t.data.data(), t.data.size()});
        io::write_safetensors(path(name), views, meta);
        return path(name);
    };
    const std::vector<std::pair<std::function<void(nlohmann::json&)>, std::string>> cases{
        {[](nlohmann::json& j) { j["epochs"] = {1, "x"}; }, "cannot use at() with number"},
        {[](nlohmann::json& j) { j["epochs"] = {{{"epoch", "one"}}}; }, "type must be number"},
        {[](nlohmann::json& j) { j.erase("solver"); }, "key 'solver' not found"},
        {[](nlohmann::json& j) { j.erase("counters"); }, "key 'counters' not found"},
        {[](nlohmann::json& j) { j["global_step"] = -5; }, "'global_step' is -5, not a non-negative integer"},
        {[](nlohmann::json& j) { j["solver"]["steps"] = -1; }, "'solver.steps' is -1, not a non-negative integer"},
        {[](nlohmann::json& j) { j["epoch"] = 1e30; }, "'epoch' is 1e+30, not a non-negative integer"},
        {[](nlohmann::json& j) { j["seen"] = 2.5; }, "'seen' is 2.5, not a non-negative integer"},
        {[](nlohmann::json& j) { j["global_step"] = 1; }, "position out of range"},  // fewer than the epoch's steps
    };
    for (size_t k = 0; k < cases.size(); ++k) {
        const std::string file = write_edited("edited" + std::to_string(k) + ".safetensors", cases[k].first);
        try {
            train::read_training_state(file);
            ADD_FAILURE() << "case " << k << " was read";
        } catch (const Error& e) {
            EXPECT_EQ(std::string(e.what()).rfind(file + ": corrupt training state: ", 0), 0u) << e.what();
            EXPECT_TRUE(has(e.what(), cases[k].second)) << e.what();
        }
    }
    // The command line: one line, exit 1, and the folder's checkpoint unchanged.
    fs::copy_file(write_edited("bad_epochs.safetensors", cases[0].first), path("r/last.safetensors"),
                  fs::copy_options::overwrite_existing);
    Outcome r = run_xylem({"train", "--resume", path("r"), "--max-steps", "20"});
    EXPECT_EQ(r.code, 1) << r.out;
    EXPECT_TRUE(has(r.out, "xylem: error: " + path("r/last.safetensors") + ": corrupt training state: ")) << r.out;
    EXPECT_FALSE(has(r.out, "unexpectedly")) << r.out;
    // An order that holds a sample twice.
    const std::string twice = write_edited("twice.safetensors", [](nlohmann::json&) {}, [](std::vector<uint8_t>& order) {
        std::memcpy(order.data() + 5 * sizeof(int32_t), order.data() + 6 * sizeof(int32_t), sizeof(int32_t));
    });
    fs::copy_file(twice, path("r/last.safetensors"), fs::copy_options::overwrite_existing);
    r = run_xylem({"train", "--resume", path("r"), "--max-steps", "20"});
    EXPECT_EQ(r.code, 1) << r.out;
    EXPECT_TRUE(has(r.out, path("r/last.safetensors") + ": corrupt training state: the training order holds sample "))
        << r.out;
    EXPECT_TRUE(has(r.out, " more than once")) << r.out;
    // A damaged config text in the state names the checkpoint, not the file it was first read from.
    const std::string bad_config = write_edited("bad_config.safetensors", [](nlohmann::json& j) {
        j["config_text"] = "[[model.layers]\ntype = ";
    });
    fs::copy_file(bad_config, path("r/last.safetensors"), fs::copy_options::overwrite_existing);
    r = run_xylem({"train", "--resume", path("r"), "--max-steps", "20"});
    EXPECT_EQ(r.code, 1) << r.out;
    EXPECT_TRUE(has(r.out, "xylem: error: " + path("r/last.safetensors") + ": the config saved in it (first read from " +
                               cfg + ") is damaged: "))
        << r.out;
}

// A checkpoint of an older xylem (no run record, no checksums) in a folder without run.json still
// resumes, and says what it could not check.
TEST_F(Resume, AnOlderCheckpointResumesSayingWhatWasNotChecked) {
    const std::string cfg = write("mlp.toml", mlp_config("epochs = 1"));
    ASSERT_EQ(run_xylem({"train", "--config", cfg, "--out", path("old"), "--max-steps", "10"}).code, 0);
    // Rewrite it as an older xylem wrote it: the same tensors and metadata without the run record
    // and the checksums (written here by hand: write_safetensors always adds checksums).
    io::Safetensors st = io::read_safetensors(path("old/last.safetensors"));
    st.metadata.erase(train::kRunRecordKey);
    st.metadata.erase(io::kChecksumsKey);
    nlohmann::ordered_json header;
    header["__metadata__"] = st.metadata;
    uint64_t offset = 0;
    std::string bytes;
    for (const auto& [name, t] : st.tensors) {
        header[name] = {{"dtype", t.dtype}, {"shape", t.shape}, {"data_offsets", {offset, offset + t.data.size()}}};
        offset += t.data.size();
        bytes.append(reinterpret_cast<const char*>(t.data.data()), t.data.size());
    }
    const std::string text = header.dump();
    const uint64_t n = text.size();
    std::ofstream f(path("old/last.safetensors"), std::ios::binary | std::ios::trunc);
    f.write(reinterpret_cast<const char*>(&n), 8);
    f << text << bytes;
    f.close();
    fs::remove(path("old/run.json"));
    EXPECT_FALSE(io::read_safetensors(path("old/last.safetensors")).checksummed);
    const Outcome r = run_xylem({"train", "--resume", path("old"), "--max-steps", "20"});
    EXPECT_EQ(r.code, 0) << r.out;
    EXPECT_TRUE(has(r.out, "note: " + path("old/last.safetensors") + " was written by an older xylem: it records no data "
                           "fingerprints and no tensor checksums")) << r.out;
    EXPECT_TRUE(fs::exists(path("old/run.json")));
}

// No file xylem writes follows a link it did not make: a log.csv planted as a symbolic link is
// refused on resume and its target is untouched; files are never world-writable, even under umask 0.
TEST_F(Resume, APlantedLinkIsNeverWrittenThroughAndNoFileIsWorldWritable) {
    const std::string cfg = write("mlp.toml", mlp_config("epochs = 1"));
    const mode_t old_mask = ::umask(0);
    const Outcome made = run_xylem({"train", "--config", cfg, "--out", path("s"), "--max-steps", "10"});
    ::umask(old_mask);
    ASSERT_EQ(made.code, 0) << made.out;
    EXPECT_EQ(fs::status(dir_ / "s").permissions() & fs::perms::others_write, fs::perms::none);  // the folder made
    for (const auto& e : fs::directory_iterator(dir_ / "s")) {
        if (e.is_regular_file()) {
            EXPECT_EQ(e.status().permissions() & fs::perms::others_write, fs::perms::none) << e.path();
        }
    }
    const std::string target = write("precious.txt", "keep me\n");
    fs::remove(path("s/log.csv"));
    fs::create_symlink(target, path("s/log.csv"));
    const Outcome r = run_xylem({"train", "--resume", path("s"), "--max-steps", "20"});
    EXPECT_EQ(r.code, 1) << r.out;
    EXPECT_TRUE(has(r.out, path("s/log.csv") + " is a symbolic link: xylem does not write through a link it did not make"))
        << r.out;
    EXPECT_FALSE(has(r.out, "step 11/")) << r.out;  // refused before training
    std::ifstream kept(target);
    EXPECT_EQ(std::string((std::istreambuf_iterator<char>(kept)), std::istreambuf_iterator<char>()), "keep me\n");
}

// Ctrl-C during the final validation stops within a batch and exits 130 with a checkpoint at the
// epoch's end; resuming scores the epoch and ends with the uninterrupted run's model.
TEST_F(Resume, SigintDuringTheFinalValidationStopsAndResumes) {
    // A wide model and most of the data held out: validation takes far longer than one batch.
    std::string text = mlp_config("epochs = 1\nsteps_per_epoch = 30", "validation = 0.9");
    text.replace(text.find("out = 64\n"), 9, "out = 2048\n");
    const std::string cfg = write("v.toml", text);
    ASSERT_EQ(run_xylem({"train", "--config", cfg, "--out", path("whole")}).code, 0);
    bool sent = false;
    const Outcome stopped = run_xylem({"train", "--config", cfg, "--out", path("cut")}, [&](const std::string& line, pid_t pid) {
        if (!sent && has(line, "step 30/30")) {  // the epoch's last step is done: validation runs now
            kill(pid, SIGINT);
            sent = true;
        }
    });
    ASSERT_TRUE(sent) << stopped.out;
    EXPECT_EQ(stopped.code, 130) << stopped.out;
    EXPECT_TRUE(has(stopped.out, "stopped by SIGINT at epoch 1 step 30")) << stopped.out;
    EXPECT_FALSE(has(stopped.out, "epoch 1: train loss")) << stopped.out;  // the epoch's scores were cut short
    EXPECT_FALSE(fs::exists(path("cut/model.safetensors")));
    const Outcome resumed = run_xylem({"train", "--resume", path("cut")});
    ASSERT_EQ(resumed.code, 0) << resumed.out;
    EXPECT_TRUE(has(resumed.out, "resuming " + path("cut/last.safetensors") + " at epoch 1 step 30")) << resumed.out;
    EXPECT_TRUE(has(resumed.out, "epoch 1: train loss")) << resumed.out;
    expect_same_tensors(path("whole/model.safetensors"), path("cut/model.safetensors"));
}
