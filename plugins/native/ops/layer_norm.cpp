// LAYER_NORM_FWD / LAYER_NORM_BWD (ABI 1.7): normalisation over the last axis, torch.nn.LayerNorm.
// Each row is one worker's, its statistics summed in double lanes (the order fixed by the row
// alone). The parameter gradients are sums over rows: partial sums over chunks of rows fixed by
// the shape, then the chunks added in order, so the bits never depend on the thread count.
#include <algorithm>
#include <cmath>

#include "lane_sum.h"
#include "native.h"
#include "xylem/plugin_kit/shapes_transformer.h"

namespace xylem::native {

namespace {

using plugin_kit::LayerNormShape;

// Sums of a row in double lanes (lane_sum.h, batch norm's scheme): vectorised without
// -ffast-math, in an order fixed by the row.
XYLEM_KERNEL(double, ln_sum, (const float* __restrict x, int64_t n), (x, n)) {
    XYLEM_LANE_SUM_(static_cast<double>(x[j]))
}
XYLEM_KERNEL(double, ln_squared_deviation, (const float* __restrict x, int64_t n, double mean), (x, n, mean)) {
    XYLEM_LANE_SUM_((x[j] - mean) * (x[j] - mean))
}
// The sums of g = dy*gamma (returned) and of g*xhat, xhat = (x - mean)*rstd (into *gx), in one
// pass: eight double lanes as a vector, two such vectors per sum taking alternate blocks of 8 (two
// chains of dependent adds each: one chain left a 128-wide row waiting on 16 adds in a row), then
// the blocks of 8 left and the tail, then the lanes pairwise: an order fixed by the row alone.
XYLEM_KERNEL(double, ln_grad_sums,
             (const float* __restrict dy, const float* __restrict x, const float* __restrict gamma, int64_t n,
              float mean, float rstd, double* gx),
             (dy, x, gamma, n, mean, rstd, gx)) {
    const F8 mv = F8{} + mean, rv = F8{} + rstd;
    D8 sg[2] = {}, sgx[2] = {};
    auto block = [&](int64_t i, int c) {
        const F8 g = *reinterpret_cast<const F8*>(dy + i) * *reinterpret_cast<const F8*>(gamma + i);
        const F8 xhat = (*reinterpret_cast<const F8*>(x + i) - mv) * rv;
        const D8 gd = __builtin_convertvector(g, D8);
        sg[c] += gd;
        sgx[c] += gd * __builtin_convertvector(xhat, D8);
    };
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) block(i, 0), block(i + 8, 1);
    for (; i + 8 <= n; i += 8) block(i, 0);
    double tg = 0.0, tgx = 0.0;
    for (int64_t j = i; j < n; ++j) {
        const double g = dy[j] * gamma[j];
        tg += g;
        tgx += g * ((x[j] - mean) * rstd);
    }
    *gx = tgx + pairwise_sum(sgx[0] + sgx[1]);
    return tg + pairwise_sum(sg[0] + sg[1]);
}

// y = (x - mean)*rstd*gamma + beta (beta may be null; y may be x).
XYLEM_KERNEL(void, ln_normalize,
             (const float* x, const float* __restrict gamma, const float* __restrict beta, float* y, int64_t n,
              float mean, float rstd),
             (x, gamma, beta, y, n, mean, rstd)) {
    if (beta)
        for (int64_t j = 0; j < n; ++j) y[j] = (x[j] - mean) * rstd * gamma[j] + beta[j];
    else
        for (int64_t j = 0; j < n; ++j) y[j] = (x[j] - mean) * rstd * gamma[j];
}

// dx = rstd*(g - mg - xhat*mgx) with g = dy*gamma, xhat = (x - mean)*rstd (dx may be dy), and
// the row's terms of the parameter gradients added into pg (dy*xhat) and pb (dy; null without
// dbeta), each element read before it is written.
XYLEM_KERNEL(void, ln_row_backward,
             (const float* dy, const float* __restrict x, const float* __restrict gamma, float* dx, int64_t n,
              float mean, float rstd, float mg, float mgx, float* __restrict pg, float* __restrict pb),
             (dy, x, gamma, dx, n, mean, rstd, mg, mgx, pg, pb)) {
    if (pb)
        for (int64_t j = 0; j < n; ++j) {
            const float d = dy[j], xhat = (x[j] - mean) * rstd;
            pg[j] += d * xhat;
            pb[j] += d;
            dx[j] = rstd * (d * gamma[j] - mg - xhat * mgx);
        }
    else
        for (int64_t j = 0; j < n; ++j) {
            const float d = dy[j], xhat = (x[j] - mean) * rstd;
            pg[j] += d * xhat;
            dx[j] = rstd * (d * gamma[j] - mg - xhat * mgx);
        }
}

// Rows per partial sum of the parameter gradients: at most kMaxChunks chunks whatever the rows,
// each at least kMinChunkRows rows; fixed by the shape.
constexpr int64_t kMaxChunks = 64, kMinChunkRows = 16;
int64_t chunk_rows(int64_t rows) {
    return std::max(kMinChunkRows, (rows + kMaxChunks - 1) / kMaxChunks);
}

// A row is two or three passes over d elements (mean, variance, output; the backward's sums):
// a worker pays for itself from a sixteenth of a pure stream's kMinSplitElements (the character
// GPT's [768, 128] rows, 98k elements, ran on one thread under a bound of 64k: 80 us forward,
// 140 us backward per call).
int row_workers(const LayerNormShape& s) {
    return split_workers(static_cast<double>(s.rows * s.d), static_cast<double>(kMinSplitElements) / 16, s.rows);
}

}  // namespace

void op_layer_norm_fwd(const xylem_op_desc& desc, xylem_stream_s&) {
    OpArgs a(desc, 2, 3, 3);
    const auto at = a.attrs<xylem_layer_norm_attrs>();
    const Tensor tx = a.in(0, "X"), tg = a.in(1, "gamma"), ty = a.out(0, "Y"), tm = a.out(1, "mean"),
                 tr = a.out(2, "rstd");
    const Tensor tb = a.n_inputs() == 3 ? a.in(2, "beta") : Tensor{};
    const Tensor* beta = a.n_inputs() == 3 ? &tb : nullptr;
    const LayerNormShape s = plugin_kit::layer_norm_shape(a, at, tx, tg, beta, tm, tr);
    plugin_kit::same_shape(a, ty, "Y", tx, "X");
    if (tx.data != ty.data && overlap(tx, ty)) a.fail("Y partly overlaps X (in place is fine)");
    if (overlap(tm, tr) || overlap(tm, ty) || overlap(tr, ty) || overlap(tm, tx) || overlap(tr, tx))
        a.fail("mean and rstd must not overlap each other, X or Y");
    const float *x = tx.f32(), *gamma = tg.f32(), *b = beta ? tb.f32() : nullptr;
    float *y = ty.f32(), *mean = tm.f32(), *rstd = tr.f32();
    const double n = static_cast<double>(s.d);
    split_work(s.rows, row_workers(s), [&](int64_t lo, int64_t hi, int) {
        for (int64_t r = lo; r < hi; ++r) {
            const float* xr = x + r * s.d;
            // Two passes (the squared deviations do not cancel like E[x^2] - E[x]^2), in double.
            const double m = ln_sum(xr, s.d) / n;
            const double v = ln_squared_deviation(xr, s.d, m) / n;
            const float mf = static_cast<float>(m), rf = static_cast<float>(1.0 / std::sqrt(v + at.eps));
            mean[r] = mf;
            rstd[r] = rf;
            ln_normalize(xr, gamma, b, y + r * s.d, s.d, mf, rf);
        }
    });
}

void op_layer_norm_bwd(const xylem_op_desc& desc, xylem_stream_s& stream) {
    const bool has_dbeta = desc.n_outputs == 3;
    OpArgs a(desc, 5, 5, has_dbeta ? 3 : 2);
    const auto at = a.attrs<xylem_layer_norm_attrs>();
    const Tensor tdy = a.in(0, "dY"), tx = a.in(1, "X"), tg = a.in(2, "gamma"), tm = a.in(3, "mean"),
                 tr = a.in(4, "rstd");
    const Tensor tdx = a.out(0, "dX"), tdg = a.out(1, "dgamma");
    const Tensor tdb = has_dbeta ? a.out(2, "dbeta") : Tensor{};
    const LayerNormShape s = plugin_kit::layer_norm_shape(a, at, tx, tg, static_cast<const Tensor*>(nullptr), tm, tr);
    plugin_kit::same_shape(a, tdy, "dY", tx, "X");
    plugin_kit::same_shape(a, tdx, "dX", tx, "X");
    if (tdg.numel != s.d) a.fail("dgamma holds %lld elements for D = %lld", static_cast<long long>(tdg.numel),
                                 static_cast<long long>(s.d));
    if (has_dbeta && tdb.numel != s.d)
        a.fail("dbeta holds %lld elements for D = %lld", static_cast<long long>(tdb.numel), static_cast<long long>(s.d));
    if (overlap(tdx, tx) || (tdx.data != tdy.data && overlap(tdx, tdy)) || overlap(tdg, tdx) || overlap(tdg, tdy) ||
        (has_dbeta && (overlap(tdb, tdx) || overlap(tdb, tdg) || overlap(tdb, tdy))))
        a.fail("the outputs overlap each other or the inputs (dX may be dY)");
    const float *dy = tdy.f32(), *x = tx.f32(), *gamma = tg.f32(), *mean = tm.f32(), *rstd = tr.f32();
    float *dx = tdx.f32(), *dgamma = tdg.f32(), *dbeta = has_dbeta ? tdb.f32() : nullptr;
    const int64_t per = chunk_rows(s.rows), chunks = (s.rows + per - 1) / per;
    // Per chunk: D partial sums of dy*xhat, then (with dbeta) D of dy.
    const int64_t width = has_dbeta ? 2 * s.d : s.d;
    float* partial = stream.scratch_.alloc<float>(std::max<int64_t>(1, chunks * width));
    const double n = static_cast<double>(s.d);
    const int workers = std::min<int64_t>(row_workers(s), chunks);
    parallel_items(chunks, workers, [&](int, int64_t c) {
        float* pg = partial + c * width;
        float* pb = has_dbeta ? pg + s.d : nullptr;
        std::fill_n(pg, width, 0.0f);
        for (int64_t r = c * per, end = std::min(s.rows, (c + 1) * per); r < end; ++r) {
            const float *dyr = dy + r * s.d, *xr = x + r * s.d;
            double sgx = 0.0;
            const double sg = ln_grad_sums(dyr, xr, gamma, s.d, mean[r], rstd[r], &sgx);
            ln_row_backward(dyr, xr, gamma, dx + r * s.d, s.d, mean[r], rstd[r], static_cast<float>(sg / n),
                            static_cast<float>(sgx / n), pg, pb);
        }
    });
    // The chunks in order, in double; beta = 0 never reads the old values (they may be NaN).
    for (int64_t j = 0; j < s.d; ++j) {
        double g = 0.0, b = 0.0;
        for (int64_t c = 0; c < chunks; ++c) {
            g += partial[c * width + j];
            if (dbeta) b += partial[c * width + s.d + j];
        }
        dgamma[j] = static_cast<float>(at.beta == 0.0f ? g : at.beta * static_cast<double>(dgamma[j]) + g);
        if (dbeta) dbeta[j] = static_cast<float>(at.beta == 0.0f ? b : at.beta * static_cast<double>(dbeta[j]) + b);
    }
}

}  // namespace xylem::native
