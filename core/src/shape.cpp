// Shape helpers.
#include "xylem/shape.h"

namespace xylem {

const char* dtype_name(DType t) { return t == DType::F32 ? "float32" : "int32"; }

int64_t numel(const Shape& s) {
    int64_t n = 1;
    for (int64_t d : s) n *= d;
    return n;
}

std::string to_string(const Shape& s) {
    std::string out = "[";
    for (size_t i = 0; i < s.size(); ++i) {
        if (i) out += ", ";
        out += std::to_string(s[i]);
    }
    return out + "]";
}

}  // namespace xylem
