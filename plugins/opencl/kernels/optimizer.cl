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

/* AdamW (decoupled weight decay): p = p*decay - step * m / (sqrt(v) * inv_sqrt_bc2 + eps), decay = 1 - lr*wd. */
__kernel void adamw(__global float* p, int p_off, __global float* m, int m_off, __global float* v, int v_off,
                    __global const float* g, int g_off, float b1, float b2, float eps, float step,
                    float inv_sqrt_bc2, float decay, int n) {
    FOR_EACH(i, n) {
        const float gi = g[g_off + i];
        const float mi = b1 * m[m_off + i] + (1.0f - b1) * gi;
        const float vi = b2 * v[v_off + i] + (1.0f - b2) * gi * gi;
        m[m_off + i] = mi;
        v[v_off + i] = vi;
        p[p_off + i] = p[p_off + i] * decay - step * mi / (sqrt(vi) * inv_sqrt_bc2 + eps);
    }
}

/* RMSprop (torch.optim.RMSprop). has_buf: momentum > 0 (buf used); centered: ga used. Unused
 * buffers are bound to sq and never touched. */
__kernel void rmsprop(__global float* p, int p_off, __global float* sq, int sq_off, __global float* buf, int buf_off,
                      __global float* ga, int ga_off, __global const float* g, int g_off, float lr, float alpha,
                      float eps, float wd, float mom, int has_buf, int centered, int n) {
    const float keep = 1.0f - alpha;
    FOR_EACH(i, n) {
        const float gi = g[g_off + i] + wd * p[p_off + i];
        const float si = alpha * sq[sq_off + i] + keep * (gi * gi);
        sq[sq_off + i] = si;
        float avg;
        if (centered) {
            const float ai = ga[ga_off + i] + keep * (gi - ga[ga_off + i]);
            ga[ga_off + i] = ai;
            avg = sqrt(si - ai * ai) + eps;
        } else {
            avg = sqrt(si) + eps;
        }
        if (has_buf) {
            const float bi = mom * buf[buf_off + i] + gi / avg;
            buf[buf_off + i] = bi;
            p[p_off + i] -= lr * bi;
        } else {
            p[p_off + i] -= lr * (gi / avg);
        }
    }
}
