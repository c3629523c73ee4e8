// What the native narrow-GEMM test uses: random operands, and the product computed in row blocks of C,
// each block a GEMM of its own, to compare bit for bit with the whole product (the plugin cuts a
// GEMM into row blocks over threads; K is never cut, so no bit may change).
#pragma once

#include <algorithm>
#include <cstring>
#include <random>
#include <vector>

#include "support/backends.h"
#include "support/native_levels.h"  // bits_differ
#include "xylem/op_calls.h"

namespace xylem::test {

inline std::vector<float> random_values(std::mt19937& rng, int64_t n) {
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    std::vector<float> v(static_cast<size_t>(n));
    for (float& x : v) x = u(rng);
    return v;
}

// C = alpha*op(A)*op(B) + beta*C, `rows` rows of C at a time. A is [m, k] (ta: stored [k, m]),
// each block's rows of it kept in that layout; b is op(B)'s tensor as given to the whole GEMM;
// c C's values before. Every block has `rows` rows (or m): the last one ends at m, overlapping
// the one before when `rows` does not divide m, so a kernel picked by shape is the same for all.
inline std::vector<float> gemm_by_row_blocks(Device& dev, bool ta, bool tb, int64_t m, int64_t n, int64_t k,
                                             float alpha, const std::vector<float>& a, const Tensor& b, float beta,
                                             const std::vector<float>& c, int64_t rows) {
    rows = std::min(rows, m);
    std::vector<float> out(c.size());
    for (int64_t start = 0; start < m; start += rows) {
        const int64_t i = std::min(start, m - rows);
        std::vector<float> block(static_cast<size_t>(rows * k));
        for (int64_t r = 0; r < rows; ++r)
            for (int64_t p = 0; p < k; ++p)
                block[static_cast<size_t>(ta ? p * rows + r : r * k + p)] =
                    a[static_cast<size_t>(ta ? p * m + i + r : (i + r) * k + p)];
        const Tensor ab = upload(dev, ta ? Shape{k, rows} : Shape{rows, k}, block);
        Tensor cb = upload(dev, {rows, n}, std::vector<float>(c.begin() + i * n, c.begin() + (i + rows) * n));
        ops::gemm(dev, ta, tb, alpha, ab, b, beta, cb);
        const std::vector<float> got = cb.to_vector();
        std::copy(got.begin(), got.end(), out.begin() + i * n);
    }
    return out;
}


}  // namespace xylem::test
