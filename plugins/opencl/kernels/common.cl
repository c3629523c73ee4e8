/* Prepended to every kernel family at build time: activations, loops, reductions, error words.
 * Kernels index with int (the host rejects tensors past 2^31 elements) and take buffer offsets
 * in elements, because OpenCL 1.2 has no host-side pointer arithmetic on cl_mem. */
#define ACT_NONE 0
#define ACT_RELU 1
#define ACT_SIGMOID 2
#define ACT_TANH 3
#define ACT_GELU 4      /* act_fwd/act_bwd only: the gradient reads x, not y */
#define ACT_GELU_TANH 5
#define ACT_RELU6 6

/* GELU's two forms and their derivatives: plugin_kit/fused.h's formulas (gelu_value, ...), with
 * one rewrite in the tanh form: 1 + tanh(u) is taken as 2/(1 + exp(-2u)) and 1 - tanh(u)^2 as
 * 4e/(1 + e)^2, e = exp(-2|u|). The same values, but an OpenCL tanh need not reach +-1: PoCL's
 * stops at +-0.99999994, which made 0.5*x*(1 + t) -3e-6 at x = -100 (-3e22 at -1e30, -inf
 * instead of the kit's NaN at -inf), and its few ulps near |t| = 1 cost 1.6e-6 in 1 - t*t after
 * the x*(1 + 0.134145x^2) factor, past act_bwd's tolerance of 1e-6. */
inline float gelu_exact(float x) { return 0.5f * x * (1.0f + erf(x * 0.70710678118654752440f)); }
inline float gelu_exact_grad(float x) { /* Phi(x) + x*phi(x) */
    return 0.5f * (1.0f + erf(x * 0.70710678118654752440f)) + x * exp(-0.5f * x * x) * 0.39894228040143267794f;
}
inline float gelu_tanh_u(float x) { return 0.79788456080286535588f * (x + 0.044715f * x * x * x); }
inline float gelu_tanh_form(float x) { return x / (1.0f + exp(-2.0f * gelu_tanh_u(x))); } /* 0.5x(1 + t) */
inline float gelu_tanh_form_grad(float x) {
    const float u = gelu_tanh_u(x), e = exp(-2.0f * fabs(u));
    const float half_1pt = 1.0f / (1.0f + exp(-2.0f * u));    /* 0.5*(1 + t) */
    const float sech2 = 4.0f * e / ((1.0f + e) * (1.0f + e)); /* 1 - t*t */
    return half_1pt + 0.5f * x * sech2 * 0.79788456080286535588f * (1.0f + 0.134145f * x * x);
}

/* Same formulas as the native plugin, so both backends round alike. */
inline float activate(int act, float v) {
    if (act == ACT_RELU) return v > 0.0f ? v : 0.0f;
    if (act == ACT_SIGMOID) return 1.0f / (1.0f + exp(-v));
    if (act == ACT_TANH) return tanh(v);
    if (act == ACT_GELU) return gelu_exact(v);
    if (act == ACT_GELU_TANH) return gelu_tanh_form(v);
    if (act == ACT_RELU6) return fmin(v > 0.0f ? v : 0.0f, 6.0f);
    return v;
}

/* dy * f'(x), expressed through y = f(x) (not the GELUs: act_bwd_value). */
inline float activate_grad(int act, float dy, float y) {
    if (act == ACT_RELU) return y > 0.0f ? dy : 0.0f;
    if (act == ACT_SIGMOID) return dy * y * (1.0f - y);
    if (act == ACT_TANH) return dy * (1.0f - y * y);
    if (act == ACT_RELU6) return y > 0.0f && 6.0f - y > 0.0f ? dy : 0.0f;
    return dy;
}

/* dy * f'(x) for the activations whose act_bwd reads x (the GELUs); v is y for the others. */
inline float act_bwd_value(int act, float dy, float v) {
    if (act == ACT_GELU) return dy * gelu_exact_grad(v);
    if (act == ACT_GELU_TANH) return dy * gelu_tanh_form_grad(v);
    return activate_grad(act, dy, v);
}

/* The same activations on 16 lanes, formula for formula: PoCL's CPU device runs a scalar erf or
 * exp ~15x slower than its float16 form (it vectorizes across work-items only in simple loops),
 * so the elementwise kernels take 16 elements per step through these. A lane's result does not
 * depend on its neighbours or its position (padding lanes are computed and dropped). */
/* erf by Norbert Juffa's single-precision minimax approximations, the native plugin's
 * (plugins/native/vecmath.h): an odd polynomial below |x| = 475/512, 1 - exp(poly(|x|)) with the
 * sign of x above, both computed and one selected. Within 1.02 ulp of erf over the floats in
 * [-6, 6] (PoCL's own float16 erf: 1.10) at a sixth of its time; +-inf give +-1, NaN gives NaN. */
inline float16 erf16(float16 x) {
    const float16 t = fabs(x), s = x * x;
    float16 r = -1.72853470e-5f * t + 3.83197126e-4f;
    const float16 u = -3.88396438e-3f * t + 2.42546219e-2f;
    r = r * s + u;
    r = r * t - 1.06777877e-1f;
    r = r * t - 6.34846687e-1f;
    r = r * t - 1.28717512e-1f;
    r = r * t - t;
    const float16 big = copysign(1.0f - exp(r), x);
    float16 q = -5.96761703e-4f;
    q = q * s + 4.99119423e-3f;
    q = q * s - 2.67681349e-2f;
    q = q * s + 1.12819925e-1f;
    q = q * s - 3.76125336e-1f;
    q = q * s + 1.28379166e-1f;
    q = q * x + x;
    return select(q, big, t > 0.927734375f);
}
inline float16 gelu_exact16(float16 x) { return 0.5f * x * (1.0f + erf16(x * 0.70710678118654752440f)); }
inline float16 gelu_exact_grad16(float16 x) {
    return 0.5f * (1.0f + erf16(x * 0.70710678118654752440f)) + x * exp(-0.5f * x * x) * 0.39894228040143267794f;
}
inline float16 gelu_tanh_u16(float16 x) { return 0.79788456080286535588f * (x + 0.044715f * x * x * x); }
inline float16 gelu_tanh_form16(float16 x) { return x / (1.0f + exp(-2.0f * gelu_tanh_u16(x))); }
inline float16 gelu_tanh_form_grad16(float16 x) {
    const float16 u = gelu_tanh_u16(x), e = exp(-2.0f * fabs(u));
    const float16 half_1pt = 1.0f / (1.0f + exp(-2.0f * u));
    const float16 sech2 = 4.0f * e / ((1.0f + e) * (1.0f + e));
    return half_1pt + 0.5f * x * sech2 * 0.79788456080286535588f * (1.0f + 0.134145f * x * x);
}
inline float16 activate16(int act, float16 v) {
    if (act == ACT_RELU) return select((float16)(0.0f), v, v > 0.0f);
    if (act == ACT_SIGMOID) return 1.0f / (1.0f + exp(-v));
    if (act == ACT_TANH) return tanh(v);
    if (act == ACT_GELU) return gelu_exact16(v);
    if (act == ACT_GELU_TANH) return gelu_tanh_form16(v);
    if (act == ACT_RELU6) return fmin(select((float16)(0.0f), v, v > 0.0f), 6.0f);
    return v;
}
inline float16 act_bwd_value16(int act, float16 dy, float16 v) {
    if (act == ACT_GELU) return dy * gelu_exact_grad16(v);
    if (act == ACT_GELU_TANH) return dy * gelu_tanh_form_grad16(v);
    if (act == ACT_RELU) return select((float16)(0.0f), dy, v > 0.0f);
    if (act == ACT_SIGMOID) return dy * v * (1.0f - v);
    if (act == ACT_TANH) return dy * (1.0f - v * v);
    if (act == ACT_RELU6) return select((float16)(0.0f), dy, (v > 0.0f) & (6.0f - v > 0.0f));
    return dy;
}

/* Fixed-order horizontal sums and max (the same bits every run). */
inline float hsum8(float8 a) {
    const float4 b = a.lo + a.hi;
    const float2 c = b.lo + b.hi;
    return c.x + c.y;
}
inline float hsum16(float16 a) { return hsum8(a.lo + a.hi); }
inline float hmax16(float16 a) {
    const float8 b = fmax(a.lo, a.hi);
    const float4 c = fmax(b.lo, b.hi);
    const float2 d = fmax(c.lo, c.hi);
    return fmax(d.x, d.y);
}

/* 16 consecutive floats from p, of which `left` (may be more) exist: the rest read as 0. */
inline float16 load16(__global const float* p, int left) {
    if (left >= 16) return vload16(0, p);
    float t[16];
    for (int e = 0; e < 16; ++e) t[e] = e < left ? p[e] : 0.0f;
    return vload16(0, t);
}
/* The first min(16, left) lanes of v to p. */
inline void store16(float16 v, __global float* p, int left) {
    if (left >= 16) {
        vstore16(v, 0, p);
        return;
    }
    float t[16];
    vstore16(v, 0, t);
    for (int e = 0; e < left; ++e) p[e] = t[e];
}
/* A grid-stride loop over chunks of 16 elements: i is the chunk's first element. */
#define FOR_EACH16(i, n) for (int i = 16 * (int)get_global_id(0); i < (n); i += 16 * (int)get_global_size(0))

/* The counter-based hash of ops.h (xylem_dropout_keep): the same mask as every other backend
 * (dropout_fwd, attention's dropout on its probabilities). */
inline int dropout_keep(ulong seed, ulong i, float p) {
    ulong z = seed + (i + 1) * 0x9E3779B97F4A7C15UL;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9UL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBUL;
    z ^= z >> 31;
    return (float)(z >> 40) * (1.0f / 16777216.0f) >= p;
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
