/* Prepended to every kernel family at build time: activations, loops, reductions, error words.
 * Kernels index with int (the host rejects tensors past 2^31 elements) and take buffer offsets
 * in elements, because OpenCL 1.2 has no host-side pointer arithmetic on cl_mem. */
#define ACT_NONE 0
#define ACT_RELU 1
#define ACT_SIGMOID 2
#define ACT_TANH 3

/* Same formulas as the native plugin, so both backends round alike. */
inline float activate(int act, float v) {
    if (act == ACT_RELU) return v > 0.0f ? v : 0.0f;
    if (act == ACT_SIGMOID) return 1.0f / (1.0f + exp(-v));
    if (act == ACT_TANH) return tanh(v);
    return v;
}

/* dy * f'(x), expressed through y = f(x). */
inline float activate_grad(int act, float dy, float y) {
    if (act == ACT_RELU) return y > 0.0f ? dy : 0.0f;
    if (act == ACT_SIGMOID) return dy * y * (1.0f - y);
    if (act == ACT_TANH) return dy * (1.0f - y * y);
    return dy;
}

/* A grid-stride loop: few work-groups cover any n (PoCL runs each group as a loop on a core). */
#define FOR_EACH(i, n) for (int i = (int)get_global_id(0); i < (n); i += (int)get_global_size(0))

/* The work-group's sum of v (local size: a power of two <= 256), returned to every item. */
inline float group_sum(__local float* buf, float v) {
    const int lid = (int)get_local_id(0);
    buf[lid] = v;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int s = (int)get_local_size(0) / 2; s > 0; s >>= 1) {
        if (lid < s) buf[lid] += buf[lid + s];
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    const float total = buf[0];
    barrier(CLK_LOCAL_MEM_FENCE);
    return total;
}

/* Records the first out-of-range label or index in the stream's error word
 * {flag, op, position, value, bound}; stream_sync turns it into an error message. */
inline void record_error(__global int* err, int op, int position, int value, int bound) {
    if (atomic_cmpxchg(err, 0, 1) == 0) {
        err[1] = op;
        err[2] = position;
        err[3] = value;
        err[4] = bound;
    }
}
