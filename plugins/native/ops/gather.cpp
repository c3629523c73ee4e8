// GATHER_ROWS: picks rows of a device-resident dataset by index (the "shared variable" input path).
#include <cstring>

#include "native.h"

namespace xylem::native {

void op_gather_rows(const xylem_op_desc& desc, xylem_stream_s&) {
    OpArgs a(desc, 2, 2, 1);
    const auto g = plugin_kit::gather_rows_operands(a);
    const Tensor &src = g.src, &idx = g.idx, &out = g.out;
    if (overlap(out, src) || overlap(out, idx)) a.fail("out overlaps src or idx");
    const int64_t rows = g.rows, row_bytes = g.row_len * 4;
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
