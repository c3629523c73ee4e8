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

/* SCATTER_ADD_ROWS: out[idx[i], :] += src[i, :] without float atomics. The positions are sorted by
 * (index, position), as keys index << 32 | position (a bad index, recorded in the error word, and
 * the padding to a power of two are ULONG_MAX, sorted last), so each row's sources lie together
 * in position order; then the work-group of each row's first key adds them in that order,
 * out + src[i0] + src[i1] + ..., the native plugin's order (the same bits). Cost: N*row_len adds
 * plus a bitonic sort, N/2 compare-exchanges in each of its log2(N)*(log2(N)+1)/2 steps. */
__kernel void scatter_keys(__global const int* idx, int idx_off, int n, int n_pad, int rows, __global ulong* keys,
                           __global int* err, int op) {
    FOR_EACH(i, n_pad) {
        ulong key = ULONG_MAX;
        if (i < n) {
            const int r = idx[idx_off + i];
            if (r < 0 || r >= rows) record_error(err, op, i, r, rows);
            else key = (ulong)r << 32 | (ulong)i;
        }
        keys[i] = key;
    }
}

/* Step (k, j) of the bitonic sort into ascending order: each pair (i, i ^ j) once, by its lower item. */
__kernel void bitonic_step(__global ulong* keys, int n_pad, int k, int j) {
    FOR_EACH(i, n_pad) {
        const int l = i ^ j;
        if (l > i) {
            const ulong a = keys[i], b = keys[l];
            if ((a > b) == ((i & k) == 0)) {
                keys[i] = b;
                keys[l] = a;
            }
        }
    }
}

/* Work-group e: if sorted key e is its row's first, its items take columns and add the row's
 * sources in position order. */
__kernel void scatter_sorted_add(__global const float* src, int src_off, __global const ulong* keys, int n,
                                 int row_len, __global float* out, int out_off) {
    const int e = (int)get_group_id(0);
    const ulong key = keys[e];
    const uint r = (uint)(key >> 32);
    if (key == ULONG_MAX || (e > 0 && (uint)(keys[e - 1] >> 32) == r)) return;
    for (int j = (int)get_local_id(0); j < row_len; j += (int)get_local_size(0)) {
        __global float* dst = out + out_off + (int)r * row_len + j;
        float acc = *dst;
        for (int f = e; f < n && (uint)(keys[f] >> 32) == r; ++f)
            acc += src[src_off + (int)(uint)keys[f] * row_len + j];
        *dst = acc;
    }
}
