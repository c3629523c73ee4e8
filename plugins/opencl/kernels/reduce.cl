/* Reductions whose result stays on the device: BIAS_GRAD (sum over N and the spatial axes, one
 * work-group per channel: the Flux #558 fix) and ACCURACY. */

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
