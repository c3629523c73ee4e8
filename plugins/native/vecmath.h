// Float exp, tanh, log and erf that GCC vectorises: straight-line arithmetic and selects, no calls, where
// libm's stay one call per element (measured on the 2-vCPU Xeon: expf 1.7 ns, tanhf 8.1 ns and
// logf 2.2 ns per element, an add 0.08 ns). Cephes' single-precision polynomials; within 1e-6
// relative of std::exp, std::tanh and std::log for every normal result, the same infinities,
// zeros and NaNs (native_fused_exec_test sweeps them). Results in the subnormal range differ from
// std::exp by at most one unit of the last place there. Compile the loops that use them
// with -fno-trapping-math: without it GCC threads the selects into branches (a branch whose
// constants could overflow may not be made unconditional) and keeps the loop scalar.
#pragma once

#include <bit>
#include <cstdint>
#include <limits>

namespace xylem::native::vecmath {

// ReLU and the gradient it passes back, as act_fwd/act_bwd and the batch norm's ReLU compute them:
// max(x, 0) (NaN and -0 give +0), and dy where the output y is positive. dy is taken whatever y
// is, so a loop's select vectorises.
inline float relu(float x) { return x > 0.0f ? x : 0.0f; }
inline float relu_gradient(float dy, float y) { return y > 0.0f ? dy : 0.0f; }

// a*b + c: rounded once (FMA) where Fma, else twice. The plugin builds with -ffp-contract=off, so
// GCC never fuses on its own: a kernel says which it wants (simd.h's S::kFma, by level), and every
// loop of one level computes a function the same way (act_fwd and the fused opcodes agree).
template <bool Fma>
inline float madd(float a, float b, float c) {
    if constexpr (Fma) return __builtin_fmaf(a, b, c);
    else return a * b + c;
}

// e^x as x = n ln2 + r: Cephes' polynomial for e^r, to be multiplied by 2^n. n is rounded to
// nearest by the 1.5 * 2^23 trick (no libm call), and read as an integer from the low bits of
// that sum rather than converted: NaN then gives some integer, not undefined behaviour, and the
// NaN goes on through p. |xc| must stay below 2^21.
template <bool Fma = false>
inline float exp_reduced_(float xc, float& n, int32_t& ni) {
    const float shifted = madd<Fma>(xc, 1.44269504088896341f, 12582912.0f);
    ni = std::bit_cast<int32_t>(shifted) - 0x4b400000;  // 0x4b400000: the bits of 12582912.0f
    n = shifted - 12582912.0f;
    // xc - n ln2, ln2 in two parts (Cody-Waite); without Fma (xc - n*0.693359375) + n*2.12194440e-4
    const float r = madd<Fma>(n, 2.12194440e-4f, madd<Fma>(n, -0.693359375f, xc));
    float p = 1.9875691500e-4f;
    p = madd<Fma>(p, r, 1.3981999507e-3f);
    p = madd<Fma>(p, r, 8.3334519073e-3f);
    p = madd<Fma>(p, r, 4.1665795894e-2f);
    p = madd<Fma>(p, r, 1.6666665459e-1f);
    p = madd<Fma>(p, r, 5.0000001201e-1f);
    return madd<Fma>(p * r, r, r) + 1.0f;
}

template <bool Fma = false>
inline float exp(float x) {
    constexpr float kMax = 88.72283935546875f;        // the largest x whose e^x is finite in float
    constexpr float kMin = -103.97208404541015625f;   // below it e^x rounds to 0
    const bool over = x > kMax, under = x < kMin;
    // NaN is not replaced: it goes through the arithmetic and comes out NaN. (Selecting x itself
    // for it made GCC divide twice in 1 / (1 + e^-x): once for the NaN lanes, once for the others.)
    const float xc = over ? kMax : under ? kMin : x;
    float n;
    int32_t ni;
    const float p = exp_reduced_<Fma>(xc, n, ni);
    // 2^n as two normal powers of two: n spans [-150, 128], past either end of one float's
    // exponent. Each product is exact but the last, so the split does not change the result.
    const int32_t n1 = ni >> 1, n2 = ni - n1;
    const float s1 = std::bit_cast<float>((n1 + 127) << 23), s2 = std::bit_cast<float>((n2 + 127) << 23);
    const float y = p * s1 * s2;
    return over ? std::numeric_limits<float>::infinity() : under ? 0.0f : y;
}

// 1 / (1 + e^-x), the kit's sigmoid, with the exp above specialised to its use here (the same
// bits): below z = -x = -20, e^z < 3e-9 and 1 + e^z rounds to exactly 1, so z is raised to -20;
// up to kMax, 2^n (n <= 128) is 2^(n-1) * 2, both factors exact; past kMax e^z is inf and the
// result 0. NaN goes through the arithmetic.
inline float sigmoid(float x) {
    constexpr float kMax = 88.72283935546875f;
    const float z = -x;
    const bool over = z > kMax, under = z < -20.0f;
    const float zc = over ? kMax : under ? -20.0f : z;
    float n;
    int32_t ni;
    const float p = exp_reduced_(zc, n, ni);
    const float e = p * std::bit_cast<float>((ni + 126) << 23) * 2.0f;
    return over ? 0.0f : 1.0f / (1.0f + e);
}

inline float tanh(float x) {
    const bool negative = x < 0.0f;
    const float ax = negative ? -x : x;
    // |x| > 0.625: 1 - 2/(e^2|x| + 1), which loses little to cancellation there (tanh > 0.55).
    // Past 2|x| = 64, e^2|x| > 6e27 and the result rounds to exactly 1 whatever e^2|x| is, so the
    // argument is capped there: 2^n is then one normal power of two (n <= 93), and overflow, a
    // second scale factor and exp's special cases are not needed (NaN takes 64 here and the
    // polynomial below).
    const float t = 2.0f * ax, tc = t < 64.0f ? t : 64.0f;
    float n;
    int32_t ni;
    const float p = exp_reduced_(tc, n, ni);
    const float e = p * std::bit_cast<float>((ni + 127) << 23);
    const float big = 1.0f - 2.0f / (e + 1.0f);
    // |x| <= 0.625: an odd polynomial (exact at 0, keeps -0).
    const float z = x * x;
    const float small =
        ((((-5.70498872745e-3f * z + 2.06390887954e-2f) * z - 5.37397155531e-2f) * z + 1.33314422036e-1f) * z -
         3.33332819422e-1f) * z * x + x;
    return ax > 0.625f ? (negative ? -big : big) : small;  // NaN takes the polynomial: NaN
}

inline float log(float x) {
    constexpr float kInf = std::numeric_limits<float>::infinity();
    const bool invalid = !(x >= 0.0f), zero = x == 0.0f, inf = x == kInf;  // invalid: below 0 or NaN
    const bool subnormal = x < std::numeric_limits<float>::min();
    // x = m 2^e with m in [0.5, 1) (frexp by bits; a subnormal scaled by 2^23 first). Special
    // inputs take x = 1 here and their own result below.
    const float xs = invalid || zero || inf ? 1.0f : subnormal ? x * 8388608.0f : x;
    const int32_t bits = std::bit_cast<int32_t>(xs);
    const int32_t e = (bits >> 23) - 126 - (subnormal ? 23 : 0);
    float m = std::bit_cast<float>((bits & 0x007fffff) | 0x3f000000);
    // m in [sqrt(1/2), sqrt 2) around 1, so log(m) = log(1 + f) with |f| < 0.42.
    const bool below = m < 0.707106781186547524f;
    const float ef = static_cast<float>(below ? e - 1 : e);
    const float f = below ? m + m - 1.0f : m - 1.0f;
    const float z = f * f;
    float y = 7.0376836292e-2f;
    y = y * f - 1.1514610310e-1f;
    y = y * f + 1.1676998740e-1f;
    y = y * f - 1.2420140846e-1f;
    y = y * f + 1.4249322787e-1f;
    y = y * f - 1.6668057665e-1f;
    y = y * f + 2.0000714765e-1f;
    y = y * f - 2.4999993993e-1f;
    y = y * f + 3.3333331174e-1f;
    y = y * f * z + ef * -2.12194440e-4f - 0.5f * z;
    const float r = (f + y) + ef * 0.693359375f;  // + e ln2, ln2 in two parts (Cody-Waite)
    // (A select between more results stops GCC's if-conversion: the loop would stay scalar.)
    return invalid ? std::numeric_limits<float>::quiet_NaN() : zero ? -kInf : inf ? kInf : r;
}

// erf by Norbert Juffa's single-precision minimax approximations (max error about 1 ulp with
// FMA, where Fma; a few ulp with separate multiplies and adds): an odd polynomial below |x| = 475/512,
// 1 - exp(poly(|x|)) with the sign of x above. Both branches are computed and one selected, so the
// loop vectorises; infinities give +-1 (exp(-inf) = 0), NaN the polynomial's NaN.
template <bool Fma = false>
inline float erf(float x) {
    const float t = x < 0.0f ? -x : x, s = x * x;
    float r = madd<Fma>(-1.72853470e-5f, t, 3.83197126e-4f);
    const float u = madd<Fma>(-3.88396438e-3f, t, 2.42546219e-2f);
    r = madd<Fma>(r, s, u);
    r = madd<Fma>(r, t, -1.06777877e-1f);
    r = madd<Fma>(r, t, -6.34846687e-1f);
    r = madd<Fma>(r, t, -1.28717512e-1f);
    r = madd<Fma>(r, t, -t);
    // Where the result is taken (t > 0.93) r is below -1.6. Below -20, e^r < 3e-9 and 1 - e^r
    // rounds to exactly 1 whatever e^r is: r is capped there (NaN too: the polynomial q is taken
    // then), so 2^n is one normal power of two (n >= -29) and exp's special cases are not needed.
    const float rc = r > -20.0f ? r : -20.0f;
    float n;
    int32_t ni;
    const float e = exp_reduced_<Fma>(rc, n, ni) * std::bit_cast<float>((ni + 127) << 23);
    const float big = 1.0f - e;
    float q = -5.96761703e-4f;
    q = madd<Fma>(q, s, 4.99119423e-3f);
    q = madd<Fma>(q, s, -2.67681349e-2f);
    q = madd<Fma>(q, s, 1.12819925e-1f);
    q = madd<Fma>(q, s, -3.76125336e-1f);
    q = madd<Fma>(q, s, 1.28379166e-1f);
    q = madd<Fma>(q, x, x);
    return t > 0.927734375f ? (x < 0.0f ? -big : big) : q;
}

// GELU and its derivative in both forms: the kit's formulas (plugin_kit/fused.h: gelu_value,
// gelu_derivative, gelu_tanh_value, gelu_tanh_derivative), term for term in float, with the erf,
// exp and tanh above in place of libm's, so that act_fwd/act_bwd and the fused opcodes vectorise
// and give the same bits. The exact GELU's polynomials fuse their multiply-adds where Fma (the
// avx512 and avx2 levels: about a third fewer instructions in the character GPT's costliest
// elementwise ops).
template <bool Fma = false>
inline float gelu(float x) {
    return 0.5f * x * (1.0f + erf<Fma>(x * 0.70710678118654752440f));
}
template <bool Fma = false>
inline float gelu_derivative(float x) {
    return 0.5f * (1.0f + erf<Fma>(x * 0.70710678118654752440f)) + x * exp<Fma>(-0.5f * x * x) * 0.39894228040143267794f;
}
inline float gelu_tanh(float x) {
    const float u = 0.79788456080286535588f * (x + 0.044715f * x * x * x);
    return 0.5f * x * (1.0f + tanh(u));
}
inline float gelu_tanh_derivative(float x) {
    const float u = 0.79788456080286535588f * (x + 0.044715f * x * x * x);
    const float t = tanh(u);
    return 0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * 0.79788456080286535588f * (1.0f + 0.134145f * x * x);
}

}  // namespace xylem::native::vecmath
