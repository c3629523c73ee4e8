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
// No level uses FMA (avx512f and avx2 do not imply it) and the plugin builds with
// -ffp-contract=off, so every level gives the same bits for these loops; the AVX-512 narrow GEMM
// (gemm_narrow.cpp) and OpenBLAS's kernels do not, which is why results across levels agree
// within float tolerance rather than bit for bit (docs/architecture.md, "Determinism").
#pragma once

namespace xylem::native {

enum class Isa : int { baseline = 0, avx2 = 1, avx512 = 2 };

// The level the plugin's kernels run at: the CPU's best, capped by XYLEM_NATIVE_ISA (isa.cpp),
// decided when the plugin loads (a global: kernels entered per tile or per row read it).
// isa_error() is non-null when that variable holds something else than a level name; the
// plugin then refuses to start (framework_get) with that message.
extern const Isa kActiveIsa;
inline Isa isa() { return kActiveIsa; }
const char* isa_error();
const char* isa_name(Isa level);  // "avx512", "avx2", "baseline": the values XYLEM_NATIVE_ISA takes
Isa cpu_isa();                     // what the CPU (and OS) supports, before the cap

// ---- one body, three compilations ----------------------------------------------------------
// by_isa(f) runs f() inlined into a function compiled for the current level: `flatten` inlines
// f and everything it calls (where GCC can), so the loops are vectorised for that level. f's
// code is compiled for baseline x86-64 wherever it is not inlined, so a call that stays a call
// is still safe on every CPU.
#if defined(__x86_64__) && defined(__GNUC__)
template <class F>
__attribute__((target("avx512f"), flatten)) inline auto run_avx512(const F& f) { return f(); }
template <class F>
__attribute__((target("avx2"), flatten)) inline auto run_avx2(const F& f) { return f(); }
template <class F>
__attribute__((flatten)) inline auto run_baseline(const F& f) { return f(); }
// The same for loops GCC must not turn into memcpy/memset calls (short row copies, where the
// call costs more than the copy).
template <class F>
__attribute__((target("avx512f"), flatten, optimize("no-tree-loop-distribute-patterns"))) inline auto
run_avx512_no_libcalls(const F& f) { return f(); }
template <class F>
__attribute__((target("avx2"), flatten, optimize("no-tree-loop-distribute-patterns"))) inline auto
run_avx2_no_libcalls(const F& f) { return f(); }
template <class F>
__attribute__((flatten, optimize("no-tree-loop-distribute-patterns"))) inline auto
run_baseline_no_libcalls(const F& f) { return f(); }

template <class F>
inline auto by_isa(const F& f) {
    switch (isa()) {
    case Isa::avx512: return run_avx512(f);
    case Isa::avx2: return run_avx2(f);
    case Isa::baseline: break;
    }
    return run_baseline(f);
}
template <class F>
inline auto by_isa_no_libcalls(const F& f) {
    switch (isa()) {
    case Isa::avx512: return run_avx512_no_libcalls(f);
    case Isa::avx2: return run_avx2_no_libcalls(f);
    case Isa::baseline: break;
    }
    return run_baseline_no_libcalls(f);
}
#else
template <class F>
inline auto by_isa(const F& f) { return f(); }
template <class F>
inline auto by_isa_no_libcalls(const F& f) { return f(); }
#endif

// Defines `ret name params` as a kernel compiled per level: the braced body that follows the
// macro is the kernel; `args` names the parameters again, to forward them. E.g.
//   XYLEM_KERNEL(void, scale, (float* __restrict x, int64_t n, float k), (x, n, k)) {
//       for (int64_t i = 0; i < n; ++i) x[i] *= k;
//   }
// The body is an always-inline function of its own, so __restrict and the other parameter
// qualifiers keep their meaning inside each compilation.
#define XYLEM_KERNEL_WITH_(dispatch, ret, name, params, args)                          \
    static inline __attribute__((always_inline)) ret name##_kernel_ params;            \
    ret name params { return dispatch([&]() -> ret { return name##_kernel_ args; }); } \
    static inline __attribute__((always_inline)) ret name##_kernel_ params
#define XYLEM_KERNEL(ret, name, params, args) XYLEM_KERNEL_WITH_(::xylem::native::by_isa, ret, name, params, args)
#define XYLEM_KERNEL_NO_LIBCALLS(ret, name, params, args) \
    XYLEM_KERNEL_WITH_(::xylem::native::by_isa_no_libcalls, ret, name, params, args)

}  // namespace xylem::native
