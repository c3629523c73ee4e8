// Checksums of tensors and fingerprints of files: XXH64 (xxHash's 64-bit hash), fast and not cryptographic.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace xylem::io {

// XXH64 as xxHash 0.8 defines it, fed in pieces: the digest of the concatenated bytes.
// 4 to 5 GB/s on one core of the test machine: a checkpoint's checksums cost far less than writing it.
class Xxh64 {
public:
    explicit Xxh64(uint64_t seed = 0);
    void update(const void* data, size_t bytes);
    uint64_t digest() const;

private:
    uint64_t v_[4];
    uint64_t seed_, total_ = 0;
    unsigned char buf_[32];
    size_t buffered_ = 0;
};

uint64_t xxh64(const void* data, size_t bytes, uint64_t seed = 0);
// "xxh64:" and 16 lowercase hex digits: how checksums are written into files.
std::string checksum_text(uint64_t hash);
// The XXH64 of a file's bytes, read in pieces; an Error naming the file if it cannot be read or
// is not a regular file.
uint64_t hash_file(const std::string& path);

}  // namespace xylem::io
