// OpenBLAS, loaded by the plugin itself on first use rather than linked: OpenBLAS picks its
// kernels (its "core type") once, in its constructor, from OPENBLAS_CORETYPE or the CPU, so the
// plugin must decide that variable before the library loads for XYLEM_NATIVE_ISA to cap
// OpenBLAS's kernels along with the plugin's own (isa.h). Always one OpenBLAS thread: GEMMs
// are spread over the plugin's own pool, in blocks fixed by the shape (ops/gemm.cpp), so results
// do not depend on the thread count (docs/architecture.md, "Determinism").
#pragma once

#include <cblas.h>

namespace xylem::native {

struct Blas {
    decltype(&::cblas_sgemm) sgemm = nullptr;
    decltype(&::cblas_sgemv) sgemv = nullptr;
    decltype(&::openblas_get_corename) corename = nullptr;
    decltype(&::openblas_get_config) config = nullptr;
    decltype(&::openblas_get_num_threads) num_threads = nullptr;
    char pinned[64] = {};  // "set OPENBLAS_CORETYPE=Haswell (XYLEM_NATIVE_ISA=avx2)" and the like, or ""
    char error[320] = {};  // why OpenBLAS could not be loaded or used, or "" when sgemm is set
};

// The library, loaded (and set to one thread) on the first call; thread-safe.
const Blas& blas();

// cblas_sgemm, row-major, through blas() (callers check blas().error first: framework_get does).
inline void cblas_sgemm_rm(bool ta, bool tb, int m, int n, int k, float alpha, const float* a, int lda, const float* b,
                           int ldb, float beta, float* c, int ldc) {
    blas().sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, m, n, k, alpha, a, lda,
                 b, ldb, beta, c, ldc);
}

// cblas_sgemv, row-major: y = alpha*op(A)*x + beta*y, A [m, n] (through blas(), as above).
inline void cblas_sgemv_rm(bool ta, int m, int n, float alpha, const float* a, int lda, const float* x, int incx,
                           float beta, float* y) {
    blas().sgemv(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, m, n, alpha, a, lda, x, incx, beta, y, 1);
}

}  // namespace xylem::native
