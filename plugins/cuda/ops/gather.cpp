// GATHER_ROWS: picks rows of a device-resident dataset by index. Indices are range-checked by the
// kernel (a bad row becomes NaN for f32, INT32_MIN for i32, and stream_sync reports it).
// SCATTER_ADD_ROWS: its gradient, deterministic (sorted by index, then each row added in position
// order: kernels/gather.cu); a bad index's row is skipped and stream_sync reports it.
#include "cuda_plugin.h"
#include "kernels/kernels.h"

namespace xylem::cuda {

void op_gather_rows(const xylem_op_desc& desc, xylem_stream_s& s, xylem_framework_s&) {
    OpArgs a(desc, 2, 2, 1);
    const auto g = plugin_kit::gather_rows_operands(a);
    const Tensor &src = g.src, &idx = g.idx, &out = g.out;
    if (overlap(out, src) || overlap(out, idx)) a.fail("out overlaps src or idx");
    // row_len comes from the trailing dims, so an empty src still flags every index.
    const int64_t rows = g.rows, row_words = g.row_len;
    const xylem_dtype dtype = g.dtype;
    const uint32_t poison = dtype == XYLEM_F32 ? 0x7fc00000u : 0x80000000u;  // quiet NaN / INT32_MIN
    kernels::gather_rows(static_cast<const uint32_t*>(src.data), idx.i32(), static_cast<uint32_t*>(out.data), idx.numel,
                         rows, row_words, poison, s.flag_word(desc.op), s.flag_bit(desc.op), s.stream_);
    a.check_launch();
}

void op_scatter_add_rows(const xylem_op_desc& desc, xylem_stream_s& s, xylem_framework_s&) {
    OpArgs a(desc, 2, 2, 1);
    const Tensor src = a.in(0, "src"), idx = a.in(1, "idx", XYLEM_I32), out = a.out(0, "out");
    const auto sh = plugin_kit::scatter_add_rows_shape(a, src, idx, out);
    if (overlap(out, src) || overlap(out, idx)) a.fail("out overlaps src or idx");
    if (!sh.n) return;
    if (sh.n > INT32_MAX) a.fail("%lld indices: this plugin sorts at most 2^31 - 1", static_cast<long long>(sh.n));
    auto* keys = s.scratch_.alloc<unsigned long long>(kernels::scatter_keys(sh.n));
    kernels::scatter_add_rows(src.f32(), idx.i32(), out.f32(), sh.n, sh.rows, sh.row_len, keys, s.flag_word(desc.op),
                              s.flag_bit(desc.op), s.stream_);
    a.check_launch();
}

}  // namespace xylem::cuda
