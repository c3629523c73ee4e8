// TensorProto -> HostTensor, strictly: a tensor is whole or it is an Error naming it.
#include "tensors.h"

#include <cstring>
#include <filesystem>
#include <fstream>

#include "xylem/error.h"

namespace xylem::onnx_import {
namespace {
namespace fs = std::filesystem;

const char* type_name(int t) {
    switch (t) {
    case onnx::TensorProto::FLOAT: return "float";
    case onnx::TensorProto::UINT8: return "uint8";
    case onnx::TensorProto::INT8: return "int8";
    case onnx::TensorProto::UINT16: return "uint16";
    case onnx::TensorProto::INT16: return "int16";
    case onnx::TensorProto::INT32: return "int32";
    case onnx::TensorProto::INT64: return "int64";
    case onnx::TensorProto::STRING: return "string";
    case onnx::TensorProto::BOOL: return "bool";
    case onnx::TensorProto::FLOAT16: return "float16";
    case onnx::TensorProto::DOUBLE: return "double";
    case onnx::TensorProto::BFLOAT16: return "bfloat16";
    default: return "an unknown type";
    }
}

size_t element_bytes(int t) {
    switch (t) {
    case onnx::TensorProto::FLOAT:
    case onnx::TensorProto::INT32: return 4;
    case onnx::TensorProto::INT64: return 8;
    case onnx::TensorProto::BOOL: return 1;
    default: return 0;
    }
}

// The external data of `t`: its bytes, read from inside `dir` only.
std::string external_bytes(const onnx::TensorProto& t, const std::string& dir, const std::string& what) {
    std::string location;
    int64_t offset = 0, length = -1;
    for (const auto& kv : t.external_data()) {
        auto number = [&](const std::string& v) {
            size_t used = 0;
            long long n = -1;
            try {
                n = std::stoll(v, &used);
            } catch (const std::exception&) {
                used = 0;
            }
            if (used != v.size() || n < 0) throw Error(what + ": external data " + kv.key() + " '" + v + "' is not a byte count");
            return static_cast<int64_t>(n);
        };
        if (kv.key() == "location") location = kv.value();
        else if (kv.key() == "offset") offset = number(kv.value());
        else if (kv.key() == "length") length = number(kv.value());
    }
    if (location.empty()) throw Error(what + ": its data is external but names no location");
    if (dir.empty()) throw Error(what + ": its data is in an external file '" + location + "', and this model has no folder to read it from");
    const fs::path rel(location);
    if (rel.is_absolute() || rel.has_root_name() || rel.has_root_directory())
        throw Error(what + ": external data location '" + location + "' is an absolute path; it must lie inside the model's folder");
    for (const auto& part : rel)
        if (part == "..") throw Error(what + ": external data location '" + location + "' leaves the model's folder");
    std::error_code ec;
    const fs::path base = fs::canonical(dir, ec);
    if (ec) throw Error(what + ": cannot resolve the model's folder " + dir + ": " + ec.message());
    const fs::path file = fs::weakly_canonical(base / rel, ec);
    if (ec) throw Error(what + ": cannot resolve external data '" + location + "': " + ec.message());
    const std::string b = base.string() + "/", f = file.string();
    if (f.compare(0, b.size(), b) != 0)
        throw Error(what + ": external data location '" + location + "' resolves to " + f + ", outside the model's folder " + base.string());
    if (!fs::is_regular_file(file, ec)) throw Error(what + ": external data file " + f + " is missing or not a regular file");
    const uintmax_t size = fs::file_size(file, ec);
    if (ec) throw Error(what + ": cannot read the size of " + f + ": " + ec.message());
    if (static_cast<uintmax_t>(offset) > size) throw Error(what + ": external data offset " + std::to_string(offset) + " is past the end of " + f);
    if (length < 0) length = static_cast<int64_t>(size) - offset;
    if (static_cast<uintmax_t>(offset) + static_cast<uintmax_t>(length) > size)
        throw Error(what + ": external data of " + std::to_string(length) + " bytes at offset " + std::to_string(offset) +
                    " runs past the end of " + f + " (" + std::to_string(size) + " bytes): truncated");
    std::ifstream in(file, std::ios::binary);
    std::string bytes(static_cast<size_t>(length), '\0');
    in.seekg(offset);
    in.read(bytes.data(), length);
    if (!in) throw Error(what + ": cannot read " + std::to_string(length) + " bytes of " + f);
    return bytes;
}

}  // namespace

HostTensor decode_tensor(const onnx::TensorProto& t, const std::string& dir, const std::string& what) {
    HostTensor h;
    int64_t n = 1;
    for (int64_t d : t.dims()) {
        if (d < 0 || d > kMaxDim) throw Error(what + ": dim " + std::to_string(d) + " is out of range [0, 2^31 - 1]");
        if (__builtin_mul_overflow(n, d, &n) || n > kMaxElements)
            throw Error(what + ": its dims describe more than 2^31 - 1 elements");
        h.dims.push_back(d);
    }
    const int type = t.data_type();
    const size_t esize = element_bytes(type);
    if (!esize)
        throw Error(what + ": data type " + type_name(type) + " (" + std::to_string(type) +
                    ") is not supported (float, int32, int64 and bool are)");
    if (t.has_segment()) throw Error(what + ": segmented tensors are not supported");
    h.is_float = type == onnx::TensorProto::FLOAT;
    const size_t count = static_cast<size_t>(n);
    std::string raw;
    const bool external = t.data_location() == onnx::TensorProto::EXTERNAL;
    if (external) raw = external_bytes(t, dir, what);
    if (external || t.has_raw_data()) {
        const std::string& bytes = external ? raw : t.raw_data();
        if (bytes.size() != count * esize)
            throw Error(what + ": holds " + std::to_string(bytes.size()) + " bytes of data, its dims and type need " +
                        std::to_string(count * esize) + " (a truncated or corrupt file?)");
        if (h.is_float) {
            h.f.resize(count);
            if (count) std::memcpy(h.f.data(), bytes.data(), count * 4);  // ONNX raw data is little-endian, as x86 and ARM
        } else {
            h.i.resize(count);
            for (size_t k = 0; k < count; ++k) {
                const char* p = bytes.data() + k * esize;
                if (esize == 8) {
                    int64_t v;
                    std::memcpy(&v, p, 8);
                    h.i[k] = v;
                } else if (esize == 4) {
                    int32_t v;
                    std::memcpy(&v, p, 4);
                    h.i[k] = v;
                } else {
                    h.i[k] = static_cast<unsigned char>(*p) != 0;
                }
            }
        }
        return h;
    }
    auto need = [&](size_t have) {
        if (have != count)
            throw Error(what + ": holds " + std::to_string(have) + " values, its dims say " + std::to_string(count) +
                        " (a truncated or corrupt file?)");
    };
    if (type == onnx::TensorProto::FLOAT) {
        need(static_cast<size_t>(t.float_data_size()));
        h.f.assign(t.float_data().begin(), t.float_data().end());
    } else if (type == onnx::TensorProto::INT64) {
        need(static_cast<size_t>(t.int64_data_size()));
        h.i.assign(t.int64_data().begin(), t.int64_data().end());
    } else {  // int32 and bool live in int32_data
        need(static_cast<size_t>(t.int32_data_size()));
        for (int32_t v : t.int32_data()) h.i.push_back(type == onnx::TensorProto::BOOL ? v != 0 : v);
    }
    return h;
}

}  // namespace xylem::onnx_import
