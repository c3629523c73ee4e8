/* Fused optimizer updates, one pass over the parameter (PyTorch semantics, as the native plugin:
 * g = grad + wd*p; v = mom*v + keep*g; g = nesterov ? g + mom*v : v; p -= lr*g). */

__kernel void sgd_plain(__global float* p, int p_off, __global const float* g, int g_off, float lr, float wd, int n) {
    FOR_EACH(i, n) p[p_off + i] -= lr * (g[g_off + i] + wd * p[p_off + i]);
}

__kernel void sgd_momentum(__global float* p, int p_off, __global float* v, int v_off, __global const float* g,
                           int g_off, float lr, float wd, float mom, float keep, int nesterov, int n) {
    FOR_EACH(i, n) {
        const float gi = g[g_off + i] + wd * p[p_off + i];
        const float vi = mom * v[v_off + i] + keep * gi;
        v[v_off + i] = vi;
        p[p_off + i] -= lr * (nesterov ? gi + mom * vi : vi);
    }
}

/* p -= step * m / (sqrt(v) * inv_sqrt_bc2 + eps), step = lr / bc1: PyTorch's evaluation order. */
__kernel void adam(__global float* p, int p_off, __global float* m, int m_off, __global float* v, int v_off,
                   __global const float* g, int g_off, float b1, float b2, float wd, float eps, float step,
                   float inv_sqrt_bc2, int n) {
    FOR_EACH(i, n) {
        const float gi = g[g_off + i] + wd * p[p_off + i];
        const float mi = b1 * m[m_off + i] + (1.0f - b1) * gi;
        const float vi = b2 * v[v_off + i] + (1.0f - b2) * gi * gi;
        m[m_off + i] = mi;
        v[v_off + i] = vi;
        p[p_off + i] -= step * mi / (sqrt(vi) * inv_sqrt_bc2 + eps);
    }
}
