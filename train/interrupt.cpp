// Signal handlers that only set a flag (the loop polls it between steps) or, the second time,
// clean up and _exit: everything here is async-signal-safe.
#include "xylem/train/interrupt.h"

#include <signal.h>
#include <unistd.h>

#include <cstring>

#include "xylem/io/atomic_file.h"

namespace xylem::train {
namespace {

volatile sig_atomic_t g_signal = 0;
struct sigaction g_old_int, g_old_term;

void say(const char* text) {
    const ssize_t ignored = ::write(STDERR_FILENO, text, std::strlen(text));
    (void)ignored;
}

void on_signal(int sig) {
    if (g_signal != 0) {
        say("\nxylem: second interrupt: exiting now; the last checkpoint written is kept\n");
        io::remove_live_temp_files();
        ::_exit(128 + sig);
    }
    g_signal = sig;
    say(sig == SIGINT ? "\nxylem: interrupted: finishing this step and writing a checkpoint (Ctrl-C again quits at once)\n"
                      : "\nxylem: terminated: finishing this step and writing a checkpoint\n");
}

}  // namespace

InterruptGuard::InterruptGuard() {
    g_signal = 0;
    struct sigaction sa {};
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;  // a signal mid-read or mid-write resumes it; the loop polls the flag
    sigaction(SIGINT, &sa, &g_old_int);
    sigaction(SIGTERM, &sa, &g_old_term);
}

InterruptGuard::~InterruptGuard() {
    sigaction(SIGINT, &g_old_int, nullptr);
    sigaction(SIGTERM, &g_old_term, nullptr);
}

int stop_signal() { return g_signal; }

int InterruptGuard::stop_requested() { return stop_signal(); }

}  // namespace xylem::train
