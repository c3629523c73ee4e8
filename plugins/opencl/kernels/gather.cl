/* GATHER_ROWS: out[i, :] = src[idx[i], :] on 4-byte words (f32 or i32). An index outside
 * [0, rows) is recorded in the error word and its row is zeroed. */
__kernel void gather_rows(__global const uint* src, int src_off, int rows, int row_len, __global const int* idx,
                          int idx_off, int n, __global uint* out, int out_off, __global int* err, int op) {
    FOR_EACH(t, n * row_len) {
        const int i = t / row_len, j = t - i * row_len;
        const int r = idx[idx_off + i];
        if (r < 0 || r >= rows) {
            if (j == 0) record_error(err, op, i, r, rows);
            out[out_off + t] = 0u;
        } else {
            out[out_off + t] = src[src_off + r * row_len + j];
        }
    }
}
