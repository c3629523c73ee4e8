// NumPy .npy files of float32, the tensors `xylem run` reads and writes: a minimal, strict
// reader (format 1.0-3.0, '<f4', or '<i4' / '<i8' token ids; C order, nothing after the data) and
// a writer (format 1.0, float32).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "xylem/shape.h"

namespace xylem::npy {

struct Array {
    Shape shape;
    std::vector<float> values;    // a float32 array's
    bool integer = false;         // an '<i4' or '<i8' array: its values in `tokens`
    std::vector<int32_t> tokens;  // each in int32's range (token ids; an int64 outside it is an error)
};

// An Error naming the file for anything but a whole little-endian float32, int32 or int64
// C-order array.
Array read(const std::string& path);
Array parse(const std::string& bytes, const std::string& source);
// Written atomically (a temporary file renamed over the path).
void write(const std::string& path, const Shape& shape, const float* values);

}  // namespace xylem::npy
