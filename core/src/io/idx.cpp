// IDX reading: header validation, exact-length payload, transparent gzip via zlib, MNIST pairing.
#include "xylem/io/idx.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <system_error>

#include "xylem/error.h"
#include "xylem/io/input_file.h"

namespace xylem::io {
namespace {

constexpr size_t kFirstChunk = size_t{64} << 10;    // payload growth starts here and doubles ...
constexpr size_t kChunk = size_t{16} << 20;         // ... up to this much at a time
constexpr uint64_t kGzipReserve = uint64_t{256} << 20;  // a header's claim we trust before seeing data
constexpr uint64_t kMaxDeflateRatio = 1032;         // deflate cannot expand its input more than this

std::string errno_text(int err) { return std::generic_category().message(err); }

std::string hex(uint32_t value, int digits) {
    char buf[16];
    std::snprintf(buf, sizeof buf, "0x%0*X", digits, value);
    return buf;
}

std::string dims_text(const std::vector<int64_t>& dims) {
    std::string text;
    for (size_t i = 0; i < dims.size(); ++i) {
        if (i) text += 'x';
        text += std::to_string(dims[i]);
    }
    return text;
}

// Where an IDX file's raw (possibly gzipped) bytes come from: a file or a caller's buffer.
class RawSource {
public:
    virtual ~RawSource() = default;
    virtual size_t read(uint8_t* buf, size_t n) = 0;  // up to n bytes, fewer only at the end
};

class FileSource : public RawSource {
public:
    explicit FileSource(const std::string& path) : path_(path) {
        fd_ = open_regular_file(path, "IDX data", &size_);  // not /dev/zero, a FIFO or a folder
    }
    ~FileSource() override { ::close(fd_); }
    FileSource(const FileSource&) = delete;
    FileSource& operator=(const FileSource&) = delete;

    size_t read(uint8_t* buf, size_t n) override {
        size_t got = 0;
        while (got < n) {
            ssize_t r = ::read(fd_, buf + got, std::min(n - got, size_t{1} << 30));
            if (r < 0 && errno == EINTR) continue;
            if (r < 0) throw Error(path_ + ": read error: " + errno_text(errno));
            if (r == 0) break;
            got += static_cast<size_t>(r);
        }
        return got;
    }
    uint64_t size() const { return size_; }

private:
    std::string path_;
    int fd_ = -1;
    uint64_t size_ = 0;
};

class BufferSource : public RawSource {
public:
    BufferSource(const uint8_t* data, size_t size) : data_(data), left_(size) {}
    size_t read(uint8_t* buf, size_t n) override {
        n = std::min(n, left_);
        if (n) std::memcpy(buf, data_, n);
        data_ += n;
        left_ -= n;
        return n;
    }

private:
    const uint8_t* data_;
    size_t left_;
};

// The IDX bytes read front to back; a gzip stream (magic 1f 8b) is inflated on the fly by zlib.
// Files and buffers share this (and the parser below), so the fuzzer tests what users run.
class Input {
public:
    Input(const std::string& name, RawSource& raw, uint64_t raw_size)
        : name_(name), raw_(raw), pending_(2), size_hint_(raw_size) {
        next_ = pending_.data();
        avail_ = raw_.read(next_, 2);
        if (avail_ == 2 && next_[0] == 0x1f && next_[1] == 0x8b) {
            // 16 + MAX_WBITS: gzip wrapper only; zlib checks the header, the CRC and the length.
            if (::inflateInit2(&z_, 16 + MAX_WBITS) != Z_OK)
                throw Error(name + ": cannot start gzip decompression (out of memory)");
            gz_ = true;
            // At most what this much gzip can inflate to: a tiny corrupt file claiming a huge
            // payload does not reserve 256 MiB.
            size_hint_ = raw_size > kGzipReserve / kMaxDeflateRatio ? kGzipReserve : raw_size * kMaxDeflateRatio;
            pending_.resize(size_t{1} << 17);  // compressed input is read this much at a time
            next_ = pending_.data();
        }
    }
    ~Input() {
        if (gz_) ::inflateEnd(&z_);
    }
    Input(const Input&) = delete;
    Input& operator=(const Input&) = delete;

    // Reads up to n bytes, fewer only at the end of the input. A gzip stream that ends early
    // is not an error here but sets gzip_truncated(), so callers can say what was cut short.
    size_t read(uint8_t* buf, size_t n) {
        if (gz_) return inflate_into(buf, n);
        size_t got = std::min(n, avail_);  // the bytes peeked at for the gzip magic come first
        if (got) std::memcpy(buf, next_, got);
        next_ += got;
        avail_ -= got;
        return got + raw_.read(buf + got, n - got);
    }

    bool gzip_truncated() const { return gzip_truncated_; }
    uint64_t size_hint() const { return size_hint_; }  // how much to reserve up front

private:
    // Makes at least `want` compressed bytes available unless the raw input ends first.
    bool fill(size_t want) {
        if (avail_ >= want) return true;
        std::memmove(pending_.data(), next_, avail_);
        next_ = pending_.data();
        while (avail_ < want) {
            size_t r = raw_.read(next_ + avail_, pending_.size() - avail_);
            if (r == 0) break;
            avail_ += r;
        }
        return avail_ >= want;
    }

    size_t inflate_into(uint8_t* buf, size_t n) {
        size_t got = 0;
        while (got < n && !gz_done_) {
            if (!fill(1)) {
                gzip_truncated_ = true;  // input ended inside a gzip member
                break;
            }
            z_.next_in = next_;
            z_.avail_in = static_cast<unsigned>(avail_);
            z_.next_out = buf + got;
            z_.avail_out = static_cast<unsigned>(std::min(n - got, size_t{1} << 30));
            unsigned out_before = z_.avail_out;
            int r = ::inflate(&z_, Z_NO_FLUSH);
            got += out_before - z_.avail_out;
            next_ = z_.next_in;
            avail_ = z_.avail_in;
            if (r == Z_STREAM_END) {
                // Another gzip member may follow (gzip concatenates them); anything else after the
                // trailer is ignored, as zlib's gzread and gzip -d do.
                if (fill(2) && next_[0] == 0x1f && next_[1] == 0x8b) ::inflateReset(&z_);
                else gz_done_ = true;
            } else if (r == Z_MEM_ERROR) {
                throw Error(name_ + ": gzip decompression ran out of memory");
            } else if (r != Z_OK && r != Z_BUF_ERROR) {
                throw Error(name_ + ": corrupt gzip stream: " + (z_.msg ? z_.msg : "compressed data error"));
            }
        }
        return got;
    }

    std::string name_;
    RawSource& raw_;
    std::vector<uint8_t> pending_;  // raw bytes read but not yet consumed
    uint8_t* next_ = nullptr;
    size_t avail_ = 0;
    z_stream z_{};
    bool gz_ = false, gz_done_ = false, gzip_truncated_ = false;
    uint64_t size_hint_ = 0;
};

[[noreturn]] void throw_short(const std::string& path, const Input& in, const std::string& part,
                              uint64_t expected, uint64_t got) {
    if (in.gzip_truncated())
        throw Error(path + ": truncated gzip stream: expected " + std::to_string(expected) + " " + part +
                    " bytes, only " + std::to_string(got) + " could be decompressed");
    throw Error(path + ": truncated IDX file: expected " + std::to_string(expected) + " " + part +
                " bytes, got " + std::to_string(got));
}

void read_exact(const std::string& path, Input& in, uint8_t* buf, size_t n, const std::string& part) {
    size_t got = in.read(buf, n);
    if (got < n) throw_short(path, in, part, n, got);
}

uint32_t big_endian32(const uint8_t* p) {
    return uint32_t{p[0]} << 24 | uint32_t{p[1]} << 16 | uint32_t{p[2]} << 8 | uint32_t{p[3]};
}

std::string join_path(const std::string& dir, const std::string& name) {
    if (dir.empty()) return name;
    return dir.back() == '/' ? dir + name : dir + "/" + name;
}

bool is_regular_file(const std::string& path) {
    struct stat st {};
    return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

// The plain name if present (someone unpacked it on purpose, and it reads faster), else the .gz one.
std::string find_idx(const std::string& dir, const std::string& stem) {
    std::string plain = join_path(dir, stem);
    std::string gz = plain + ".gz";
    if (is_regular_file(plain)) return plain;
    if (is_regular_file(gz)) return gz;
    throw Error(gz + ": no such file (nor " + stem + " without .gz) in dataset directory " + dir);
}

// The one IDX parser; `path` is the name used in messages.
IdxArray parse_idx_input(const std::string& path, Input& in) {
    uint8_t magic[4];
    read_exact(path, in, magic, 4, "magic number");
    uint32_t magic_value = big_endian32(magic);
    if (magic[0] != 0 || magic[1] != 0)
        throw Error(path + ": not an IDX file (magic " + hex(magic_value, 8) + ", the first two bytes must be zero)");
    if (magic[2] != kIdxUnsignedByte && magic[2] != kIdxFloat)
        throw Error(path + ": unsupported IDX element type " + hex(magic[2], 2) + " (magic " + hex(magic_value, 8) +
                    "; only 0x08, unsigned byte, and 0x0D, float32, are supported)");
    int ndim = magic[3];
    if (ndim == 0) throw Error(path + ": IDX header declares 0 dimensions (magic " + hex(magic_value, 8) + ")");

    uint8_t dim_bytes[4 * 255];
    read_exact(path, in, dim_bytes, 4 * ndim, "dimension-header");
    IdxArray array;
    array.type = magic[2];
    uint64_t expected = array.element_size();  // payload bytes
    bool overflow = false;
    for (int i = 0; i < ndim; ++i) {
        uint32_t dim = big_endian32(dim_bytes + 4 * i);
        array.dims.push_back(dim);
        overflow = overflow || __builtin_mul_overflow(expected, uint64_t{dim}, &expected);
    }
    if (overflow || expected > array.data.max_size())
        throw Error(path + ": IDX dimensions " + dims_text(array.dims) + " are too large to load");

    // Grow as data actually arrives, so a corrupt header claiming terabytes fails as
    // "truncated" instead of as an allocation failure. Steps double from 64 KiB, so a short
    // input claiming much more costs at most twice its own size, not a 16 MiB step.
    array.data.reserve(std::min(expected, in.size_hint()));
    while (array.data.size() < expected) {
        size_t have = array.data.size();
        size_t step = static_cast<size_t>(std::min<uint64_t>(std::clamp(have, kFirstChunk, kChunk), expected - have));
        array.data.resize(have + step);
        size_t got = in.read(array.data.data() + have, step);
        if (got < step) throw_short(path, in, "payload", expected, have + got);
    }

    // Reading on to the end also makes zlib verify the gzip trailer (CRC and length).
    uint64_t trailing = 0;
    uint8_t scratch[1 << 16];
    while (size_t n = in.read(scratch, sizeof scratch)) trailing += n;
    if (in.gzip_truncated())
        throw Error(path + ": truncated gzip stream: the IDX payload is complete but the gzip trailer is missing");
    if (trailing > 0)
        throw Error(path + ": " + std::to_string(trailing) + " trailing bytes after the IDX payload (dims " +
                    dims_text(array.dims) + " take exactly " + std::to_string(expected) + " payload bytes)");
    return array;
}

std::string magic_text(const IdxArray& a) { return hex(uint32_t{a.type} << 8 | static_cast<uint32_t>(a.dims.size()), 8); }

}  // namespace

std::vector<float> idx_floats(const IdxArray& a) {
    std::vector<float> out(a.numel());
    if (a.type == kIdxFloat) {
        for (size_t i = 0; i < out.size(); ++i) {
            const uint32_t bits = big_endian32(a.data.data() + 4 * i);
            std::memcpy(&out[i], &bits, 4);
        }
    } else {
        std::transform(a.data.begin(), a.data.end(), out.begin(), [](uint8_t v) { return static_cast<float>(v); });
    }
    return out;
}

std::string Dataset::sample_text() const {
    if (is_tokens()) return std::to_string(steps) + " tokens";
    return (channels == 1 ? "" : std::to_string(channels) + "x") + std::to_string(rows) + "x" + std::to_string(cols);
}

IdxArray read_idx(const std::string& path) {
    FileSource file(path);
    Input in(path, file, file.size());
    return parse_idx_input(path, in);
}

IdxArray parse_idx(const uint8_t* data, size_t size, const std::string& name) {
    BufferSource buffer(data, size);
    Input in(name, buffer, size);
    return parse_idx_input(name, in);
}

Dataset load_idx_images(const std::string& images_path) {
    IdxArray images = read_idx(images_path);
    const size_t nd = images.dims.size();
    if (nd != 3 && nd != 4)
        throw Error(images_path + ": not an IDX image file (magic " + magic_text(images) +
                    ", expected 0x00000803 [N, rows, cols] or 0x00000804 [N, channels, rows, cols]; 0x00000D03 or "
                    "0x00000D04 for float32)");
    // An empty set is a valid IDX file but no dataset: training on it gave a NaN loss and an
    // untrained checkpoint, and evaluating it an accuracy of 0/0.
    if (images.dims[0] == 0) throw Error(images_path + ": holds 0 images (a dataset needs at least one)");
    Dataset set;
    set.count = images.dims[0];
    set.channels = nd == 4 ? images.dims[1] : 1;
    set.rows = images.dims[nd - 2];
    set.cols = images.dims[nd - 1];
    if (set.sample_size() == 0)
        throw Error(images_path + ": images of " + dims_text({images.dims.begin() + 1, images.dims.end()}) +
                    (nd == 4 ? " (channels x rows x cols)" : " pixels") +
                    " (a dataset needs at least one pixel per image)");
    set.images = idx_floats(images);
    if (images.type == kIdxUnsignedByte) {
        for (float& v : set.images) v /= 255.0f;
    } else {
        for (size_t i = 0; i < set.images.size(); ++i)
            if (!std::isfinite(set.images[i]))
                throw Error(images_path + ": float32 value " + std::to_string(set.images[i]) + " at element " +
                            std::to_string(i) + " is not finite (image " + std::to_string(static_cast<int64_t>(i) / set.sample_size()) + ")");
    }
    return set;
}

Dataset load_mnist(const std::string& images_path, const std::string& labels_path) {
    Dataset set = load_idx_images(images_path);
    IdxArray labels = read_idx(labels_path);
    if (labels.dims.size() != 1 || labels.type != kIdxUnsignedByte)
        throw Error(labels_path + ": not an IDX label file (magic " + magic_text(labels) +
                    ", expected 0x00000801)");
    if (set.count != labels.dims[0])
        throw Error(images_path + ": has " + std::to_string(set.count) + " images but " + labels_path + " has " +
                    std::to_string(labels.dims[0]) + " labels");
    set.labels.assign(labels.data.begin(), labels.data.end());
    return set;
}

Dataset load_mnist_dir(const std::string& dir, bool train) {
    struct stat st {};
    if (::stat(dir.c_str(), &st) != 0) {
        int err = errno;
        throw Error(dir + ": cannot open dataset directory: " + errno_text(err));
    }
    if (!S_ISDIR(st.st_mode)) throw Error(dir + ": not a directory (expected an MNIST-style dataset directory)");
    const auto [images, labels] = mnist_files(dir, train);
    return load_mnist(images, labels);
}

std::pair<std::string, std::string> mnist_files(const std::string& dir, bool train) {
    const std::string prefix = train ? "train" : "t10k";
    return {find_idx(dir, prefix + "-images-idx3-ubyte"), find_idx(dir, prefix + "-labels-idx1-ubyte")};
}

}  // namespace xylem::io
