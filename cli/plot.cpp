// `xylem plot RUN_DIR`: hands the run's log.csv and metrics.json to xylem-plot.py, installed beside
// xylem, which draws them with matplotlib. The script reads the files and reports what is wrong
// in them; this side checks what must exist before Python starts.
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <system_error>
#include <vector>

#include "commands.h"
#include "xylem/error.h"

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
    const std::string out = !a.out.empty() ? a.out : (dir / "curves.png").string();

    const char* env_python = std::getenv("XYLEM_PYTHON");
    const std::string python = env_python && *env_python ? env_python : "/usr/bin/python3";
    if (::access(python.c_str(), X_OK) != 0)
        throw Error("xylem plot needs " + python + " with matplotlib, and " + python +
                    " is not there (Debian: apt-get install python3 python3-matplotlib)");
    const fs::path script = plot_script();
    if (!fs::exists(script, ec)) throw Error(script.string() + ": the plot script is missing (an incomplete install?)");

    std::vector<std::string> words = {python, script.string(), dir.string(), "--out", out};
    std::vector<char*> argv;
    for (std::string& w : words) argv.push_back(w.data());
    argv.push_back(nullptr);
    std::fflush(stdout);
    pid_t pid = 0;
    if (int err = posix_spawn(&pid, python.c_str(), nullptr, nullptr, argv.data(), environ); err != 0)
        throw Error("cannot run " + python + ": " + std::system_category().message(err));
    int status = 0;
    while (::waitpid(pid, &status, 0) < 0)
        if (errno != EINTR) throw Error("waiting for " + python + ": " + std::system_category().message(errno));
    if (WIFSIGNALED(status)) throw Error(script.string() + " was killed by signal " + std::to_string(WTERMSIG(status)));
    const int code = WEXITSTATUS(status);
    if (code != 0) return code;  // the script said what is wrong on stderr, in one line
    std::printf("curves: %s\n", out.c_str());
    return 0;
}

}  // namespace xylem::cli
