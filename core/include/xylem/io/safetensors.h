// The safetensors checkpoint format: 8-byte little-endian header length, JSON header, raw tensor bytes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace xylem::io {

// A tensor to write; `data` is borrowed and must hold exactly product(shape) * dtype size bytes.
struct TensorView {
    std::string name;
    std::string dtype;  // "F32" or "I32" (any dtype read_safetensors accepts is written too)
    std::vector<int64_t> shape;
    const void* data;
    size_t bytes;
};

// The metadata key holding each tensor's checksum: a JSON object {name: "xxh64:<16 hex digits>"}
// over the tensor's bytes. write_safetensors always adds it; readers verify it when present.
inline constexpr const char* kChecksumsKey = "xylem.checksums";

// Writes tensors (laid out in the order given) and string metadata atomically: everything is
// validated first, then written via AtomicFile, so a failure leaves an existing `path` untouched.
// The metadata gets kChecksumsKey when there are tensors (a caller's entry of that name is replaced).
void write_safetensors(const std::string& path, const std::vector<TensorView>& tensors,
                       const std::map<std::string, std::string>& metadata = {});

struct LoadedTensor {
    std::string dtype;  // F32, F64, I32, I64, U8, F16 or BF16, as written in the file
    std::vector<int64_t> shape;
    std::vector<uint8_t> data;  // little-endian element bytes, exactly product(shape) * dtype size
};

struct Safetensors {
    std::map<std::string, LoadedTensor> tensors;
    std::map<std::string, std::string> metadata;
    bool checksummed = false;  // every tensor matched its recorded checksum (false: the file has none)
};

// Reads and fully validates a safetensors file (header, dtypes, shapes, offsets, and that the
// tensors tile the byte buffer exactly) before reading any tensor data, then each tensor against its
// checksum when the file has kChecksumsKey (then removed from `metadata`: the caller sees what was
// written). Throws xylem::Error naming the file and the offending tensor or field.
Safetensors read_safetensors(const std::string& path);

// The same from bytes in memory, `name` standing for the path in messages. read_safetensors is
// this parser over a file; the fuzz target (fuzz/safetensors_fuzz.cpp) calls it directly.
Safetensors parse_safetensors(const uint8_t* data, size_t size, const std::string& name);

// Bytes per element of a safetensors dtype name ("F32" -> 4), or 0 if unsupported.
size_t safetensors_dtype_size(const std::string& dtype);

}  // namespace xylem::io
