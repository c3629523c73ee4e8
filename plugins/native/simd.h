// Kernels whose register tiles differ by instruction-set level, and that multiply-add with FMA
// where the level has it: the direct convolutions (ops/conv_direct.cpp), attention's block
// products, and the exact GELU's polynomials (act_fwd/act_bwd and the fused opcodes, through
// S::kFma and vecmath.h's madd).
//
// XYLEM_KERNEL_LEVELS(ret, name, (params), (args)) { body } is XYLEM_KERNEL (isa.h) for a body
// that is a template on its level's `Simd` traits (`template <class S>`): the vector width S::L
// (16 floats at avx512, 8 at avx2, 4 at baseline), its int vectors for lane masks (S::Vi), its vector registers (S::kRegisters: a kernel
// sizes its register tiles by them), S::splat(x) and S::fma(a, b, c) = a*b + c. As with XYLEM_KERNEL the three compilations
// are picked once per process by the level (XYLEM_NATIVE_ISA caps it). Unlike XYLEM_KERNEL's,
// the avx512 and avx2 compilations fuse the multiply-add (one rounding), the baseline one does
// not (two): such a kernel gives the same bits for any thread count on one level, and results
// within float rounding across levels, like OpenBLAS and the narrow GEMM (docs/architecture.md,
// "Determinism"). FMA is not part of AVX2: the avx2 compilation runs only where the CPU has it
// (every AVX2 CPU Intel and AMD have shipped does), else the baseline one does.
//
// The traits' fma() carries its level's target and is not always_inline: GCC will not inline a
// function compiled for AVX-512 into the template body (compiled for baseline x86-64) but does
// inline it into the `flatten` wrapper the body ends up in, so no call is left.
#pragma once

#include <immintrin.h>

#include "isa.h"

namespace xylem::native {

struct SimdAvx512 {
    static constexpr int L = 16;     // floats per vector
    static constexpr int kRegisters = 32;
    static constexpr bool kFma = true;  // fma() and vecmath's madd<kFma> round once
    using V = float __attribute__((vector_size(64)));
    using Vu = float __attribute__((vector_size(64), aligned(4), may_alias));
    using Vi = int __attribute__((vector_size(64)));  // lane masks (comparisons give -1 or 0)
    using Viu = int __attribute__((vector_size(64), aligned(4), may_alias));
    // x in every lane: a broadcast (`V{} + x` adds +0.0 lane by lane, which GCC keeps: it turns
    // -0.0 into +0.0; GCC 12 built V{x, x, ...} from a loaded x as 16 masked broadcasts).
#if defined(__x86_64__) && defined(__GNUC__)
    __attribute__((target("avx512f"))) static V splat(float x) { return reinterpret_cast<V>(_mm512_set1_ps(x)); }
#else
    static V splat(float x) { return V{x, x, x, x, x, x, x, x, x, x, x, x, x, x, x, x}; }
#endif
#if defined(__x86_64__) && defined(__GNUC__)
    __attribute__((target("avx512f"))) static V fma(V a, V b, V c) {
        return reinterpret_cast<V>(_mm512_fmadd_ps(reinterpret_cast<__m512>(a), reinterpret_cast<__m512>(b),
                                                   reinterpret_cast<__m512>(c)));
    }
#else
    static V fma(V a, V b, V c) { return a * b + c; }
#endif
    // *p = v past the caches (p aligned to the vector): an output not read again soon costs no
    // read of its lines first (the stores of an ordinary write fetch them). nt_fence() after.
#if defined(__x86_64__) && defined(__GNUC__)
    __attribute__((target("avx512f"))) static void stream(float* p, V v) { _mm512_stream_ps(p, reinterpret_cast<__m512>(v)); }
#else
    static void stream(float* p, V v) { *reinterpret_cast<V*>(p) = v; }
#endif
};

struct SimdAvx2 {
    static constexpr int L = 8;
    static constexpr int kRegisters = 16;
    static constexpr bool kFma = true;
    using V = float __attribute__((vector_size(32)));
    using Vu = float __attribute__((vector_size(32), aligned(4), may_alias));
    using Vi = int __attribute__((vector_size(32)));  // lane masks (comparisons give -1 or 0)
    using Viu = int __attribute__((vector_size(32), aligned(4), may_alias));
#if defined(__x86_64__) && defined(__GNUC__)
    __attribute__((target("avx2"))) static V splat(float x) { return reinterpret_cast<V>(_mm256_set1_ps(x)); }
#else
    static V splat(float x) { return V{x, x, x, x, x, x, x, x}; }
#endif
#if defined(__x86_64__) && defined(__GNUC__)
    __attribute__((target("avx2,fma"))) static V fma(V a, V b, V c) {
        return reinterpret_cast<V>(_mm256_fmadd_ps(reinterpret_cast<__m256>(a), reinterpret_cast<__m256>(b),
                                                   reinterpret_cast<__m256>(c)));
    }
#else
    static V fma(V a, V b, V c) { return a * b + c; }
#endif
#if defined(__x86_64__) && defined(__GNUC__)
    __attribute__((target("avx"))) static void stream(float* p, V v) { _mm256_stream_ps(p, reinterpret_cast<__m256>(v)); }
#else
    static void stream(float* p, V v) { *reinterpret_cast<V*>(p) = v; }
#endif
};

struct SimdBaseline {
    static constexpr int L = 4;
    static constexpr int kRegisters = 16;
    static constexpr bool kFma = false;
    using V = float __attribute__((vector_size(16)));
    using Vu = float __attribute__((vector_size(16), aligned(4), may_alias));
    using Vi = int __attribute__((vector_size(16)));  // lane masks (comparisons give -1 or 0)
    using Viu = int __attribute__((vector_size(16), aligned(4), may_alias));
#if defined(__x86_64__) && defined(__GNUC__)
    static V splat(float x) { return reinterpret_cast<V>(_mm_set1_ps(x)); }
#else
    static V splat(float x) { return V{x, x, x, x}; }
#endif
    static V fma(V a, V b, V c) { return a * b + c; }  // two roundings (-ffp-contract=off)
#if defined(__x86_64__) && defined(__GNUC__)
    static void stream(float* p, V v) { _mm_stream_ps(p, reinterpret_cast<__m128>(v)); }
#else
    static void stream(float* p, V v) { *reinterpret_cast<V*>(p) = v; }
#endif
};

// Orders streaming stores (S::stream) before what follows: a worker's last act before the
// pool's join, so that another thread reads what it stored.
inline void nt_fence() {
#if defined(__x86_64__)
    _mm_sfence();
#endif
}

// The avx2 compilation where the CPU has FMA, else the baseline one.
bool cpu_has_fma();
template <class F>
F pick_simd_level(F avx512, F avx2, F baseline) {
    const F f = pick_level(avx512, avx2, baseline);
    return f == avx2 && !cpu_has_fma() ? baseline : f;
}

#if defined(__x86_64__) && defined(__GNUC__)
#define XYLEM_AT_AVX2_FMA_ __attribute__((target("avx2,fma"), flatten))
#else
#define XYLEM_AT_AVX2_FMA_ __attribute__((flatten))
#endif

#define XYLEM_KERNEL_LEVELS(ret, name, params, args)                                                           \
    template <class S>                                                                                         \
    static inline __attribute__((always_inline)) ret name##_kernel_ params;                                    \
    XYLEM_AT_AVX512_ static ret name##_avx512_ params { return name##_kernel_<::xylem::native::SimdAvx512> args; } \
    XYLEM_AT_AVX2_FMA_ static ret name##_avx2_ params { return name##_kernel_<::xylem::native::SimdAvx2> args; }   \
    XYLEM_AT_BASELINE_ static ret name##_baseline_ params {                                                    \
        return name##_kernel_<::xylem::native::SimdBaseline> args;                                             \
    }                                                                                                          \
    static ret(*const name##_at_level_) params =                                                               \
        ::xylem::native::pick_simd_level(&name##_avx512_, &name##_avx2_, &name##_baseline_);                   \
    ret name params { return name##_at_level_ args; }                                                          \
    template <class S>                                                                                         \
    static inline __attribute__((always_inline)) ret name##_kernel_ params

}  // namespace xylem::native
