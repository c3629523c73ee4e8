/* Gradient clipping (as the native plugin's ops/clip.cpp): CLAMP, SUM_SQUARES (two passes, no
 * atomics: per-group partials in scratch, then one group adds them in a fixed order) and
 * CLIP_BY_NORM (the factor is computed from the device scalar by every work-item). */

/* NaN stays NaN (both comparisons are false), as torch.clamp. */
__kernel void clamp_values(__global float* x, int off, float lo, float hi, int n) {
    FOR_EACH(i, n) {
        const float v = x[off + i];
        x[off + i] = v < lo ? lo : v > hi ? hi : v;
    }
}

__kernel void sum_squares_partial(__global const float* x, int off, int n, __global float* partial) {
    __local float buf[256];
    float acc = 0.0f;
    FOR_EACH(i, n) {
        const float v = x[off + i];
        acc += v * v;
    }
    const float total = group_sum(buf, acc);
    if (get_local_id(0) == 0) partial[get_group_id(0)] = total;
}

__kernel void sum_squares_finish(__global const float* partial, int groups, float beta, __global float* acc,
                                 int acc_off) {
    __local float buf[256];
    float part = 0.0f;
    for (int g = (int)get_local_id(0); g < groups; g += (int)get_local_size(0)) part += partial[g];
    const float total = group_sum(buf, part);
    if (get_local_id(0) == 0) acc[acc_off] = beta == 0.0f ? total : beta * acc[acc_off] + total;
}

/* x *= min(1, max_norm / (sqrt(sumsq) + eps)); a NaN norm gives NaN; a factor of 1 writes nothing. */
__kernel void clip_by_norm(__global const float* sumsq, int s_off, __global float* x, int off, float max_norm,
                           float eps, int n) {
    float coef = max_norm / (sqrt(sumsq[s_off]) + eps);
    coef = coef > 1.0f ? 1.0f : coef;
    if (coef == 1.0f) return;
    FOR_EACH(i, n) x[off + i] *= coef;
}
