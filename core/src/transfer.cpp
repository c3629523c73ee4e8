// Transfer accounting and strict mode.
#include "xylem/transfer.h"

namespace xylem {
namespace {
std::atomic<uint64_t> g_h2d_count{0}, g_h2d_bytes{0}, g_d2h_count{0}, g_d2h_bytes{0};
thread_local int t_strict_depth = 0;
}  // namespace

TransferCounts transfer_counts() {
    return {g_h2d_count.load(std::memory_order_relaxed), g_h2d_bytes.load(std::memory_order_relaxed),
            g_d2h_count.load(std::memory_order_relaxed), g_d2h_bytes.load(std::memory_order_relaxed)};
}

void record_transfer(bool to_device, uint64_t bytes) {
    (to_device ? g_h2d_count : g_d2h_count).fetch_add(1, std::memory_order_relaxed);
    (to_device ? g_h2d_bytes : g_d2h_bytes).fetch_add(bytes, std::memory_order_relaxed);
}

StrictTransfers::StrictTransfers() { ++t_strict_depth; }
StrictTransfers::~StrictTransfers() { --t_strict_depth; }
bool StrictTransfers::active() { return t_strict_depth > 0; }

}  // namespace xylem
