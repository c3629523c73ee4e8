// XXH64 (Yann Collet's xxHash, 64-bit variant), written from its specification.
#include "xylem/io/checksum.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <system_error>
#include <vector>

#include "xylem/error.h"
#include "xylem/io/input_file.h"

namespace xylem::io {
namespace {

constexpr uint64_t P1 = 11400714785074694791ull, P2 = 14029467366897019727ull, P3 = 1609587929392839161ull,
                   P4 = 9650029242287828579ull, P5 = 2870177450012600261ull;

uint64_t rotl(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }
uint64_t read64(const unsigned char* p) {
    uint64_t v;
    std::memcpy(&v, p, 8);  // little-endian hosts only (safetensors.cpp asserts it too)
    return v;
}
uint32_t read32(const unsigned char* p) {
    uint32_t v;
    std::memcpy(&v, p, 4);
    return v;
}
uint64_t round(uint64_t acc, uint64_t input) { return rotl(acc + input * P2, 31) * P1; }
uint64_t merge(uint64_t acc, uint64_t v) { return (acc ^ round(0, v)) * P1 + P4; }

}  // namespace

Xxh64::Xxh64(uint64_t seed) : v_{seed + P1 + P2, seed + P2, seed, seed - P1}, seed_(seed) {}

void Xxh64::update(const void* data, size_t bytes) {
    const auto* p = static_cast<const unsigned char*>(data);
    total_ += bytes;
    if (buffered_ + bytes < 32) {
        if (bytes) std::memcpy(buf_ + buffered_, p, bytes);
        buffered_ += bytes;
        return;
    }
    if (buffered_) {
        const size_t fill = 32 - buffered_;
        std::memcpy(buf_ + buffered_, p, fill);
        for (int i = 0; i < 4; ++i) v_[i] = round(v_[i], read64(buf_ + 8 * i));
        p += fill;
        bytes -= fill;
        buffered_ = 0;
    }
    for (; bytes >= 32; p += 32, bytes -= 32)
        for (int i = 0; i < 4; ++i) v_[i] = round(v_[i], read64(p + 8 * i));
    if (bytes) std::memcpy(buf_, p, bytes);
    buffered_ = bytes;
}

uint64_t Xxh64::digest() const {
    uint64_t h;
    if (total_ >= 32) {
        h = rotl(v_[0], 1) + rotl(v_[1], 7) + rotl(v_[2], 12) + rotl(v_[3], 18);
        for (uint64_t v : v_) h = merge(h, v);
    } else {
        h = seed_ + P5;
    }
    h += total_;
    const unsigned char* p = buf_;
    size_t n = buffered_;
    for (; n >= 8; p += 8, n -= 8) h = rotl(h ^ round(0, read64(p)), 27) * P1 + P4;
    if (n >= 4) {
        h = rotl(h ^ (static_cast<uint64_t>(read32(p)) * P1), 23) * P2 + P3;
        p += 4;
        n -= 4;
    }
    for (; n > 0; ++p, --n) h = rotl(h ^ (*p * P5), 11) * P1;
    h ^= h >> 33;
    h *= P2;
    h ^= h >> 29;
    h *= P3;
    h ^= h >> 32;
    return h;
}

uint64_t xxh64(const void* data, size_t bytes, uint64_t seed) {
    Xxh64 h(seed);
    h.update(data, bytes);
    return h.digest();
}

std::string checksum_text(uint64_t hash) {
    char text[24];
    std::snprintf(text, sizeof text, "xxh64:%016llx", static_cast<unsigned long long>(hash));
    return text;
}

uint64_t hash_file(const std::string& path) {
    uint64_t size = 0;
    const int fd = open_regular_file(path, "data", &size);  // the readers' rule: a regular file, never blocking
    Xxh64 h;
    // On the heap, not thread_local: 64 KiB of thread-local storage in the core's library leaves
    // LeakSanitizer unable to walk the threads' dynamic TLS at exit (it crashed the ASan runs).
    std::vector<unsigned char> buf(size_t{1} << 16);
    for (;;) {
        const ssize_t n = ::read(fd, buf.data(), buf.size());
        if (n == 0) break;
        if (n < 0) {
            if (errno == EINTR) continue;
            const int err = errno;
            ::close(fd);
            throw Error(path + ": cannot read it to check its fingerprint: " + std::generic_category().message(err));
        }
        h.update(buf.data(), static_cast<size_t>(n));
    }
    ::close(fd);
    return h.digest();
}

}  // namespace xylem::io
