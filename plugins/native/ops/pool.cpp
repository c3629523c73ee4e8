// POOL2D_FWD / POOL2D_BWD, NCHW f32: max pooling (the first maximum in row-major window order wins,
// padding never does) and average pooling, with a fast path for the common 2x2 stride-2 window.
#include <algorithm>
#include <cstring>
#include <optional>
#include <vector>

#include "native.h"

namespace xylem::native {

namespace {

struct Pool : plugin_kit::Pool2dShape {
    bool fast2x2() const { return kh == 2 && kw == 2 && sh == 2 && sw == 2 && ph == 0 && pw == 0; }
    // An average over each whole plane (global_avgpool): one window, no padding.
    bool whole_plane_avg() const { return !max && kh == h && kw == w && ph == 0 && pw == 0 && oh == 1 && ow == 1; }
};

Pool pool_shape(const OpArgs& a, const xylem_pool2d_attrs& at, const Tensor& x, const char* xn, const Tensor& y,
                const char* yn) {
    return Pool{plugin_kit::pool2d_shape(a, at, x, xn, y, yn)};
}

// v takes over the running maximum m: strictly larger, or the first NaN (NaN propagates, as in PyTorch).
inline bool wins(float v, float m) { return v > m || (v != v && m == m); }

// The same maximum as a chain of wins() from the window's first element, written as selects so
// that the 2x2 loops vectorize (branches would mispredict on random data).
inline float take(float v, float m) {
    const float t = v > m ? v : m;
    return v != v ? v : t;
}

// The windows' input rows (or columns) per output row (column), clipped to the input, and how
// many of them the average's divisor counts (ops.h's xylem_pool2d_window, shared with the CUDA
// kernels): worked out once per op, not per output (ResNet-18's 3x3 stride-2 max pool spent more
// time there than comparing).
struct Spans {
    std::vector<int64_t> lo, hi, count;
    Spans(int64_t outputs, int64_t size, int64_t k, int64_t stride, int64_t pad, int include_pad)
        : lo(static_cast<size_t>(outputs)), hi(lo.size()), count(lo.size()) {
        for (int64_t o = 0; o < outputs; ++o) {
            const size_t i = static_cast<size_t>(o);
            count[i] = xylem_pool2d_window(o, size, k, stride, pad, include_pad, &lo[i], &hi[i]);
        }
    }
};

struct Windows {
    Spans rows, cols;
    explicit Windows(const Pool& p)
        : rows(p.oh, p.h, p.kh, p.sh, p.ph, p.include_pad), cols(p.ow, p.w, p.kw, p.sw, p.pw, p.include_pad) {}
};

// Index in the plane of the first maximum of window (i, j).
inline int64_t argmax(const Pool& p, const Windows& win, const float* x, int64_t i, int64_t j) {
    const size_t r = static_cast<size_t>(i), c = static_cast<size_t>(j);
    const int64_t ws = win.cols.lo[c], we = win.cols.hi[c];
    int64_t best = win.rows.lo[r] * p.w + ws;
    for (int64_t ih = win.rows.lo[r]; ih < win.rows.hi[r]; ++ih)
        for (int64_t iw = ws; iw < we; ++iw)
            if (wins(x[ih * p.w + iw], x[best])) best = ih * p.w + iw;
    return best;
}

// 2x2 stride-2 windows, four at a time with GCC vector extensions (SSE on any x86-64): rows of
// pooled maps are short (12 or 4 in LeNet), too short for the auto-vectorizer's 8-wide loops.
using V4 = float __attribute__((vector_size(16)));
using I4 = int __attribute__((vector_size(16)));

inline V4 load4(const float* p) {
    V4 v;
    std::memcpy(&v, p, sizeof v);
    return v;
}
inline void store4(float* p, V4 v) { std::memcpy(p, &v, sizeof v); }

inline V4 take4(V4 v, V4 m) {
    const V4 t = v > m ? v : m;
    return v != v ? v : t;
}

// The four corners (a b / c d) of windows j..j+3 of one output row.
struct Corners {
    V4 a, b, c, d;
};
inline Corners corners(const float* r0, const float* r1, int64_t j) {
    const V4 l0 = load4(r0 + 2 * j), h0 = load4(r0 + 2 * j + 4), l1 = load4(r1 + 2 * j), h1 = load4(r1 + 2 * j + 4);
    const I4 even = {0, 2, 4, 6}, odd = {1, 3, 5, 7};
    return {__builtin_shuffle(l0, h0, even), __builtin_shuffle(l0, h0, odd), __builtin_shuffle(l1, h1, even),
            __builtin_shuffle(l1, h1, odd)};
}

void fwd_2x2(const Pool& p, const float* x, float* y) {
    const int64_t ow4 = p.ow / 4 * 4;
    for (int64_t pl = 0; pl < p.planes; ++pl)
        for (int64_t i = 0; i < p.oh; ++i) {
            const float* r0 = x + (pl * p.h + 2 * i) * p.w;
            const float* r1 = r0 + p.w;
            float* out = y + (pl * p.oh + i) * p.ow;
            if (p.max) {
                for (int64_t j = 0; j < ow4; j += 4) {
                    const Corners q = corners(r0, r1, j);
                    store4(out + j, take4(q.d, take4(q.c, take4(q.b, q.a))));
                }
                for (int64_t j = ow4; j < p.ow; ++j)
                    out[j] = take(r1[2 * j + 1], take(r1[2 * j], take(r0[2 * j + 1], r0[2 * j])));
            } else {
                for (int64_t j = 0; j < ow4; j += 4) {
                    const Corners q = corners(r0, r1, j);
                    store4(out + j, (q.a + q.b + q.c + q.d) / 4.0f);
                }
                for (int64_t j = ow4; j < p.ow; ++j)
                    out[j] = (r0[2 * j] + r0[2 * j + 1] + r1[2 * j] + r1[2 * j + 1]) / 4.0f;
            }
        }
}

// Window (i, j) of a plane, one output at a time: the first maximum's value (that of argmax()'s
// element, or the first NaN), or the average.
inline float window_value(const Pool& p, const Windows& win, const float* plane, int64_t i, int64_t j) {
    const size_t r = static_cast<size_t>(i), c = static_cast<size_t>(j);
    const int64_t hs = win.rows.lo[r], he = win.rows.hi[r], ws = win.cols.lo[c], we = win.cols.hi[c];
    if (p.max) {
        float m = plane[hs * p.w + ws];
        for (int64_t ih = hs; ih < he; ++ih)
            for (int64_t iw = ws; iw < we; ++iw)
                if (wins(plane[ih * p.w + iw], m)) m = plane[ih * p.w + iw];
        return m;
    }
    float sum = 0.0f;
    for (int64_t ih = hs; ih < he; ++ih)
        for (int64_t iw = ws; iw < we; ++iw) sum += plane[ih * p.w + iw];
    return sum / static_cast<float>(win.rows.count[r] * win.cols.count[c]);
}

// The output columns [lo, hi) whose windows lie wholly inside the input's columns.
void inner_columns(const Pool& p, int64_t& lo, int64_t& hi) {
    lo = std::min(p.ow, (p.pw + p.sw - 1) / p.sw);
    hi = p.w - p.kw + p.pw >= 0 ? std::min(p.ow, (p.w - p.kw + p.pw) / p.sw + 1) : 0;
    hi = std::max(lo, hi);
}

// One output row's inner columns [lo, hi), tap by tap over the whole row (the taps of each window
// in the same row-major order as window_value, so the same sums; for max the same value but for
// which NaN's bits a window with several gives): vector loads across the row instead of a branch
// per element. SW: the column stride when it is 1 or 2 (ResNet's 3x3 stride-2 pool), else 0.
template <int SW>
void inner_row(const Pool& p, const float* plane, int64_t hs, int64_t he, int64_t lo, int64_t hi, float count,
               float* out) {
    const int64_t sw = SW ? SW : p.sw;
    for (int64_t ih = hs; ih < he; ++ih)
        for (int64_t kw = 0; kw < p.kw; ++kw) {
            const float* in = plane + ih * p.w + kw - p.pw;
            const bool first = ih == hs && kw == 0;
            if (p.max) {
                if (first)
                    for (int64_t j = lo; j < hi; ++j) out[j] = in[j * sw];
                else
                    for (int64_t j = lo; j < hi; ++j) out[j] = take(in[j * sw], out[j]);
            } else {
                if (first)
                    for (int64_t j = lo; j < hi; ++j) out[j] = 0.0f + in[j * sw];
                else
                    for (int64_t j = lo; j < hi; ++j) out[j] += in[j * sw];
            }
        }
    if (!p.max)
        for (int64_t j = lo; j < hi; ++j) out[j] /= count;
}

void fwd_general(const Pool& p, const float* x, float* y) {
    const Windows win(p);
    int64_t lo, hi;
    inner_columns(p, lo, hi);
    for (int64_t pl = 0; pl < p.planes; ++pl) {
        const float* plane = x + pl * p.h * p.w;
        for (int64_t i = 0; i < p.oh; ++i) {
            float* out = y + (pl * p.oh + i) * p.ow;
            for (int64_t j = 0; j < lo; ++j) out[j] = window_value(p, win, plane, i, j);
            for (int64_t j = hi; j < p.ow; ++j) out[j] = window_value(p, win, plane, i, j);
            if (lo == hi) continue;
            const size_t r = static_cast<size_t>(i);
            // Inner columns all count the kernel's width (clipped or not, by count_include_pad alike).
            const float count = static_cast<float>(win.rows.count[r] * win.cols.count[static_cast<size_t>(lo)]);
            const int64_t hs = win.rows.lo[r], he = win.rows.hi[r];
            if (p.sw == 1) inner_row<1>(p, plane, hs, he, lo, hi, count, out);
            else if (p.sw == 2) inner_row<2>(p, plane, hs, he, lo, hi, count, out);
            else inner_row<0>(p, plane, hs, he, lo, hi, count, out);
        }
    }
}

// Non-overlapping windows write every covered dX element once; only odd edges need zeros.
void bwd_2x2(const Pool& p, const float* dy, const float* x, const float* y, float* dx) {
    const int64_t ow4 = p.ow / 4 * 4;
    std::optional<Windows> win;  // only for NaN windows and odd edges: no allocation on the common path
    const I4 lo = {0, 4, 1, 5}, hi = {2, 6, 3, 7};  // interleave two rows of window values back
    for (int64_t pl = 0; pl < p.planes; ++pl) {
        const float* plane = x + pl * p.h * p.w;
        for (int64_t i = 0; i < p.oh; ++i) {
            const int64_t row = (pl * p.h + 2 * i) * p.w;
            const float *r0 = x + row, *r1 = r0 + p.w;
            float *d0 = dx + row, *d1 = d0 + p.w;
            const float* g = dy + (pl * p.oh + i) * p.ow;
            if (p.max) {
                // The gradient goes to the first corner equal to the maximum...
                for (int64_t j = 0; j < ow4; j += 4) {
                    const Corners q = corners(r0, r1, j);
                    const V4 m = take4(q.d, take4(q.c, take4(q.b, q.a))), zero = {};
                    V4 left = load4(g + j);
                    const V4 ga = q.a == m ? left : zero;
                    left = q.a == m ? zero : left;
                    const V4 gb = q.b == m ? left : zero;
                    left = q.b == m ? zero : left;
                    const V4 gc = q.c == m ? left : zero;
                    const V4 gd = q.c == m ? zero : left;
                    store4(d0 + 2 * j, __builtin_shuffle(ga, gb, lo));
                    store4(d0 + 2 * j + 4, __builtin_shuffle(ga, gb, hi));
                    store4(d1 + 2 * j, __builtin_shuffle(gc, gd, lo));
                    store4(d1 + 2 * j + 4, __builtin_shuffle(gc, gd, hi));
                }
                // ...which a NaN equals nowhere: windows whose Y is NaN, and the tail, go the general way.
                const float* yr = y + (pl * p.oh + i) * p.ow;
                for (int64_t j = 0; j < p.ow; ++j) {
                    if (j < ow4 && yr[j] == yr[j]) continue;
                    d0[2 * j] = d0[2 * j + 1] = d1[2 * j] = d1[2 * j + 1] = 0.0f;
                    if (!win) win.emplace(p);
                    dx[pl * p.h * p.w + argmax(p, *win, plane, i, j)] = g[j];
                }
            } else {
                for (int64_t j = 0; j < ow4; j += 4) {
                    const V4 v = load4(g + j) / 4.0f;
                    const V4 lo2 = __builtin_shuffle(v, v, lo), hi2 = __builtin_shuffle(v, v, hi);
                    store4(d0 + 2 * j, lo2);
                    store4(d0 + 2 * j + 4, hi2);
                    store4(d1 + 2 * j, lo2);
                    store4(d1 + 2 * j + 4, hi2);
                }
                for (int64_t j = ow4; j < p.ow; ++j) d0[2 * j] = d0[2 * j + 1] = d1[2 * j] = d1[2 * j + 1] = g[j] / 4.0f;
            }
            for (int64_t c = 2 * p.ow; c < p.w; ++c) d0[c] = d1[c] = 0.0f;
        }
        for (int64_t r = 2 * p.oh; r < p.h; ++r) std::fill_n(dx + (pl * p.h + r) * p.w, p.w, 0.0f);
    }
}

void bwd_general(const Pool& p, const float* dy, const float* x, float* dx) {
    std::fill_n(dx, p.planes * p.h * p.w, 0.0f);  // windows may overlap or leave gaps
    const Windows win(p);
    for (int64_t pl = 0; pl < p.planes; ++pl) {
        const float* plane = x + pl * p.h * p.w;
        const float* g = dy + pl * p.oh * p.ow;
        float* d = dx + pl * p.h * p.w;
        for (int64_t i = 0; i < p.oh; ++i)
            for (int64_t j = 0; j < p.ow; ++j) {
                if (p.max) {
                    d[argmax(p, win, plane, i, j)] += g[i * p.ow + j];
                    continue;
                }
                const size_t r = static_cast<size_t>(i), c = static_cast<size_t>(j);
                const float v = g[i * p.ow + j] / static_cast<float>(win.rows.count[r] * win.cols.count[c]);
                for (int64_t ih = win.rows.lo[r]; ih < win.rows.hi[r]; ++ih)
                    for (int64_t iw = win.cols.lo[c]; iw < win.cols.hi[c]; ++iw) d[ih * p.w + iw] += v;
            }
    }
}

// body(q, off_in, off_out) for pieces q of the planes shared out among the workers (each plane's
// windows are computed the same wherever the planes are cut): q is p with its plane count,
// off_in / off_out the first plane's offsets in X (dX) and Y (dY).
// A worker from a quarter of a pure stream's kMinSplitElements: pooling compares and shuffles as it
// streams (LeNet's second pool, 204,800 floats in, ran on one CPU: its passes took 167 -> 135 ms
// per 300 training steps on two).
template <class F>
void split_planes(const Pool& p, const F& body) {
    const int64_t planes = p.planes;
    const int workers = split_workers(static_cast<double>(planes * p.h * p.w), kMinSplitElements / 4, planes);
    split_work(planes, workers, [&](int64_t lo, int64_t hi, int) {
        Pool q = p;
        q.planes = hi - lo;
        body(q, lo * p.h * p.w, lo * p.oh * p.ow);
    });
}

// Each plane's mean: lane_sum's fixed order (16 float lanes, then float64), where the general
// path summed 49 floats one by one per window with its bookkeeping (ResNet-20's global pool at
// batch 1000: 4 ms a call).
void global_avg_fwd(const Pool& p, const float* x, float* y) {
    const int64_t hw = p.h * p.w;
    for (int64_t pl = 0; pl < p.planes; ++pl) {
        const float* plane = x + pl * hw;
        y[pl] = static_cast<float>(lane_sum(hw, [plane](int64_t i) { return plane[i]; }) / static_cast<double>(hw));
    }
}

void global_avg_bwd(const Pool& p, const float* dy, float* dx) {
    const int64_t hw = p.h * p.w;
    for (int64_t pl = 0; pl < p.planes; ++pl) std::fill_n(dx + pl * hw, hw, dy[pl] / static_cast<float>(hw));
}

}  // namespace

void op_pool2d_fwd(const xylem_op_desc& desc, xylem_stream_s&) {
    OpArgs a(desc, 1, 1, 1);
    const auto attrs = a.attrs<xylem_pool2d_attrs>();
    const Tensor tx = a.in(0, "X"), ty = a.out(0, "Y");
    const Pool p = pool_shape(a, attrs, tx, "X", ty, "Y");
    if (overlap(ty, tx)) a.fail("Y overlaps X");
    const float* x = tx.f32();
    float* y = ty.f32();
    split_planes(p, [&](const Pool& q, int64_t in, int64_t out) {
        if (q.whole_plane_avg()) global_avg_fwd(q, x + in, y + out);
        else if (q.fast2x2()) fwd_2x2(q, x + in, y + out);
        else fwd_general(q, x + in, y + out);
    });
}

// The max windows are found again in X (ties to the first); Y only flags NaN windows for the fast path.
void op_pool2d_bwd(const xylem_op_desc& desc, xylem_stream_s&) {
    OpArgs a(desc, 3, 3, 1);
    const auto attrs = a.attrs<xylem_pool2d_attrs>();
    const Tensor tdy = a.in(0, "dY"), tx = a.in(1, "X"), ty = a.in(2, "Y"), tdx = a.out(0, "dX");
    const Pool p = pool_shape(a, attrs, tx, "X", tdy, "dY");
    a.same_numel(tdy, "dY", ty, "Y");
    a.same_numel(tx, "X", tdx, "dX");
    if (overlap(tdx, tdy) || overlap(tdx, tx)) a.fail("dX overlaps dY or X");
    const float *dy = tdy.f32(), *x = tx.f32(), *y = ty.f32();
    float* dx = tdx.f32();
    split_planes(p, [&](const Pool& q, int64_t in, int64_t out) {
        if (q.whole_plane_avg()) global_avg_bwd(q, dy + out, dx + in);
        else if (q.fast2x2()) bwd_2x2(q, dy + out, x + in, y + out, dx + in);
        else bwd_general(q, dy + out, x + in, dx + in);
    });
}

}  // namespace xylem::native
