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

/* SCATTER_ADD_ROWS: out[idx[i], :] += src[i, :] without float atomics, over two scratch words per
 * row of out (owner, count) in three passes:
 *   scatter_rows_init   owner = INT_MAX, count = 0;
 *   scatter_rows_claim  one item per position: an index outside [0, rows) is recorded in the error
 *                       word (its row is skipped); else the position bids for its row with an
 *                       integer atomic_min (the first position wins whatever the order) and counts;
 *   scatter_rows_add    one work-group per position; only a row's first position goes on: its items
 *                       take columns and add the row's sources in position order,
 *                       out + src[i0] + src[i1] + ..., the native plugin's order (the same bits),
 *                       scanning idx forward until they met the row's count.
 * The work is N*row_len adds plus, per distinct index, a scan from its first to its last position:
 * linear for the usual embedding batch, N^2/2 index reads at worst (every index repeated far apart).
 * A kernel per destination row would scan all of idx for each of R rows; sorting needs far more code. */
__kernel void scatter_rows_init(__global int* words, int rows) {
    FOR_EACH(r, rows) {
        words[r] = INT_MAX;
        words[rows + r] = 0;
    }
}

__kernel void scatter_rows_claim(__global const int* idx, int idx_off, int n, int rows, __global int* words,
                                 __global int* err, int op) {
    FOR_EACH(i, n) {
        const int r = idx[idx_off + i];
        if (r < 0 || r >= rows) {
            record_error(err, op, i, r, rows);
        } else {
            atomic_min(words + r, i);
            atomic_inc(words + rows + r);
        }
    }
}

__kernel void scatter_rows_add(__global const float* src, int src_off, __global const int* idx, int idx_off,
                               int rows, int row_len, __global const int* words, __global float* out, int out_off) {
    const int i = (int)get_group_id(0), r = idx[idx_off + i];
    if (r < 0 || r >= rows || words[r] != i) return;
    const int repeats = words[rows + r];
    for (int j = (int)get_local_id(0); j < row_len; j += (int)get_local_size(0)) {
        __global float* dst = out + out_off + r * row_len + j;
        float acc = *dst + src[src_off + i * row_len + j];
        for (int k = i + 1, found = 1; found < repeats; ++k)
            if (idx[idx_off + k] == r) {
                acc += src[src_off + k * row_len + j];
                ++found;
            }
        *dst = acc;
    }
}
