// Conformance, softmax and loss family: softmax_fwd/bwd (log and not, logits of +-1000, logits
// near +-1e5 with small spreads), xent/nll/mse forward (acc 0 over garbage, acc 1) and backward,
// and accuracy (with ties).
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "ops/conformance.h"
#include "support/backends.h"
#include "support/reference.h"
#include "xylem/op_calls.h"

namespace xylem::test {
namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

class SoftmaxLossConformance : public BackendTest {};
XYLEM_INSTANTIATE_OVER_BACKENDS(SoftmaxLossConformance);

std::vector<Shape> softmax_shapes() {
    std::vector<Shape> s = row_shapes();
    s.push_back({2, 3, 129});  // rank 3: still over the last axis
    s.push_back({7});          // rank 1: one row
    return s;
}

int64_t rows_of(const Shape& s) {
    return numel(s) / s.back();
}

TEST_P(SoftmaxLossConformance, SoftmaxForward) {
    XYLEM_REQUIRE_OP(XYLEM_OP_SOFTMAX_FWD);
    Rng rng;
    for (bool log : {false, true})
        for (const Shape& s : softmax_shapes()) {
            SCOPED_TRACE(std::string(log ? "log_softmax" : "softmax") + " shape " + to_string(s));
            const auto x = rng.uniform(numel(s), -5.0f, 5.0f);
            Tensor tx = upload(dev(), s, x), ty(s, DType::F32, dev());
            ops::softmax_fwd(dev(), log, tx, ty);
            EXPECT_TRUE(near(ty.to_vector(), ref::softmax_fwd(to_double(x), rows_of(s), s.back(), log), tol::kSoftmax));
        }
}

// Logits of +-1000 overflow a naive exp; rows of equal huge values must still give 1/C.
TEST_P(SoftmaxLossConformance, SoftmaxForwardLargeLogitsStayFinite) {
    XYLEM_REQUIRE_OP(XYLEM_OP_SOFTMAX_FWD);
    Rng rng;
    const Shape s{6, 33};
    auto x = rng.uniform(numel(s), -1000.0f, 1000.0f);
    for (int64_t j = 0; j < 33; ++j) {
        x[static_cast<size_t>(33 * 0 + j)] = 1000.0f;
        x[static_cast<size_t>(33 * 1 + j)] = -1000.0f;
        x[static_cast<size_t>(33 * 2 + j)] = j % 2 ? 1000.0f : -1000.0f;
    }
    for (bool log : {false, true}) {
        SCOPED_TRACE(log ? "log_softmax" : "softmax");
        Tensor tx = upload(dev(), s, x), ty(s, DType::F32, dev());
        ops::softmax_fwd(dev(), log, tx, ty);
        EXPECT_TRUE(near(ty.to_vector(), ref::softmax_fwd(to_double(x), 6, 33, log), tol::kSoftmax));
    }
}

// Logits near +-1e5 that differ by a few units: log_softmax must keep those differences. Computed
// as x - (max + log sum) it rounds at the size of max (float spacing 7.8e-3 at 1e5), an error of
// about 4e-3 where the values are of order 1; (x - max) - log sum is exact up to the log.
std::vector<float> near_offset(Rng& rng, int64_t n, float offset) {
    return rng.uniform(n, offset - 5.0f, offset + 5.0f);
}

// Each row one huge value at a random place among small ones: exp of the others underflows to 0,
// the huge entry's log-probability is 0 and the others' are x - huge, all finite.
std::vector<float> one_huge_per_row(Rng& rng, const Shape& s, float huge) {
    auto x = rng.uniform(numel(s), -5.0f, 5.0f);
    const auto at = rng.labels(s[0], s[1]);
    for (int64_t i = 0; i < s[0]; ++i) x[static_cast<size_t>(i * s[1] + at[static_cast<size_t>(i)])] = huge;
    return x;
}

TEST_P(SoftmaxLossConformance, SoftmaxForwardKeepsSmallSpreadsAtLargeLogits) {
    XYLEM_REQUIRE_OP(XYLEM_OP_SOFTMAX_FWD);
    Rng rng;
    for (bool log : {true, false})
        for (const Shape& s : std::vector<Shape>{{7, 33}, {33, 129}, {5, 1000}}) {
            const int64_t rows = s[0], cols = s[1];
            const std::vector<std::pair<std::string, std::vector<float>>> cases = {
                {"near +1e5", near_offset(rng, numel(s), 1e5f)},
                {"near -1e5", near_offset(rng, numel(s), -1e5f)},
                {"one 1e5 per row", one_huge_per_row(rng, s, 1e5f)},
            };
            for (const auto& [name, x] : cases) {
                SCOPED_TRACE(std::string(log ? "log_softmax" : "softmax") + " shape " + to_string(s) + " " + name);
                Tensor tx = upload(dev(), s, x), ty(s, DType::F32, dev());
                ops::softmax_fwd(dev(), log, tx, ty);
                EXPECT_TRUE(near(ty.to_vector(), ref::softmax_fwd(to_double(x), rows, cols, log), tol::kSoftmax));
            }
        }
}

TEST_P(SoftmaxLossConformance, SoftmaxBackwardThroughOutput) {
    XYLEM_REQUIRE_OP(XYLEM_OP_SOFTMAX_BWD);
    Rng rng;
    for (bool log : {false, true})
        for (const Shape& s : softmax_shapes()) {
            SCOPED_TRACE(std::string(log ? "log_softmax" : "softmax") + " shape " + to_string(s));
            const int64_t rows = rows_of(s), cols = s.back();
            const auto y = to_float(ref::softmax_fwd(to_double(rng.uniform(numel(s), -5.0f, 5.0f)), rows, cols, log));
            const auto dy = rng.uniform(numel(s));
            Tensor tdy = upload(dev(), s, dy), ty = upload(dev(), s, y), tdx(s, DType::F32, dev());
            ops::softmax_bwd(dev(), log, tdy, ty, tdx);
            EXPECT_TRUE(
                near(tdx.to_vector(), ref::softmax_bwd(to_double(dy), to_double(y), rows, cols, log), tol::kSoftmax));
        }
}

enum class LossKind { Xent, Nll, Mse };
const char* loss_name(LossKind k) {
    return k == LossKind::Xent ? "xent" : k == LossKind::Nll ? "nll" : "mse";
}

// One forward case on given inputs: acc = 0 over a NaN (the old loss must not be read), acc = 1
// over 2.5.
void check_loss_forward(Device& dev, LossKind kind, const Shape& s, const std::vector<float>& x,
                        const std::vector<int32_t>& labels, Rng& rng) {
    const int64_t n = s[0], c = s[1];
    const auto target = rng.uniform(numel(s));
    Tensor tx = upload(dev, s, x), tt = upload(dev, s, target), tl = upload_i32(dev, {n}, labels);
    double sum = kind == LossKind::Xent  ? ref::xent_sum(to_double(x), n, c, labels)
                 : kind == LossKind::Nll ? ref::nll_sum(to_double(x), n, c, labels)
                                         : ref::mse_sum(to_double(x), to_double(target));
    for (float scale : {1.0f, 1.0f / static_cast<float>(n), 0.37f})
        for (bool acc : {false, true}) {
            SCOPED_TRACE(std::string(loss_name(kind)) + " shape " + to_string(s) + " scale " + std::to_string(scale) +
                         " acc " + std::to_string(acc));
            Tensor loss({1}, DType::F32, dev);
            if (acc)
                loss = upload(dev, {1}, {2.5f});
            else
                ops::fill(dev, loss, kNaN);
            if (kind == LossKind::Xent)
                ops::xent_fwd(dev, tx, tl, loss, scale, acc);
            else if (kind == LossKind::Nll)
                ops::nll_fwd(dev, tx, tl, loss, scale, acc);
            else
                ops::mse_fwd(dev, tx, tt, loss, scale, acc);
            EXPECT_TRUE(near(loss.to_vector(), {ref::store_loss(2.5, scale, acc ? 1.0 : 0.0, sum)}, tol::kLossForward));
        }
}

// The same on uniform inputs in [lo, hi] and random labels.
void check_loss_forward(Device& dev, LossKind kind, const Shape& s, Rng& rng, float lo, float hi) {
    const auto x = rng.uniform(numel(s), lo, hi);
    check_loss_forward(dev, kind, s, x, rng.labels(s[0], s[1]), rng);
}

TEST_P(SoftmaxLossConformance, XentForward) {
    XYLEM_REQUIRE_OP(XYLEM_OP_XENT_FWD);
    XYLEM_REQUIRE_HELPER_OP(XYLEM_OP_FILL);
    Rng rng;
    for (const Shape& s : row_shapes()) check_loss_forward(dev(), LossKind::Xent, s, rng, -5.0f, 5.0f);
    check_loss_forward(dev(), LossKind::Xent, {5, 33}, rng, -1000.0f, 1000.0f);  // log-sum-exp must not overflow
}

// Cross-entropy at logits near 1e5 is a loss of order 1 per row: max + log sum - x[label] would
// round at the size of max; (max - x[label]) + log sum keeps it. One huge logit per row: a loss of
// 0 where the label is on it, 1e5 minus the logit elsewhere.
TEST_P(SoftmaxLossConformance, XentForwardAtLargeLogits) {
    XYLEM_REQUIRE_OP(XYLEM_OP_XENT_FWD);
    XYLEM_REQUIRE_HELPER_OP(XYLEM_OP_FILL);
    Rng rng;
    for (const Shape& s : std::vector<Shape>{{7, 33}, {33, 129}, {5, 1000}}) {
        for (float offset : {1e5f, -1e5f})
            check_loss_forward(dev(), LossKind::Xent, s, near_offset(rng, numel(s), offset), rng.labels(s[0], s[1]),
                               rng);
        const auto x = one_huge_per_row(rng, s, 1e5f);
        auto on_huge = rng.labels(s[0], s[1]);
        for (int64_t i = 0; i < s[0]; ++i)
            for (int64_t j = 0; j < s[1]; ++j)
                if (x[static_cast<size_t>(i * s[1] + j)] == 1e5f)
                    on_huge[static_cast<size_t>(i)] = static_cast<int32_t>(j);
        check_loss_forward(dev(), LossKind::Xent, s, x, on_huge, rng);                 // loss 0
        check_loss_forward(dev(), LossKind::Xent, s, x, rng.labels(s[0], s[1]), rng);  // mostly 1e5 - x
    }
}

TEST_P(SoftmaxLossConformance, NllForward) {
    XYLEM_REQUIRE_OP(XYLEM_OP_NLL_FWD);
    XYLEM_REQUIRE_HELPER_OP(XYLEM_OP_FILL);
    Rng rng;
    for (const Shape& s : row_shapes()) check_loss_forward(dev(), LossKind::Nll, s, rng, -8.0f, 0.0f);
}

TEST_P(SoftmaxLossConformance, MseForward) {
    XYLEM_REQUIRE_OP(XYLEM_OP_MSE_FWD);
    XYLEM_REQUIRE_HELPER_OP(XYLEM_OP_FILL);
    Rng rng;
    for (const Shape& s : row_shapes()) check_loss_forward(dev(), LossKind::Mse, s, rng, -3.0f, 3.0f);
}

TEST_P(SoftmaxLossConformance, XentBackward) {
    XYLEM_REQUIRE_OP(XYLEM_OP_XENT_BWD);
    Rng rng;
    for (const Shape& s : row_shapes())
        for (auto [center, range] : {std::pair{0.0f, 5.0f}, {0.0f, 1000.0f}, {1e5f, 5.0f}, {-1e5f, 5.0f}})
            for (float scale : {1.0f, 1.0f / static_cast<float>(s[0])}) {
                SCOPED_TRACE("shape " + to_string(s) + " center " + std::to_string(center) + " range " +
                             std::to_string(range) + " scale " + std::to_string(scale));
                const auto x = rng.uniform(numel(s), center - range, center + range);
                const auto labels = rng.labels(s[0], s[1]);
                Tensor tx = upload(dev(), s, x), tl = upload_i32(dev(), {s[0]}, labels), tdx(s, DType::F32, dev());
                ops::xent_bwd(dev(), tx, tl, tdx, scale);
                EXPECT_TRUE(
                    near(tdx.to_vector(), ref::xent_bwd(to_double(x), s[0], s[1], labels, scale), tol::kLossBackward));
            }
}

TEST_P(SoftmaxLossConformance, NllBackward) {
    XYLEM_REQUIRE_OP(XYLEM_OP_NLL_BWD);
    Rng rng;
    for (const Shape& s : row_shapes())
        for (float scale : {1.0f, 1.0f / static_cast<float>(s[0])}) {
            SCOPED_TRACE("shape " + to_string(s) + " scale " + std::to_string(scale));
            const auto labels = rng.labels(s[0], s[1]);
            Tensor tx = upload(dev(), s, rng.uniform(numel(s), -5.0f, 0.0f));
            Tensor tl = upload_i32(dev(), {s[0]}, labels);
            Tensor tdx = upload(dev(), s, std::vector<float>(static_cast<size_t>(numel(s)), kNaN));
            ops::nll_bwd(dev(), tx, tl, tdx, scale);  // every element written, also the zeros
            EXPECT_TRUE(near(tdx.to_vector(), ref::nll_bwd(s[0], s[1], labels, scale), tol::kLossBackward));
        }
}

TEST_P(SoftmaxLossConformance, MseBackward) {
    XYLEM_REQUIRE_OP(XYLEM_OP_MSE_BWD);
    Rng rng;
    for (const Shape& s : elementwise_shapes())
        for (float scale : {1.0f, 0.01f}) {
            SCOPED_TRACE("shape " + to_string(s) + " scale " + std::to_string(scale));
            const auto p = rng.uniform(numel(s), -3.0f, 3.0f), t = rng.uniform(numel(s), -3.0f, 3.0f);
            Tensor tp = upload(dev(), s, p), tt = upload(dev(), s, t), tdp(s, DType::F32, dev());
            ops::mse_bwd(dev(), tp, tt, tdp, scale);
            EXPECT_TRUE(near(tdp.to_vector(), ref::mse_bwd(to_double(p), to_double(t), scale), tol::kLossBackward));
        }
}

TEST_P(SoftmaxLossConformance, MseForwardAnyRank) {
    XYLEM_REQUIRE_OP(XYLEM_OP_MSE_FWD);
    Rng rng;
    for (const Shape& s : elementwise_shapes()) {
        SCOPED_TRACE("shape " + to_string(s));
        const auto p = rng.uniform(numel(s)), t = rng.uniform(numel(s));
        Tensor tp = upload(dev(), s, p), tt = upload(dev(), s, t), loss = upload(dev(), {1}, {-1.0f});
        ops::mse_fwd(dev(), tp, tt, loss, 0.5f, true);
        EXPECT_TRUE(near(loss.to_vector(), {-1.0 + 0.5 * ref::mse_sum(to_double(p), to_double(t))}, tol::kLossForward));
    }
}

TEST_P(SoftmaxLossConformance, AccuracyCountsAndAccumulates) {
    XYLEM_REQUIRE_OP(XYLEM_OP_ACCURACY);
    Rng rng;
    for (const Shape& s : row_shapes()) {
        SCOPED_TRACE("shape " + to_string(s));
        const auto x = rng.uniform(numel(s));
        auto labels = rng.labels(s[0], s[1]);
        // Make about half the rows hits so the count is not trivially 0.
        for (int64_t i = 0; i < s[0]; i += 2) {
            int64_t best = 0;
            for (int64_t j = 1; j < s[1]; ++j)
                if (x[static_cast<size_t>(i * s[1] + j)] > x[static_cast<size_t>(i * s[1] + best)]) best = j;
            labels[static_cast<size_t>(i)] = static_cast<int32_t>(best);
        }
        Tensor tx = upload(dev(), s, x), tl = upload_i32(dev(), {s[0]}, labels), correct = upload(dev(), {1}, {3.0f});
        ops::accuracy(dev(), tx, tl, correct);
        EXPECT_TRUE(near(correct.to_vector(), {ref::accuracy(to_double(x), s[0], s[1], labels, 3.0)}, tol::kCount));
    }
}

// Ties count for the first maximal index (numpy and PyTorch argmax).
TEST_P(SoftmaxLossConformance, AccuracyTiesGoToTheFirstMaximum) {
    XYLEM_REQUIRE_OP(XYLEM_OP_ACCURACY);
    const std::vector<float> x = {
        0.5f,  0.5f,  0.5f,  0.5f,  // all equal, label 0: hit
        0.5f,  0.5f,  0.5f,  0.5f,  // all equal, label 3: miss
        0.1f,  0.9f,  0.2f,  0.9f,  // max at 1 and 3, label 1: hit
        0.1f,  0.9f,  0.2f,  0.9f,  // max at 1 and 3, label 3: miss
        -2.0f, -1.0f, -1.0f, -3.0f  // negative ties, label 1: hit
    };
    const std::vector<int32_t> labels = {0, 3, 1, 3, 1};
    Tensor tx = upload(dev(), {5, 4}, x), tl = upload_i32(dev(), {5}, labels), correct = upload(dev(), {1}, {0.0f});
    ops::accuracy(dev(), tx, tl, correct);
    EXPECT_TRUE(near(correct.to_vector(), {3.0}, tol::kCount));
    EXPECT_TRUE(near(correct.to_vector(), {ref::accuracy(to_double(x), 5, 4, labels, 0.0)}, tol::kCount));
}

}  // namespace
}  // namespace xylem::test
