/* Losses. Forward: one work-group sums the per-row losses and writes
 * loss = acc*loss + scale*sum (acc == 0 does not read the old value). Backward: one work-item
 * per row. A label outside [0, C) is recorded in the error word and its row is skipped. */

inline void store_loss(__global float* loss, int loss_off, float scale, float acc, float sum) {
    loss[loss_off] = acc == 0.0f ? scale * sum : acc * loss[loss_off] + scale * sum;
}

__kernel void xent_fwd(__global const float* x, int x_off, __global const int* labels, int l_off, int n, int c,
                       float scale, float acc, __global float* loss, int loss_off, __global int* err, int op) {
    __local float buf[256];
    float part = 0.0f;
    for (int i = (int)get_local_id(0); i < n; i += (int)get_local_size(0)) {
        const int label = labels[l_off + i];
        if (label < 0 || label >= c) {
            record_error(err, op, i, label, c);
            continue;
        }
        __global const float* row = x + x_off + i * c;
        float m = row[0];
        for (int j = 1; j < c; ++j) m = fmax(m, row[j]);
        float s = 0.0f;
        for (int j = 0; j < c; ++j) s += exp(row[j] - m);
        part += (m - row[label]) + log(s); /* the difference first: m + log(s) rounds at the size of m */
    }
    const float total = group_sum(buf, part);
    if (get_local_id(0) == 0) store_loss(loss, loss_off, scale, acc, total);
}

/* dx = scale*(softmax(x) - onehot(label)); dx may alias x. */
__kernel void xent_bwd(__global const float* x, int x_off, __global const int* labels, int l_off, int n, int c,
                       float scale, __global float* dx, int dx_off, __global int* err, int op) {
    FOR_EACH(i, n) {
        const int label = labels[l_off + i];
        __global const float* row = x + x_off + i * c;
        __global float* drow = dx + dx_off + i * c;
        if (label < 0 || label >= c) {
            record_error(err, op, i, label, c);
            continue;
        }
        float m = row[0];
        for (int j = 1; j < c; ++j) m = fmax(m, row[j]);
        float s = 0.0f;
        for (int j = 0; j < c; ++j) {
            const float e = exp(row[j] - m);
            drow[j] = e;
            s += e;
        }
        const float k = scale / s;
        for (int j = 0; j < c; ++j) drow[j] *= k;
        drow[label] -= scale;
    }
}

__kernel void nll_fwd(__global const float* logp, int p_off, __global const int* labels, int l_off, int n, int c,
                      float scale, float acc, __global float* loss, int loss_off, __global int* err, int op) {
    __local float buf[256];
    float part = 0.0f;
    for (int i = (int)get_local_id(0); i < n; i += (int)get_local_size(0)) {
        const int label = labels[l_off + i];
        if (label < 0 || label >= c) {
            record_error(err, op, i, label, c);
            continue;
        }
        part -= logp[p_off + i * c + label];
    }
    const float total = group_sum(buf, part);
    if (get_local_id(0) == 0) store_loss(loss, loss_off, scale, acc, total);
}

__kernel void nll_bwd(__global const int* labels, int l_off, int n, int c, float scale, __global float* dx, int dx_off,
                      __global int* err, int op) {
    FOR_EACH(i, n) {
        const int label = labels[l_off + i];
        __global float* drow = dx + dx_off + i * c;
        for (int j = 0; j < c; ++j) drow[j] = 0.0f;
        if (label < 0 || label >= c) record_error(err, op, i, label, c);
        else drow[label] = -scale;
    }
}

__kernel void mse_fwd(__global const float* p, int p_off, __global const float* t, int t_off, int n, float scale,
                      float acc, __global float* loss, int loss_off) {
    __local float buf[256];
    float part = 0.0f;
    for (int i = (int)get_local_id(0); i < n; i += (int)get_local_size(0)) {
        const float d = p[p_off + i] - t[t_off + i];
        part += d * d;
    }
    const float total = group_sum(buf, part);
    if (get_local_id(0) == 0) store_loss(loss, loss_off, scale, acc, total);
}

__kernel void mse_bwd(__global const float* p, int p_off, __global const float* t, int t_off, float k,
                      __global float* dp, int dp_off, int n) {
    FOR_EACH(i, n) dp[dp_off + i] = k * (p[p_off + i] - t[t_off + i]);
}
