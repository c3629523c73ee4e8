// Losses: XENT (fused log-softmax + NLL, via log-sum-exp), NLL and MSE, forward into a device
// scalar (loss = acc*loss + scale*sum) and backward into the gradient of the prediction.
#include <algorithm>
#include <cmath>

#include "native.h"

namespace xylem::native {

namespace {

// acc = 0 overwrites without reading the old loss (it may hold NaN).
void store_loss(const Tensor& loss, const xylem_loss_attrs& attrs, double sum) {
    float* l = loss.f32();
    const double add = static_cast<double>(attrs.scale) * sum;
    l[0] = static_cast<float>(attrs.acc == 0.0f ? add : attrs.acc * static_cast<double>(l[0]) + add);
}

struct RowLse {
    float max;
    double sum;  // sum of exp(x - max)
};

RowLse row_lse(const float* x, int64_t c) {
    const float m = row_max(x, c);
    return {m, sum_exp(x, c, m, nullptr)};
}

// Rows per slice of the row loops below, and the elements per extra worker from which they split:
// an exp per element makes these rows compute-bound (char-rnn: 2,500 rows of 114 per step).
constexpr int64_t kRowChunk = 64;
constexpr int64_t kMinXentSplit = 32 * 1024;

int xent_workers(int64_t n, int64_t c) {
    return split_workers(n * c, kMinXentSplit, (n + kRowChunk - 1) / kRowChunk);
}

}  // namespace

void op_xent_fwd(const xylem_op_desc& desc, xylem_stream_s& stream) {
    OpArgs a(desc, 2, 2, 1);
    const auto attrs = a.attrs<xylem_loss_attrs>();
    const Tensor tx = a.in(0, "logits"), tl = a.in(1, "labels", XYLEM_I32), tloss = a.out(0, "loss");
    a.check_classification(tx, tl);
    a.check_scalar(tloss, "loss");
    const int64_t n = tx.dims[0], c = tx.dims[1];
    // A sum per chunk of kRowChunk rows, the chunks added in order: the same total however the
    // chunks are shared between threads.
    const int64_t chunks = (n + kRowChunk - 1) / kRowChunk;
    double* part = stream.scratch_.alloc<double>(std::max<int64_t>(chunks, 1));
    split_work(chunks, xent_workers(n, c), [&](int64_t lo, int64_t hi, int) {
        for (int64_t k = lo; k < hi; ++k) {
            double s = 0.0;
            for (int64_t i = k * kRowChunk; i < std::min(n, (k + 1) * kRowChunk); ++i) {
                const float* x = tx.f32() + i * c;
                const RowLse lse = row_lse(x, c);
                // (max - x[label]) + log(sum), the same order as log_softmax: the difference first.
                s += (static_cast<double>(lse.max) - x[tl.i32()[i]]) + std::log(lse.sum);
            }
            part[k] = s;
        }
    });
    double total = 0.0;
    for (int64_t k = 0; k < chunks; ++k) total += part[k];
    store_loss(tloss, attrs, total);
}

void op_xent_bwd(const xylem_op_desc& desc, xylem_stream_s&) {
    OpArgs a(desc, 2, 2, 1);
    const float scale = a.attrs<xylem_loss_attrs>().scale;
    const Tensor tx = a.in(0, "logits"), tl = a.in(1, "labels", XYLEM_I32), tdx = a.out(0, "dlogits");
    a.check_classification(tx, tl);
    a.same_numel(tx, "logits", tdx, "dlogits");
    const int64_t n = tx.dims[0], c = tx.dims[1];
    split_work(n, xent_workers(n, c), [&](int64_t lo, int64_t hi, int) {  // rows are independent
        for (int64_t i = lo; i < hi; ++i) {
            const float* x = tx.f32() + i * c;
            float* dx = tdx.f32() + i * c;  // may alias x: each dx[j] is written after x[j] is read
            const double sum = sum_exp(x, c, row_max(x, c), dx);  // one exp per element: kept in dx
            const float k = static_cast<float>(scale / sum);
            for (int64_t j = 0; j < c; ++j) dx[j] *= k;
            dx[tl.i32()[i]] -= scale;
        }
    });
}

void op_nll_fwd(const xylem_op_desc& desc, xylem_stream_s&) {
    OpArgs a(desc, 2, 2, 1);
    const auto attrs = a.attrs<xylem_loss_attrs>();
    const Tensor tlogp = a.in(0, "logp"), tl = a.in(1, "labels", XYLEM_I32), tloss = a.out(0, "loss");
    a.check_classification(tlogp, tl);
    a.check_scalar(tloss, "loss");
    const int64_t n = tlogp.dims[0], c = tlogp.dims[1];
    double total = 0.0;
    for (int64_t i = 0; i < n; ++i) total -= tlogp.f32()[i * c + tl.i32()[i]];
    store_loss(tloss, attrs, total);
}

void op_nll_bwd(const xylem_op_desc& desc, xylem_stream_s&) {
    OpArgs a(desc, 2, 2, 1);
    const float scale = a.attrs<xylem_loss_attrs>().scale;
    const Tensor tlogp = a.in(0, "logp"), tl = a.in(1, "labels", XYLEM_I32), tdx = a.out(0, "dlogp");
    a.check_classification(tlogp, tl);
    a.same_numel(tlogp, "logp", tdx, "dlogp");
    const int64_t n = tlogp.dims[0], c = tlogp.dims[1];
    float* dx = tdx.f32();
    std::fill_n(dx, n * c, 0.0f);
    for (int64_t i = 0; i < n; ++i) dx[i * c + tl.i32()[i]] = -scale;
}

void op_mse_fwd(const xylem_op_desc& desc, xylem_stream_s&) {
    OpArgs a(desc, 2, 2, 1);
    const auto attrs = a.attrs<xylem_loss_attrs>();
    const Tensor tp = a.in(0, "pred"), tt = a.in(1, "target"), tloss = a.out(0, "loss");
    a.same_numel(tp, "pred", tt, "target");
    a.check_scalar(tloss, "loss");
    const float *p = tp.f32(), *t = tt.f32();
    const double total = lane_sum(tp.numel, [p, t](int64_t i) {
        const float d = p[i] - t[i];
        return d * d;
    });
    store_loss(tloss, attrs, total);
}

void op_mse_bwd(const xylem_op_desc& desc, xylem_stream_s&) {
    OpArgs a(desc, 2, 2, 1);
    const float k = 2.0f * a.attrs<xylem_loss_attrs>().scale;
    const Tensor tp = a.in(0, "pred"), tt = a.in(1, "target"), tdp = a.out(0, "dpred");
    a.same_numel(tp, "pred", tt, "target");
    a.same_numel(tp, "pred", tdp, "dpred");
    const float *p = tp.f32(), *t = tt.f32();
    float* dp = tdp.f32();
    for (int64_t i = 0; i < tp.numel; ++i) dp[i] = k * (p[i] - t[i]);
}

}  // namespace xylem::native
