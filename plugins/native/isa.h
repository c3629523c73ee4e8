// The instruction-set level the native plugin's own kernels run at, and how a kernel is compiled
// once per level and picked at run time.
//
// The .so is built for baseline x86-64 (it must load on any x86-64); the compute-bound loops
// (Adam's sqrt and divide, the fused programs' exp and tanh, im2col, the gathers) are compiled
// three times: AVX-512, AVX2 and baseline. The level is the CPU's, capped by XYLEM_NATIVE_ISA
// (avx512, avx2 or baseline), so one machine can run, and test, the code every other machine
// runs; the same switch pins OpenBLAS's core type (blas.cpp). GCC's target_clones picked the
// clone by CPU alone, in an ifunc resolver that nothing could steer, hence this dispatch.
//
// No XYLEM_KERNEL loop uses FMA (avx512f and avx2 do not imply it) and the plugin builds with
// -ffp-contract=off, so every level gives the same bits for these loops; the level templates of
// simd.h (direct convolutions, attention, the exact GELU), the narrow GEMM kernels
// (gemm_narrow.cpp: AVX-512, and AVX2 with FMA) and OpenBLAS's kernels do not, which is why
// results across levels agree within float tolerance rather than bit for bit
// (docs/architecture.md, "Determinism").
#pragma once

namespace xylem::native {

enum class Isa : int { baseline = 0, avx2 = 1, avx512 = 2 };

// The level the plugin's kernels run at: the CPU's best, capped by XYLEM_NATIVE_ISA (isa.cpp),
// decided once per process. isa_error() is non-null when that variable holds something else than
// a level name; the plugin then refuses to start (framework_get) with that message.
Isa isa();
const char* isa_error();
const char* isa_name(Isa level);  // "avx512", "avx2", "baseline": the values XYLEM_NATIVE_ISA takes
Isa cpu_isa();                     // what the CPU (and OS) supports, before the cap

// ---- one body, three compilations ----------------------------------------------------------
// XYLEM_KERNEL(ret, name, (params), (args)) { body } defines `ret name params`: the body is an
// always-inline function, and three `flatten` functions compiled for AVX-512, AVX2 and baseline
// x86-64 inline it (and everything it calls, where GCC can), so its loops are vectorised for each
// level. Which one runs is picked once, when the plugin loads, into a function pointer: a call
// costs one indirect call, as GCC's ifunc-based target_clones did (the fused interpreter calls
// its arithmetic kernel for every instruction of every 128-element tile, ~200k times per LSTM
// step; a per-call switch on the level cost it 4%). `args` names the parameters again, e.g.
//   XYLEM_KERNEL(void, scale, (float* __restrict x, int64_t n, float k), (x, n, k)) {
//       for (int64_t i = 0; i < n; ++i) x[i] *= k;
//   }
// Code the body calls but GCC does not inline stays compiled for baseline x86-64: safe on every
// CPU. No kernel may run during static initialisation (the pointers are set then).
template <class F>
F pick_level(F avx512, F avx2, F baseline) {
    switch (isa()) {
    case Isa::avx512: return avx512;
    case Isa::avx2: return avx2;
    case Isa::baseline: break;
    }
    return baseline;
}

#if defined(__x86_64__) && defined(__GNUC__)
#define XYLEM_AT_AVX512_ __attribute__((target("avx512f"), flatten))
#define XYLEM_AT_AVX2_ __attribute__((target("avx2"), flatten))
#define XYLEM_AT_BASELINE_ __attribute__((flatten))
#else
#define XYLEM_AT_AVX512_ __attribute__((flatten))
#define XYLEM_AT_AVX2_ __attribute__((flatten))
#define XYLEM_AT_BASELINE_ __attribute__((flatten))
#endif

#define XYLEM_KERNEL_WITH_(extra, ret, name, params, args)                                                  \
    static inline __attribute__((always_inline)) ret name##_kernel_ params;                                 \
    XYLEM_AT_AVX512_ extra static ret name##_avx512_ params { return name##_kernel_ args; }                 \
    XYLEM_AT_AVX2_ extra static ret name##_avx2_ params { return name##_kernel_ args; }                     \
    XYLEM_AT_BASELINE_ extra static ret name##_baseline_ params { return name##_kernel_ args; }             \
    static ret(*const name##_at_level_) params =                                                            \
        ::xylem::native::pick_level(&name##_avx512_, &name##_avx2_, &name##_baseline_);                     \
    ret name params { return name##_at_level_ args; }                                                       \
    static inline __attribute__((always_inline)) ret name##_kernel_ params
#define XYLEM_KERNEL(ret, name, params, args) XYLEM_KERNEL_WITH_(, ret, name, params, args)
// The same for loops GCC must not turn into memcpy/memset calls (short row copies, where the
// call costs more than the copy).
#define XYLEM_KERNEL_NO_LIBCALLS(ret, name, params, args) \
    XYLEM_KERNEL_WITH_(__attribute__((optimize("no-tree-loop-distribute-patterns"))), ret, name, params, args)

}  // namespace xylem::native
