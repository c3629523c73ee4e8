// Profiler tables: per op kind and per scope (layer pass) call counts and times, plus the
// transfer totals.
#include "xylem/profiler.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdarg>
#include <cstdio>
#include <map>
#include <mutex>
#include <ostream>
#include <vector>

#include "xylem/backend.h"
#include "xylem/transfer.h"

namespace xylem::profiler {
namespace {

struct Entry {
    double seconds = 0;
    uint64_t calls = 0;
};

// Ops may run on several threads: the flag is atomic and the tables take a lock (profiling
// already syncs after every op, so the lock costs nothing that matters).
std::atomic<bool> g_enabled{false};
std::mutex g_mutex;
std::array<Entry, XYLEM_OP_COUNT_> g_ops{};
std::map<std::string, std::array<Entry, XYLEM_OP_COUNT_>> g_scopes;
std::vector<std::string> g_scope_order;
std::vector<std::string> g_notes;  // in the order first noted; kept across reset()
TransferCounts g_transfers_at_reset;
thread_local const std::string* t_scope = nullptr;

void line(std::ostream& out, const char* fmt, ...) __attribute__((format(printf, 2, 3)));
void line(std::ostream& out, const char* fmt, ...) {
    char buf[256];
    va_list args;
    va_start(args, fmt);
    std::vsnprintf(buf, sizeof buf, fmt, args);
    va_end(args);
    out << buf << "\n";
}

}  // namespace

void enable(bool on) { g_enabled = on; }
bool enabled() { return g_enabled; }

void reset() {
    std::lock_guard lock(g_mutex);
    g_ops.fill({});
    g_scopes.clear();
    g_scope_order.clear();
    g_transfers_at_reset = transfer_counts();
}

void note(const std::string& text) {
    std::lock_guard lock(g_mutex);
    if (std::find(g_notes.begin(), g_notes.end(), text) == g_notes.end()) g_notes.push_back(text);
}

std::vector<std::string> notes() {
    std::lock_guard lock(g_mutex);
    return g_notes;
}

void record(uint32_t op, double seconds) {
    if (op >= XYLEM_OP_COUNT_) return;
    std::lock_guard lock(g_mutex);
    g_ops[op].seconds += seconds;
    g_ops[op].calls += 1;
    if (t_scope) {
        auto [it, inserted] = g_scopes.try_emplace(*t_scope);
        if (inserted) g_scope_order.push_back(*t_scope);
        it->second[op].seconds += seconds;
        it->second[op].calls += 1;
    }
}

double total_seconds(uint32_t op) {
    std::lock_guard lock(g_mutex);
    return op < XYLEM_OP_COUNT_ ? g_ops[op].seconds : 0;
}

uint64_t calls(uint32_t op) {
    std::lock_guard lock(g_mutex);
    return op < XYLEM_OP_COUNT_ ? g_ops[op].calls : 0;
}

double scope_seconds(const std::string& scope, uint32_t op) {
    std::lock_guard lock(g_mutex);
    auto it = g_scopes.find(scope);
    return it == g_scopes.end() || op >= XYLEM_OP_COUNT_ ? 0 : it->second[op].seconds;
}

double scope_seconds(const std::string& scope) {
    std::lock_guard lock(g_mutex);
    auto it = g_scopes.find(scope);
    double total = 0;
    if (it != g_scopes.end())
        for (const Entry& e : it->second) total += e.seconds;
    return total;
}

void print(std::ostream& out) {
    std::lock_guard lock(g_mutex);
    std::vector<uint32_t> ops;
    double total = 0;
    for (uint32_t op = 0; op < XYLEM_OP_COUNT_; ++op) {
        if (g_ops[op].calls == 0) continue;
        ops.push_back(op);
        total += g_ops[op].seconds;
    }
    std::sort(ops.begin(), ops.end(), [](uint32_t a, uint32_t b) { return g_ops[a].seconds > g_ops[b].seconds; });
    line(out, "%-18s %10s %12s %10s %7s", "op", "calls", "total ms", "mean us", "share");
    for (uint32_t op : ops)
        line(out, "%-18s %10llu %12.2f %10.2f %6.1f%%", op_name(op), static_cast<unsigned long long>(g_ops[op].calls),
             g_ops[op].seconds * 1e3, g_ops[op].seconds * 1e6 / static_cast<double>(g_ops[op].calls),
             total > 0 ? 100 * g_ops[op].seconds / total : 0.0);
    line(out, "%-18s %10s %12.2f ms in ops", "total", "", total * 1e3);
    if (!g_scope_order.empty()) {
        out << "\n";
        line(out, "%-44s %12s  %s", "layer pass", "total ms", "top ops (ms)");
        for (const std::string& scope : g_scope_order) {
            const auto& entries = g_scopes.at(scope);
            double sum = 0;
            std::vector<uint32_t> used;
            for (uint32_t op = 0; op < XYLEM_OP_COUNT_; ++op)
                if (entries[op].calls) {
                    sum += entries[op].seconds;
                    used.push_back(op);
                }
            std::sort(used.begin(), used.end(), [&](uint32_t a, uint32_t b) { return entries[a].seconds > entries[b].seconds; });
            std::string detail;
            for (uint32_t op : used) {
                char buf[64];
                std::snprintf(buf, sizeof buf, "%s%s %.2f", detail.empty() ? "" : ", ", op_name(op), entries[op].seconds * 1e3);
                detail += buf;
            }
            line(out, "%-44s %12.2f  %s", scope.c_str(), sum * 1e3, detail.c_str());
        }
    }
    for (const std::string& n : g_notes) out << "note: " << n << "\n";
    TransferCounts t = transfer_counts() - g_transfers_at_reset;
    line(out, "\ntransfers: host->device %llu (%llu bytes), device->host %llu (%llu bytes)",
         static_cast<unsigned long long>(t.h2d_count), static_cast<unsigned long long>(t.h2d_bytes),
         static_cast<unsigned long long>(t.d2h_count), static_cast<unsigned long long>(t.d2h_bytes));
}

Scope::Scope(const std::string* name) : previous_(t_scope) {
    if (name && g_enabled.load(std::memory_order_relaxed)) t_scope = name;
}

Scope::~Scope() { t_scope = previous_; }

}  // namespace xylem::profiler
