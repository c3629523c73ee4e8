/* Elementwise ops: FILL, COPY, AXPBY, MUL, ACT_FWD/BWD, DROPOUT_FWD, and the bias + activation
 * passes that GEMM-based ops (linear, conv) run after their matrix product. */

__kernel void fill_f32(__global float* y, int y_off, int n, float value) {
    FOR_EACH(i, n) y[y_off + i] = value;
}

__kernel void fill_i32(__global int* y, int y_off, int n, int value) {
    FOR_EACH(i, n) y[y_off + i] = value;
}

/* 4-byte words, so one kernel copies f32 and i32. */
__kernel void copy_words(__global const uint* x, int x_off, __global uint* y, int y_off, int n) {
    FOR_EACH(i, n) y[y_off + i] = x[x_off + i];
}

__kernel void axpby(float alpha, __global const float* a, int a_off, float beta, __global const float* b, int b_off,
                    __global float* y, int y_off, int n) {
    FOR_EACH(i, n) y[y_off + i] = alpha * a[a_off + i] + beta * b[b_off + i];
}

/* y = alpha*a + beta*y; beta == 0 does not read y (BLAS convention: it may hold NaN). */
__kernel void axpby_inplace(float alpha, __global const float* a, int a_off, float beta, __global float* y, int y_off,
                            int n) {
    FOR_EACH(i, n) y[y_off + i] = beta == 0.0f ? alpha * a[a_off + i] : alpha * a[a_off + i] + beta * y[y_off + i];
}

__kernel void mul(__global const float* a, int a_off, __global const float* b, int b_off, __global float* y, int y_off,
                  int n) {
    FOR_EACH(i, n) y[y_off + i] = a[a_off + i] * b[b_off + i];
}

/* ADD: y = alpha*a + beta*b; mode 0: b elementwise, 1: b[cols] per row, 2: b[rows] per column. */
__kernel void add_broadcast(float alpha, __global const float* a, int a_off, float beta, __global const float* b,
                            int b_off, int mode, int cols, __global float* y, int y_off, int n) {
    FOR_EACH(i, n) {
        const int j = mode == 0 ? i : mode == 1 ? i % cols : i / cols;
        y[y_off + i] = alpha * a[a_off + i] + beta * b[b_off + j];
    }
}

/* The activations take 16 elements per step (common.cl's activate16: PoCL's scalar exp and erf
 * are ~15x slower than their vector forms); launched over ceil(n/16) items. y may be x exactly. */
__kernel void act_fwd(int act, __global const float* x, int x_off, __global float* y, int y_off, int n) {
    FOR_EACH16(i, n) store16(activate16(act, load16(x + x_off + i, n - i)), y + y_off + i, n - i);
}

/* v is y, or x for the GELUs (ops.h: their act_bwd's second input). */
__kernel void act_bwd(int act, __global const float* dy, int dy_off, __global const float* v, int v_off,
                      __global float* dx, int dx_off, int n) {
    FOR_EACH16(i, n) {
        const float16 g = load16(dy + dy_off + i, n - i), vv = load16(v + v_off + i, n - i);
        store16(act_bwd_value16(act, g, vv), dx + dx_off + i, n - i);
    }
}

/* dropout_keep (common.cl) is ops.h's xylem_dropout_keep. */
__kernel void dropout_fwd(ulong seed, float p, __global const float* x, int x_off, __global float* y, int y_off,
                          __global float* mask, int mask_off, int n) {
    const float scale = p == 0.0f ? 1.0f : 1.0f / (1.0f - p);
    FOR_EACH(i, n) {
        const float m = (p == 0.0f || dropout_keep(seed, (ulong)i, p)) ? scale : 0.0f;
        mask[mask_off + i] = m;
        y[y_off + i] = p == 0.0f ? x[x_off + i] : x[x_off + i] * m;
    }
}

/* y[r,c] = act(y[r,c] + b[c]) over rows x cols (has_bias == 0: act only), 16 elements per step
 * (launched over ceil(rows*cols/16) items); a chunk that crosses a row gathers its bias. */
__kernel void bias_act_rows(int act, int has_bias, __global const float* b, int b_off, __global float* y, int y_off,
                            int rows, int cols) {
    const int n = rows * cols;
    FOR_EACH16(i, n) {
        float16 v = load16(y + y_off + i, n - i);
        if (has_bias) {
            const int col = i % cols;
            if (col + 16 <= cols) {
                v += vload16(0, b + b_off + col);
            } else {
                float t[16];
                for (int e = 0, c = col; e < 16; ++e, c = c + 1 == cols ? 0 : c + 1) t[e] = b[b_off + c];
                v += vload16(0, t);
            }
        }
        store16(activate16(act, v), y + y_off + i, n - i);
    }
}

/* In place: y = factor*y (the beta of an accumulating op whose product term is empty). */
__kernel void scale_f32(float factor, __global float* y, int y_off, int n) {
    FOR_EACH(i, n) y[y_off + i] = factor == 0.0f ? 0.0f : factor * y[y_off + i];
}
