// GATHER_ROWS: picks rows of a device-resident dataset by index (the "shared variable" input path).
#include <cstring>

#include "native.h"

namespace xylem::native {

void op_gather_rows(const xylem_op_desc& desc, xylem_stream_s&) {
    OpArgs a(desc, 2, 2, 1);
    if (desc.inputs[0].dtype != desc.outputs[0].dtype) a.fail("src and out must have the same dtype");
    const auto dtype = static_cast<xylem_dtype>(desc.inputs[0].dtype);
    if (dtype != XYLEM_F32 && dtype != XYLEM_I32) a.fail("src must be f32 or i32");
    const Tensor src = a.in(0, "src", dtype), idx = a.in(1, "idx", XYLEM_I32), out = a.out(0, "out", dtype);
    if (src.ndim < 1 || out.ndim != src.ndim) a.fail("src and out need the same rank >= 1, got %u and %u", src.ndim, out.ndim);
    if (idx.ndim != 1 || out.dims[0] != idx.numel)
        a.fail("out has %lld rows for %lld indices", static_cast<long long>(out.dims[0]), static_cast<long long>(idx.numel));
    for (uint32_t d = 1; d < src.ndim; ++d)
        if (out.dims[d] != src.dims[d]) a.fail("out's dim %u is %lld but src's is %lld", d,
                                               static_cast<long long>(out.dims[d]), static_cast<long long>(src.dims[d]));
    if (overlap(out, src) || overlap(out, idx)) a.fail("out overlaps src or idx");
    const int64_t rows = src.dims[0], row_bytes = (rows ? src.numel / rows : 0) * 4;
    const int32_t* ix = idx.i32();
    for (int64_t i = 0; i < idx.numel; ++i)
        if (ix[i] < 0 || ix[i] >= rows)
            a.fail("index %d at position %lld is out of range [0, %lld)", ix[i], static_cast<long long>(i),
                   static_cast<long long>(rows));
    const char* s = static_cast<const char*>(src.data);
    char* o = static_cast<char*>(out.data);
    for (int64_t i = 0; i < idx.numel; ++i) std::memcpy(o + i * row_bytes, s + ix[i] * row_bytes, row_bytes);
}

}  // namespace xylem::native
