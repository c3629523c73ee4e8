// Fuzz target: the TOML run-config loader on arbitrary text. A clean xylem::Error is the only
// acceptable failure; anything else (crash, sanitizer report, other exception) is a finding.
#include <cstddef>
#include <cstdint>
#include <string>

#include "xylem/config.h"
#include "xylem/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    try {
        xylem::RunConfig c = xylem::parse_config(std::string(reinterpret_cast<const char*>(data), size), "fuzz.toml");
        // What a successful parse promises (config.cpp's own checks).
        if (c.backend.empty() || c.batch_size <= 0 || c.print_every <= 0 || !(c.solver.lr > 0)) __builtin_trap();
    } catch (const xylem::Error&) {
    }
    return 0;
}
