// GEMMs with a narrow C (n <= 64 columns, B not transposed) on AVX-512: the LSTM's per-step
// products W_hh * h [4H, B] and W_hh^T * dgates [H, B], whose n is the batch. OpenBLAS packs both
// operands for every call and works in tiles cut for big matrices; at 512x50x128 it reached ~96
// GFLOP/s on one core here, this kernel ~130 (bench numbers: docs/benchmarks.md).
//
// Each row of C is up to four 16-float vectors held in registers for the whole of K: a tile of R
// rows of C takes one row of B (from L1: B is k*n floats) and R broadcasts of A per k. Every
// element is one chain of FMAs over k in order from zero, then alpha * sum + beta * c: the same
// bits however C's rows are cut into tiles or over threads.
#include <immintrin.h>

#include "native.h"

namespace xylem::native {

namespace {

#if defined(__x86_64__)
#pragma GCC push_options
#pragma GCC target("avx512f")

// C rows [0, ROWS) of a tile: NV vectors per row, the last one masked by `last`.
template <int NV, int ROWS, bool TA>
__attribute__((always_inline)) inline void narrow_tile(int64_t k, const float* a, int64_t lda, const float* b,
                                                       int64_t ldb, float alpha, float beta, float* c, int64_t ldc,
                                                       __mmask16 last) {
    __m512 acc[ROWS][NV];
    for (int r = 0; r < ROWS; ++r)
        for (int j = 0; j < NV; ++j) acc[r][j] = _mm512_setzero_ps();
    for (int64_t p = 0; p < k; ++p) {
        __m512 bv[NV];
        const float* bp = b + p * ldb;
        for (int j = 0; j < NV; ++j)
            bv[j] = j == NV - 1 ? _mm512_maskz_loadu_ps(last, bp + 16 * j) : _mm512_loadu_ps(bp + 16 * j);
        for (int r = 0; r < ROWS; ++r) {
            const __m512 av = _mm512_set1_ps(TA ? a[p * lda + r] : a[r * lda + p]);
            for (int j = 0; j < NV; ++j) acc[r][j] = _mm512_fmadd_ps(av, bv[j], acc[r][j]);
        }
    }
    const __m512 va = _mm512_set1_ps(alpha), vb = _mm512_set1_ps(beta);
    for (int r = 0; r < ROWS; ++r)
        for (int j = 0; j < NV; ++j) {
            const __mmask16 mask = j == NV - 1 ? last : __mmask16(0xFFFF);
            float* cp = c + r * ldc + 16 * j;
            __m512 v = _mm512_mul_ps(va, acc[r][j]);
            if (beta != 0.0f) v = _mm512_fmadd_ps(vb, _mm512_maskz_loadu_ps(mask, cp), v);  // beta 0 reads nothing
            _mm512_mask_storeu_ps(cp, mask, v);
        }
}

// Rows of R at a time (R * NV = 24 accumulators of the 32 registers), the rest one row at a time.
template <int NV, bool TA>
void narrow_rows(int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda, const float* b, int64_t ldb,
                 float beta, float* c, int64_t ldc) {
    constexpr int R = 24 / NV;
    const int64_t rem = n - 16 * (NV - 1);
    const __mmask16 last = static_cast<__mmask16>(rem >= 16 ? 0xFFFF : (1u << rem) - 1);
    int64_t i = 0;
    for (; i + R <= m; i += R)
        narrow_tile<NV, R, TA>(k, TA ? a + i : a + i * lda, lda, b, ldb, alpha, beta, c + i * ldc, ldc, last);
    for (; i < m; ++i)
        narrow_tile<NV, 1, TA>(k, TA ? a + i : a + i * lda, lda, b, ldb, alpha, beta, c + i * ldc, ldc, last);
}

template <bool TA>
void narrow_avx512(int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda, const float* b,
                   int64_t ldb, float beta, float* c, int64_t ldc) {
    switch ((n + 15) / 16) {
        case 1: return narrow_rows<1, TA>(m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
        case 2: return narrow_rows<2, TA>(m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
        case 3: return narrow_rows<3, TA>(m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
        default: return narrow_rows<4, TA>(m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    }
}

#pragma GCC pop_options
#endif

}  // namespace

bool narrow_gemm_available() {
#if defined(__x86_64__)
    static const bool ok = [] {
        __builtin_cpu_init();
        return __builtin_cpu_supports("avx512f") != 0;
    }();
    return ok;
#else
    return false;
#endif
}

void narrow_sgemm(bool ta, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda, const float* b,
                  int64_t ldb, float beta, float* c, int64_t ldc) {
#if defined(__x86_64__)
    if (ta) narrow_avx512<true>(m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    else narrow_avx512<false>(m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
#else
    (void)ta, (void)m, (void)n, (void)k, (void)alpha, (void)a, (void)lda, (void)b, (void)ldb, (void)beta, (void)c, (void)ldc;
#endif
}

}  // namespace xylem::native
