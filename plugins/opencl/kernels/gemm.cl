/* GEMM for CPU devices (PoCL), where CLBlast's GPU-tuned kernels ran at 6-10 GFLOP/s: each
 * work-item computes an 8 x 32 block of C in sixteen float16 registers, one broadcast element of
 * A times two float16 rows of B per step of k (the compiler's embedded-broadcast FMA on
 * AVX-512, two FMAs per vector on AVX2), no local memory (the caches serve the reuse). About
 * 100-140 GFLOP/s on two Xeon cores against CLBlast's 6-30 on the same GPT-sized products.
 *
 *   C = act(alpha * op(A) * B + beta * C + bias)      (beta == 0: C is not read)
 *
 * B is row-major [k, >= round_up(n, 32)] (the host packs it there when it is transposed or its
 * rows are shorter: every tile reads whole float16s); A is [m, k] (gemm_nn) or [k, m] (gemm_tn),
 * its rows past m clamped to row m - 1 (computed, never stored). One sum per element in k order:
 * the same bits every run. The third grid dimension is the batch (GEMM_BATCHED's strides). */
#define GEMM_TM 8
#define GEMM_TN 32

#define GEMM_ROWS(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7)

#define GEMM_ARGS                                                                                              \
    int m, int n, int k, float alpha, __global const float *A, int a_off, int lda, int a_stride,                \
        __global const float *B, int b_off, int ldb, int b_stride, float beta, __global float *C, int c_off,   \
        int ldc, int c_stride, int has_bias, __global const float *bias, int bias_off, int act

/* Row r of the tile: alpha*acc (+ beta*C) (+ bias) -> act, stored where i0 + r < m, j < n. */
inline void gemm_store_row(float16 v0, float16 v1, __global float* c, int ldc, int i, int m, int j0, int n,
                           float alpha, float beta, int has_bias, __global const float* bias, int act) {
    if (i >= m) return;
    c += i * ldc + j0;
    const int nc = n - j0;
    v0 *= alpha;
    v1 *= alpha;
    if (nc >= GEMM_TN) {
        if (beta != 0.0f) {
            v0 += beta * vload16(0, c);
            v1 += beta * vload16(1, c);
        }
        if (has_bias) {
            v0 += vload16(0, bias + j0);
            v1 += vload16(1, bias + j0);
        }
        vstore16(activate16(act, v0), 0, c);
        vstore16(activate16(act, v1), 1, c);
        return;
    }
    float t[GEMM_TN], u[GEMM_TN];
    vstore16(v0, 0, t);
    vstore16(v1, 1, t);
    for (int e = 0; e < GEMM_TN; ++e) u[e] = 0.0f;
    for (int e = 0; e < nc; ++e) {
        if (beta != 0.0f) t[e] += beta * c[e];
        if (has_bias) t[e] += bias[j0 + e];
    }
    vstore16(activate16(act, vload16(0, t)), 0, u);
    vstore16(activate16(act, vload16(1, t)), 1, u);
    for (int e = 0; e < nc; ++e) c[e] = u[e];
}

/* a*b + c contracted to one FMA where the device has it (PoCL lowers mad() to a multiply and an
 * add, and fma() is a slow library call on a CPU without FMA). */
#pragma OPENCL FP_CONTRACT ON
#define GEMM_DECL(r) float16 acc##r##a = (float16)(0.0f), acc##r##b = (float16)(0.0f);
#define GEMM_STEP(r)                                                                                           \
    {                                                                                                          \
        const float16 av = (float16)(GEMM_A(r));                                                               \
        acc##r##a = av * b0 + acc##r##a;                                                                       \
        acc##r##b = av * b1 + acc##r##b;                                                                       \
    }
#define GEMM_STORE(r) gemm_store_row(acc##r##a, acc##r##b, c, ldc, i0 + r, m, j0, n, alpha, beta, has_bias, bias, act);

#define GEMM_PROLOGUE                                                                                          \
    const int j0 = (int)get_global_id(0) * GEMM_TN, i0 = (int)get_global_id(1) * GEMM_TM;                     \
    const int batch = (int)get_global_id(2);                                                                   \
    if (j0 >= n || i0 >= m) return;                                                                            \
    __global const float* a = A + a_off + batch * a_stride;                                                    \
    __global const float* b = B + b_off + batch * b_stride + j0;                                               \
    __global float* c = C + c_off + batch * c_stride;                                                          \
    if (has_bias) bias += bias_off;                                                                            \
    GEMM_ROWS(GEMM_DECL)

/* A row-major [m, k]: eight row pointers (clamped rows), element p of each. */
#define GEMM_ROW_PTR(r) __global const float* a##r = a + min(i0 + r, m - 1) * lda;
#define GEMM_A(r) a##r[p]
__kernel void gemm_nn(GEMM_ARGS) {
    GEMM_PROLOGUE
    GEMM_ROWS(GEMM_ROW_PTR)
    for (int p = 0; p < k; ++p) {
        const float16 b0 = vload16(0, b + p * ldb), b1 = vload16(1, b + p * ldb);
        GEMM_ROWS(GEMM_STEP)
    }
    GEMM_ROWS(GEMM_STORE)
}
#undef GEMM_A

/* A stored [k, m] (op(A) = its transpose): row p of storage holds column p of op(A). */
#define GEMM_COL_IDX(r) const int c##r = min(i0 + r, m - 1);
#define GEMM_A(r) ap[c##r]
__kernel void gemm_tn(GEMM_ARGS) {
    GEMM_PROLOGUE
    GEMM_ROWS(GEMM_COL_IDX)
    for (int p = 0; p < k; ++p) {
        __global const float* ap = a + p * lda;
        const float16 b0 = vload16(0, b + p * ldb), b1 = vload16(1, b + p * ldb);
        GEMM_ROWS(GEMM_STEP)
    }
    GEMM_ROWS(GEMM_STORE)
}
#undef GEMM_A

/* dst[batch][p * ldd + j] = op(B)[p, j] for j < n, 0 for n <= j < ldd (ldd: a multiple of 16);
 * op(B) = B [k, n] (ldb) or, with trans, the transpose of B [n, k]. One float16 per item. */
__kernel void gemm_pack_b(__global const float* B, int b_off, int ldb, int b_stride, int trans, int k, int n,
                          int ldd, __global float* dst) {
    const int j0 = (int)get_global_id(0) * 16, p = (int)get_global_id(1), batch = (int)get_global_id(2);
    if (j0 >= ldd || p >= k) return;
    __global const float* src = B + b_off + batch * b_stride;
    float t[16];
    for (int e = 0; e < 16; ++e) {
        const int j = j0 + e;
        t[e] = j < n ? (trans ? src[j * ldb + p] : src[p * ldb + j]) : 0.0f;
    }
    vstore16(vload16(0, t), 0, dst + (batch * k + p) * ldd + j0);
}
