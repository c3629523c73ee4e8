// GATHER_ROWS: picks rows of a device-resident dataset by index. Indices are range-checked by the
// kernel (a bad row becomes NaN for f32, INT32_MIN for i32, and stream_sync reports it).
#include "cuda_plugin.h"
#include "kernels/kernels.h"

namespace xylem::cuda {

namespace {
using ll = long long;
}

void op_gather_rows(const xylem_op_desc& desc, xylem_stream_s& s, xylem_framework_s&) {
    OpArgs a(desc, 2, 2, 1);
    if (desc.inputs[0].dtype != desc.outputs[0].dtype) a.fail("src and out must have the same dtype");
    const auto dtype = static_cast<xylem_dtype>(desc.inputs[0].dtype);
    if (dtype != XYLEM_F32 && dtype != XYLEM_I32) a.fail("src must be f32 or i32");
    const Tensor src = a.in(0, "src", dtype), idx = a.in(1, "idx", XYLEM_I32), out = a.out(0, "out", dtype);
    if (src.ndim < 1 || out.ndim != src.ndim) a.fail("src and out need the same rank >= 1, got %u and %u", src.ndim, out.ndim);
    if (idx.ndim != 1 || out.dims[0] != idx.numel)
        a.fail("out has %lld rows for %lld indices", ll(out.dims[0]), ll(idx.numel));
    for (uint32_t d = 1; d < src.ndim; ++d)
        if (out.dims[d] != src.dims[d]) a.fail("out's dim %u is %lld but src's is %lld", d, ll(out.dims[d]), ll(src.dims[d]));
    if (overlap(out, src) || overlap(out, idx)) a.fail("out overlaps src or idx");
    int64_t row_words = 1;  // from the trailing dims, so an empty src still flags every index
    for (uint32_t d = 1; d < src.ndim; ++d) row_words *= src.dims[d];
    const int64_t rows = src.dims[0];
    const uint32_t poison = dtype == XYLEM_F32 ? 0x7fc00000u : 0x80000000u;  // quiet NaN / INT32_MIN
    kernels::gather_rows(static_cast<const uint32_t*>(src.data), idx.i32(), static_cast<uint32_t*>(out.data), idx.numel,
                         rows, row_words, poison, s.flags(), 1u << desc.op, s.stream_);
    a.check_launch();
}

}  // namespace xylem::cuda
