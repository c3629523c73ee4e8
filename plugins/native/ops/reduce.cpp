// Reductions whose result stays in a device buffer: BIAS_GRAD and ACCURACY.
#include <algorithm>

#include "native.h"

namespace xylem::native {

namespace {

// db = beta*db + acc, without reading db when beta == 0 (it may hold NaN).
inline float blend(float beta, float db, double acc) {
    return beta == 0.0f ? static_cast<float>(acc) : static_cast<float>(beta * db + acc);
}

}  // namespace

void op_bias_grad(const xylem_op_desc& desc, xylem_stream_s& stream) {
    OpArgs a(desc, 1, 1, 1);
    const float beta = a.attrs<xylem_bias_grad_attrs>().beta;
    const Tensor tdy = a.in(0, "dy"), tdb = a.out(0, "db");
    if (tdy.ndim < 2) a.fail("dy must be [N,C,...], got %u dims", tdy.ndim);
    const int64_t n = tdy.dims[0], c = tdy.dims[1];
    int64_t inner = 1;
    for (uint32_t d = 2; d < tdy.ndim; ++d) inner *= tdy.dims[d];
    if (tdb.numel != c)
        a.fail("db holds %lld elements for %lld channels", static_cast<long long>(tdb.numel),
               static_cast<long long>(c));
    const float* dy = tdy.f32();
    float* db = tdb.f32();
    if (inner == 1) {
        // [N,C]: add whole rows into a stack block of column sums, so dy is read once, in order.
        constexpr int64_t kCols = 512;
        double acc[kCols];
        for (int64_t j0 = 0; j0 < c; j0 += kCols) {
            const int64_t w = c - j0 < kCols ? c - j0 : kCols;
            for (int64_t j = 0; j < w; ++j) acc[j] = 0.0;
            for (int64_t r = 0; r < n; ++r) {
                const float* row = dy + r * c + j0;
                for (int64_t j = 0; j < w; ++j) acc[j] += row[j];
            }
            for (int64_t j = 0; j < w; ++j) db[j0 + j] = blend(beta, db[j0 + j], acc[j]);
        }
        return;
    }
    // [N,C,H,W...]: each (n,c) plane is contiguous; sum the planes in memory order (one
    // sequential pass, which the prefetcher follows) into per-channel accumulators.
    double* acc = stream.scratch_.alloc<double>(c);
    std::fill_n(acc, c, 0.0);
    for (int64_t r = 0; r < n; ++r)
        for (int64_t ch = 0; ch < c; ++ch) {
            const float* plane = dy + (r * c + ch) * inner;
            acc[ch] += lane_sum(inner, [plane](int64_t i) { return plane[i]; });
        }
    for (int64_t ch = 0; ch < c; ++ch) db[ch] = blend(beta, db[ch], acc[ch]);
}

void op_accuracy(const xylem_op_desc& desc, xylem_stream_s&) {
    OpArgs a(desc, 2, 2, 1);
    const Tensor tlogits = a.in(0, "logits"), tlabels = a.in(1, "labels", XYLEM_I32), tcorrect = a.out(0, "correct");
    a.check_classification(tlogits, tlabels);
    a.check_scalar(tcorrect, "correct");
    const int64_t n = tlogits.dims[0], c = tlogits.dims[1];
    const float* x = tlogits.f32();
    const int32_t* labels = tlabels.i32();
    int64_t count = 0;
    for (int64_t i = 0; i < n; ++i) {
        const float* row = x + i * c;
        int64_t best = 0;
        for (int64_t j = 1; j < c; ++j)
            if (row[j] > row[best]) best = j;  // strict: ties keep the first max
        count += best == labels[i];
    }
    tcorrect.f32()[0] += static_cast<float>(count);
}

}  // namespace xylem::native
