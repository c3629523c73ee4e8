// Fuzz target: the safetensors reader on arbitrary bytes. A clean xylem::Error is the only
// acceptable failure; anything else (crash, sanitizer report, other exception) is a finding.
#include <cstddef>
#include <cstdint>

#include "xylem/error.h"
#include "xylem/io/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    try {
        xylem::io::Safetensors file = xylem::io::parse_safetensors(data, size, "fuzz.safetensors");
        // What a successful read promises: every tensor holds exactly product(shape) * dtype size
        // bytes, and together they cannot hold more than the input did.
        uint64_t total = 0;
        for (const auto& [name, t] : file.tensors) {
            uint64_t bytes = xylem::io::safetensors_dtype_size(t.dtype);
            if (bytes == 0) __builtin_trap();  // an unknown dtype must have been rejected
            for (int64_t d : t.shape) bytes *= static_cast<uint64_t>(d);
            if (bytes != t.data.size()) __builtin_trap();
            total += bytes;
        }
        if (total > size) __builtin_trap();
    } catch (const xylem::Error&) {
    }
    return 0;
}
