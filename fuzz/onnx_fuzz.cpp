// Fuzz target: the ONNX importer (onnx/) on arbitrary bytes, as `xylem run`/`import` read a model
// file. A clean xylem::Error is the only acceptable failure; anything else (crash, sanitizer
// report, other exception) is a finding. External data is refused (no folder is given), so the
// input is the whole world the importer sees.
#include <cstddef>
#include <cstdint>
#include <string>

#include "xylem/error.h"
#include "xylem/onnx/importer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    try {
        const xylem::onnx_import::Imported m =
            xylem::onnx_import::import_bytes(std::string(reinterpret_cast<const char*>(data), size), "fuzz.onnx", "");
        // What a successful import promises: a model graph of at least one layer, and parameters
        // that hold exactly as many values as their shapes say.
        if (m.layers.empty()) __builtin_trap();
        for (const auto& [name, t] : m.params) {
            int64_t n = 1;
            for (int64_t d : t.shape) n *= d;
            if (n != static_cast<int64_t>(t.values.size())) __builtin_trap();
        }
    } catch (const xylem::Error&) {
    }
    return 0;
}
