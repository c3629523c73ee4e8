// GEMMs with a narrow C (n <= 64 columns, B not transposed) on AVX-512 and on AVX2 + FMA: the LSTM's per-step
// products W_hh * h [4H, B] and W_hh^T * dgates [H, B], whose n is the batch. OpenBLAS packs both
// operands for every call and works in tiles cut for big matrices; at 512x50x128 it reached ~100
// GFLOP/s on one core here, this kernel ~140 (docs/benchmarks.md, docs/architecture.md).
//
// C's columns are cut in two. The first 16*F (F = n / 16 whole vectors) are held in registers,
// F vectors per row, for the whole of K: a tile of R rows takes one row of B (from L1: B is k*n
// floats) and R broadcasts of A per k, and each element is one chain of FMAs over k in order.
// The last n % 16 columns would waste most of a vector per row (50 = 3*16 + 2: a fourth vector
// 2/16 used, a quarter of all FMAs), so they are computed across rows instead:
//   - A^T given (ta): A's column k is contiguous, so 16 rows of C take one load of A per k and a
//     broadcast of B per tail column (one FMA per 16 elements, not one per element);
//   - A given: each tail element is a dot product of a row of A with a column of B (packed into
//     a contiguous row first), summed in 16 lanes over k and then across the lanes.
// Every element's arithmetic depends only on its row and column, so row blocks cut anyhow (over
// threads) give the same bits. At the AVX-512 level the same kernel also takes wider products,
// in panels of 64 columns (wide_avx512 below). The AVX2 kernel (namespace avx2 below) is the same
// in 8-float vectors, with C's whole vectors in blocks of at most 4 (16 registers); its sums differ
// from the AVX-512 kernel's (8 lanes, not 16, in the tails' dot products), as OpenBLAS's do across
// levels.
#include <immintrin.h>

#include <algorithm>
#include <type_traits>
#include <vector>

#include "native.h"
#include "ops/transpose8.h"

namespace xylem::native {

namespace {

#if defined(__x86_64__)
#pragma GCC push_options
#pragma GCC target("avx512f")

// c = alpha * sum + beta * c (beta 0 reads nothing: C may hold NaN), `mask` lanes.
__attribute__((always_inline)) inline void store_c(float* c, __m512 sum, float alpha, float beta, __mmask16 mask) {
    __m512 v = _mm512_mul_ps(_mm512_set1_ps(alpha), sum);
    if (beta != 0.0f) v = _mm512_fmadd_ps(_mm512_set1_ps(beta), _mm512_maskz_loadu_ps(mask, c), v);
    _mm512_mask_storeu_ps(c, mask, v);
}

// Columns [0, 16*F) of ROWS rows of C.
template <int F, int ROWS, bool TA>
__attribute__((always_inline)) inline void vector_tile(int64_t k, const float* a, int64_t lda, const float* b,
                                                       int64_t ldb, float alpha, float beta, float* c, int64_t ldc) {
    __m512 acc[ROWS][F];
    for (int r = 0; r < ROWS; ++r)
        for (int j = 0; j < F; ++j) acc[r][j] = _mm512_setzero_ps();
    for (int64_t p = 0; p < k; ++p) {
        __m512 bv[F];
        for (int j = 0; j < F; ++j) bv[j] = _mm512_loadu_ps(b + p * ldb + 16 * j);
        for (int r = 0; r < ROWS; ++r) {
            const __m512 av = _mm512_set1_ps(TA ? a[p * lda + r] : a[r * lda + p]);
            for (int j = 0; j < F; ++j) acc[r][j] = _mm512_fmadd_ps(av, bv[j], acc[r][j]);
        }
    }
    for (int r = 0; r < ROWS; ++r)
        for (int j = 0; j < F; ++j) store_c(c + r * ldc + 16 * j, acc[r][j], alpha, beta, 0xFFFF);
}

// Rows in tiles of R, the rest in tiles of 4, 2 and 1 rows: a one-row tile reads B's row for F
// FMAs, so a row block of 256 (42 tiles of 6 and 4 rows left) would spend 5% of its time on 4
// rows. (The tiles give every element the same arithmetic: the cut does not change the bits.)
template <int F, bool TA>
void vector_columns(int64_t m, int64_t k, float alpha, const float* a, int64_t lda, const float* b, int64_t ldb,
                    float beta, float* c, int64_t ldc) {
    constexpr int R = 24 / F;  // R * F = 24 accumulators of the 32 registers
    int64_t i = 0;
    auto tiles = [&]<int ROWS>(std::integral_constant<int, ROWS>) {
        for (; i + ROWS <= m; i += ROWS)
            vector_tile<F, ROWS, TA>(k, TA ? a + i : a + i * lda, lda, b, ldb, alpha, beta, c + i * ldc, ldc);
    };
    tiles(std::integral_constant<int, R>{});
    if constexpr (R > 4) tiles(std::integral_constant<int, 4>{});
    if constexpr (R > 2) tiles(std::integral_constant<int, 2>{});
    tiles(std::integral_constant<int, 1>{});
}

// ta: tail columns [j0, j0 + t) of every row, 16 rows a vector (A^T's rows are A's columns).
template <int T>
void tail_across_rows(int64_t m, int64_t k, float alpha, const float* a, int64_t lda, const float* b, int64_t ldb,
                      float beta, float* c, int64_t ldc) {
    for (int64_t i = 0; i < m; i += 16) {
        const int64_t rows = std::min<int64_t>(16, m - i);
        const __mmask16 mask = static_cast<__mmask16>(rows == 16 ? 0xFFFF : (1u << rows) - 1);
        __m512 acc[T];
        for (int j = 0; j < T; ++j) acc[j] = _mm512_setzero_ps();
        for (int64_t p = 0; p < k; ++p) {
            const __m512 av = _mm512_maskz_loadu_ps(mask, a + p * lda + i);
            for (int j = 0; j < T; ++j) acc[j] = _mm512_fmadd_ps(av, _mm512_set1_ps(b[p * ldb + j]), acc[j]);
        }
        alignas(64) float sums[T][16];
        for (int j = 0; j < T; ++j) _mm512_store_ps(sums[j], acc[j]);
        for (int64_t r = 0; r < rows; ++r)
            for (int j = 0; j < T; ++j) {
                float& out = c[(i + r) * ldc + j];
                out = beta != 0.0f ? alpha * sums[j][r] + beta * out : alpha * sums[j][r];
            }
    }
}

// A given: tail column j of row i is A's row i . bt's row j (B's column, packed), in 16 lanes.
void tail_dot_products(int64_t m, int64_t t, int64_t k, float alpha, const float* a, int64_t lda, const float* bt,
                       float beta, float* c, int64_t ldc) {
    const int64_t whole = k / 16 * 16;
    const __mmask16 rest = static_cast<__mmask16>((1u << (k - whole)) - 1);
    for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < t; ++j) {
            const float* ar = a + i * lda;
            const float* br = bt + j * k;
            __m512 acc = _mm512_setzero_ps();
            for (int64_t p = 0; p < whole; p += 16)
                acc = _mm512_fmadd_ps(_mm512_loadu_ps(ar + p), _mm512_loadu_ps(br + p), acc);
            if (rest) acc = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(rest, ar + whole), _mm512_maskz_loadu_ps(rest, br + whole), acc);
            const float sum = _mm512_reduce_add_ps(acc);
            float& out = c[i * ldc + j];
            out = beta != 0.0f ? alpha * sum + beta * out : alpha * sum;
        }
}

void tail_ta(int64_t t, int64_t m, int64_t k, float alpha, const float* a, int64_t lda, const float* b, int64_t ldb,
             float beta, float* c, int64_t ldc) {
    switch (t) {
#define XYLEM_TAIL_CASE_(T) \
    case T: return tail_across_rows<T>(m, k, alpha, a, lda, b, ldb, beta, c, ldc);
        XYLEM_TAIL_CASE_(1) XYLEM_TAIL_CASE_(2) XYLEM_TAIL_CASE_(3) XYLEM_TAIL_CASE_(4) XYLEM_TAIL_CASE_(5)
        XYLEM_TAIL_CASE_(6) XYLEM_TAIL_CASE_(7) XYLEM_TAIL_CASE_(8) XYLEM_TAIL_CASE_(9) XYLEM_TAIL_CASE_(10)
        XYLEM_TAIL_CASE_(11) XYLEM_TAIL_CASE_(12) XYLEM_TAIL_CASE_(13) XYLEM_TAIL_CASE_(14) XYLEM_TAIL_CASE_(15)
#undef XYLEM_TAIL_CASE_
    }
}

// Columns [0, 16*f) for f in 0..4 (f == 0: the tail is all there is).
template <bool TA>
void whole_vectors(int64_t f, int64_t m, int64_t k, float alpha, const float* a, int64_t lda, const float* b,
                   int64_t ldb, float beta, float* c, int64_t ldc) {
    switch (f) {
    case 1: return vector_columns<1, TA>(m, k, alpha, a, lda, b, ldb, beta, c, ldc);
    case 2: return vector_columns<2, TA>(m, k, alpha, a, lda, b, ldb, beta, c, ldc);
    case 3: return vector_columns<3, TA>(m, k, alpha, a, lda, b, ldb, beta, c, ldc);
    case 4: return vector_columns<4, TA>(m, k, alpha, a, lda, b, ldb, beta, c, ldc);
    }
}

void narrow_avx512(bool ta, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda, const float* b,
                   int64_t ldb, float beta, float* c, int64_t ldc) {
    const int64_t f = n / 16, t = n % 16;
    if (ta) whole_vectors<true>(f, m, k, alpha, a, lda, b, ldb, beta, c, ldc);
    else whole_vectors<false>(f, m, k, alpha, a, lda, b, ldb, beta, c, ldc);
    if (t == 0) return;
    const int64_t j0 = 16 * f;
    if (ta) return tail_ta(t, m, k, alpha, a, lda, b + j0, ldb, beta, c + j0, ldc);
    // B's tail columns as contiguous rows (t * k floats, a few KB at the sizes this runs at).
    thread_local std::vector<float> bt;
    bt.resize(static_cast<size_t>(t * k));
    for (int64_t p = 0; p < k; ++p)
        for (int64_t j = 0; j < t; ++j) bt[static_cast<size_t>(j * k + p)] = b[p * ldb + j0 + j];
    tail_dot_products(m, t, k, alpha, a, lda, bt.data(), beta, c + j0, ldc);
}

// out[p][j] = rows[j * ld + p] for p < k, j < w: B^T's panel from w stored rows of B, in 8x8
// blocks (a scalar loop took 4x as long, and 15x at k = 512, where the 64 rows are 2 KB apart).
void pack_transposed(const float* rows, int64_t ld, int64_t k, int64_t w, float* out) {
    const int64_t k8 = k / 8 * 8, w8 = w / 8 * 8;
    for (int64_t j0 = 0; j0 < w8; j0 += 8) {
        const float* r = rows + j0 * ld;
        for (int64_t p0 = 0; p0 < k8; p0 += 8) transpose8(r + p0, ld, out + p0 * w + j0, w);
        for (int64_t p = k8; p < k; ++p)
            for (int64_t j = j0; j < j0 + 8; ++j) out[p * w + j] = rows[j * ld + p];
    }
    for (int64_t j = w8; j < w; ++j)
        for (int64_t p = 0; p < k; ++p) out[p * w + j] = rows[j * ld + p];
}

// C of any width in panels of 64 columns, each a narrow GEMM above (its tiles keep the panel's C
// in registers for the whole of k). OpenBLAS packs A and B for every call (its copy routines and
// the zeroing of C took 17% of the character GPT's GEMM time, where k is 128 to 768); here A is
// read where it is, and B too unless transposed: then each panel of B^T (rows j0.. of the stored
// B) is packed once into [k][64], 32 KB at k = 128, and serves every row of the block. On one
// core of the AMD Zen 4 machine (2026-11-28), against OpenBLAS 0.3.21's Cooperlake kernels, warm
// caches: 112-116 against 100-102 GFLOP/s on the GPT's shapes (384x512x128, 384x128x512,
// A^T 256x128x768, B^T 384x512x128, ...), 97-110 against 90-95 on convolution-sized ones
// (128x1024x1152, 256x192x2304).
void wide_avx512(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
                 const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
    constexpr int64_t kPanel = 64;
    thread_local std::vector<float> panel;
    if (tb) panel.resize(static_cast<size_t>(k * kPanel));
    for (int64_t j0 = 0; j0 < n; j0 += kPanel) {
        const int64_t w = std::min(kPanel, n - j0);
        const float* bp = b + j0;
        int64_t ldp = ldb;
        if (tb) {  // B^T's rows j0 .. j0 + w as [k][w]
            pack_transposed(b + j0 * ldb, ldb, k, w, panel.data());
            bp = panel.data(), ldp = w;
        }
        narrow_avx512(ta, m, w, k, alpha, a, lda, bp, ldp, beta, c + j0, ldc);
    }
}

#pragma GCC pop_options

#pragma GCC push_options
#pragma GCC target("avx2,fma")

// The same kernel in 8-float vectors and 16 registers, for CPUs with AVX2 and FMA but no AVX-512
// (and XYLEM_NATIVE_ISA=avx2). A tile keeps R*F accumulators, one B vector and R broadcasts of A
// in registers: F whole vectors of 8 columns (4 to 8 for n = 32..64), R rows (R*F + R + 1 <= 16).
namespace avx2 {

__attribute__((always_inline)) inline __m256i lane_mask(int64_t lanes) {  // the first `lanes` lanes
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(lanes)), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

template <int F, int ROWS, bool TA>
__attribute__((always_inline)) inline void vector_tile(int64_t k, const float* a, int64_t lda, const float* b,
                                                       int64_t ldb, float alpha, float beta, float* c, int64_t ldc) {
    __m256 acc[ROWS][F];
    for (int r = 0; r < ROWS; ++r)
        for (int j = 0; j < F; ++j) acc[r][j] = _mm256_setzero_ps();
    for (int64_t p = 0; p < k; ++p) {
        __m256 av[ROWS];
        for (int r = 0; r < ROWS; ++r) av[r] = _mm256_broadcast_ss(TA ? a + p * lda + r : a + r * lda + p);
        for (int j = 0; j < F; ++j) {
            const __m256 bv = _mm256_loadu_ps(b + p * ldb + 8 * j);
            for (int r = 0; r < ROWS; ++r) acc[r][j] = _mm256_fmadd_ps(av[r], bv, acc[r][j]);
        }
    }
    const __m256 va = _mm256_set1_ps(alpha), vb = _mm256_set1_ps(beta);
    for (int r = 0; r < ROWS; ++r)
        for (int j = 0; j < F; ++j) {
            float* out = c + r * ldc + 8 * j;
            __m256 v = _mm256_mul_ps(va, acc[r][j]);
            if (beta != 0.0f) v = _mm256_fmadd_ps(vb, _mm256_loadu_ps(out), v);
            _mm256_storeu_ps(out, v);
        }
}

template <int F, bool TA>
void vector_columns(int64_t m, int64_t k, float alpha, const float* a, int64_t lda, const float* b, int64_t ldb,
                    float beta, float* c, int64_t ldc) {
    constexpr int R = F <= 2 ? 5 : F == 3 ? 4 : 3;  // R*F + R + 1 <= 16 registers
    int64_t i = 0;
    for (; i + R <= m; i += R)
        vector_tile<F, R, TA>(k, TA ? a + i : a + i * lda, lda, b, ldb, alpha, beta, c + i * ldc, ldc);
    for (; i < m; ++i) vector_tile<F, 1, TA>(k, TA ? a + i : a + i * lda, lda, b, ldb, alpha, beta, c + i * ldc, ldc);
}

// ta: tail columns of every row, 8 rows a vector.
template <int T>
void tail_across_rows(int64_t m, int64_t k, float alpha, const float* a, int64_t lda, const float* b, int64_t ldb,
                      float beta, float* c, int64_t ldc) {
    for (int64_t i = 0; i < m; i += 8) {
        const int64_t rows = std::min<int64_t>(8, m - i);
        const __m256i mask = lane_mask(rows);
        __m256 acc[T];
        for (int j = 0; j < T; ++j) acc[j] = _mm256_setzero_ps();
        for (int64_t p = 0; p < k; ++p) {
            const __m256 av = rows == 8 ? _mm256_loadu_ps(a + p * lda + i) : _mm256_maskload_ps(a + p * lda + i, mask);
            for (int j = 0; j < T; ++j) acc[j] = _mm256_fmadd_ps(av, _mm256_broadcast_ss(b + p * ldb + j), acc[j]);
        }
        alignas(32) float sums[T][8];
        for (int j = 0; j < T; ++j) _mm256_store_ps(sums[j], acc[j]);
        for (int64_t r = 0; r < rows; ++r)
            for (int j = 0; j < T; ++j) {
                float& out = c[(i + r) * ldc + j];
                out = beta != 0.0f ? alpha * sums[j][r] + beta * out : alpha * sums[j][r];
            }
    }
}

// Lanes summed in a fixed order: (0+4, 1+5, 2+6, 3+7), then pairs, then the last two.
__attribute__((always_inline)) inline float reduce_add(__m256 v) {
    const __m128 q = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    const __m128 h = _mm_add_ps(q, _mm_movehl_ps(q, q));
    return _mm_cvtss_f32(_mm_add_ss(h, _mm_shuffle_ps(h, h, 1)));
}

void tail_dot_products(int64_t m, int64_t t, int64_t k, float alpha, const float* a, int64_t lda, const float* bt,
                       float beta, float* c, int64_t ldc) {
    const int64_t whole = k / 8 * 8;
    const __m256i rest = lane_mask(k - whole);
    for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < t; ++j) {
            const float* ar = a + i * lda;
            const float* br = bt + j * k;
            __m256 acc = _mm256_setzero_ps();
            for (int64_t p = 0; p < whole; p += 8)
                acc = _mm256_fmadd_ps(_mm256_loadu_ps(ar + p), _mm256_loadu_ps(br + p), acc);
            if (k > whole)
                acc = _mm256_fmadd_ps(_mm256_maskload_ps(ar + whole, rest), _mm256_maskload_ps(br + whole, rest), acc);
            const float sum = reduce_add(acc);
            float& out = c[i * ldc + j];
            out = beta != 0.0f ? alpha * sum + beta * out : alpha * sum;
        }
}

void tail_ta(int64_t t, int64_t m, int64_t k, float alpha, const float* a, int64_t lda, const float* b, int64_t ldb,
             float beta, float* c, int64_t ldc) {
    switch (t) {
#define XYLEM_TAIL_CASE_(T) \
    case T: return tail_across_rows<T>(m, k, alpha, a, lda, b, ldb, beta, c, ldc);
        XYLEM_TAIL_CASE_(1) XYLEM_TAIL_CASE_(2) XYLEM_TAIL_CASE_(3) XYLEM_TAIL_CASE_(4) XYLEM_TAIL_CASE_(5)
        XYLEM_TAIL_CASE_(6) XYLEM_TAIL_CASE_(7)
#undef XYLEM_TAIL_CASE_
    }
}

template <bool TA>
void whole_vectors(int64_t f, int64_t m, int64_t k, float alpha, const float* a, int64_t lda, const float* b,
                   int64_t ldb, float beta, float* c, int64_t ldc) {
    switch (f) {
    case 1: return vector_columns<1, TA>(m, k, alpha, a, lda, b, ldb, beta, c, ldc);
    case 2: return vector_columns<2, TA>(m, k, alpha, a, lda, b, ldb, beta, c, ldc);
    case 3: return vector_columns<3, TA>(m, k, alpha, a, lda, b, ldb, beta, c, ldc);
    case 4: return vector_columns<4, TA>(m, k, alpha, a, lda, b, ldb, beta, c, ldc);
    }
}

void narrow(bool ta, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda, const float* b,
            int64_t ldb, float beta, float* c, int64_t ldc) {
    const int64_t f = n / 8, t = n % 8;
    // Whole vectors in blocks of at most 4 (3 rows a tile: 12 accumulators), each block a pass
    // over A: wider tiles have fewer rows and read B (from L2 when k is large) once per 1 or 2 rows.
    for (int64_t j = 0; j < f;) {
        const int64_t fb = f - j >= 4 ? 4 : f - j == 3 ? 2 : f - j;  // never 3: R = 4 spills
        if (ta) whole_vectors<true>(fb, m, k, alpha, a, lda, b + 8 * j, ldb, beta, c + 8 * j, ldc);
        else whole_vectors<false>(fb, m, k, alpha, a, lda, b + 8 * j, ldb, beta, c + 8 * j, ldc);
        j += fb;
    }
    if (t == 0) return;
    const int64_t j0 = 8 * f;
    if (ta) return tail_ta(t, m, k, alpha, a, lda, b + j0, ldb, beta, c + j0, ldc);
    thread_local std::vector<float> bt;
    bt.resize(static_cast<size_t>(t * k));
    for (int64_t p = 0; p < k; ++p)
        for (int64_t j = 0; j < t; ++j) bt[static_cast<size_t>(j * k + p)] = b[p * ldb + j0 + j];
    tail_dot_products(m, t, k, alpha, a, lda, bt.data(), beta, c + j0, ldc);
}

}  // namespace avx2

#pragma GCC pop_options
#endif

}  // namespace

bool narrow_gemm_available() {
#if defined(__x86_64__)
    // The CPU has AVX-512 and XYLEM_NATIVE_ISA does not cap it away; or the level is avx2 and the
    // CPU has FMA (every AVX2 CPU but a few early VIA ones).
    static const bool fma = __builtin_cpu_supports("fma");
    return isa() == Isa::avx512 || (isa() == Isa::avx2 && fma);
#else
    return false;
#endif
}

bool wide_gemm_available() {
#if defined(__x86_64__)
    return isa() == Isa::avx512;
#else
    return false;
#endif
}

void own_sgemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
               const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
#if defined(__x86_64__)
    if (isa() == Isa::avx512) wide_avx512(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    else avx2::narrow(ta, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);  // n <= 64, !tb: the callers' rules
#else
    (void)ta, (void)tb, (void)m, (void)n, (void)k, (void)alpha, (void)a, (void)lda, (void)b, (void)ldb, (void)beta,
        (void)c, (void)ldc;
#endif
}

}  // namespace xylem::native
