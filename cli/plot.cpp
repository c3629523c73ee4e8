// `xylem plot RUN_DIR`: hands the run's log.csv and metrics.json to xylem-plot.py, installed beside
// xylem, which draws them with matplotlib. The script reads the files and reports what is wrong
// in them; this side checks what must exist before Python starts.
#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <system_error>
#include <vector>

#include "commands.h"
#include "xylem/env.h"
#include "xylem/error.h"
#include "xylem/io/input_file.h"

#ifndef XYLEM_PLOT_SCRIPT
#error "XYLEM_PLOT_SCRIPT: the script's path relative to the folder of the xylem binary (cli/CMakeLists.txt)"
#endif

extern char** environ;

namespace xylem::cli {
namespace {
namespace fs = std::filesystem;

// The script sits at the same place relative to the binary in the build tree and the install tree.
fs::path plot_script() {
    std::error_code ec;
    const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
    if (ec) throw Error("cannot find the xylem binary to locate " XYLEM_PLOT_SCRIPT ": " + ec.message());
    return (exe.parent_path() / XYLEM_PLOT_SCRIPT).lexically_normal();
}


// XYLEM_PYTHON as execvp would find it: a name without '/' is searched in PATH.
std::string find_python() {
    const env::Value<std::string> v = env::text("XYLEM_PYTHON");
    const std::string python = v.set ? v.value : "/usr/bin/python3";
    if (python.find('/') != std::string::npos) {
        if (::access(python.c_str(), X_OK) != 0)
            throw Error("xylem plot needs " + python + " with matplotlib, and " + python +
                        " is not there (Debian: apt-get install python3 python3-matplotlib)");
        return python;
    }
    const char* path = std::getenv("PATH");
    const std::string dirs = path && *path ? path : "/usr/local/bin:/usr/bin:/bin";
    for (size_t from = 0; from <= dirs.size();) {
        const size_t to = std::min(dirs.find(':', from), dirs.size());
        const fs::path candidate = fs::path(to > from ? dirs.substr(from, to - from) : ".") / python;
        std::error_code ec;
        if (fs::is_regular_file(candidate, ec) && ::access(candidate.c_str(), X_OK) == 0) return candidate.string();
        from = to + 1;
    }
    throw Error("XYLEM_PYTHON=" + python + ": no such program in PATH (" + dirs + "); name a Python with matplotlib");
}

// The last lines of what the interpreter wrote on stderr, on one line.
std::string tail_of(std::string text) {
    while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
    if (text.size() > 600) text = "..." + text.substr(text.size() - 600);
    for (char& ch : text)
        if (ch == '\n') ch = '|';
    return text;
}

}  // namespace

int run_plot(const Args& a) {
    if (a.operands.empty()) throw UsageError{"plot needs RUN_DIR, a training run's out dir", "plot"};
    const fs::path dir = a.operands[0];
    std::error_code ec;
    if (!fs::is_directory(dir, ec)) throw Error(dir.string() + ": no such run folder");
    const fs::path log = dir / "log.csv";
    if (!fs::exists(log, ec))
        throw Error(log.string() + ": not found; a training run writes it as it trains (is " + dir.string() +
                    " a run's out dir?)");
    // Regular files only: a FIFO would hang the script, a folder would fail in Python's words.
    uint64_t size = 0;
    ::close(io::open_regular_file(log.string(), "training logs", &size));
    if (const fs::path metrics = dir / "metrics.json"; fs::exists(metrics, ec))
        ::close(io::open_regular_file(metrics.string(), "run metrics", &size));
    const std::string out = !a.out.empty() ? a.out : (dir / "curves.png").string();

    const std::string python = find_python();
    // Whether the script wrote the picture is judged by the file, not by its exit status alone.
    const auto written_before = fs::exists(out, ec) ? fs::last_write_time(out, ec) : fs::file_time_type::min();
    const fs::path script = plot_script();
    if (!fs::exists(script, ec)) throw Error(script.string() + ": the plot script is missing (an incomplete install?)");

    std::vector<std::string> words = {python, script.string(), dir.string(), "--out", out};
    std::vector<char*> argv;
    for (std::string& w : words) argv.push_back(w.data());
    argv.push_back(nullptr);
    // The script's stderr comes back through a pipe: its one-line errors are passed on, and an
    // interpreter that fails without one is reported with what it did say.
    int err_pipe[2];
    if (::pipe2(err_pipe, O_CLOEXEC) != 0)
        throw Error("xylem plot: cannot create a pipe: " + std::system_category().message(errno));
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_adddup2(&actions, err_pipe[1], STDERR_FILENO);
    std::fflush(stdout);
    pid_t pid = 0;
    const int spawned = posix_spawn(&pid, python.c_str(), &actions, nullptr, argv.data(), environ);
    posix_spawn_file_actions_destroy(&actions);
    ::close(err_pipe[1]);
    if (spawned != 0) {
        ::close(err_pipe[0]);
        throw Error("cannot run " + python + ": " + std::system_category().message(spawned));
    }
    std::string err;
    char buf[4096];
    for (ssize_t n; (n = ::read(err_pipe[0], buf, sizeof buf)) != 0;) {
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) break;
        if (err.size() < (1u << 20)) err.append(buf, static_cast<size_t>(n));
    }
    ::close(err_pipe[0]);
    int status = 0;
    while (::waitpid(pid, &status, 0) < 0)
        if (errno != EINTR) throw Error("waiting for " + python + ": " + std::system_category().message(errno));
    const std::string doing = python + " " + script.string();
    if (WIFSIGNALED(status))
        throw Error(doing + " was killed by signal " + std::to_string(WTERMSIG(status)) +
                    (err.empty() ? "" : ": " + tail_of(err)));
    const int code = WEXITSTATUS(status);
    // The script's own failure: one "xylem: error: ..." line, passed on as it is.
    if (code != 0 && err.rfind("xylem: error: ", 0) == 0 && err.find('\n') == err.size() - 1) {
        std::fputs(err.c_str(), stderr);
        return 1;
    }
    if (code != 0)
        throw Error(doing + " failed (exit status " + std::to_string(code) + ")" +
                    (err.empty() ? ", printing nothing on stderr (is XYLEM_PYTHON a Python with matplotlib?)"
                                 : ": " + tail_of(err)));
    if (!err.empty()) std::fputs(err.c_str(), stderr);  // warnings of a run that worked
    if (!fs::is_regular_file(out, ec) || fs::file_size(out, ec) == 0 || fs::last_write_time(out, ec) == written_before)
        throw Error(doing + " exited 0 but wrote no picture to " + out +
                    " (is XYLEM_PYTHON a Python that runs the script?)");
    std::printf("curves: %s\n", out.c_str());
    return 0;
}

}  // namespace xylem::cli
