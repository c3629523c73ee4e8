// GATHER_ROWS (kernels/gather.cl): rows of a device-resident dataset by index; indices are
// range-checked on the device (see stream.cpp's error word).
#include "opencl.h"

namespace xylem::opencl {

void op_gather_rows(const xylem_op_desc& desc, xylem_stream_s& s) {
    OpArgs a(desc, 2, 2, 1);
    if (desc.inputs[0].dtype != desc.outputs[0].dtype) a.fail("src and out must have the same dtype");
    const auto dtype = static_cast<xylem_dtype>(desc.inputs[0].dtype);
    if (dtype != XYLEM_F32 && dtype != XYLEM_I32) a.fail("src must be f32 or i32");
    const Tensor src = a.in(0, "src", dtype), idx = a.in(1, "idx", XYLEM_I32), out = a.out(0, "out", dtype);
    if (src.ndim < 1 || out.ndim != src.ndim)
        a.fail("src and out need the same rank >= 1, got %u and %u", src.ndim, out.ndim);
    if (idx.ndim != 1 || out.dims[0] != idx.numel)
        a.fail("out has %lld rows for %d indices", static_cast<long long>(out.dims[0]), idx.numel);
    for (uint32_t d = 1; d < src.ndim; ++d)
        if (out.dims[d] != src.dims[d])
            a.fail("out's dim %u is %lld but src's is %lld", d, static_cast<long long>(out.dims[d]),
                   static_cast<long long>(src.dims[d]));
    if (overlap(out, src) || overlap(out, idx)) a.fail("out overlaps src or idx");
    const int32_t rows = static_cast<int32_t>(src.dims[0]), row_len = rows ? src.numel / rows : 0;
    const cl_int op = XYLEM_OP_GATHER_ROWS;
    Kernel(s, Family::Gather, "gather_rows").arg(src.mem).arg(src.off).arg(rows).arg(row_len).arg(idx.mem).arg(idx.off)
        .arg(idx.numel).arg(out.mem).arg(out.off).arg(s.error_word_).arg(op).run(out.numel);
}

}  // namespace xylem::opencl
