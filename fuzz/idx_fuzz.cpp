// Fuzz target: the IDX reader (plain or gzipped) on arbitrary bytes. A clean xylem::Error is the
// only acceptable failure; anything else (crash, sanitizer report, other exception) is a finding.
#include <cstddef>
#include <cstdint>

#include "xylem/error.h"
#include "xylem/io/idx.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    try {
        xylem::io::IdxArray array = xylem::io::parse_idx(data, size, "fuzz.idx");
        // What a successful read promises: dims that multiply out to exactly the payload's elements
        // (bytes, or 4-byte float32), and their floats for each.
        uint64_t count = 1;
        for (int64_t d : array.dims) count *= static_cast<uint64_t>(d);
        if (array.dims.empty() || count * array.element_size() != array.data.size() || count != array.numel())
            __builtin_trap();
        if (xylem::io::idx_floats(array).size() != count) __builtin_trap();
    } catch (const xylem::Error&) {
    }
    return 0;
}
