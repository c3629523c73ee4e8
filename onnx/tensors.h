// The importer's host tensors: an ONNX TensorProto (an initializer, a Constant's value) decoded
// and checked. Internal to xylem_onnx.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "onnx/onnx_pb.h"  // defines ONNX_API, then includes onnx-ml.pb.h (ONNX_ML)

namespace xylem::onnx_import {

// A constant: float or integer values (int32/int64/bool read as integers), row-major.
struct HostTensor {
    std::vector<int64_t> dims;
    bool is_float = true;
    std::vector<float> f;
    std::vector<int64_t> i;
    int64_t numel() const {
        int64_t n = 1;
        for (int64_t d : dims) n *= d;
        return n;
    }
};

// The largest extent of one axis and the most elements of one tensor the importer accepts
// (2^31 - 1 each): a dim beyond it is a corrupt or hostile file, not a model.
inline constexpr int64_t kMaxDim = 2147483647, kMaxElements = 2147483647;

// Decodes `t`, checking its type, dims (each in [0, kMaxDim], their product in range) and that
// its data holds exactly that many values. External data is read from `dir` only: the location
// must be a relative path that stays inside it, naming a regular file that holds offset + length
// bytes. `what` names the tensor in errors ("initializer 'fc.weight'").
HostTensor decode_tensor(const onnx::TensorProto& t, const std::string& dir, const std::string& what);

}  // namespace xylem::onnx_import
