// Runs a piece of work in a forked child process, so that whatever the work does (a plugin's
// constructor that segfaults, aborts, exits or hangs) cannot take this process with it.
#pragma once

#include <sys/mman.h>

#include <chrono>
#include <functional>
#include <new>
#include <string>

namespace xylem::detail {

// How the child ended.
struct ChildOutcome {
    enum Kind {
        finished,     // the work returned and the child exited normally
        exited,       // the child exited before the work returned (exit() in the work); `code` is its status
        signaled,     // killed by signal `code` (a crash, or a signal sent from outside)
        timed_out,    // still running at the timeout: killed with SIGKILL and reaped
        not_started,  // fork or its setup failed; `error` says why
    } kind = not_started;
    int code = 0;
    std::string last_output;  // the last line the child wrote to stdout or stderr, for the reason
    std::string error;
};

// Forks, runs `work` in the child with stdin from /dev/null and stdout and stderr captured
// (never shown), and waits at most `timeout` for it. The child gets default signal handlers,
// dies with this process, and ends with _exit (no atexit handlers, no stdio flush). The
// parent always reaps it. Results travel back through Shared<T> memory made before the call.
// Fork before loading what the work loads: a child copies this process's state (threads
// other than the caller's are not copied; a lock one of them held stays locked in the child,
// which the timeout then catches).
ChildOutcome run_in_child(const std::function<void()>& work, std::chrono::milliseconds timeout);

// "SIGSEGV" for 11: the name of a signal for messages.
std::string signal_name(int sig);

// A T in memory shared between this process and the children it forks while the object
// lives; T must be trivially copyable (it is written by another process).
template <class T>
class Shared {
public:
    Shared() {
        void* p = ::mmap(nullptr, sizeof(T), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
        if (p == MAP_FAILED) throw std::bad_alloc();
        value_ = new (p) T{};
    }
    ~Shared() { ::munmap(value_, sizeof(T)); }
    Shared(const Shared&) = delete;
    Shared& operator=(const Shared&) = delete;
    T* operator->() const { return value_; }
    T& operator*() const { return *value_; }

private:
    T* value_;
};

}  // namespace xylem::detail
