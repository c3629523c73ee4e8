// The .npy reader and writer (npy.h).
#include "xylem/onnx/npy.h"

#include <cctype>
#include <cstdint>
#include <cstring>

#include "xylem/error.h"
#include "xylem/io/atomic_file.h"
#include "xylem/io/input_file.h"

namespace xylem::npy {
namespace {

const char kMagic[] = "\x93NUMPY";

// The value of `key` in the header's dict, as written: up to the next top-level ',' or '}'.
std::string dict_value(const std::string& h, const std::string& key, const std::string& source) {
    const std::string quoted[] = {"'" + key + "'", "\"" + key + "\""};
    size_t at = std::string::npos;
    for (const auto& q : quoted)
        if ((at = h.find(q)) != std::string::npos) {
            at += q.size();
            break;
        }
    if (at == std::string::npos) throw Error(source + ": .npy header has no '" + key + "'");
    while (at < h.size() && std::isspace(static_cast<unsigned char>(h[at]))) ++at;
    if (at >= h.size() || h[at] != ':') throw Error(source + ": .npy header is malformed at '" + key + "'");
    ++at;
    int depth = 0;
    size_t end = at;
    for (; end < h.size(); ++end) {
        if (h[end] == '(')
            ++depth;
        else if (h[end] == ')')
            --depth;
        else if ((h[end] == ',' || h[end] == '}') && depth == 0)
            break;
    }
    std::string v = h.substr(at, end - at);
    while (!v.empty() && std::isspace(static_cast<unsigned char>(v.front()))) v.erase(v.begin());
    while (!v.empty() && std::isspace(static_cast<unsigned char>(v.back()))) v.pop_back();
    return v;
}

}  // namespace

Array parse(const std::string& b, const std::string& source) {
    if (b.size() < 10 || b.compare(0, 6, kMagic, 6) != 0)
        throw Error(source + ": not a .npy file (no \\x93NUMPY magic)");
    const int major = static_cast<unsigned char>(b[6]);
    size_t header_len = 0, start = 0;
    if (major == 1) {
        header_len = static_cast<unsigned char>(b[8]) | static_cast<size_t>(static_cast<unsigned char>(b[9])) << 8;
        start = 10;
    } else if (major == 2 || major == 3) {
        if (b.size() < 12) throw Error(source + ": .npy header is truncated");
        for (int k = 0; k < 4; ++k) header_len |= static_cast<size_t>(static_cast<unsigned char>(b[8 + k])) << (8 * k);
        start = 12;
    } else {
        throw Error(source + ": .npy format version " + std::to_string(major) + " is not supported (1 to 3 are)");
    }
    if (header_len > b.size() - start) throw Error(source + ": .npy header is truncated");
    const std::string h = b.substr(start, header_len);
    const std::string descr = dict_value(h, "descr", source);
    std::string type = descr.size() == 5 ? descr.substr(1, 3) : "";
    // The type first: an empty descr ("'descr': ,") has no front() to compare.
    if ((type != "<f4" && type != "<i4" && type != "<i8") || (descr.front() != '\'' && descr.front() != '"') ||
        descr.back() != descr.front())
        throw Error(source + ": .npy dtype " + (descr.empty() ? std::string("(empty)") : descr) +
                    " is not supported: xylem reads little-endian float32 ('<f4'), or "
                    "int32/int64 token ids ('<i4', '<i8'); convert with a.astype(numpy.float32)");
    const size_t width = type == "<i8" ? 8 : 4;
    if (dict_value(h, "fortran_order", source) != "False")
        throw Error(source + ": .npy array is in Fortran order; save a C-order array (numpy.ascontiguousarray)");
    std::string s = dict_value(h, "shape", source);
    if (s.size() < 2 || s.front() != '(' || s.back() != ')')
        throw Error(source + ": .npy shape " + s + " is malformed");
    s = s.substr(1, s.size() - 2);
    Array a;
    int64_t count = 1;
    size_t at = 0;
    while (at < s.size()) {
        while (at < s.size() && (std::isspace(static_cast<unsigned char>(s[at])) || s[at] == ',')) ++at;
        if (at >= s.size()) break;
        size_t end = at;
        while (end < s.size() && std::isdigit(static_cast<unsigned char>(s[end]))) ++end;
        if (end == at || end - at > 12) throw Error(source + ": .npy shape (" + s + ") is malformed");
        const int64_t d = std::stoll(s.substr(at, end - at));
        if (d > 2147483647 || __builtin_mul_overflow(count, d, &count) || count > 2147483647)
            throw Error(source + ": .npy shape (" + s + ") holds more than 2^31 - 1 values");
        a.shape.push_back(d);
        at = end;
    }
    const size_t data = start + header_len, bytes = static_cast<size_t>(count) * width;
    if (b.size() - data != bytes)
        throw Error(source + ": .npy data is " + std::to_string(b.size() - data) + " bytes, its shape " +
                    to_string(a.shape) + " needs " + std::to_string(bytes) +
                    (b.size() - data < bytes ? " (truncated)" : ""));
    if (type == "<f4") {
        a.values.resize(static_cast<size_t>(count));
        if (bytes) std::memcpy(a.values.data(), b.data() + data, bytes);
        return a;
    }
    a.integer = true;
    a.tokens.resize(static_cast<size_t>(count));
    for (size_t i = 0; i < a.tokens.size(); ++i) {
        int64_t v = 0;
        if (width == 8)
            std::memcpy(&v, b.data() + data + 8 * i, 8);
        else {
            int32_t w = 0;
            std::memcpy(&w, b.data() + data + 4 * i, 4);
            v = w;
        }
        if (v < INT32_MIN || v > INT32_MAX)
            throw Error(source + ": .npy value " + std::to_string(v) + " at " + std::to_string(i) +
                        " is outside int32's range");
        a.tokens[i] = static_cast<int32_t>(v);
    }
    return a;
}

Array read(const std::string& path) {
    return parse(io::read_regular_file(path, "arrays (.npy)"), path);
}

void write(const std::string& path, const Shape& shape, const float* values) {
    std::string dims;
    for (size_t k = 0; k < shape.size(); ++k)
        dims += std::to_string(shape[k]) + (shape.size() == 1 || k + 1 < shape.size() ? "," : "");
    std::string h = "{'descr': '<f4', 'fortran_order': False, 'shape': (" + dims + "), }";
    while ((10 + h.size() + 1) % 64) h += ' ';
    h += '\n';
    std::string head(kMagic, 6);
    head += '\x01';
    head += '\x00';
    head += static_cast<char>(h.size() & 0xff);
    head += static_cast<char>(h.size() >> 8);
    head += h;
    io::AtomicFile f(path);
    f.write(head.data(), head.size());
    f.write(values, static_cast<size_t>(numel(shape)) * sizeof(float));
    f.commit();
}

}  // namespace xylem::npy
