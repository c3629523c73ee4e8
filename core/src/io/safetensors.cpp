// safetensors reading and writing, validated as strictly as the reference implementation.
#include "xylem/io/safetensors.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>
#include <system_error>

#include "xylem/error.h"
#include "xylem/io/atomic_file.h"
#include "xylem/io/input_file.h"
#include "xylem/io/checksum.h"

// Tensor bytes are stored little-endian and copied verbatim.
static_assert(std::endian::native == std::endian::little, "safetensors I/O assumes a little-endian host");

namespace xylem::io {
namespace {

using nlohmann::json;

constexpr uint64_t kMaxHeaderBytes = 100'000'000;  // the reference implementation's limit
constexpr const char* kDtypeList = "F32, F64, I32, I64, U8, F16, BF16";

std::string errno_text(int err) { return std::generic_category().message(err); }

std::string shape_text(const std::vector<int64_t>& shape) {
    std::string text = "[";
    for (size_t i = 0; i < shape.size(); ++i) {
        if (i) text += ", ";
        text += std::to_string(shape[i]);
    }
    return text + "]";
}

std::string range_text(uint64_t begin, uint64_t end) {
    std::string text = "[";  // built up, not "[" + ..., which trips GCC 12's bogus -Wrestrict
    text += std::to_string(begin);
    text += ", ";
    text += std::to_string(end);
    return text + "]";
}

// product(shape) * element size, or false on overflow.
bool byte_size(const std::vector<int64_t>& shape, size_t element, uint64_t* out) {
    uint64_t n = element;
    for (int64_t dim : shape)
        if (__builtin_mul_overflow(n, static_cast<uint64_t>(dim), &n)) return false;
    *out = n;
    return true;
}

// Where a safetensors file's bytes come from: a file (pread) or a caller's buffer.
class Source {
public:
    virtual ~Source() = default;
    virtual uint64_t size() const = 0;
    virtual void read_at(void* buf, size_t n, uint64_t offset) = 0;  // within [0, size()]
};

class InputFile : public Source {
public:
    explicit InputFile(const std::string& path) : path_(path) {
        fd_ = open_regular_file(path, "safetensors files", &size_);  // not a device, a FIFO or a folder
    }
    ~InputFile() override { ::close(fd_); }
    InputFile(const InputFile&) = delete;
    InputFile& operator=(const InputFile&) = delete;

    uint64_t size() const override { return size_; }

    void read_at(void* buf, size_t n, uint64_t offset) override {
        char* p = static_cast<char*>(buf);
        while (n > 0) {
            ssize_t r = ::pread(fd_, p, std::min(n, size_t{1} << 30), static_cast<off_t>(offset));
            if (r < 0 && errno == EINTR) continue;
            if (r < 0) throw Error(path_ + ": read error: " + errno_text(errno));
            if (r == 0) throw Error(path_ + ": file shrank while being read (unexpected end at byte " + std::to_string(offset) + ")");
            p += r;
            n -= static_cast<size_t>(r);
            offset += static_cast<uint64_t>(r);
        }
    }

private:
    std::string path_;
    int fd_ = -1;
    uint64_t size_ = 0;
};

class BufferSource : public Source {
public:
    BufferSource(const uint8_t* data, size_t size) : data_(data), size_(size) {}
    uint64_t size() const override { return size_; }
    void read_at(void* buf, size_t n, uint64_t offset) override {
        if (n) std::memcpy(buf, data_ + offset, n);  // the parser only asks within size()
    }

private:
    const uint8_t* data_;
    size_t size_;
};

// Parses the header, rejecting duplicate top-level keys (nlohmann would silently keep the last).
json parse_header(const std::string& path, const std::string& text) {
    std::set<std::string> keys;
    std::string duplicate;
    auto note_keys = [&](int depth, json::parse_event_t event, json& parsed) {
        if (depth == 1 && event == json::parse_event_t::key && !keys.insert(parsed.get<std::string>()).second &&
            duplicate.empty())
            duplicate = parsed.get<std::string>();
        return true;
    };
    json header;
    try {
        header = json::parse(text.begin(), text.end(), note_keys);
    } catch (const json::exception& e) {
        std::string what = e.what();
        size_t tag_end = what.find("] ");  // drop nlohmann's "[json.exception.parse_error.101] "
        throw Error(path + ": header is not valid JSON: " + (tag_end == std::string::npos ? what : what.substr(tag_end + 2)));
    }
    if (!header.is_object()) throw Error(path + ": header is not a JSON object");
    if (!duplicate.empty()) throw Error(path + ": header names '" + duplicate + "' more than once");
    return header;
}

std::map<std::string, std::string> parse_metadata(const std::string& path, const json& value) {
    if (!value.is_object()) throw Error(path + ": __metadata__ is not a JSON object");
    std::map<std::string, std::string> metadata;
    for (const auto& [key, item] : value.items()) {
        if (!item.is_string()) throw Error(path + ": __metadata__ entry '" + key + "' is not a string");
        metadata[key] = item.get<std::string>();
    }
    return metadata;
}

// Non-negative JSON integers within int64 (nlohmann stores those as number_unsigned).
bool read_uints(const json& value, std::vector<uint64_t>* out) {
    if (!value.is_array()) return false;
    for (const json& item : value) {
        if (!item.is_number_unsigned()) return false;
        uint64_t v = item.get<uint64_t>();
        if (v > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return false;
        out->push_back(v);
    }
    return true;
}

struct Range {
    uint64_t begin, end;
    std::string name;
};

// Every tensor against the checksum the writer recorded (xylem.checksums), when there is one:
// damaged bytes are an error naming the tensor, not weights that load. Files without the key
// (older xylem, other writers) load unchecked, and say so through Safetensors::checksummed.
void check_checksums(const std::string& path, Safetensors& file) {
    auto it = file.metadata.find(kChecksumsKey);
    if (it == file.metadata.end()) return;
    json sums;
    try {
        sums = json::parse(it->second);
    } catch (const json::exception&) {
        throw Error(path + ": __metadata__ entry '" + kChecksumsKey + "' is not JSON: the file is damaged");
    }
    if (!sums.is_object()) throw Error(path + ": __metadata__ entry '" + kChecksumsKey + "' is not a JSON object");
    for (const auto& [name, t] : file.tensors) {
        auto sum = sums.find(name);
        if (sum == sums.end() || !sum->is_string())
            throw Error(path + ": tensor '" + name + "' has no checksum in '" + kChecksumsKey +
                        "' (a tensor added after the file was written?)");
        if (sum->get<std::string>() != checksum_text(xxh64(t.data.data(), t.data.size())))
            throw Error(path + ": tensor '" + name + "' does not match its checksum: the file is damaged (its bytes "
                        "changed after it was written)");
    }
    for (const auto& [name, sum] : sums.items())
        if (!file.tensors.count(name))
            throw Error(path + ": '" + kChecksumsKey + "' lists tensor '" + name + "', which the file does not hold");
    file.checksummed = true;
    file.metadata.erase(it);  // verified: the caller sees the metadata that was written
}

}  // namespace

size_t safetensors_dtype_size(const std::string& dtype) {
    static const std::map<std::string, size_t> sizes = {{"F32", 4}, {"F64", 8}, {"I32", 4}, {"I64", 8},
                                                         {"U8", 1},  {"F16", 2}, {"BF16", 2}};
    auto it = sizes.find(dtype);
    return it == sizes.end() ? 0 : it->second;
}

void write_safetensors(const std::string& path, const std::vector<TensorView>& tensors,
                       const std::map<std::string, std::string>& metadata) {
    // ordered_json: __metadata__ first, then tensors in layout order, like the reference writer.
    nlohmann::ordered_json header = nlohmann::ordered_json::object();
    std::map<std::string, std::string> meta = metadata;
    nlohmann::ordered_json sums = nlohmann::ordered_json::object();  // filled below, once each tensor is checked
    std::set<std::string> names;
    uint64_t offset = 0;
    for (const TensorView& t : tensors) {
        std::string where = path + ": tensor '" + t.name + "'";
        if (t.name.empty()) throw Error(path + ": a tensor has an empty name");
        if (t.name == "__metadata__") throw Error(where + ": the name is reserved for metadata");
        if (!names.insert(t.name).second) throw Error(where + " is given more than once");
        size_t element = safetensors_dtype_size(t.dtype);
        if (element == 0) throw Error(where + ": unsupported dtype '" + t.dtype + "' (expected one of " + kDtypeList + ")");
        if (std::any_of(t.shape.begin(), t.shape.end(), [](int64_t d) { return d < 0; }))
            throw Error(where + ": negative dimension in shape " + shape_text(t.shape));
        uint64_t needed = 0;
        if (!byte_size(t.shape, element, &needed)) throw Error(where + ": shape " + shape_text(t.shape) + " is too large");
        if (needed != t.bytes)
            throw Error(where + ": has " + std::to_string(t.bytes) + " bytes but shape " + shape_text(t.shape) + " of " +
                        t.dtype + " needs " + std::to_string(needed));
        if (t.data == nullptr && t.bytes > 0) throw Error(where + ": data pointer is null");
        nlohmann::ordered_json entry = nlohmann::ordered_json::object();
        entry["dtype"] = t.dtype;
        entry["shape"] = t.shape;
        entry["data_offsets"] = nlohmann::ordered_json::array({offset, offset + t.bytes});
        header[t.name] = std::move(entry);
        offset += t.bytes;
        sums[t.name] = checksum_text(xxh64(t.data, t.bytes));
    }
    if (!tensors.empty()) meta[kChecksumsKey] = sums.dump();
    // ordered_json keeps insertion order: put __metadata__ first, as the reference writer does.
    nlohmann::ordered_json ordered = nlohmann::ordered_json::object();
    if (!meta.empty()) ordered["__metadata__"] = meta;
    for (auto it = header.begin(); it != header.end(); ++it) ordered[it.key()] = std::move(it.value());
    header = std::move(ordered);
    std::string text;
    try {
        text = header.dump();
    } catch (const nlohmann::json::exception&) {
        throw Error(path + ": tensor names and metadata must be valid UTF-8");
    }
    // Pad with spaces to a multiple of 8 so the byte buffer starts 8-aligned, as the reference does.
    text.append((8 - text.size() % 8) % 8, ' ');
    uint8_t prefix[8];
    for (int i = 0; i < 8; ++i) prefix[i] = static_cast<uint8_t>(static_cast<uint64_t>(text.size()) >> (8 * i));

    AtomicFile out(path);
    out.write(prefix, sizeof prefix);
    out.write(text.data(), text.size());
    for (const TensorView& t : tensors) out.write(t.data, t.bytes);
    out.commit();
}

namespace {

// The one safetensors parser; `path` is the name used in messages.
Safetensors parse_source(const std::string& path, Source& file) {
    if (file.size() < 8)
        throw Error(path + ": not a safetensors file (" + std::to_string(file.size()) +
                    " bytes, too short for the 8-byte header length)");
    uint8_t prefix[8];
    file.read_at(prefix, 8, 0);
    uint64_t header_bytes = 0;
    for (int i = 7; i >= 0; --i) header_bytes = header_bytes << 8 | prefix[i];
    if (header_bytes > kMaxHeaderBytes)
        throw Error(path + ": header length " + std::to_string(header_bytes) + " exceeds the " +
                    std::to_string(kMaxHeaderBytes) + "-byte limit (not a safetensors file?)");
    if (header_bytes > file.size() - 8)
        throw Error(path + ": header length " + std::to_string(header_bytes) + " runs past the end of the file (" +
                    std::to_string(file.size() - 8) + " bytes follow the length prefix)");
    std::string text(header_bytes, '\0');
    file.read_at(text.data(), text.size(), 8);
    json header = parse_header(path, text);

    const uint64_t data_start = 8 + header_bytes;
    const uint64_t buffer_bytes = file.size() - data_start;
    Safetensors result;
    std::vector<Range> ranges;
    for (const auto& [name, entry] : header.items()) {
        if (name == "__metadata__") {
            result.metadata = parse_metadata(path, entry);
            continue;
        }
        std::string where = path + ": tensor '" + name + "'";
        if (!entry.is_object()) throw Error(where + ": entry is not a JSON object");
        auto dtype_it = entry.find("dtype");
        if (dtype_it == entry.end() || !dtype_it->is_string()) throw Error(where + ": missing or non-string \"dtype\"");
        std::string dtype = dtype_it->get<std::string>();
        size_t element = safetensors_dtype_size(dtype);
        if (element == 0) throw Error(where + ": unsupported dtype '" + dtype + "' (expected one of " + kDtypeList + ")");

        std::vector<uint64_t> dims, offsets;
        auto shape_it = entry.find("shape");
        if (shape_it == entry.end() || !read_uints(*shape_it, &dims))
            throw Error(where + ": \"shape\" is missing or not an array of non-negative integers");
        auto offsets_it = entry.find("data_offsets");
        if (offsets_it == entry.end() || !read_uints(*offsets_it, &offsets) || offsets.size() != 2)
            throw Error(where + ": \"data_offsets\" is missing or not a pair of non-negative integers");

        LoadedTensor tensor;
        tensor.dtype = dtype;
        tensor.shape.assign(dims.begin(), dims.end());
        uint64_t begin = offsets[0], end = offsets[1], needed = 0;
        if (!byte_size(tensor.shape, element, &needed))
            throw Error(where + ": shape " + shape_text(tensor.shape) + " is too large");
        if (begin > end) throw Error(where + ": data_offsets " + range_text(begin, end) + " are reversed");
        if (end > buffer_bytes)
            throw Error(where + ": data_offsets " + range_text(begin, end) + " run past the end of the " +
                        std::to_string(buffer_bytes) + "-byte data buffer");
        if (end - begin != needed)
            throw Error(where + ": data_offsets " + range_text(begin, end) + " hold " + std::to_string(end - begin) +
                        " bytes but shape " + shape_text(tensor.shape) + " of " + dtype + " needs " + std::to_string(needed));
        result.tensors.emplace(name, std::move(tensor));
        ranges.push_back({begin, end, name});
    }

    // The spec requires the tensors to tile the buffer: no overlaps, no gaps, nothing left over.
    std::sort(ranges.begin(), ranges.end(),
              [](const Range& a, const Range& b) { return a.begin != b.begin ? a.begin < b.begin : a.end < b.end; });
    uint64_t covered = 0;
    for (size_t i = 0; i < ranges.size(); ++i) {
        const Range& r = ranges[i];
        if (r.begin < covered) {
            const Range& prev = ranges[i - 1];
            throw Error(path + ": tensors '" + prev.name + "' " + range_text(prev.begin, prev.end) + " and '" + r.name +
                        "' " + range_text(r.begin, r.end) + " overlap in the data buffer");
        }
        if (r.begin > covered)
            throw Error(path + ": gap in the data buffer: bytes " + range_text(covered, r.begin) + " before tensor '" +
                        r.name + "' belong to no tensor");
        covered = r.end;
    }
    if (covered != buffer_bytes)
        throw Error(path + ": the data buffer has " + std::to_string(buffer_bytes) + " bytes but the tensors cover only " +
                    std::to_string(covered) + " (trailing bytes after the last tensor)");

    for (const Range& r : ranges) {
        std::vector<uint8_t>& data = result.tensors[r.name].data;
        data.resize(r.end - r.begin);
        file.read_at(data.data(), data.size(), data_start + r.begin);
    }
    check_checksums(path, result);
    return result;
}

}  // namespace

Safetensors read_safetensors(const std::string& path) {
    InputFile file(path);
    return parse_source(path, file);
}

Safetensors parse_safetensors(const uint8_t* data, size_t size, const std::string& name) {
    BufferSource buffer(data, size);
    return parse_source(name, buffer);
}

}  // namespace xylem::io
