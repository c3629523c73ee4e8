// The op conformance suite's tolerance table and shared shapes. The suite runs every op on
// every backend in the plugin folder and compares with the float64 reference in
// support/reference.h; a plugin author runs it unchanged against their own plugin.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "xylem/shape.h"

namespace xylem::test::tol {

// Tolerances on the normalized error max|got - ref| / max(1, max|ref|) (support/backends.h).
// A real bug (wrong index, transposition, missing term) gives errors of order 1e-2 or more;
// these bounds sit about 10x above float32 rounding on the native backend.
//
//   op family                  | tolerance                  | why
//   ---------------------------+----------------------------+--------------------------------------
//   fill, copy                 | 1e-7                       | moves bits: effectively exact
//   axpby, mul                 | 1e-6                       | one or two float roundings
//   gemm, linear_fwd           | 1e-5 * max(1, K/32)        | float accumulation over K products
//   bias_grad                  | 1e-5 * max(1, R/32)        | float accumulation over R summed values
//   act_fwd, act_bwd           | 1e-6                       | exp/tanh within a few ulp
//   softmax_fwd, softmax_bwd   | 1e-6                       | exp, one row sum, one division
//   xent/nll/mse forward       | 1e-5                       | a sum over the batch into one float
//   xent/nll/mse backward      | 1e-6                       | elementwise from the row's softmax
//   dropout_fwd                | mask decision exact; 1e-6  | the keep decision is integer hashing
//   sgd_update                 | 1e-6                       | a few roundings per step
//   adam_update, adamw_update  | 2e-6                       | sqrt and division per step
//   rmsprop_update             | 2e-6                       | sqrt and division per step
//   clamp, clip_by_norm        | 1e-6                       | a comparison, or one product
//   sum_squares                | 1e-5 * max(1, sqrt(R/1024))| float accumulation over R positive squares
//   accuracy                   | 1e-7                       | an integer count
//   conv2d fwd/bwd_data/filter | 1e-5 * max(1, K/32)        | K = products summed per output
//   pool2d fwd/bwd             | 1e-6                       | a max, or a sum of a few over a count
//   batchnorm fwd/bwd          | 1e-5 * max(1, R/32)        | R = values per channel (mean, variance)
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
constexpr double kCount = 1e-7;

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

}  // namespace xylem::test
