/* POOL2D_FWD / POOL2D_BWD, NCHW. Max: the first maximum in row-major window order wins, NaN
 * propagates, padding never wins. Average: divides by the full window (count_include_pad) or by
 * its in-bounds part. The backward pass gathers per input element (no atomics). */

/* kh, kw, sh, sw, ph, pw, max, include_pad */
#define KH_ s0
#define KW_ s1
#define SH_ s2
#define SW_ s3
#define PH_ s4
#define PW_ s5
#define MAX_ s6
#define INCL_ s7

inline int wins(float v, float m) { return v > m || (isnan(v) && !isnan(m)); }

/* The in-bounds rows [*h0,*h1) and columns [*w0,*w1) of window (oh, ow). */
inline void window(int8 a, int H, int W, int oh, int ow, int* h0, int* h1, int* w0, int* w1) {
    const int hs = oh * a.SH_ - a.PH_, ws = ow * a.SW_ - a.PW_;
    *h0 = max(hs, 0);
    *h1 = min(hs + a.KH_, H);
    *w0 = max(ws, 0);
    *w1 = min(ws + a.KW_, W);
}

/* Index within the plane of the window's first maximum. */
inline int window_argmax(__global const float* plane, int W, int h0, int h1, int w0, int w1) {
    int best = h0 * W + w0;
    float m = plane[best];
    for (int h = h0; h < h1; ++h)
        for (int w = w0; w < w1; ++w)
            if (wins(plane[h * W + w], m)) {
                m = plane[h * W + w];
                best = h * W + w;
            }
    return best;
}

__kernel void pool_fwd(int8 a, int planes, int H, int W, int OH, int OW, __global const float* x, int x_off,
                       __global float* y, int y_off) {
    FOR_EACH(t, planes * OH * OW) {
        const int pl = t / (OH * OW), o = t - pl * OH * OW;
        const int oh = o / OW, ow = o - oh * OW;
        __global const float* plane = x + x_off + pl * H * W;
        int h0, h1, w0, w1;
        window(a, H, W, oh, ow, &h0, &h1, &w0, &w1);
        float v;
        if (a.MAX_) {
            v = plane[window_argmax(plane, W, h0, h1, w0, w1)];
        } else {
            float sum = 0.0f;
            for (int h = h0; h < h1; ++h)
                for (int w = w0; w < w1; ++w) sum += plane[h * W + w];
            v = sum / (float)(a.INCL_ ? a.KH_ * a.KW_ : (h1 - h0) * (w1 - w0));
        }
        y[y_off + t] = v;
    }
}

__kernel void pool_bwd(int8 a, int planes, int H, int W, int OH, int OW, __global const float* dy, int dy_off,
                       __global const float* x, int x_off, __global float* dx, int dx_off) {
    FOR_EACH(t, planes * H * W) {
        const int pl = t / (H * W), e = t - pl * H * W;
        const int h = e / W, w = e - h * W;
        __global const float* plane = x + x_off + pl * H * W;
        __global const float* g = dy + dy_off + pl * OH * OW;
        /* windows oh with oh*sh - ph <= h < oh*sh - ph + kh */
        const int oh_lo = max(0, (h + a.PH_ - a.KH_ + a.SH_) / a.SH_), oh_hi = min(OH - 1, (h + a.PH_) / a.SH_);
        const int ow_lo = max(0, (w + a.PW_ - a.KW_ + a.SW_) / a.SW_), ow_hi = min(OW - 1, (w + a.PW_) / a.SW_);
        float sum = 0.0f;
        for (int oh = oh_lo; oh <= oh_hi; ++oh)
            for (int ow = ow_lo; ow <= ow_hi; ++ow) {
                int h0, h1, w0, w1;
                window(a, H, W, oh, ow, &h0, &h1, &w0, &w1);
                if (h < h0 || h >= h1 || w < w0 || w >= w1) continue;
                if (a.MAX_) {
                    if (window_argmax(plane, W, h0, h1, w0, w1) == e) sum += g[oh * OW + ow];
                } else {
                    sum += g[oh * OW + ow] / (float)(a.INCL_ ? a.KH_ * a.KW_ : (h1 - h0) * (w1 - w0));
                }
            }
        dx[dx_off + t] = sum;
    }
}
