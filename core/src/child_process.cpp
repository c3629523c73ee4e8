// fork + waitpid with a timeout. The child's output goes to an anonymous file (memfd), not a
// pipe: a child that writes a lot can never block on a full pipe, and the parent reads the
// file only after the child is gone.
#include "child_process.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <thread>

namespace xylem::detail {
namespace {

// Set by the child after the work returned: an exit(0) from inside the work is not "finished".
struct Done {
    int value;
};
constexpr int kDoneMagic = 0x58594c4d;  // "XYLM"

std::string error_text(const char* what) {
    return std::string(what) + ": " + std::strerror(errno);
}

// The last non-empty line of what the child wrote (at most 200 characters, printable ASCII).
std::string last_line(int fd) {
    const off_t size = ::lseek(fd, 0, SEEK_END);
    if (size <= 0) return {};
    const off_t from = size > 4096 ? size - 4096 : 0;
    std::string text(static_cast<size_t>(size - from), '\0');
    ssize_t got;
    do got = ::pread(fd, text.data(), text.size(), from);
    while (got < 0 && errno == EINTR);
    if (got <= 0) return {};
    text.resize(static_cast<size_t>(got));
    while (!text.empty() && (text.back() == '\n' || text.back() == '\r' || text.back() == ' ')) text.pop_back();
    const size_t nl = text.find_last_of('\n');
    std::string line = nl == std::string::npos ? text : text.substr(nl + 1);
    for (char& c : line)
        if (static_cast<unsigned char>(c) < 0x20 || static_cast<unsigned char>(c) > 0x7e) c = '?';
    if (line.size() > 200) line = line.substr(0, 197) + "...";
    return line;
}

// The child's side: never returns.
[[noreturn]] void child_main(const std::function<void()>& work, int out_fd, pid_t parent, Done* done) {
    // Die with the parent (a hung child must not outlive a killed xylem).
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(127);
    // Default dispositions and an empty mask: the parent's handlers (SIGINT, crash reporters)
    // must not run here, and a crash must end the child by its signal.
    for (int sig = 1; sig < NSIG; ++sig) ::signal(sig, SIG_DFL);
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    const int null_fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (null_fd >= 0) ::dup2(null_fd, STDIN_FILENO);
    ::dup2(out_fd, STDOUT_FILENO);
    ::dup2(out_fd, STDERR_FILENO);
    try {
        work();
    } catch (...) {
        ::_exit(126);  // the work's own exceptions are its business; this one escaped
    }
    done->value = kDoneMagic;
    ::_exit(0);
}

}  // namespace

std::string signal_name(int sig) {
#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 32))
    if (const char* abbrev = sigabbrev_np(sig)) return std::string("SIG") + abbrev;
#endif
    const char* text = strsignal(sig);
    return text ? text : "unknown signal";
}

ChildOutcome run_in_child(const std::function<void()>& work, std::chrono::milliseconds timeout) {
    ChildOutcome out;
    const int out_fd = ::memfd_create("xylem-child-output", MFD_CLOEXEC);
    if (out_fd < 0) {
        out.error = error_text("memfd_create");
        return out;
    }
    Shared<Done> done;
    // Whatever this process has buffered must not be written a second time by the child.
    std::fflush(nullptr);
    const pid_t parent = ::getpid();
    const pid_t pid = ::fork();
    if (pid < 0) {
        out.error = error_text("fork");
        ::close(out_fd);
        return out;
    }
    if (pid == 0) child_main(work, out_fd, parent, &*done);

    // Poll with a growing sleep: quick for a fast probe, cheap for a slow one.
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    auto nap = std::chrono::microseconds(200);
    int status = 0;
    for (;;) {
        const pid_t got = ::waitpid(pid, &status, WNOHANG);
        if (got == pid) break;
        if (got < 0 && errno != EINTR) {  // ECHILD: SIGCHLD ignored, the child was reaped for us
            out.error = error_text("waitpid");
            ::close(out_fd);
            return out;
        }
        if (std::chrono::steady_clock::now() >= deadline) {
            ::kill(pid, SIGKILL);
            while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
            }
            out.kind = ChildOutcome::timed_out;
            out.last_output = last_line(out_fd);
            ::close(out_fd);
            return out;
        }
        std::this_thread::sleep_for(nap);
        nap = std::min(nap * 2, std::chrono::microseconds(20000));
    }
    out.last_output = last_line(out_fd);
    ::close(out_fd);
    if (WIFSIGNALED(status)) {
        out.kind = ChildOutcome::signaled;
        out.code = WTERMSIG(status);
    } else if (WIFEXITED(status) && WEXITSTATUS(status) == 0 && done->value == kDoneMagic) {
        out.kind = ChildOutcome::finished;
    } else {
        out.kind = ChildOutcome::exited;
        out.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    }
    return out;
}

}  // namespace xylem::detail
