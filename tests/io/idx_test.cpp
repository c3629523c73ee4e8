// Tests for IDX / MNIST loading: real Fashion-MNIST, hand-made plain and gzipped files, corrupt inputs.
#include "xylem/io/idx.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
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
    write_bytes(file("f"), idx_bytes({2}, {0, 0, 0, 0, 0, 0, 0, 0}, 0x0D));
    std::string msg = error_of([&] { xylem::io::read_idx(file("f")); });
    EXPECT_TRUE(contains(msg, file("f") + ": unsupported IDX element type 0x0D (magic 0x00000D01")) << msg;
}

TEST_F(IdxTest, LabelFileGivenAsImages) {
    write_bytes(file("lbl"), idx_bytes({3}, {1, 2, 3}));
    EXPECT_EQ(error_of([&] { xylem::io::load_mnist(file("lbl"), file("lbl")); }),
              file("lbl") + ": not an IDX image file (magic 0x00000801, expected 0x00000803)");
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
