// Plugin kit: PointerTensor, a validated operand of a plugin whose buffers have an address (host
// memory, or a CUDA device pointer): the element address plus the shape. Use it as the traits'
// Tensor type for OpArgs (op_args.h) and build it in the traits' tensor():
//
//   static PointerTensor tensor(const xylem_tensor_arg& a, uint64_t numel) {
//       return PointerTensor::at(address_of(a.buffer), a, numel);
//   }
#pragma once

#include <cstdint>

#include "xylem/plugin_api.h"

namespace xylem::plugin_kit {

struct PointerTensor {
    void* data;  // first element (the buffer's address plus the operand's offset)
    int64_t numel;
    uint32_t ndim;
    const int64_t* dims;

    // The operand `a` of a buffer whose data starts at `base` (both dtypes are 4 bytes).
    static PointerTensor at(void* base, const xylem_tensor_arg& a, uint64_t numel) {
        return PointerTensor{static_cast<char*>(base) + a.offset * 4, static_cast<int64_t>(numel), a.ndim, a.dims};
    }

    float* f32() const { return static_cast<float*>(data); }
    int32_t* i32() const { return static_cast<int32_t*>(data); }
    int64_t cols() const { return ndim ? dims[ndim - 1] : 1; }  // size of the last axis
    int64_t rows() const {                                        // product of the other axes
        int64_t r = 1;
        for (uint32_t d = 0; d + 1 < ndim; ++d) r *= dims[d];
        return r;
    }
};

// True when the two operands share any byte (device addresses compare like host ones).
inline bool overlap(const PointerTensor& a, const PointerTensor& b) {
    const char *a0 = static_cast<const char*>(a.data), *b0 = static_cast<const char*>(b.data);
    return a.numel && b.numel && a0 < b0 + b.numel * 4 && b0 < a0 + a.numel * 4;
}

}  // namespace xylem::plugin_kit
