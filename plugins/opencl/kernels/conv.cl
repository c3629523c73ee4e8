/* Convolution around CLBlast GEMMs. For a chunk of nb images the column matrix is
 * cols[C*R*S, nb*P] (P = OH*OW; row (c*R + r)*S + s, column i*P + p), so one GEMM per group
 * covers the whole chunk; results in [K, nb*P] order are moved to NCHW by the kernels below. */

/* Shape of one convolution, passed by value (an int16 keeps the argument list short). */
#define N_ s0
#define C_ s1
#define H_ s2
#define W_ s3
#define K_ s4
#define R_ s5
#define S_ s6
#define OH_ s7
#define OW_ s8
#define SH_ s9
#define SW_ sa
#define PH_ sb
#define PW_ sc
#define DH_ sd
#define DW_ se

/* cols[q, i*P + p] = x[n0 + i, c, oh*sh - ph + r*dh, ow*sw - pw + s*dw] (0 in the padding). */
__kernel void im2col(int16 v, __global const float* x, int x_off, int n0, int nb, __global float* cols, int cols_off) {
    const int P = v.OH_ * v.OW_, ncols = nb * P, rows = v.C_ * v.R_ * v.S_;
    FOR_EACH(t, rows * ncols) {
        const int q = t / ncols, col = t - q * ncols;
        const int i = col / P, p = col - i * P;
        const int s = q % v.S_, r = (q / v.S_) % v.R_, c = q / (v.S_ * v.R_);
        const int oh = p / v.OW_, ow = p - oh * v.OW_;
        const int h = oh * v.SH_ - v.PH_ + r * v.DH_, w = ow * v.SW_ - v.PW_ + s * v.DW_;
        float value = 0.0f;
        if (h >= 0 && h < v.H_ && w >= 0 && w < v.W_)
            value = x[x_off + (((n0 + i) * v.C_ + c) * v.H_ + h) * v.W_ + w];
        cols[cols_off + t] = value;
    }
}

/* dx[n0 + i, c, h, w] = sum of dcols over the (r, s, oh, ow) that read (h, w): each input
 * element gathers its own sum, so no atomics and a fixed order. */
__kernel void col2im(int16 v, __global const float* dcols, int dcols_off, int n0, int nb, __global float* dx,
                     int dx_off) {
    const int P = v.OH_ * v.OW_, ncols = nb * P, hw = v.H_ * v.W_;
    FOR_EACH(t, nb * v.C_ * hw) {
        const int i = t / (v.C_ * hw), rest = t - i * v.C_ * hw;
        const int c = rest / hw, h = (rest - c * hw) / v.W_, w = rest - c * hw - h * v.W_;
        float sum = 0.0f;
        for (int r = 0; r < v.R_; ++r) {
            const int hh = h + v.PH_ - r * v.DH_;
            if (hh < 0 || hh % v.SH_) continue;
            const int oh = hh / v.SH_;
            if (oh >= v.OH_) continue;
            for (int s = 0; s < v.S_; ++s) {
                const int ww = w + v.PW_ - s * v.DW_;
                if (ww < 0 || ww % v.SW_) continue;
                const int ow = ww / v.SW_;
                if (ow >= v.OW_) continue;
                sum += dcols[dcols_off + ((c * v.R_ + r) * v.S_ + s) * ncols + i * P + oh * v.OW_ + ow];
            }
        }
        dx[dx_off + ((n0 + i) * v.C_ + c) * hw + h * v.W_ + w] = sum;
    }
}

/* y[n0 + i, k, p] = act(yt[k, i*P + p] + b[k] + r[n0 + i, k, p]): the GEMM result to NCHW, bias,
 * residual (ABI 1.10) and activation fused. */
__kernel void kp_to_nchw_bias_act(int K, int P, int nb, int n0, __global const float* yt, int yt_off, int act,
                                  int has_bias, __global const float* b, int b_off, int has_res,
                                  __global const float* r, int r_off, __global float* y, int y_off) {
    FOR_EACH(t, nb * K * P) {
        const int i = t / (K * P), rest = t - i * K * P;
        const int k = rest / P, p = rest - k * P;
        float v = yt[yt_off + k * nb * P + i * P + p] + (has_bias ? b[b_off + k] : 0.0f);
        if (has_res) v += r[r_off + n0 * K * P + t];
        y[y_off + n0 * K * P + t] = activate(act, v);
    }
}

/* y = act(y + r) over n elements: the residual and activation after the Linear case's GEMM and bias. */
__kernel void residual_act(int act, __global const float* r, int r_off, __global float* y, int y_off, int n) {
    FOR_EACH(t, n) y[y_off + t] = activate(act, y[y_off + t] + r[r_off + t]);
}

/* dyt[k, i*P + p] = dy[n0 + i, k, p]: the gradient in the GEMMs' [K, nb*P] order. */
__kernel void nchw_to_kp(int K, int P, int nb, int n0, __global const float* dy, int dy_off, __global float* dyt,
                         int dyt_off) {
    FOR_EACH(t, nb * K * P) {
        const int k = t / (nb * P), col = t - k * nb * P;
        const int i = col / P, p = col - i * P;
        dyt[dyt_off + t] = dy[dy_off + ((n0 + i) * K + k) * P + p];
    }
}
