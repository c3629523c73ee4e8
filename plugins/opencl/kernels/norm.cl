/* BATCHNORM over axis 1 of [N, C, inner]: per-channel statistics by one work-group per channel
 * (two passes: the sum of squared deviations does not cancel like E[x^2] - E[x]^2), then one
 * elementwise pass. PyTorch semantics: biased variance to normalise, unbiased in running_var. */

#define AT(n, ch, j) (((n) * C + (ch)) * inner + (j))

__kernel void bn_stats(__global const float* x, int x_off, int N, int C, int inner, float eps, float momentum,
                       __global float* rm, int rm_off, __global float* rv, int rv_off, __global float* smean,
                       int sm_off, __global float* sinvstd, int si_off) {
    __local float buf[256];
    const int ch = (int)get_group_id(0), lid = (int)get_local_id(0), group = (int)get_local_size(0);
    const int count = N * inner;
    float acc = 0.0f;
    for (int t = lid; t < count; t += group) acc += x[x_off + AT(t / inner, ch, t % inner)];
    const float mean = group_sum(buf, acc) / (float)count;
    acc = 0.0f;
    for (int t = lid; t < count; t += group) {
        const float d = x[x_off + AT(t / inner, ch, t % inner)] - mean;
        acc += d * d;
    }
    const float var = group_sum(buf, acc) / (float)count;
    if (lid == 0) {
        smean[sm_off + ch] = mean;
        sinvstd[si_off + ch] = 1.0f / sqrt(var + eps);
        rm[rm_off + ch] = (1.0f - momentum) * rm[rm_off + ch] + momentum * mean;
        rv[rv_off + ch] = (1.0f - momentum) * rv[rv_off + ch] + momentum * var * ((float)count / (float)(count - 1));
    }
}

/* y = (x - mean) * gamma * invstd + beta; eval mode passes the running statistics with
 * use_var = 1 (invstd computed from the variance here). */
__kernel void bn_normalize(__global const float* x, int x_off, int N, int C, int inner, __global const float* mean,
                           int mean_off, __global const float* stat, int stat_off, int use_var, float eps,
                           __global const float* gamma, int g_off, __global const float* beta, int b_off,
                           __global float* y, int y_off, int relu) {
    FOR_EACH(t, N * C * inner) {
        const int ch = (t / inner) % C;
        const float invstd = use_var ? 1.0f / sqrt(stat[stat_off + ch] + eps) : stat[stat_off + ch];
        const float v = (x[x_off + t] - mean[mean_off + ch]) * (gamma[g_off + ch] * invstd) + beta[b_off + ch];
        y[y_off + t] = relu ? (v > 0.0f ? v : 0.0f) : v; /* ABI 1.11: the ReLU after the batch norm */
    }
}

/* The gradient the batch norm sees: dY, or with the ReLU (has_y: its output y) dY where y > 0. */
#define BN_GRAD(i) (has_y && !(y[y_off + (i)] > 0.0f) ? 0.0f : dy[dy_off + (i)])

/* dbeta = sum g; dgamma = sum g*(x - mean)*invstd (one work-group per channel; g: BN_GRAD). */
__kernel void bn_grad_sums(__global const float* dy, int dy_off, __global const float* y, int y_off, int has_y,
                           __global const float* x, int x_off, int N, int C, int inner, __global const float* mean,
                           int mean_off, __global const float* invstd, int is_off, __global float* dgamma, int dg_off,
                           __global float* dbeta, int db_off) {
    __local float buf[256];
    const int ch = (int)get_group_id(0), lid = (int)get_local_id(0), group = (int)get_local_size(0);
    const int count = N * inner;
    const float m = mean[mean_off + ch];
    float s_dy = 0.0f, s_dyxc = 0.0f;
    for (int t = lid; t < count; t += group) {
        const int i = AT(t / inner, ch, t % inner);
        const float g = BN_GRAD(i);
        s_dy += g;
        s_dyxc += g * (x[x_off + i] - m);
    }
    const float db = group_sum(buf, s_dy);
    const float dg = group_sum(buf, s_dyxc) * invstd[is_off + ch];
    if (lid == 0) {
        dgamma[dg_off + ch] = dg;
        dbeta[db_off + ch] = db;
    }
}

/* dX = gamma*invstd * (g - dbeta/count - (x - mean)*invstd*dgamma/count), g: BN_GRAD. */
__kernel void bn_backward(__global const float* dy, int dy_off, __global const float* y, int y_off, int has_y,
                          __global const float* x, int x_off, int N, int C, int inner, __global const float* gamma,
                          int g_off, __global const float* mean, int mean_off, __global const float* invstd, int is_off,
                          __global const float* dgamma, int dg_off, __global const float* dbeta, int db_off,
                          __global float* dx, int dx_off) {
    const float per = 1.0f / (float)(N * inner);
    FOR_EACH(t, N * C * inner) {
        const int ch = (t / inner) % C;
        const float is = invstd[is_off + ch], g = gamma[g_off + ch] * is;
        const float xc = x[x_off + t] - mean[mean_off + ch];
        dx[dx_off + t] = g * BN_GRAD(t) - g * is * dgamma[dg_off + ch] * per * xc - g * dbeta[db_off + ch] * per;
    }
}
