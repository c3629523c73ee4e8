// Counts every host<->device copy, and lets a scope forbid implicit ones (strict mode).
#pragma once

#include <atomic>
#include <cstdint>

namespace xylem {

struct TransferCounts {
    uint64_t h2d_count = 0, h2d_bytes = 0, d2h_count = 0, d2h_bytes = 0;
    uint64_t count() const { return h2d_count + d2h_count; }
    TransferCounts operator-(const TransferCounts& o) const {
        return {h2d_count - o.h2d_count, h2d_bytes - o.h2d_bytes, d2h_count - o.d2h_count, d2h_bytes - o.d2h_bytes};
    }
};

// Process-wide totals; cheap relaxed atomics since copies are rare next to ops.
TransferCounts transfer_counts();
void record_transfer(bool to_device, uint64_t bytes);

// While one of these lives on a thread, an implicit transfer (one the code did not ask for
// with Tensor::upload / Tensor::download) throws instead of silently copying.
class StrictTransfers {
public:
    StrictTransfers();
    ~StrictTransfers();
    StrictTransfers(const StrictTransfers&) = delete;
    StrictTransfers& operator=(const StrictTransfers&) = delete;
    static bool active();
};

}  // namespace xylem
