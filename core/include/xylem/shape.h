// Shapes and element types of tensors, with the helpers every shape check uses.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "xylem/plugin_api.h"

namespace xylem {

using Shape = std::vector<int64_t>;

enum class DType : uint32_t { F32 = XYLEM_F32, I32 = XYLEM_I32 };

inline size_t dtype_size(DType) { return 4; }  // both supported dtypes are 4 bytes
const char* dtype_name(DType t);

int64_t numel(const Shape& s);
std::string to_string(const Shape& s);  // "[64, 784]"

}  // namespace xylem
