// Tests for IDX / MNIST loading: real Fashion-MNIST, hand-made plain and gzipped files, corrupt inputs.
#include "xylem/io/idx.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <cstring>
#include <fstream>
#include <limits>
#include <string>
#include <vector>

#include "xylem/config.h"
#include "xylem/error.h"
#include "xylem/io/safetensors.h"

namespace fs = std::filesystem;
using xylem::io::Dataset;
using xylem::io::IdxArray;

namespace {

using Bytes = std::vector<uint8_t>;

// A real deflate-compressed (gzip -9, python's gzip module) IDX file: dims 2x8x8, pixel i = (i % 16) * 17.
const Bytes kDeflatedImages = {
    0x1f, 0x8b, 0x08, 0x00, 0x00, 0x00, 0x00, 0x00, 0x02, 0x03, 0x63, 0x60, 0xe0, 0x60, 0x66, 0x60, 0x60,
    0x60, 0x02, 0x62, 0x0e, 0x30, 0x16, 0x54, 0x32, 0x76, 0x09, 0x4d, 0x2b, 0xef, 0x98, 0xb9, 0x6a, 0xf7,
    0x99, 0xbb, 0xef, 0xfe, 0xd3, 0x9b, 0x0f, 0x00, 0x63, 0xab, 0x1c, 0x46, 0x90, 0x00, 0x00, 0x00};

Bytes idx_bytes(const std::vector<uint32_t>& dims, const Bytes& payload, uint8_t type = 0x08) {
    Bytes out = {0, 0, type, static_cast<uint8_t>(dims.size())};
    for (uint32_t d : dims)
        for (int shift = 24; shift >= 0; shift -= 8) out.push_back(static_cast<uint8_t>(d >> shift));
    out.insert(out.end(), payload.begin(), payload.end());
    return out;
}

Bytes iota_bytes(size_t n) {
    Bytes out(n);
    for (size_t i = 0; i < n; ++i) out[i] = static_cast<uint8_t>(i * 7);
    return out;
}

uint32_t crc32(const Bytes& data) {
    uint32_t crc = 0xFFFFFFFFu;
    for (uint8_t b : data) {
        crc ^= b;
        for (int k = 0; k < 8; ++k) crc = (crc >> 1) ^ (0xEDB88320u & (0u - (crc & 1u)));
    }
    return ~crc;
}

// A valid gzip member using stored (uncompressed) deflate blocks. test_io does not link zlib
// (it is private to xylem_core), so the test writes gzip by hand; kDeflatedImages covers real deflate.
Bytes gzip_stored(const Bytes& data) {
    Bytes out = {0x1f, 0x8b, 0x08, 0x00, 0, 0, 0, 0, 0x00, 0xff};
    size_t pos = 0;
    do {
        size_t n = std::min<size_t>(data.size() - pos, 65535);
        bool last = pos + n == data.size();
        out.push_back(last ? 1 : 0);
        out.push_back(static_cast<uint8_t>(n));
        out.push_back(static_cast<uint8_t>(n >> 8));
        out.push_back(static_cast<uint8_t>(~n));
        out.push_back(static_cast<uint8_t>(~n >> 8));
        out.insert(out.end(), data.begin() + pos, data.begin() + pos + n);
        pos += n;
    } while (pos < data.size());
    uint32_t crc = crc32(data), size = static_cast<uint32_t>(data.size());
    for (int i = 0; i < 4; ++i) out.push_back(static_cast<uint8_t>(crc >> (8 * i)));
    for (int i = 0; i < 4; ++i) out.push_back(static_cast<uint8_t>(size >> (8 * i)));
    return out;
}

void write_bytes(const std::string& path, const Bytes& bytes) {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
    ASSERT_TRUE(out.good()) << path;
}

template <typename F>
std::string error_of(F&& f) {
    try {
        f();
    } catch (const xylem::Error& e) {
        return e.what();
    }
    return "<no xylem::Error thrown>";
}

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

class IdxTest : public ::testing::Test {
protected:
    void SetUp() override {
        std::string pattern = ::testing::TempDir() + "xylem_idx_XXXXXX";
        ASSERT_NE(::mkdtemp(pattern.data()), nullptr);
        dir_ = pattern;
    }
    void TearDown() override { fs::remove_all(dir_); }
    std::string file(const std::string& name) const { return dir_ + "/" + name; }

    std::string dir_;
};

TEST_F(IdxTest, PlainRoundTrip) {
    Bytes payload = iota_bytes(2 * 3 * 4);
    write_bytes(file("a.idx"), idx_bytes({2, 3, 4}, payload));
    IdxArray a = xylem::io::read_idx(file("a.idx"));
    EXPECT_EQ(a.dims, (std::vector<int64_t>{2, 3, 4}));
    EXPECT_EQ(a.data, payload);
}

TEST_F(IdxTest, GzipRoundTrip) {
    Bytes payload = iota_bytes(70000);  // more than one stored block
    write_bytes(file("a.idx.gz"), gzip_stored(idx_bytes({70000}, payload)));
    IdxArray a = xylem::io::read_idx(file("a.idx.gz"));
    EXPECT_EQ(a.dims, (std::vector<int64_t>{70000}));
    EXPECT_EQ(a.data, payload);
}

TEST_F(IdxTest, RealDeflateStream) {
    write_bytes(file("d.gz"), kDeflatedImages);
    IdxArray a = xylem::io::read_idx(file("d.gz"));
    ASSERT_EQ(a.dims, (std::vector<int64_t>{2, 8, 8}));
    for (size_t i = 0; i < a.data.size(); ++i) ASSERT_EQ(a.data[i], (i % 16) * 17) << i;
}

TEST_F(IdxTest, EmptyDimensionIsLegal) {
    write_bytes(file("e.idx"), idx_bytes({0, 28, 28}, {}));
    IdxArray a = xylem::io::read_idx(file("e.idx"));
    EXPECT_EQ(a.dims, (std::vector<int64_t>{0, 28, 28}));
    EXPECT_TRUE(a.data.empty());
}

TEST_F(IdxTest, LoadMnistScalesPixelsAndKeepsLabels) {
    write_bytes(file("img.gz"), gzip_stored(idx_bytes({3, 2, 2}, {0, 255, 51, 102, 1, 2, 3, 4, 5, 6, 7, 8})));
    write_bytes(file("lbl"), idx_bytes({3}, {9, 0, 200}));
    Dataset d = xylem::io::load_mnist(file("img.gz"), file("lbl"));
    EXPECT_EQ(d.count, 3);
    EXPECT_EQ(d.rows, 2);
    EXPECT_EQ(d.cols, 2);
    ASSERT_EQ(d.images.size(), 12u);
    EXPECT_FLOAT_EQ(d.images[0], 0.0f);
    EXPECT_FLOAT_EQ(d.images[1], 1.0f);
    EXPECT_FLOAT_EQ(d.images[2], 0.2f);
    EXPECT_FLOAT_EQ(d.images[3], 0.4f);
    EXPECT_EQ(d.labels, (std::vector<int32_t>{9, 0, 200}));
}

TEST_F(IdxTest, LoadMnistDirAcceptsPlainAndGzip) {
    write_bytes(file("train-images-idx3-ubyte.gz"), gzip_stored(idx_bytes({2, 1, 3}, iota_bytes(6))));
    write_bytes(file("train-labels-idx1-ubyte"), idx_bytes({2}, {4, 5}));
    Dataset d = xylem::io::load_mnist_dir(dir_, true);
    EXPECT_EQ(d.count, 2);
    EXPECT_EQ(d.labels, (std::vector<int32_t>{4, 5}));

    std::string msg = error_of([&] { xylem::io::load_mnist_dir(dir_, false); });
    EXPECT_TRUE(contains(msg, file("t10k-images-idx3-ubyte.gz"))) << msg;
    EXPECT_TRUE(contains(msg, "no such file")) << msg;

    msg = error_of([&] { xylem::io::load_mnist_dir(file("nope"), true); });
    EXPECT_EQ(msg, file("nope") + ": cannot open dataset directory: No such file or directory");
}

// An empty set reads as an IDX array (above) but is no dataset: training on it gave a NaN loss.
TEST_F(IdxTest, LoadMnistRejectsAnEmptySetNamingTheFile) {
    write_bytes(file("img"), idx_bytes({0, 28, 28}, {}));
    write_bytes(file("lbl"), idx_bytes({0}, {}));
    EXPECT_EQ(error_of([&] { xylem::io::load_mnist(file("img"), file("lbl")); }),
              file("img") + ": holds 0 images (a dataset needs at least one)");
    write_bytes(file("flat"), idx_bytes({2, 0, 28}, {}));
    write_bytes(file("lbl2"), idx_bytes({2}, {1, 2}));
    EXPECT_EQ(error_of([&] { xylem::io::load_mnist(file("flat"), file("lbl2")); }),
              file("flat") + ": images of 0x28 pixels (a dataset needs at least one pixel per image)");
}

TEST_F(IdxTest, WrongMagic) {
    write_bytes(file("m"), Bytes{0x50, 0x4b, 0x03, 0x04, 0, 0, 0, 0});
    EXPECT_EQ(error_of([&] { xylem::io::read_idx(file("m")); }),
              file("m") + ": not an IDX file (magic 0x504B0304, the first two bytes must be zero)");
}

TEST_F(IdxTest, WrongTypeByte) {
    write_bytes(file("f"), idx_bytes({2}, {0, 0, 0, 0}, 0x0B));  // 16-bit integers
    std::string msg = error_of([&] { xylem::io::read_idx(file("f")); });
    EXPECT_TRUE(contains(msg, file("f") + ": unsupported IDX element type 0x0B (magic 0x00000B01")) << msg;
    EXPECT_TRUE(contains(msg, "only 0x08, unsigned byte, and 0x0D, float32, are supported")) << msg;
}

TEST_F(IdxTest, LabelFileGivenAsImages) {
    write_bytes(file("lbl"), idx_bytes({3}, {1, 2, 3}));
    EXPECT_EQ(error_of([&] { xylem::io::load_mnist(file("lbl"), file("lbl")); }),
              file("lbl") + ": not an IDX image file (magic 0x00000801, expected 0x00000803 [N, rows, cols] or "
                            "0x00000804 [N, channels, rows, cols]; 0x00000D03 or 0x00000D04 for float32)");
    write_bytes(file("img"), idx_bytes({1, 1, 1}, {7}));
    EXPECT_EQ(error_of([&] { xylem::io::load_mnist(file("img"), file("img")); }),
              file("img") + ": not an IDX label file (magic 0x00000803, expected 0x00000801)");
}

TEST_F(IdxTest, TruncatedPayload) {
    Bytes bytes = idx_bytes({2, 3, 4}, iota_bytes(24));
    bytes.resize(bytes.size() - 4);
    write_bytes(file("t"), bytes);
    EXPECT_EQ(error_of([&] { xylem::io::read_idx(file("t")); }),
              file("t") + ": truncated IDX file: expected 24 payload bytes, got 20");
    // The same short payload inside an intact gzip stream is an IDX problem, not a gzip one.
    write_bytes(file("t.gz"), gzip_stored(bytes));
    EXPECT_EQ(error_of([&] { xylem::io::read_idx(file("t.gz")); }),
              file("t.gz") + ": truncated IDX file: expected 24 payload bytes, got 20");
}

TEST_F(IdxTest, TruncatedHeader) {
    write_bytes(file("h"), Bytes{0, 0, 8, 3, 0, 0, 0, 2, 0, 0});
    EXPECT_EQ(error_of([&] { xylem::io::read_idx(file("h")); }),
              file("h") + ": truncated IDX file: expected 12 dimension-header bytes, got 6");
    write_bytes(file("empty"), Bytes{});
    EXPECT_EQ(error_of([&] { xylem::io::read_idx(file("empty")); }),
              file("empty") + ": truncated IDX file: expected 4 magic number bytes, got 0");
}

TEST_F(IdxTest, ZeroDimensions) {
    write_bytes(file("z"), Bytes{0, 0, 8, 0});
    std::string msg = error_of([&] { xylem::io::read_idx(file("z")); });
    EXPECT_TRUE(contains(msg, file("z") + ": IDX header declares 0 dimensions")) << msg;
}

TEST_F(IdxTest, HugeClaimedSizeFailsAsTruncatedNotBadAlloc) {
    write_bytes(file("big"), idx_bytes({0xFFFFFFFFu, 16}, iota_bytes(10)));
    EXPECT_EQ(error_of([&] { xylem::io::read_idx(file("big")); }),
              file("big") + ": truncated IDX file: expected 68719476720 payload bytes, got 10");
    write_bytes(file("big.gz"), gzip_stored(idx_bytes({0xFFFFFFFFu, 16}, iota_bytes(10))));
    EXPECT_EQ(error_of([&] { xylem::io::read_idx(file("big.gz")); }),
              file("big.gz") + ": truncated IDX file: expected 68719476720 payload bytes, got 10");
    write_bytes(file("huge"), idx_bytes({0xFFFFFFFFu, 0xFFFFFFFFu, 0xFFFFFFFFu}, {}));
    std::string msg = error_of([&] { xylem::io::read_idx(file("huge")); });
    EXPECT_TRUE(contains(msg, "are too large to load")) << msg;
}

TEST_F(IdxTest, TrailingBytes) {
    Bytes bytes = idx_bytes({2, 2}, iota_bytes(4));
    bytes.push_back(0xAB);
    bytes.push_back(0xCD);
    write_bytes(file("x"), bytes);
    EXPECT_EQ(error_of([&] { xylem::io::read_idx(file("x")); }),
              file("x") + ": 2 trailing bytes after the IDX payload (dims 2x2 take exactly 4 payload bytes)");
    write_bytes(file("x.gz"), gzip_stored(bytes));
    EXPECT_EQ(error_of([&] { xylem::io::read_idx(file("x.gz")); }),
              file("x.gz") + ": 2 trailing bytes after the IDX payload (dims 2x2 take exactly 4 payload bytes)");
}

TEST_F(IdxTest, CountMismatch) {
    write_bytes(file("img"), idx_bytes({3, 1, 1}, {1, 2, 3}));
    write_bytes(file("lbl"), idx_bytes({2}, {1, 2}));
    EXPECT_EQ(error_of([&] { xylem::io::load_mnist(file("img"), file("lbl")); }),
              file("img") + ": has 3 images but " + file("lbl") + " has 2 labels");
}

TEST_F(IdxTest, MissingFile) {
    EXPECT_EQ(error_of([&] { xylem::io::read_idx(file("absent.gz")); }),
              file("absent.gz") + ": cannot open: No such file or directory");
}

// Only regular files are data (xylem/io/input_file.h, issue 26: /dev/zero was read without end):
// a folder, a device or a FIFO is refused naming the file and what it is, and a FIFO does not hang.
TEST_F(IdxTest, OnlyRegularFilesAreRead) {
    const std::string why = ", not a regular file: xylem reads IDX data from regular files only";
    EXPECT_EQ(error_of([&] { xylem::io::read_idx(dir_); }), dir_ + ": is a directory" + why);
    EXPECT_EQ(error_of([&] { xylem::io::read_idx("/dev/zero"); }), "/dev/zero: is a character device" + why);
    ASSERT_EQ(::mkfifo(file("fifo").c_str(), 0600), 0);
    EXPECT_EQ(error_of([&] { xylem::io::load_idx_images(file("fifo")); }), file("fifo") + ": is a FIFO (named pipe)" + why);
    EXPECT_EQ(error_of([&] { xylem::io::read_safetensors("/dev/zero"); }),
              "/dev/zero: is a character device, not a regular file: xylem reads safetensors files from regular files only");
    EXPECT_EQ(error_of([&] { xylem::load_config("/dev/zero"); }),
              "/dev/zero: is a character device, not a regular file: xylem reads configs from regular files only");
    EXPECT_EQ(error_of([&] { xylem::load_config(file("fifo")); }),
              file("fifo") + ": is a FIFO (named pipe), not a regular file: xylem reads configs from regular files only");
}

TEST_F(IdxTest, TruncatedGzipStream) {
    Bytes gz = gzip_stored(idx_bytes({1000}, iota_bytes(1000)));
    write_bytes(file("cut.gz"), Bytes(gz.begin(), gz.begin() + 500));
    std::string msg = error_of([&] { xylem::io::read_idx(file("cut.gz")); });
    EXPECT_TRUE(contains(msg, file("cut.gz") + ": truncated gzip stream: expected 1000 payload bytes, only ")) << msg;

    // Losing only the 8-byte trailer leaves the payload whole, but the stream is still incomplete.
    write_bytes(file("notrailer.gz"), Bytes(gz.begin(), gz.end() - 8));
    EXPECT_EQ(error_of([&] { xylem::io::read_idx(file("notrailer.gz")); }),
              file("notrailer.gz") + ": truncated gzip stream: the IDX payload is complete but the gzip trailer is missing");

    Bytes real = kDeflatedImages;
    write_bytes(file("real.gz"), Bytes(real.begin(), real.begin() + 30));
    msg = error_of([&] { xylem::io::read_idx(file("real.gz")); });
    EXPECT_TRUE(contains(msg, file("real.gz") + ": truncated gzip stream")) << msg;
}

// gzip may hold several members back to back (`cat a.gz b.gz`); they decompress as one stream.
TEST_F(IdxTest, ConcatenatedGzipMembersReadAsOne) {
    Bytes whole = idx_bytes({3, 100}, iota_bytes(300));
    Bytes gz = gzip_stored(Bytes(whole.begin(), whole.begin() + 111));
    Bytes second = gzip_stored(Bytes(whole.begin() + 111, whole.end()));
    gz.insert(gz.end(), second.begin(), second.end());
    write_bytes(file("two.gz"), gz);
    IdxArray a = xylem::io::read_idx(file("two.gz"));
    EXPECT_EQ(a.dims, (std::vector<int64_t>{3, 100}));
    EXPECT_EQ(a.data, iota_bytes(300));
}

// Bytes after the last gzip member that are not another member are ignored, as gzip -d and
// zlib's gzread do; the IDX payload and the member's CRC have been checked by then.
TEST_F(IdxTest, JunkAfterTheLastGzipMemberIsIgnored) {
    Bytes gz = gzip_stored(idx_bytes({2}, {7, 9}));
    gz.insert(gz.end(), {0, 0, 0, 0x1f});
    write_bytes(file("junk.gz"), gz);
    EXPECT_EQ(xylem::io::read_idx(file("junk.gz")).data, (Bytes{7, 9}));
}

// parse_idx is the parser read_idx runs over a file: same results, same errors, under the given name.
TEST_F(IdxTest, ParseFromMemoryMatchesTheFileReader) {
    for (const Bytes& bytes : {kDeflatedImages, idx_bytes({2, 3}, iota_bytes(6)), gzip_stored(idx_bytes({5}, iota_bytes(5)))}) {
        write_bytes(file("m"), bytes);
        IdxArray from_file = xylem::io::read_idx(file("m"));
        IdxArray from_memory = xylem::io::parse_idx(bytes.data(), bytes.size(), "mem");
        EXPECT_EQ(from_memory.dims, from_file.dims);
        EXPECT_EQ(from_memory.data, from_file.data);
    }
    Bytes cut = gzip_stored(idx_bytes({1000}, iota_bytes(1000)));
    cut.resize(500);
    std::string msg = error_of([&] { xylem::io::parse_idx(cut.data(), cut.size(), "mem.gz"); });
    EXPECT_TRUE(contains(msg, "mem.gz: truncated gzip stream: expected 1000 payload bytes, only ")) << msg;
    EXPECT_EQ(error_of([&] { xylem::io::parse_idx(nullptr, 0, "empty"); }),
              "empty: truncated IDX file: expected 4 magic number bytes, got 0");
}

TEST_F(IdxTest, CorruptGzipChecksum) {
    Bytes gz = gzip_stored(idx_bytes({4}, {1, 2, 3, 4}));
    gz[gz.size() - 6] ^= 0xFF;  // inside the CRC32
    write_bytes(file("crc.gz"), gz);
    EXPECT_EQ(error_of([&] { xylem::io::read_idx(file("crc.gz")); }),
              file("crc.gz") + ": corrupt gzip stream: incorrect data check");
}

// float32 values as an IDX payload: big-endian IEEE bytes.
Bytes float_bytes(const std::vector<float>& values) {
    Bytes out;
    for (float v : values) {
        uint32_t bits;
        std::memcpy(&bits, &v, 4);
        for (int shift = 24; shift >= 0; shift -= 8) out.push_back(static_cast<uint8_t>(bits >> shift));
    }
    return out;
}

// [N, C, H, W] image files load as C-channel images, bytes scaled and float32 as stored; the
// sample shape and size come from the one place (Dataset::sample_shape / sample_size).
TEST_F(IdxTest, MultiChannelImagesRoundTrip) {
    const Bytes pixels = iota_bytes(2 * 3 * 2 * 4);
    write_bytes(file("train-images-idx3-ubyte"), idx_bytes({2, 3, 2, 4}, pixels));
    write_bytes(file("train-labels-idx1-ubyte"), idx_bytes({2}, {4, 1}));
    Dataset d = xylem::io::load_mnist_dir(dir_, true);
    EXPECT_EQ(d.count, 2);
    EXPECT_EQ(d.channels, 3);
    EXPECT_EQ(d.rows, 2);
    EXPECT_EQ(d.cols, 4);
    EXPECT_EQ(d.sample_shape(), (std::vector<int64_t>{3, 2, 4}));
    EXPECT_EQ(d.sample_size(), 24);
    EXPECT_EQ(d.sample_text(), "3x2x4");
    ASSERT_EQ(d.images.size(), pixels.size());
    for (size_t i = 0; i < pixels.size(); ++i) ASSERT_FLOAT_EQ(d.images[i], pixels[i] / 255.0f) << i;
    EXPECT_EQ(d.labels, (std::vector<int32_t>{4, 1}));
    const Dataset empty = d.empty_like();
    EXPECT_EQ(empty.count, 0);
    EXPECT_EQ(empty.sample_shape(), d.sample_shape());

    // float32, gzipped: the values exactly as written (no scaling; negative and > 1 allowed).
    std::vector<float> values(2 * 3 * 2 * 2);
    for (size_t i = 0; i < values.size(); ++i) values[i] = -1.5f + 0.37f * static_cast<float>(i);
    write_bytes(file("f.gz"), gzip_stored(idx_bytes({2, 3, 2, 2}, float_bytes(values), 0x0D)));
    IdxArray raw = xylem::io::read_idx(file("f.gz"));
    EXPECT_EQ(raw.type, xylem::io::kIdxFloat);
    EXPECT_EQ(raw.numel(), values.size());
    EXPECT_EQ(xylem::io::idx_floats(raw), values);
    Dataset f = xylem::io::load_idx_images(file("f.gz"));
    EXPECT_EQ(f.sample_shape(), (std::vector<int64_t>{3, 2, 2}));
    EXPECT_EQ(f.images, values);

    // A 3-dim file stays one channel, float32 too.
    write_bytes(file("g"), idx_bytes({3, 2, 2}, float_bytes(std::vector<float>(12, 0.25f)), 0x0D));
    Dataset g = xylem::io::load_idx_images(file("g"));
    EXPECT_EQ(g.channels, 1);
    EXPECT_EQ(g.sample_shape(), (std::vector<int64_t>{1, 2, 2}));
    EXPECT_EQ(g.sample_text(), "2x2");
    EXPECT_EQ(g.images, std::vector<float>(12, 0.25f));
}

TEST_F(IdxTest, BadMultiChannelFilesAreRefusedNamingTheFile) {
    // Truncated: a float payload short of its 4-byte elements, plain and gzipped.
    Bytes cut = idx_bytes({2, 3, 2, 2}, float_bytes(std::vector<float>(24, 1.0f)), 0x0D);
    cut.resize(cut.size() - 6);
    write_bytes(file("cut"), cut);
    EXPECT_EQ(error_of([&] { xylem::io::load_idx_images(file("cut")); }),
              file("cut") + ": truncated IDX file: expected 96 payload bytes, got 90");
    write_bytes(file("cut.gz"), gzip_stored(cut));
    EXPECT_EQ(error_of([&] { xylem::io::load_idx_images(file("cut.gz")); }),
              file("cut.gz") + ": truncated IDX file: expected 96 payload bytes, got 90");
    // Dims whose product overflows, or whose bytes do once float32's 4 bytes count.
    write_bytes(file("over"), idx_bytes({0xFFFFFFFFu, 0xFFFFFFFFu, 0xFFFFFFFFu, 3}, {}));
    std::string msg = error_of([&] { xylem::io::load_idx_images(file("over")); });
    EXPECT_EQ(msg, file("over") + ": IDX dimensions 4294967295x4294967295x4294967295x3 are too large to load");
    write_bytes(file("over4"), idx_bytes({0x80000000u, 0x80000000u, 2, 1}, {}, 0x0D));  // 2^63 elements, 2^65 bytes
    msg = error_of([&] { xylem::io::load_idx_images(file("over4")); });
    EXPECT_EQ(msg, file("over4") + ": IDX dimensions 2147483648x2147483648x2x1 are too large to load");
    // A huge claim with little data is "truncated", not an allocation failure.
    write_bytes(file("claim"), idx_bytes({1000000, 3, 64, 64}, iota_bytes(10)));
    EXPECT_EQ(error_of([&] { xylem::io::load_idx_images(file("claim")); }),
              file("claim") + ": truncated IDX file: expected 12288000000 payload bytes, got 10");
    // No pixels: zero channels.
    write_bytes(file("zero"), idx_bytes({2, 0, 2, 2}, {}));
    EXPECT_EQ(error_of([&] { xylem::io::load_idx_images(file("zero")); }),
              file("zero") + ": images of 0x2x2 (channels x rows x cols) (a dataset needs at least one pixel per image)");
    // Five dims are no image file.
    write_bytes(file("five"), idx_bytes({1, 1, 1, 1, 1}, {7}));
    msg = error_of([&] { xylem::io::load_idx_images(file("five")); });
    EXPECT_EQ(msg.rfind(file("five") + ": not an IDX image file (magic 0x00000805, expected 0x00000803", 0), 0u) << msg;
    // A float that is not finite.
    std::vector<float> values(12, 0.5f);
    values[7] = std::numeric_limits<float>::quiet_NaN();
    write_bytes(file("nan"), idx_bytes({1, 3, 2, 2}, float_bytes(values), 0x0D));
    msg = error_of([&] { xylem::io::load_idx_images(file("nan")); });
    EXPECT_EQ(msg.rfind(file("nan") + ": float32 value nan at element 7 is not finite", 0), 0u) << msg;
    // Labels must be unsigned bytes.
    write_bytes(file("img"), idx_bytes({1, 3, 1, 1}, {1, 2, 3}));
    write_bytes(file("flbl"), idx_bytes({1}, float_bytes({1.0f}), 0x0D));
    EXPECT_EQ(error_of([&] { xylem::io::load_mnist(file("img"), file("flbl")); }),
              file("flbl") + ": not an IDX label file (magic 0x00000D01, expected 0x00000801)");
}

// The real Fashion-MNIST from the dataset-fashion-mnist package, when installed.
TEST(FashionMnist, LoadsTrainAndTestSets) {
    const std::string dir = "/usr/share/datasets/fashion-mnist";
    if (!fs::exists(dir)) GTEST_SKIP() << dir << " not installed";
    for (bool train : {true, false}) {
        Dataset d = xylem::io::load_mnist_dir(dir, train);
        const int64_t count = train ? 60000 : 10000;
        EXPECT_EQ(d.count, count);
        EXPECT_EQ(d.rows, 28);
        EXPECT_EQ(d.cols, 28);
        ASSERT_EQ(d.images.size(), static_cast<size_t>(count * 28 * 28));
        ASSERT_EQ(d.labels.size(), static_cast<size_t>(count));
        auto [lo, hi] = std::minmax_element(d.images.begin(), d.images.end());
        EXPECT_EQ(*lo, 0.0f);
        EXPECT_EQ(*hi, 1.0f);
        std::vector<int64_t> per_class(10, 0);
        for (int32_t label : d.labels) {
            ASSERT_GE(label, 0);
            ASSERT_LT(label, 10);
            ++per_class[label];
        }
        for (int64_t n : per_class) EXPECT_EQ(n, count / 10);  // Fashion-MNIST is exactly balanced
    }
}

}  // namespace
