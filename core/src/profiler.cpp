// Profiler tables: per op kind call counts and times, plus the transfer totals.
#include "xylem/profiler.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <mutex>
#include <cstdio>
#include <ostream>
#include <vector>

#include "xylem/backend.h"
#include "xylem/transfer.h"

namespace xylem::profiler {
namespace {
// Ops may run on several threads: the flag is atomic and the tables take a lock (profiling
// already syncs after every op, so the lock costs nothing that matters).
std::atomic<bool> g_enabled{false};
std::mutex g_mutex;
std::array<double, XYLEM_OP_COUNT_> g_seconds{};
std::array<uint64_t, XYLEM_OP_COUNT_> g_calls{};
TransferCounts g_transfers_at_reset;
}  // namespace

void enable(bool on) { g_enabled = on; }
bool enabled() { return g_enabled; }

void reset() {
    std::lock_guard lock(g_mutex);
    g_seconds.fill(0);
    g_calls.fill(0);
    g_transfers_at_reset = transfer_counts();
}

void record(uint32_t op, double seconds) {
    if (op >= XYLEM_OP_COUNT_) return;
    std::lock_guard lock(g_mutex);
    g_seconds[op] += seconds;
    g_calls[op] += 1;
}

double total_seconds(uint32_t op) {
    std::lock_guard lock(g_mutex);
    return op < XYLEM_OP_COUNT_ ? g_seconds[op] : 0;
}
uint64_t calls(uint32_t op) {
    std::lock_guard lock(g_mutex);
    return op < XYLEM_OP_COUNT_ ? g_calls[op] : 0;
}

void print(std::ostream& out) {
    std::lock_guard lock(g_mutex);
    std::vector<uint32_t> ops;
    double total = 0;
    for (uint32_t op = 0; op < XYLEM_OP_COUNT_; ++op) {
        if (g_calls[op] == 0) continue;
        ops.push_back(op);
        total += g_seconds[op];
    }
    std::sort(ops.begin(), ops.end(), [](uint32_t a, uint32_t b) { return g_seconds[a] > g_seconds[b]; });
    char line[160];
    std::snprintf(line, sizeof line, "%-14s %10s %12s %10s %7s\n", "op", "calls", "total ms", "mean us", "share");
    out << line;
    for (uint32_t op : ops) {
        std::snprintf(line, sizeof line, "%-14s %10llu %12.2f %10.2f %6.1f%%\n", op_name(op),
                      static_cast<unsigned long long>(g_calls[op]), g_seconds[op] * 1e3,
                      g_seconds[op] * 1e6 / static_cast<double>(g_calls[op]), total > 0 ? 100 * g_seconds[op] / total : 0.0);
        out << line;
    }
    TransferCounts t = transfer_counts() - g_transfers_at_reset;
    std::snprintf(line, sizeof line, "%-14s %10.2f ms in ops\n", "total", total * 1e3);
    out << line;
    std::snprintf(line, sizeof line, "transfers: host->device %llu (%llu bytes), device->host %llu (%llu bytes)\n",
                  static_cast<unsigned long long>(t.h2d_count), static_cast<unsigned long long>(t.h2d_bytes),
                  static_cast<unsigned long long>(t.d2h_count), static_cast<unsigned long long>(t.d2h_bytes));
    out << line;
}

}  // namespace xylem::profiler
