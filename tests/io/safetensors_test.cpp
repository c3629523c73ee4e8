// Tests for safetensors I/O: round trip, the reference byte layout, corrupt files, atomic replacement.
#include "xylem/io/safetensors.h"
#include "xylem/io/checksum.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "xylem/error.h"

namespace fs = std::filesystem;
using xylem::io::Safetensors;
using xylem::io::TensorView;

namespace {

using Bytes = std::vector<uint8_t>;

Bytes read_all(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    return Bytes(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

void write_bytes(const std::string& path, const Bytes& bytes) {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
    ASSERT_TRUE(out.good()) << path;
}

// A hand-built file: length prefix (the header's own length unless overridden), header, buffer.
Bytes raw_file(const std::string& header, size_t buffer_bytes, uint64_t length = UINT64_MAX) {
    if (length == UINT64_MAX) length = header.size();
    Bytes out;
    for (int i = 0; i < 8; ++i) out.push_back(static_cast<uint8_t>(length >> (8 * i)));
    out.insert(out.end(), header.begin(), header.end());
    out.resize(out.size() + buffer_bytes, 0x5A);
    return out;
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

class SafetensorsTest : public ::testing::Test {
protected:
    void SetUp() override {
        std::string pattern = ::testing::TempDir() + "xylem_st_XXXXXX";
        ASSERT_NE(::mkdtemp(pattern.data()), nullptr);
        dir_ = pattern;
    }
    void TearDown() override { fs::remove_all(dir_); }
    std::string file(const std::string& name) const { return dir_ + "/" + name; }

    // Writes `header` + a buffer of `buffer_bytes` and returns read_safetensors' error message.
    std::string reject(const std::string& header, size_t buffer_bytes) {
        write_bytes(file("bad.safetensors"), raw_file(header, buffer_bytes));
        return error_of([&] { xylem::io::read_safetensors(file("bad.safetensors")); });
    }

    bool temp_files_left() const {
        for (const auto& entry : fs::directory_iterator(dir_))
            if (contains(entry.path().filename().string(), ".tmp.")) return true;
        return false;
    }

    std::string dir_;
    const std::vector<float> weights_ = {1.5f, -2.0f, 3.25f, 0.0f, 1e-8f, -7.0f};
    const std::vector<int32_t> steps_ = {1, -2, 2147483647, -2147483647 - 1};
    const float scalar_ = 42.0f;
};

TEST_F(SafetensorsTest, RoundTrip) {
    std::vector<TensorView> tensors = {
        {"layer.weight", "F32", {2, 3}, weights_.data(), weights_.size() * 4},
        {"steps", "I32", {4}, steps_.data(), steps_.size() * 4},
        {"scalar", "F32", {}, &scalar_, 4},
        {"empty", "F32", {0, 3}, nullptr, 0},
    };
    std::map<std::string, std::string> metadata = {{"epoch", "3"}, {"format", "pt"}, {"note", "with \"quotes\"\n"}};
    xylem::io::write_safetensors(file("m.safetensors"), tensors, metadata);

    Safetensors st = xylem::io::read_safetensors(file("m.safetensors"));
    EXPECT_EQ(st.metadata, metadata);
    ASSERT_EQ(st.tensors.size(), 4u);
    for (const TensorView& t : tensors) {
        SCOPED_TRACE(t.name);
        ASSERT_EQ(st.tensors.count(t.name), 1u);
        const auto& loaded = st.tensors.at(t.name);
        EXPECT_EQ(loaded.dtype, t.dtype);
        EXPECT_EQ(loaded.shape, t.shape);
        ASSERT_EQ(loaded.data.size(), t.bytes);
        if (t.bytes) {
            EXPECT_EQ(std::memcmp(loaded.data.data(), t.data, t.bytes), 0);
        }
    }
    EXPECT_FALSE(temp_files_left());
}

TEST_F(SafetensorsTest, NoTensorsNoMetadata) {
    xylem::io::write_safetensors(file("e.safetensors"), {});
    Safetensors st = xylem::io::read_safetensors(file("e.safetensors"));
    EXPECT_TRUE(st.tensors.empty());
    EXPECT_TRUE(st.metadata.empty());
    EXPECT_EQ(read_all(file("e.safetensors")), raw_file("{}      ", 0));
}

// The layout other readers (Python safetensors, PyTorch tooling) rely on.
TEST_F(SafetensorsTest, ReferenceLayout) {
    std::vector<TensorView> tensors = {
        {"z_first", "I32", {2, 2}, steps_.data(), 16},
        {"a_second", "F32", {6}, weights_.data(), 24},
    };
    xylem::io::write_safetensors(file("r.safetensors"), tensors, {{"k", "v"}});
    Bytes bytes = read_all(file("r.safetensors"));
    ASSERT_GE(bytes.size(), 8u);
    uint64_t n = 0;
    for (int i = 7; i >= 0; --i) n = n << 8 | bytes[i];
    EXPECT_EQ(n % 8, 0u);                // padded so the buffer starts 8-aligned
    EXPECT_EQ(bytes.size(), 8 + n + 40);  // prefix + header + exactly the tensor bytes
    std::string header(bytes.begin() + 8, bytes.begin() + 8 + static_cast<int64_t>(n));
    EXPECT_EQ(header.front(), '{');
    size_t last = header.find_last_not_of(' ');
    EXPECT_EQ(header[last], '}');
    EXPECT_LT(header.size() - last - 1, 8u);  // only padding spaces after the JSON

    auto json = nlohmann::json::parse(header);
    EXPECT_EQ(json["__metadata__"]["k"], "v");
    EXPECT_EQ(json["__metadata__"].size(), 2u);  // and each tensor's checksum (ChecksumsCatchDamagedBytes)
    EXPECT_EQ(json["z_first"]["dtype"], "I32");
    EXPECT_EQ(json["z_first"]["shape"], (nlohmann::json{2, 2}));
    EXPECT_EQ(json["z_first"]["data_offsets"], (nlohmann::json{0, 16}));  // laid out in the order given
    EXPECT_EQ(json["a_second"]["data_offsets"], (nlohmann::json{16, 40}));
    EXPECT_EQ(std::memcmp(bytes.data() + 8 + n, steps_.data(), 16), 0);
    EXPECT_EQ(std::memcmp(bytes.data() + 8 + n + 16, weights_.data(), 24), 0);
}

TEST_F(SafetensorsTest, ReadsEveryDtype) {
    std::string header =
        R"({"a":{"dtype":"F64","shape":[1],"data_offsets":[0,8]},"b":{"dtype":"I64","shape":[1],"data_offsets":[8,16]},)"
        R"("c":{"dtype":"U8","shape":[3],"data_offsets":[16,19]},"d":{"dtype":"F16","shape":[1],"data_offsets":[19,21]},)"
        R"("e":{"dtype":"BF16","shape":[2],"data_offsets":[21,25]},"f":{"dtype":"I32","shape":[],"data_offsets":[25,29]}})";
    write_bytes(file("d.safetensors"), raw_file(header, 29));
    Safetensors st = xylem::io::read_safetensors(file("d.safetensors"));
    EXPECT_EQ(st.tensors.at("a").dtype, "F64");
    EXPECT_EQ(st.tensors.at("b").dtype, "I64");
    EXPECT_EQ(st.tensors.at("c").data, (Bytes{0x5A, 0x5A, 0x5A}));
    EXPECT_EQ(st.tensors.at("d").dtype, "F16");
    EXPECT_EQ(st.tensors.at("e").shape, (std::vector<int64_t>{2}));
    EXPECT_EQ(st.tensors.at("f").shape, (std::vector<int64_t>{}));
}

TEST_F(SafetensorsTest, RejectsShortAndOversizedHeaders) {
    write_bytes(file("empty"), {});
    EXPECT_EQ(error_of([&] { xylem::io::read_safetensors(file("empty")); }),
              file("empty") + ": not a safetensors file (0 bytes, too short for the 8-byte header length)");
    write_bytes(file("beyond"), raw_file("{}", 0, 1000));
    EXPECT_EQ(error_of([&] { xylem::io::read_safetensors(file("beyond")); }),
              file("beyond") + ": header length 1000 runs past the end of the file (2 bytes follow the length prefix)");
    write_bytes(file("huge"), raw_file("{}", 0, 100'000'001));
    EXPECT_EQ(error_of([&] { xylem::io::read_safetensors(file("huge")); }),
              file("huge") + ": header length 100000001 exceeds the 100000000-byte limit (not a safetensors file?)");
    EXPECT_EQ(error_of([&] { xylem::io::read_safetensors(file("missing")); }),
              file("missing") + ": cannot open: No such file or directory");
}

TEST_F(SafetensorsTest, RejectsBadJson) {
    std::string msg = reject(R"({"a": {"dtype": "F32",)", 0);
    EXPECT_TRUE(contains(msg, file("bad.safetensors") + ": header is not valid JSON: parse error")) << msg;
    EXPECT_EQ(reject("[1, 2]", 0), file("bad.safetensors") + ": header is not a JSON object");
    EXPECT_EQ(reject(R"({"a": 1})", 0), file("bad.safetensors") + ": tensor 'a': entry is not a JSON object");
    EXPECT_EQ(reject(R"({"__metadata__": {"k": 1}})", 0),
              file("bad.safetensors") + ": __metadata__ entry 'k' is not a string");
    EXPECT_EQ(reject(R"({"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}})", 1),
              file("bad.safetensors") + ": header names 'a' more than once");
}

TEST_F(SafetensorsTest, RejectsBadFields) {
    const std::string bad = file("bad.safetensors") + ": tensor 'w': ";
    EXPECT_EQ(reject(R"({"w": {"dtype": "Q8", "shape": [1], "data_offsets": [0, 1]}})", 1),
              bad + "unsupported dtype 'Q8' (expected one of F32, F64, I32, I64, U8, F16, BF16)");
    EXPECT_EQ(reject(R"({"w": {"shape": [1], "data_offsets": [0, 1]}})", 1), bad + "missing or non-string \"dtype\"");
    EXPECT_EQ(reject(R"({"w": {"dtype": "U8", "shape": [-1], "data_offsets": [0, 1]}})", 1),
              bad + "\"shape\" is missing or not an array of non-negative integers");
    EXPECT_EQ(reject(R"({"w": {"dtype": "U8", "shape": [1.5], "data_offsets": [0, 1]}})", 1),
              bad + "\"shape\" is missing or not an array of non-negative integers");
    EXPECT_EQ(reject(R"({"w": {"dtype": "U8", "shape": [1], "data_offsets": [0]}})", 1),
              bad + "\"data_offsets\" is missing or not a pair of non-negative integers");
    EXPECT_EQ(reject(R"({"w": {"dtype": "F32", "shape": [2, 2], "data_offsets": [0, 12]}})", 12),
              bad + "data_offsets [0, 12] hold 12 bytes but shape [2, 2] of F32 needs 16");
    EXPECT_EQ(reject(R"({"w": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}})", 8),
              bad + "data_offsets [0, 16] run past the end of the 8-byte data buffer");
    EXPECT_EQ(reject(R"({"w": {"dtype": "U8", "shape": [0], "data_offsets": [8, 0]}})", 8),
              bad + "data_offsets [8, 0] are reversed");
    EXPECT_EQ(reject(R"({"w": {"dtype": "F64", "shape": [4294967296, 4294967296], "data_offsets": [0, 0]}})", 0),
              bad + "shape [4294967296, 4294967296] is too large");
}

TEST_F(SafetensorsTest, RejectsBadTiling) {
    const std::string f = file("bad.safetensors");
    EXPECT_EQ(reject(R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
                         "b": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}})", 12),
              f + ": tensors 'a' [0, 8] and 'b' [4, 12] overlap in the data buffer");
    EXPECT_EQ(reject(R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
                         "b": {"dtype": "F32", "shape": [2], "data_offsets": [12, 20]}})", 20),
              f + ": gap in the data buffer: bytes [8, 12] before tensor 'b' belong to no tensor");
    EXPECT_EQ(reject(R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}})", 12),
              f + ": gap in the data buffer: bytes [0, 4] before tensor 'a' belong to no tensor");
    EXPECT_EQ(reject(R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}})", 12),
              f + ": the data buffer has 12 bytes but the tensors cover only 8 (trailing bytes after the last tensor)");
}

TEST_F(SafetensorsTest, WriterRejectsBadTensors) {
    auto write = [&](TensorView t) { xylem::io::write_safetensors(file("w.safetensors"), {t}); };
    const std::string bad = file("w.safetensors") + ": tensor 'w'";
    EXPECT_EQ(error_of([&] { write({"w", "F32", {2, 3}, weights_.data(), 20}); }),
              bad + ": has 20 bytes but shape [2, 3] of F32 needs 24");
    EXPECT_EQ(error_of([&] { write({"w", "F8", {1}, weights_.data(), 1}); }),
              bad + ": unsupported dtype 'F8' (expected one of F32, F64, I32, I64, U8, F16, BF16)");
    EXPECT_EQ(error_of([&] { write({"w", "F32", {-1}, weights_.data(), 4}); }), bad + ": negative dimension in shape [-1]");
    EXPECT_EQ(error_of([&] { write({"__metadata__", "F32", {1}, weights_.data(), 4}); }),
              file("w.safetensors") + ": tensor '__metadata__': the name is reserved for metadata");
    EXPECT_EQ(error_of([&] {
                  xylem::io::write_safetensors(file("w.safetensors"), {{"w", "F32", {1}, weights_.data(), 4},
                                                                       {"w", "F32", {1}, weights_.data(), 4}});
              }),
              bad + " is given more than once");
    EXPECT_FALSE(fs::exists(file("w.safetensors")));
    EXPECT_FALSE(temp_files_left());
}

// parse_safetensors is the parser read_safetensors runs over a file: same result, same errors.
TEST_F(SafetensorsTest, ParseFromMemoryMatchesTheFileReader) {
    std::vector<TensorView> tensors = {{"w", "F32", {2, 3}, weights_.data(), weights_.size() * 4},
                                       {"steps", "I32", {4}, steps_.data(), steps_.size() * 4}};
    xylem::io::write_safetensors(file("m.safetensors"), tensors, {{"epoch", "2"}});
    const Bytes bytes = read_all(file("m.safetensors"));
    Safetensors from_file = xylem::io::read_safetensors(file("m.safetensors"));
    Safetensors from_memory = xylem::io::parse_safetensors(bytes.data(), bytes.size(), "mem");
    EXPECT_EQ(from_memory.metadata, from_file.metadata);
    ASSERT_EQ(from_memory.tensors.size(), 2u);
    for (const auto& [name, t] : from_file.tensors) {
        EXPECT_EQ(from_memory.tensors.at(name).dtype, t.dtype);
        EXPECT_EQ(from_memory.tensors.at(name).shape, t.shape);
        EXPECT_EQ(from_memory.tensors.at(name).data, t.data);
    }
    const Bytes cut(bytes.begin(), bytes.end() - 1);
    std::string msg = error_of([&] { xylem::io::parse_safetensors(cut.data(), cut.size(), "mem"); });
    EXPECT_TRUE(contains(msg, "mem: tensor 'steps': data_offsets [24, 40] run past the end of the 39-byte data buffer")) << msg;
    EXPECT_EQ(error_of([&] { xylem::io::parse_safetensors(nullptr, 0, "empty"); }),
              "empty: not a safetensors file (0 bytes, too short for the 8-byte header length)");
}

TEST_F(SafetensorsTest, FailedWriteLeavesOldFileIntact) {
    const std::string path = file("ckpt.safetensors");
    xylem::io::write_safetensors(path, {{"w", "F32", {6}, weights_.data(), 24}}, {{"epoch", "1"}});
    const Bytes before = read_all(path);

    EXPECT_THROW(xylem::io::write_safetensors(path, {{"w", "F32", {6}, weights_.data(), 23}}), xylem::Error);
    EXPECT_EQ(read_all(path), before);
    EXPECT_FALSE(temp_files_left());

    // A folder is no file name: refused naming it, before any temporary file is made (it was
    // "cannot rename ...: Is a directory", or "Not a directory" for a name ending in '/').
    fs::create_directory(file("dir.safetensors"));
    std::string msg = error_of([&] {
        xylem::io::write_safetensors(file("dir.safetensors"), {{"w", "F32", {6}, weights_.data(), 24}});
    });
    EXPECT_EQ(msg, file("dir.safetensors") + ": is a folder; a file name is needed here (e.g. " + file("dir.safetensors") +
                       "/NAME)");
    msg = error_of([&] { xylem::io::write_safetensors(file("dir.safetensors") + "/", {{"w", "F32", {6}, weights_.data(), 24}}); });
    EXPECT_EQ(msg, file("dir.safetensors") + "/: ends with '/', so it names a folder; a file name is needed here (e.g. " +
                       file("dir.safetensors") + "/NAME)");
    EXPECT_FALSE(temp_files_left());
    EXPECT_TRUE(fs::is_empty(file("dir.safetensors")));
    // Any valid file name can be written: its temporary name is cut to fit (255 bytes at most).
    const std::string longest = file(std::string(255, 'n'));
    xylem::io::write_safetensors(longest, {{"w", "F32", {6}, weights_.data(), 24}});
    EXPECT_EQ(xylem::io::read_safetensors(longest).tensors.at("w").data.size(), 24u);
    EXPECT_FALSE(temp_files_left());
    fs::remove(longest);

    // A successful overwrite replaces the contents.
    xylem::io::write_safetensors(path, {{"s", "I32", {4}, steps_.data(), 16}});
    Safetensors st = xylem::io::read_safetensors(path);
    EXPECT_EQ(st.tensors.count("w"), 0u);
    EXPECT_EQ(st.tensors.at("s").data.size(), 16u);
    EXPECT_FALSE(temp_files_left());
}

// Every tensor's checksum (XXH64, metadata "xylem.checksums") is written and verified: one flipped
// bit is an error naming the tensor; a file without checksums (older xylem, other writers) still
// reads, with checksummed = false; the key never reaches the caller's metadata.
TEST_F(SafetensorsTest, ChecksumsCatchDamagedBytes) {
    xylem::io::write_safetensors(file("c.safetensors"), {{"a", "F32", {6}, weights_.data(), 24}, {"b", "I32", {4}, steps_.data(), 16}},
                                 {{"k", "v"}});
    Safetensors ok = xylem::io::read_safetensors(file("c.safetensors"));
    EXPECT_TRUE(ok.checksummed);
    EXPECT_EQ(ok.metadata, (std::map<std::string, std::string>{{"k", "v"}}));
    Bytes bytes = read_all(file("c.safetensors"));
    bytes[bytes.size() - 3] ^= 0x01;  // in tensor b, the last one laid out
    write_bytes(file("c.safetensors"), bytes);
    EXPECT_EQ(error_of([&] { xylem::io::read_safetensors(file("c.safetensors")); }),
              file("c.safetensors") + ": tensor 'b' does not match its checksum: the file is damaged (its bytes changed "
                                      "after it was written)");
    // Without the key: read as before, unverified.
    write_bytes(file("plain.safetensors"),
                raw_file(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", 4));
    EXPECT_FALSE(xylem::io::read_safetensors(file("plain.safetensors")).checksummed);
    // XXH64's reference values.
    EXPECT_EQ(xylem::io::checksum_text(xylem::io::xxh64("", 0)), "xxh64:ef46db3751d8e999");
    EXPECT_EQ(xylem::io::checksum_text(xylem::io::xxh64("abc", 3)), "xxh64:44bc2cf5ad770999");
    std::string text(1000, 'x');
    for (size_t i = 0; i < text.size(); ++i) text[i] = static_cast<char>(i * 131 + 7);
    xylem::io::Xxh64 pieces;
    pieces.update(text.data(), 5);
    pieces.update(text.data() + 5, 600);
    pieces.update(text.data() + 605, 395);
    EXPECT_EQ(pieces.digest(), xylem::io::xxh64(text.data(), text.size()));
}

}  // namespace
