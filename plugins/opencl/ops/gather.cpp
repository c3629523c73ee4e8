// GATHER_ROWS (kernels/gather.cl): rows of a device-resident dataset by index; indices are
// range-checked on the device (see stream.cpp's error word).
#include "opencl.h"

namespace xylem::opencl {

void op_gather_rows(const xylem_op_desc& desc, xylem_stream_s& s) {
    OpArgs a(desc, 2, 2, 1);
    const auto g = plugin_kit::gather_rows_operands(a);
    const Tensor &src = g.src, &idx = g.idx, &out = g.out;
    if (overlap(out, src) || overlap(out, idx)) a.fail("out overlaps src or idx");
    // out holds idx.numel * row_len elements, so row_len fits an int whenever there is work.
    const int32_t rows = static_cast<int32_t>(g.rows), row_len = rows ? static_cast<int32_t>(g.row_len) : 0;
    const cl_int op = XYLEM_OP_GATHER_ROWS;
    Kernel(s, Family::Gather, "gather_rows").arg(src.mem).arg(src.off).arg(rows).arg(row_len).arg(idx.mem).arg(idx.off)
        .arg(idx.numel).arg(out.mem).arg(out.off).arg(s.error_word_).arg(op).run(out.numel);
}

}  // namespace xylem::opencl
