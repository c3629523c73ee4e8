// The op conformance suite's tolerance table and shared shapes. The suite runs every op on
// every backend in the plugin folder and compares with the float64 reference in
// support/reference.h; a plugin author runs it unchanged against their own plugin.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "xylem/error.h"
#include "xylem/shape.h"

namespace xylem::test::tol {

// Tolerances on the normalized error max|got - ref| / max(1, max|ref|) (support/backends.h): the
// bound each op's line in ops.h states, where a plugin author reads it. A real bug (wrong index,
// transposition, missing term) gives errors of order 1e-2 or more; these bounds sit about 10x
// above float32 rounding on the native backend (moves of bits 1e-7; one or two roundings 1e-6;
// sqrt and division 2e-6; sums grow with the count summed).
constexpr double kCopy = 1e-7;
constexpr double kElementwise = 1e-6;
inline double gemm(int64_t k) {
    return 1e-5 * std::max(1.0, static_cast<double>(k) / 32.0);
}
inline double reduction(int64_t r) {
    return 1e-5 * std::max(1.0, static_cast<double>(r) / 32.0);
}
constexpr double kActivation = 1e-6;
constexpr double kSoftmax = 1e-6;
constexpr double kLossForward = 1e-5;
constexpr double kLossBackward = 1e-6;
constexpr double kDropout = 1e-6;
constexpr double kSgd = 1e-6;
constexpr double kAdam = 2e-6;
constexpr double kRmsprop = 2e-6;
constexpr double kClip = 1e-6;
inline double sum_squares(int64_t r) {
    return 1e-5 * std::max(1.0, std::sqrt(static_cast<double>(r) / 1024.0));
}
// REDUCE: r values per output, as sum_squares (scatter_add_rows uses reduction(r), r = the most
// repeats of one index).
inline double reduce(int64_t r) {
    return sum_squares(r);
}
constexpr double kCount = 1e-7;
// fused_elementwise: a whole program of up to 192 instructions per element, run in float32 (the
// reference runs it in float64), per output.
constexpr double kFused = 1e-5;

// ABI 1.7, as their lines in ops.h. layer_norm_fwd: d values per row's statistics.
inline double layer_norm(int64_t d) {
    return 1e-5 * std::max(1.0, static_cast<double>(d) / 32.0);
}
// layer_norm_bwd: rows summed into dgamma and dbeta, d into each row's dX.
inline double layer_norm_bwd(int64_t d, int64_t rows) {
    return 1e-5 * std::max(1.0, static_cast<double>(std::max(d, rows)) / 32.0);
}
// attention_fwd: l keys used; attention_bwd: also tq queries summed into dK and dV.
inline double attention(int64_t l) {
    return 1e-5 * std::max(1.0, static_cast<double>(l) / 32.0);
}
inline double attention_bwd(int64_t l, int64_t tq) {
    return 1e-5 * std::max(1.0, static_cast<double>(std::max(l, tq)) / 32.0);
}
constexpr double kMaskedSoftmax = 1e-6;
constexpr double kExact = 0.0;  // permute moves values

}  // namespace xylem::test::tol

namespace xylem::test {

// Awkward sizes (1, 7, 33, 129, a tail past 4096-element blocks) and ranks 1 to 4.
inline std::vector<Shape> elementwise_shapes() {
    return {{1}, {7}, {33}, {129}, {1, 129}, {3, 33}, {2, 3, 5, 7}, {2, 4099}};
}

// [rows, classes] for softmax, losses and accuracy: a batch of 1, a single class, odd widths.
inline std::vector<Shape> row_shapes() {
    return {{1, 1}, {1, 7}, {7, 1}, {7, 33}, {33, 129}, {5, 1000}};
}

// What fn throws as an Error, or "<no error>": the cases check an op's refusals by message.
template <class F>
std::string error_of(F&& fn) {
    try {
        fn();
    } catch (const Error& e) {
        return e.what();
    }
    return "<no error>";
}

}  // namespace xylem::test
