// NumPy .npy files of float32, the tensors `xylem run` reads and writes: a minimal, strict
// reader (format 1.0-3.0, '<f4', C order, nothing after the data) and a writer (format 1.0).
#pragma once

#include <string>
#include <vector>

#include "xylem/shape.h"

namespace xylem::npy {

struct Array {
    Shape shape;
    std::vector<float> values;
};

// An Error naming the file for anything but a whole little-endian float32 C-order array.
Array read(const std::string& path);
Array parse(const std::string& bytes, const std::string& source);
// Written atomically (a temporary file renamed over the path).
void write(const std::string& path, const Shape& shape, const float* values);

}  // namespace xylem::npy
