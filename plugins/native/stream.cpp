// Streams: ops and copies run on the calling thread as they are enqueued, so a stream is synchronous.
// Each stream owns the scratch arena its ops use.
#include <sys/mman.h>

#include <cstdlib>
#include <new>

#include "native.h"

namespace xylem::native {

namespace {
constexpr size_t kAlign = 64;
constexpr size_t kHugePage = size_t{2} << 20;
constexpr size_t kPage = 4096;  // the smallest page: touching one byte of each faults the block in

// Blocks of 2 MB or more are 2 MB-aligned and asked for transparent huge pages: the scratch
// kernels write rows far apart (Winograd's 16 or 36 rows of V per tile, im2col's columns), which
// on 4 KB pages missed the TLB (ResNet-18 at batch 16 3-8% faster a conv, ResNet-20's training
// step 3-5%: docs/benchmarks.md). The arena keeps its block, so the pages are faulted in once.
// Tensors (memory.cpp) stay on ordinary pages: on huge pages ResNet-20's evaluation at batch
// 1000 ran 18% slower (the first touch of each new 2 MB page, zeroed and compacted, is the
// likely cost; not examined further). The arena's block is faulted in when it is made (reset).
void* aligned_block(size_t bytes) {
    void* p = nullptr;
    if (bytes >= kHugePage) {
        const size_t rounded = (bytes + kHugePage - 1) / kHugePage * kHugePage;
        p = std::aligned_alloc(kHugePage, rounded);
        if (p) madvise(p, rounded, MADV_HUGEPAGE);  // advice only: refused, the pages stay small
    } else {
        p = std::aligned_alloc(kAlign, (bytes + kAlign - 1) / kAlign * kAlign);
    }
    if (!p) throw std::bad_alloc();
    return p;
}
}  // namespace

Arena::~Arena() {
    for (int i = 0; i < n_overflow_; ++i) std::free(overflow_[i]);
    std::free(block_);
}

void* Arena::bytes(size_t n) {
    n = (n + kAlign - 1) / kAlign * kAlign;
    if (n <= size_ - used_) {
        void* p = block_ + used_;
        used_ += n;
        return p;
    }
    // Out of room: a block of its own for this op, remembered so reset() can grow block_.
    if (n_overflow_ == static_cast<int>(sizeof overflow_ / sizeof overflow_[0])) throw std::bad_alloc();
    void* p = aligned_block(n);
    overflow_[n_overflow_++] = p;
    overflow_used_ += n;
    return p;
}

void Arena::reset() {
    if (n_overflow_) {
        const size_t need = used_ + overflow_used_;  // this op's high-water mark
        for (int i = 0; i < n_overflow_; ++i) std::free(overflow_[i]);
        n_overflow_ = 0;
        overflow_used_ = 0;
        std::free(block_);
        block_ = nullptr;
        size_ = 0;
        used_ = 0;
        block_ = static_cast<char*>(aligned_block(need));
        size_ = need;
        // Every page faulted in now: an op that reaches deeper into the block than the ops so far
        // would otherwise fault (and, on huge pages, zero or compact 2 MB) in the middle of a later
        // pass. MobileNetV2 at batch 1 (`xylem run`): its second pass took 13-14 ms instead of
        // 7.5-8 in one run of two or three; touched here, every run took 7.2-8.3.
        for (size_t i = 0; i < need; i += kPage) block_[i] = 0;
    }
    used_ = 0;
}

xylem_status stream_create(xylem_framework_t, uint32_t device, xylem_stream_t* out) {
    if (!out) return set_error(XYLEM_E_INVALID, "native: stream_create: out is NULL");
    *out = nullptr;
    if (device != 0) return set_error(XYLEM_E_INVALID, "native: stream_create: no device %u (the CPU is device 0)", device);
    *out = new (std::nothrow) xylem_stream_s{device, {}};
    return *out ? XYLEM_OK : set_error(XYLEM_E_NO_MEMORY, "native: stream_create: out of host memory");
}

void stream_destroy(xylem_framework_t, xylem_stream_t stream) { delete stream; }

// Everything enqueued has already finished by the time the enqueue call returned.
xylem_status stream_sync(xylem_framework_t, xylem_stream_t) { return XYLEM_OK; }

}  // namespace xylem::native
