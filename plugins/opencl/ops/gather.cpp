// GATHER_ROWS (kernels/gather.cl): rows of a device-resident dataset by index, and
// SCATTER_ADD_ROWS, its gradient; indices are range-checked on the device (see stream.cpp's error
// word).
#include <algorithm>

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

// Deterministic without float atomics: the positions are sorted by (index, position) and each
// row's sources added in position order by one work-group (kernels/gather.cl). A bad index is
// reported by the next stream_sync; its source row is skipped.
void op_scatter_add_rows(const xylem_op_desc& desc, xylem_stream_s& s) {
    OpArgs a(desc, 2, 2, 1);
    const Tensor src = a.in(0, "src"), idx = a.in(1, "idx", XYLEM_I32), out = a.out(0, "out");
    const auto sh = plugin_kit::scatter_add_rows_shape(a, src, idx, out);
    if (overlap(out, src) || overlap(out, idx)) a.fail("out overlaps src or idx");
    const int32_t n = idx.numel, rows = static_cast<int32_t>(sh.rows);
    if (n == 0) return;
    if (n > (1 << 30)) a.fail("%d indices: this plugin sorts at most 2^30", n);
    // src holds n * row_len elements, so row_len fits an int whenever there is work.
    const int32_t row_len = static_cast<int32_t>(sh.row_len);
    cl_int n_pad = 1;
    while (n_pad < n) n_pad *= 2;
    cl_mem keys = stream_scratch(s, static_cast<size_t>(n_pad) * sizeof(cl_ulong));
    const cl_int op = XYLEM_OP_SCATTER_ADD_ROWS;
    Kernel(s, Family::Gather, "scatter_keys").arg(idx.mem).arg(idx.off).arg(n).arg(n_pad).arg(rows).arg(keys)
        .arg(s.error_word_).arg(op).run(n_pad);
    if (row_len == 0) return;  // indices checked, nothing to add
    for (cl_int k = 2; k <= n_pad; k *= 2)
        for (cl_int j = k / 2; j > 0; j /= 2)
            Kernel(s, Family::Gather, "bitonic_step").arg(keys).arg(n_pad).arg(k).arg(j).run(n_pad);
    size_t group = 1;  // enough items for the columns, at most the reduction group
    while (group < static_cast<size_t>(row_len) && group < reduce_group(s)) group *= 2;
    Kernel(s, Family::Gather, "scatter_sorted_add").arg(src.mem).arg(src.off).arg(keys).arg(n).arg(row_len)
        .arg(out.mem).arg(out.off).run_groups(n, group);
}

}  // namespace xylem::opencl
