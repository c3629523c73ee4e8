/* SOFTMAX_FWD / SOFTMAX_BWD over the last axis, one work-item per row (rows are short here:
 * classes). y may alias x: each element is read before it is written. */

__kernel void softmax_fwd(int log_softmax, __global const float* x, int x_off, __global float* y, int y_off, int rows,
                          int c) {
    FOR_EACH(r, rows) {
        __global const float* xr = x + x_off + r * c;
        __global float* yr = y + y_off + r * c;
        float m = xr[0];
        for (int j = 1; j < c; ++j) m = fmax(m, xr[j]);
        float sum = 0.0f;
        if (log_softmax) {
            for (int j = 0; j < c; ++j) sum += exp(xr[j] - m);
            /* (x - m) - log(sum): m + log(sum) would round at the size of m (4e-3 near 1e5). */
            const float lse = log(sum);
            for (int j = 0; j < c; ++j) yr[j] = (xr[j] - m) - lse;
        } else {
            for (int j = 0; j < c; ++j) {
                const float e = exp(xr[j] - m);
                yr[j] = e;
                sum += e;
            }
            const float inv = 1.0f / sum;
            for (int j = 0; j < c; ++j) yr[j] *= inv;
        }
    }
}

/* softmax: dx = y*(dy - sum(dy*y)); log_softmax: dx = dy - exp(y)*sum(dy). */
__kernel void softmax_bwd(int log_softmax, __global const float* dy, int dy_off, __global const float* y, int y_off,
                          __global float* dx, int dx_off, int rows, int c) {
    FOR_EACH(r, rows) {
        __global const float* dyr = dy + dy_off + r * c;
        __global const float* yr = y + y_off + r * c;
        __global float* dxr = dx + dx_off + r * c;
        float s = 0.0f;
        if (log_softmax) {
            for (int j = 0; j < c; ++j) s += dyr[j];
            for (int j = 0; j < c; ++j) dxr[j] = dyr[j] - exp(yr[j]) * s;
        } else {
            for (int j = 0; j < c; ++j) s += dyr[j] * yr[j];
            for (int j = 0; j < c; ++j) dxr[j] = yr[j] * (dyr[j] - s);
        }
    }
}
