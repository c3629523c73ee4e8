/* Reductions whose result stays on the device: BIAS_GRAD (sum over N and the spatial axes, one
 * work-group per channel: the Flux #558 fix), ACCURACY and REDUCE (sum, mean or max over an axis). */

/* db[c] = beta*db[c] + sum over n, j of dy[(n*C + c)*inner + j]. */
__kernel void bias_grad(__global const float* dy, int dy_off, int n, int c, int inner, float beta,
                        __global float* db, int db_off) {
    __local float buf[256];
    const int ch = (int)get_group_id(0);
    const int lid = (int)get_local_id(0), group = (int)get_local_size(0);
    float acc = 0.0f;
    const int per_channel = n * inner;
    for (int t = lid; t < per_channel; t += group) {
        const int img = t / inner, j = t - img * inner;
        acc += dy[dy_off + (img * c + ch) * inner + j];
    }
    const float total = group_sum(buf, acc);
    if (lid == 0) db[db_off + ch] = beta == 0.0f ? total : beta * db[db_off + ch] + total;
}

/* BIAS_GRAD of a [rows, cols] dy (inner == 1: linear layers), step 1: each fixed chunk of
 * chunk_rows rows summed per column, 16 columns per item, into part[chunk*cols + col]; step 2
 * adds the chunks in chunk order. The chunking depends on the shape only: the same bits every run,
 * and each column's sums are the same operations in whichever lane it falls. */
__kernel void colsum_partials(__global const float* x, int x_off, int rows, int cols, int chunk_rows, int n_chunks,
                              __global float* part) {
    const int blocks = (cols + 15) / 16;
    FOR_EACH(t, n_chunks * blocks) {
        const int c = t / blocks, col = (t - c * blocks) * 16, left = cols - col;
        const int r0 = c * chunk_rows, r1 = min(rows, r0 + chunk_rows);
        float16 acc = (float16)(0.0f);
        for (int r = r0; r < r1; ++r) acc += load16(x + x_off + r * cols + col, left);
        store16(acc, part + c * cols + col, left);
    }
}

/* out = beta*out + the chunks' sums (beta == 0: out is not read). */
__kernel void colsum_combine(__global const float* part, int n_chunks, int cols, float beta, __global float* out,
                             int out_off) {
    FOR_EACH16(col, cols) {
        const int left = cols - col;
        float16 acc = (float16)(0.0f);
        for (int c = 0; c < n_chunks; ++c) acc += load16(part + c * cols + col, left);
        if (beta != 0.0f) acc += beta * load16(out + out_off + col, left);
        store16(acc, out + out_off + col, left);
    }
}

/* correct[0] += rows whose first maximum sits at the label (one work-group). */
__kernel void accuracy(__global const float* x, int x_off, __global const int* labels, int l_off, int n, int c,
                       __global float* correct, int correct_off, __global int* err, int op) {
    __local float buf[256];
    float hits = 0.0f;
    for (int i = (int)get_local_id(0); i < n; i += (int)get_local_size(0)) {
        const int label = labels[l_off + i];
        if (label < 0 || label >= c) {
            record_error(err, op, i, label, c);
            continue;
        }
        __global const float* row = x + x_off + i * c;
        int best = 0;
        for (int j = 1; j < c; ++j)
            if (row[j] > row[best]) best = j;
        hits += best == label ? 1.0f : 0.0f;
    }
    const float total = group_sum(buf, hits);
    if (get_local_id(0) == 0) correct[correct_off] += total;
}

/* REDUCE: x viewed as [outer, n, inner]; output t = o*inner + j reduces x[(o*n + k)*inner + j]
 * over k < n (the kit's reduce_shape). Three kernels, chosen by the host from the shape alone, so
 * the same tensor always reduces in the same order (no atomics): reduce_each (one item per output,
 * for many outputs or short runs), reduce_groups (one work-group per output, or per slice of a long
 * run whose slices reduce_finish then combines in slice order). */
#define REDUCE_SUM 0
#define REDUCE_MEAN 1
#define REDUCE_MAX 2

/* max that propagates NaN (a NaN on either side wins), as torch.amax; fmax would drop it. */
inline float max_nan(float a, float b) { return a > b || isnan(a) ? a : b; }

/* The work-group's NaN-propagating max of v (local size: a power of two <= 256), to every item. */
inline float group_max_nan(__local float* buf, float v) {
    const int lid = (int)get_local_id(0);
    buf[lid] = v;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int s = (int)get_local_size(0) / 2; s > 0; s >>= 1) {
        if (lid < s) buf[lid] = max_nan(buf[lid], buf[lid + s]);
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    const float total = buf[0];
    barrier(CLK_LOCAL_MEM_FENCE);
    return total;
}

/* out[t] = beta*out[t] + v (a mean divides v by n first: 0/0 is NaN); out not read when beta == 0. */
inline void reduce_store(__global float* out, int t, int mode, int n, float beta, float v) {
    if (mode == REDUCE_MEAN) v /= (float)n;
    out[t] = beta == 0.0f ? v : beta * out[t] + v;
}

/* One item per output, its run in order; sums add blocks of 256 first (a bounded rounding error). */
__kernel void reduce_each(__global const float* x, int x_off, int n, int inner, int outputs, int mode,
                          __global float* out, int out_off, float beta) {
    FOR_EACH(t, outputs) {
        const int o = t / inner, j = t - o * inner;
        __global const float* p = x + x_off + o * n * inner + j;
        float v;
        if (mode == REDUCE_MAX) {
            v = -INFINITY;
            for (int k = 0; k < n; ++k) v = max_nan(v, p[k * inner]);
        } else {
            v = 0.0f;
            for (int k0 = 0; k0 < n; k0 += 256) {
                const int k1 = min(k0 + 256, n);
                float block = 0.0f;
                for (int k = k0; k < k1; ++k) block += p[k * inner];
                v += block;
            }
        }
        reduce_store(out, out_off + t, mode, n, beta, v);
    }
}

/* Work-group g reduces slice g % slices of output g / slices. With one slice it stores the output
 * (final != 0); else it writes its partial to dst[g] for reduce_finish. */
__kernel void reduce_groups(__global const float* x, int x_off, int n, int inner, int slices, int mode,
                            __global float* dst, int dst_off, float beta, int final) {
    __local float buf[256];
    const int g = (int)get_group_id(0), t = g / slices, slice = g - t * slices;
    const int o = t / inner, j = t - o * inner;
    const int lo = (int)((long)slice * n / slices), hi = (int)((long)(slice + 1) * n / slices);
    const int lid = (int)get_local_id(0), size = (int)get_local_size(0);
    __global const float* p = x + x_off + o * n * inner + j;
    float v;
    if (mode == REDUCE_MAX) {
        v = -INFINITY;
        for (int k = lo + lid; k < hi; k += size) v = max_nan(v, p[k * inner]);
        v = group_max_nan(buf, v);
    } else {
        v = 0.0f;
        for (int k = lo + lid; k < hi; k += size) v += p[k * inner];
        v = group_sum(buf, v);
    }
    if (lid != 0) return;
    if (final) reduce_store(dst, dst_off + t, mode, n, beta, v);
    else dst[g] = v;
}

/* Each output's slices combined in slice order. */
__kernel void reduce_finish(__global const float* partial, int slices, int n, int mode, int outputs,
                            __global float* out, int out_off, float beta) {
    FOR_EACH(t, outputs) {
        __global const float* p = partial + t * slices;
        float v = p[0];
        for (int s = 1; s < slices; ++s) v = mode == REDUCE_MAX ? max_nan(v, p[s]) : v + p[s];
        reduce_store(out, out_off + t, mode, n, beta, v);
    }
}
