// Shared pieces of the xylem Python extension: how xylem's errors become Python exceptions, and
// the NumPy arrays the API takes and returns.
#pragma once

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>

#include <cstdint>
#include <string>
#include <vector>

#include "xylem/error.h"
#include "xylem/shape.h"

namespace xylem::python {

namespace nb = nanobind;

// Any C-contiguous array in host memory; the Python layer (xylem/_arrays.py) converts a user's
// array to float32 or int32 and to C order first, so the checks here only guard that contract.
using HostArray = nb::ndarray<nb::c_contig, nb::device::cpu>;
using NumpyF32 = nb::ndarray<nb::numpy, float>;

// xylem::Error is one type; what it means for a Python caller depends on what was being done.
// Config, arrays and shapes: ValueError (raised through this). Backends, devices, files, steps:
// RuntimeError (the module's translator turns any other xylem::Error into one).
template <class F> auto value_errors(F&& f) -> decltype(f()) {
    try {
        return f();
    } catch (const Error& e) {
        throw nb::value_error(e.what());
    }
}

Shape array_shape(const HostArray& a);
std::string shape_text(const Shape& s);
bool is_f32(const HostArray& a);
bool is_i32(const HostArray& a);
// A new NumPy float32 array of `shape` that owns `values`.
NumpyF32 numpy_f32(std::vector<float>&& values, const Shape& shape);

void bind_model(nb::module_& m);
void bind_tensor(nb::module_& m);

}  // namespace xylem::python
