/* Transformer ops (ABI 1.7): LAYER_NORM_FWD/BWD, ATTENTION_FWD/BWD, MASKED_SOFTMAX, PERMUTE
 * (GEMM_BATCHED: ops/gemm.cpp). Every sum runs in a fixed order (no atomics), so a device gives
 * the same bits for the same inputs. */

/* ---- layer norm: one work-group per row, two passes (the squared deviations do not cancel as
 * E[x^2] - E[x]^2 does). Y may be X exactly: each item reads its elements before writing them. */
__kernel void ln_fwd(__global const float* x, int x_off, int d, float eps, __global const float* gamma, int g_off,
                     int has_beta, __global const float* beta, int b_off, __global float* y, int y_off,
                     __global float* mean, int mean_off, __global float* rstd, int rstd_off) {
    __local float buf[256];
    const int row = (int)get_group_id(0), lid = (int)get_local_id(0), group = (int)get_local_size(0);
    __global const float* xr = x + x_off + row * d;
    __global float* yr = y + y_off + row * d;
    float acc = 0.0f;
    for (int j = lid; j < d; j += group) acc += xr[j];
    const float mu = group_sum(buf, acc) / (float)d;
    acc = 0.0f;
    for (int j = lid; j < d; j += group) {
        const float c = xr[j] - mu;
        acc += c * c;
    }
    const float rs = 1.0f / sqrt(group_sum(buf, acc) / (float)d + eps);
    if (lid == 0) {
        mean[mean_off + row] = mu;
        rstd[rstd_off + row] = rs;
    }
    for (int j = lid; j < d; j += group)
        yr[j] = (xr[j] - mu) * rs * gamma[g_off + j] + (has_beta ? beta[b_off + j] : 0.0f);
}

/* dX = rstd*(g - mean(g) - xhat*mean(g*xhat)), g = dY*gamma: one work-group per row. dX may be dY
 * exactly (both sums are complete, behind group_sum's barrier, before any write).
 * No contraction in either dX kernel: NVIDIA's OpenCL fused g = dy*gamma into g - mean(g) as one
 * fma, so g - mean(g) kept dy*gamma's rounding error where it should cancel, and rstd (316 when a
 * row's variance is 0, e.g. d = 1) made it -1.34e-5 where 0 is right (the H100 run's one failed
 * conformance case, docs/gpu-results.md). */
__kernel void ln_bwd_dx(__global const float* dy, int dy_off, __global const float* x, int x_off, int d,
                        __global const float* gamma, int g_off, __global const float* mean, int mean_off,
                        __global const float* rstd, int rstd_off, __global float* dx, int dx_off) {
#pragma OPENCL FP_CONTRACT OFF
    __local float buf[256];
    const int row = (int)get_group_id(0), lid = (int)get_local_id(0), group = (int)get_local_size(0);
    __global const float* dyr = dy + dy_off + row * d;
    __global const float* xr = x + x_off + row * d;
    __global float* dxr = dx + dx_off + row * d;
    const float mu = mean[mean_off + row], rs = rstd[rstd_off + row];
    float sg = 0.0f, sgx = 0.0f;
    for (int j = lid; j < d; j += group) {
        const float g = dyr[j] * gamma[g_off + j];
        sg += g;
        sgx += g * ((xr[j] - mu) * rs);
    }
    const float mg = group_sum(buf, sg) / (float)d;
    const float mgx = group_sum(buf, sgx) / (float)d;
    for (int j = lid; j < d; j += group) {
        const float g = dyr[j] * gamma[g_off + j];
        dxr[j] = rs * (g - mg - ((xr[j] - mu) * rs) * mgx);
    }
}

/* dgamma and dbeta, step 1: the sums over each chunk of chunk_rows rows, one item per (chunk,
 * 16 columns), into part[chunk*d + col] (dgamma's) and part[n_chunks*d + chunk*d + col] (dbeta's).
 * The chunking depends on the shape only, so the combine below always adds in the same order;
 * each column's sum is the same sequence of operations in whichever lane it falls. */
__kernel void ln_bwd_partials(__global const float* dy, int dy_off, __global const float* x, int x_off,
                              __global const float* mean, int mean_off, __global const float* rstd, int rstd_off,
                              int rows, int d, int chunk_rows, int n_chunks, __global float* part) {
    const int blocks = (d + 15) / 16;
    FOR_EACH(t, n_chunks * blocks) {
        const int c = t / blocks, col = (t - c * blocks) * 16, left = d - col;
        const int r0 = c * chunk_rows, r1 = min(rows, r0 + chunk_rows);
        float16 sg = (float16)(0.0f), sb = (float16)(0.0f);
        for (int r = r0; r < r1; ++r) {
            const float16 g = load16(dy + dy_off + r * d + col, left);
            sg += g * ((load16(x + x_off + r * d + col, left) - mean[mean_off + r]) * rstd[rstd_off + r]);
            sb += g;
        }
        store16(sg, part + c * d + col, left);
        store16(sb, part + (n_chunks + c) * d + col, left);
    }
}

/* Step 2: one item per 16 columns adds their chunks in chunk order; beta == 0 does not read the
 * old value. */
__kernel void ln_bwd_combine(__global const float* part, int n_chunks, int d, float beta, __global float* dgamma,
                             int dg_off, int has_dbeta, __global float* dbeta, int db_off) {
    FOR_EACH16(col, d) {
        const int left = d - col;
        float16 sg = (float16)(0.0f), sb = (float16)(0.0f);
        for (int c = 0; c < n_chunks; ++c) {
            sg += load16(part + c * d + col, left);
            sb += load16(part + (n_chunks + c) * d + col, left);
        }
        if (beta != 0.0f) sg += beta * load16(dgamma + dg_off + col, left);
        store16(sg, dgamma + dg_off + col, left);
        if (has_dbeta) {
            if (beta != 0.0f) sb += beta * load16(dbeta + db_off + col, left);
            store16(sb, dbeta + db_off + col, left);
        }
    }
}

/* ---- layer norm, CPU-shaped (DeviceContext::cpu_kernels): one work-item per row, 16 columns per
 * step, lane sums then a fixed-order horizontal sum (the same bits every run). Y may be X, dX may
 * dY, exactly: a row is read whole before it is written. */
/* Lanes of a step at column j of d that exist (the rest are padding). */
inline int16 lanes_left(int left) {
    return (int16)(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15) < (int16)(left);
}

__kernel void ln_fwd_rows(__global const float* x, int x_off, int rows, int d, float eps, __global const float* gamma,
                          int g_off, int has_beta, __global const float* beta, int b_off, __global float* y, int y_off,
                          __global float* mean, int mean_off, __global float* rstd, int rstd_off) {
    FOR_EACH(row, rows) {
        __global const float* xr = x + x_off + row * d;
        __global float* yr = y + y_off + row * d;
        float16 acc = (float16)(0.0f);
        for (int j = 0; j < d; j += 16) acc += load16(xr + j, d - j);
        const float mu = hsum16(acc) / (float)d;
        acc = (float16)(0.0f);
        for (int j = 0; j < d; j += 16) {
            const float16 c = select((float16)(0.0f), load16(xr + j, d - j) - mu, lanes_left(d - j));
            acc += c * c;
        }
        const float rs = 1.0f / sqrt(hsum16(acc) / (float)d + eps);
        mean[mean_off + row] = mu;
        rstd[rstd_off + row] = rs;
        for (int j = 0; j < d; j += 16) {
            float16 v = (load16(xr + j, d - j) - mu) * rs * load16(gamma + g_off + j, d - j);
            if (has_beta) v += load16(beta + b_off + j, d - j);
            store16(v, yr + j, d - j);
        }
    }
}

/* dX = rstd*(g - mean(g) - xhat*mean(g*xhat)), g = dY*gamma (padding lanes: g = 0). */
__kernel void ln_bwd_dx_rows(__global const float* dy, int dy_off, __global const float* x, int x_off, int rows,
                             int d, __global const float* gamma, int g_off, __global const float* mean, int mean_off,
                             __global const float* rstd, int rstd_off, __global float* dx, int dx_off) {
#pragma OPENCL FP_CONTRACT OFF
    FOR_EACH(row, rows) {
        __global const float* dyr = dy + dy_off + row * d;
        __global const float* xr = x + x_off + row * d;
        __global float* dxr = dx + dx_off + row * d;
        const float mu = mean[mean_off + row], rs = rstd[rstd_off + row];
        float16 sg = (float16)(0.0f), sgx = (float16)(0.0f);
        for (int j = 0; j < d; j += 16) {
            const float16 g = load16(dyr + j, d - j) * load16(gamma + g_off + j, d - j);
            sg += g;
            sgx += g * ((load16(xr + j, d - j) - mu) * rs);
        }
        const float mg = hsum16(sg) / (float)d, mgx = hsum16(sgx) / (float)d;
        for (int j = 0; j < d; j += 16) {
            const float16 g = load16(dyr + j, d - j) * load16(gamma + g_off + j, d - j);
            store16(rs * (g - mg - ((load16(xr + j, d - j) - mu) * rs) * mgx), dxr + j, d - j);
        }
    }
}

/* ---- attention ------------------------------------------------------------------------------
 * Flash style: one work-group per (batch*head, block of G rows), one work-item per row, the other
 * side's rows streamed through local memory in tiles of ATT_BK rows x DC columns (the head dims in
 * chunks of DC), scores kept per tile in registers: no [Tq, L] buffer. The forward pass keeps a
 * running max and sum (online softmax); the backward pass recomputes P from LSE.
 *
 * Vectors, not scalar loops: a dot product as a scalar loop is a float reduction, which no
 * compiler vectorizes without reassociating (PoCL then ran these kernels at scalar speed, slower
 * than the composed gemm + softmax path). Rows are float8 lanes with a fixed-order horizontal sum
 * (hsum8), so the result is still the same bits every run. Tiles are zero-padded to ATT_BK x DC
 * with DC = 32 or 64 (the kernels' _32/_64 suffix, the constant bounds of the inner loops).
 * Loop bounds that contain a barrier are the same for the whole group; a work-item past the end
 * only helps stage tiles. */
#define ATT_BK 16   /* rows per tile: one float16 of scores */
#define ATT_W 8     /* float8 lanes per row chunk, at most (DC = 64) */

/* Keys [0, end) are visible to query i: bottom-right aligned causal (shapes_transformer.h). */
inline int att_visible_end(int i, int L, int Tq, int causal) {
    if (!causal) return L;
    const int e = i + L - Tq + 1;
    return e < 0 ? 0 : (e > L ? L : e);
}

/* Dropout's factor M_ij on P's element `index`: keep/(1-p), or 1 when p == 0. */
inline float att_drop(float p, ulong seed, ulong index, float keep_scale) {
    return p > 0.0f ? (dropout_keep(seed, index, p) ? keep_scale : 0.0f) : 1.0f;
}

/* 8 floats of a row from c (< n), zeros past n. */
inline float8 att_load8(__global const float* row, int c, int n) {
    if (c + 8 <= n) return vload8(0, row + c);
    float t[8];
    for (int e = 0; e < 8; ++e) t[e] = c + e < n ? row[c + e] : 0.0f;
    return vload8(0, t);
}

/* tile[rr*W + w] = src row r0 + rr, columns c0 + 8w .. + 8 (ld floats per row) for rr < nr and
 * columns < c0 + nc, zero elsewhere; the whole group stages. W = DC/8. */
inline void att_stage(__local float8* tile, __global const float* src, int ld, int r0, int nr, int c0, int nc,
                      const int W) {
    const int lid = (int)get_local_id(0), group = (int)get_local_size(0);
    for (int t = lid; t < ATT_BK * W; t += group) {
        const int rr = t / W, w = t - rr * W;
        tile[t] = rr < nr ? att_load8(src + (r0 + rr) * ld + c0, 8 * w, nc) : (float8)(0.0f);
    }
}

/* The row's chunk [c0, c0 + 8W) into registers, zeros past n. */
inline void att_row(float8* r, __global const float* row, int c0, int n, const int W) {
    for (int w = 0; w < W; ++w) r[w] = att_load8(row + c0, 8 * w, n - c0);
}

/* acc[jj] += r . tile row jj, for the tile's ATT_BK rows. */
inline void att_dots(float* acc, const float8* r, __local const float8* tile, const int W) {
    for (int jj = 0; jj < ATT_BK; ++jj) {
        float8 a = r[0] * tile[jj * W];
        for (int w = 1; w < W; ++w) a += r[w] * tile[jj * W + w];
        acc[jj] += hsum8(a);
    }
}

/* The operands every attention kernel takes, in this order: the shape, the mask's broadcast
 * strides (ops.h: mask(b, h, i, j) = mask[b*msb + h*msh + i*msq + j]) and dropout. */
#define ATT_SHAPE_ARGS                                                                                          \
    int H, int Tq, int Tk, int L, int Dk, int Dv, float scale, int causal, float p, ulong seed,                 \
        __global const float *mask, int mask_off, int has_mask, int msb, int msh, int msq
#define ATT_SHAPE_PASS H, Tq, Tk, L, Dk, Dv, scale, causal, p, seed, mask, mask_off, has_mask, msb, msh, msq

/* Scores of query row i against the tile's keys j0 + jj: scale*dot + mask, -inf where hidden. */
inline float16 att_scores(float* s, int j0, int row_end, float scale, int has_mask, __global const float* mr) {
    for (int jj = 0; jj < ATT_BK; ++jj) {
        const int j = j0 + jj;
        s[jj] = j < row_end ? scale * s[jj] + (has_mask ? mr[j] : 0.0f) : -INFINITY;
    }
    return vload16(0, s);
}

/* O[:, dv0 : dv0 + DC] and (dv0 == 0) LSE, for the G query rows of this group. */
#define ATT_FWD_ARGS                                                                                            \
    __global const float *q, int q_off, __global const float *k, int k_off, __global const float *v, int v_off, \
        __global float *o, int o_off, __global float *lse, int lse_off, int dv0, int n_blocks, ATT_SHAPE_ARGS
#define ATT_FWD_PASS q, q_off, k, k_off, v, v_off, o, o_off, lse, lse_off, dv0, n_blocks, ATT_SHAPE_PASS

inline void attn_fwd_body(const int W, __local float8* kt, __local float8* vt, ATT_FWD_ARGS) {
    const int DC = 8 * W;
    const int lid = (int)get_local_id(0), G = (int)get_local_size(0), grp = (int)get_group_id(0);
    const int bh = grp / n_blocks, i0 = (grp - bh * n_blocks) * G, i = i0 + lid;
    const int valid = i < Tq, ir = valid ? i : i0;
    const int row_end = valid ? att_visible_end(i, L, Tq, causal) : 0;
    const int group_end = att_visible_end(min(Tq, i0 + G) - 1, L, Tq, causal); /* the block's last row sees most */
    __global const float* qr = q + q_off + (bh * Tq + ir) * Dk;
    __global const float* kh = k + k_off + bh * Tk * Dk;
    __global const float* vh = v + v_off + bh * Tk * Dv;
    __global const float* mr = mask + mask_off + (bh / H) * msb + (bh % H) * msh + ir * msq;
    const ulong drop_row = ((ulong)bh * (ulong)Tq + (ulong)ir) * (ulong)L; /* P's flat index of (i, 0) */
    const float keep_scale = 1.0f / (1.0f - p);
    float8 acc[ATT_W], r[ATT_W];
    float s[ATT_BK];
    for (int w = 0; w < W; ++w) acc[w] = (float8)(0.0f);
    float m = -INFINITY, l = 0.0f;
    for (int j0 = 0; j0 < group_end; j0 += ATT_BK) {
        const int nk = min(ATT_BK, group_end - j0);
        for (int jj = 0; jj < ATT_BK; ++jj) s[jj] = 0.0f;
        for (int c0 = 0; c0 < Dk; c0 += DC) {
            barrier(CLK_LOCAL_MEM_FENCE); /* every item is done with the previous tile */
            att_stage(kt, kh, Dk, j0, nk, c0, min(DC, Dk - c0), W);
            barrier(CLK_LOCAL_MEM_FENCE);
            if (j0 < row_end) { /* a causal row's hidden tiles cost nothing but the staging */
                att_row(r, qr, c0, Dk, W);
                att_dots(s, r, kt, W);
            }
        }
        att_stage(vt, vh, Dv, j0, nk, dv0, min(DC, Dv - dv0), W); /* vt's last readers passed the barrier above */
        barrier(CLK_LOCAL_MEM_FENCE);
        /* if-blocks, not continue: the loop's barriers stay in plainly uniform control flow */
        const float16 sv = att_scores(s, j0, row_end, scale, has_mask, mr);
        const float mt = hmax16(sv);
        if (mt > -INFINITY) { /* something visible in this tile (row_end is 0 past the last row) */
            const float m_new = fmax(m, mt), f = exp(m - m_new);
            const float16 pv = exp(sv - m_new); /* hidden: exp(-inf) = 0 */
            l = l * f + hsum16(pv);             /* LSE is taken before dropout */
            for (int w = 0; w < W; ++w) acc[w] *= f;
            vstore16(pv, 0, s);
            for (int jj = 0; jj < ATT_BK; ++jj) {
                const float pm = p > 0.0f && s[jj] != 0.0f
                                     ? s[jj] * att_drop(p, seed, drop_row + (ulong)(j0 + jj), keep_scale)
                                     : s[jj];
                for (int w = 0; w < W; ++w) acc[w] += pm * vt[jj * W + w];
            }
            m = m_new;
        }
    }
    if (!valid) return;
    const int none = m == -INFINITY; /* no visible key, or only -inf scores */
    __global float* orow = o + o_off + (bh * Tq + i) * Dv + dv0;
    const int ndv = min(DC, Dv - dv0);
    float out[8 * ATT_W];
    for (int w = 0; w < W; ++w) vstore8(none ? (float8)(0.0f) : acc[w] / l, w, out);
    for (int dd = 0; dd < ndv; ++dd) orow[dd] = out[dd];
    if (dv0 == 0) lse[lse_off + bh * Tq + i] = none ? -INFINITY : m + log(l);
}

__kernel void attn_fwd_32(ATT_FWD_ARGS) {
    __local float8 kt[ATT_BK * 4], vt[ATT_BK * 4];
    attn_fwd_body(4, kt, vt, ATT_FWD_PASS);
}
__kernel void attn_fwd_64(ATT_FWD_ARGS) {
    __local float8 kt[ATT_BK * 8], vt[ATT_BK * 8];
    attn_fwd_body(8, kt, vt, ATT_FWD_PASS);
}

/* Backward step 1: dsum[r] = dO_r . O_r (D in ops.h), one item per row. */
__kernel void attn_bwd_rowdot(__global const float* dout, int do_off, __global const float* o, int o_off, int rows,
                              int dv, __global float* dsum) {
    FOR_EACH(r, rows) {
        float acc = 0.0f;
        for (int dd = 0; dd < dv; ++dd) acc += dout[do_off + r * dv + dd] * o[o_off + r * dv + dd];
        dsum[r] = acc;
    }
}

/* Backward step 2: dQ[:, c_out : c_out + DC] = scale * sum_j dS_ij k_j, one item per query row.
 * Per key tile: s_ij (Q.K over Dk's chunks), dp_ij = dO_i . v_j (over Dv's chunks), then K's
 * output chunk (still staged when Dk fits one chunk). */
#define ATT_DQ_ARGS                                                                                              \
    __global const float *dout, int do_off, __global const float *q, int q_off, __global const float *k,         \
        int k_off, __global const float *v, int v_off, __global const float *lse, int lse_off,                   \
        __global const float *dsum, __global float *dq, int dq_off, int c_out, int n_blocks, ATT_SHAPE_ARGS
#define ATT_DQ_PASS dout, do_off, q, q_off, k, k_off, v, v_off, lse, lse_off, dsum, dq, dq_off, c_out, n_blocks, \
    ATT_SHAPE_PASS

inline void attn_bwd_dq_body(const int W, __local float8* kt, __local float8* vt, ATT_DQ_ARGS) {
    const int DC = 8 * W;
    const int lid = (int)get_local_id(0), G = (int)get_local_size(0), grp = (int)get_group_id(0);
    const int bh = grp / n_blocks, i0 = (grp - bh * n_blocks) * G, i = i0 + lid;
    const int valid = i < Tq, ir = valid ? i : i0;
    const int row_end = valid ? att_visible_end(i, L, Tq, causal) : 0;
    const int group_end = att_visible_end(min(Tq, i0 + G) - 1, L, Tq, causal);
    __global const float* qr = q + q_off + (bh * Tq + ir) * Dk;
    __global const float* dor = dout + do_off + (bh * Tq + ir) * Dv;
    __global const float* kh = k + k_off + bh * Tk * Dk;
    __global const float* vh = v + v_off + bh * Tk * Dv;
    __global const float* mr = mask + mask_off + (bh / H) * msb + (bh % H) * msh + ir * msq;
    const ulong drop_row = ((ulong)bh * (ulong)Tq + (ulong)ir) * (ulong)L;
    const float keep_scale = 1.0f / (1.0f - p);
    const float lse_i = lse[lse_off + bh * Tq + ir], d_i = dsum[bh * Tq + ir];
    const int live = valid && lse_i > -INFINITY; /* a row with no visible key has P = 0 */
    float8 acc[ATT_W], r[ATT_W];
    float s[ATT_BK], dp[ATT_BK];
    for (int w = 0; w < W; ++w) acc[w] = (float8)(0.0f);
    for (int j0 = 0; j0 < group_end; j0 += ATT_BK) {
        const int nk = min(ATT_BK, group_end - j0);
        for (int jj = 0; jj < ATT_BK; ++jj) s[jj] = dp[jj] = 0.0f;
        for (int c0 = 0; c0 < Dk; c0 += DC) {
            barrier(CLK_LOCAL_MEM_FENCE);
            att_stage(kt, kh, Dk, j0, nk, c0, min(DC, Dk - c0), W);
            barrier(CLK_LOCAL_MEM_FENCE);
            if (live && j0 < row_end) {
                att_row(r, qr, c0, Dk, W);
                att_dots(s, r, kt, W);
            }
        }
        for (int c0 = 0; c0 < Dv; c0 += DC) {
            barrier(CLK_LOCAL_MEM_FENCE);
            att_stage(vt, vh, Dv, j0, nk, c0, min(DC, Dv - c0), W);
            barrier(CLK_LOCAL_MEM_FENCE);
            if (live && j0 < row_end) {
                att_row(r, dor, c0, Dv, W);
                att_dots(dp, r, vt, W);
            }
        }
        if (Dk > DC) { /* kt holds Dk's last chunk: stage the output's */
            barrier(CLK_LOCAL_MEM_FENCE);
            att_stage(kt, kh, Dk, j0, nk, c_out, min(DC, Dk - c_out), W);
            barrier(CLK_LOCAL_MEM_FENCE);
        }
        if (live && j0 < row_end) {
            const float16 pv = exp(att_scores(s, j0, row_end, scale, has_mask, mr) - lse_i);
            vstore16(pv, 0, s);
            for (int jj = 0; jj < ATT_BK; ++jj) {
                if (s[jj] == 0.0f) continue; /* hidden, or nothing to add */
                const float mij = att_drop(p, seed, drop_row + (ulong)(j0 + jj), keep_scale);
                const float ds = s[jj] * (mij * dp[jj] - d_i);
                for (int w = 0; w < W; ++w) acc[w] += ds * kt[jj * W + w];
            }
        }
    }
    if (!valid) return;
    __global float* dqr = dq + dq_off + (bh * Tq + i) * Dk + c_out;
    float out[8 * ATT_W];
    for (int w = 0; w < W; ++w) vstore8(scale * acc[w], w, out);
    for (int dd = 0; dd < min(DC, Dk - c_out); ++dd) dqr[dd] = out[dd];
}

__kernel void attn_bwd_dq_32(ATT_DQ_ARGS) {
    __local float8 kt[ATT_BK * 4], vt[ATT_BK * 4];
    attn_bwd_dq_body(4, kt, vt, ATT_DQ_PASS);
}
__kernel void attn_bwd_dq_64(ATT_DQ_ARGS) {
    __local float8 kt[ATT_BK * 8], vt[ATT_BK * 8];
    attn_bwd_dq_body(8, kt, vt, ATT_DQ_PASS);
}

/* Backward step 3: dK[:, c_out : c_out + DC] = scale * sum_i dS_ij q_i and dV[:, c_out : ...] =
 * sum_i P_ij M_ij dO_i, one item per key row j, query rows streamed in tiles. Rows j >= L (a
 * cache's unused tail) are written 0. */
#define ATT_DKV_ARGS                                                                                              \
    __global const float *dout, int do_off, __global const float *q, int q_off, __global const float *k,          \
        int k_off, __global const float *v, int v_off, __global const float *lse, int lse_off,                    \
        __global const float *dsum, __global float *dk, int dk_off, __global float *dv, int dv_off, int c_out,    \
        int n_blocks, ATT_SHAPE_ARGS
#define ATT_DKV_PASS dout, do_off, q, q_off, k, k_off, v, v_off, lse, lse_off, dsum, dk, dk_off, dv, dv_off, c_out, \
    n_blocks, ATT_SHAPE_PASS

inline void attn_bwd_dkdv_body(const int W, __local float8* qt, __local float8* ot, ATT_DKV_ARGS) {
    const int DC = 8 * W;
    const int lid = (int)get_local_id(0), G = (int)get_local_size(0), grp = (int)get_group_id(0);
    const int bh = grp / n_blocks, j0 = (grp - bh * n_blocks) * G, j = j0 + lid;
    const int in_range = j < Tk, key = j < L, jr = key ? j : 0;
    /* The first query that sees the block's first key (the earliest seen); none past L. */
    const int first = j0 >= L ? Tq : (causal ? max(0, j0 - L + Tq) : 0);
    __global const float* kr = k + k_off + (bh * Tk + jr) * Dk;
    __global const float* vr = v + v_off + (bh * Tk + jr) * Dv;
    __global const float* qh = q + q_off + bh * Tq * Dk;
    __global const float* doh = dout + do_off + bh * Tq * Dv;
    __global const float* mh = mask + mask_off + (bh / H) * msb + (bh % H) * msh + jr;
    const ulong drop_base = (ulong)bh * (ulong)Tq * (ulong)L + (ulong)jr;
    const float keep_scale = 1.0f / (1.0f - p);
    float8 acc_k[ATT_W], acc_v[ATT_W], r[ATT_W];
    float s[ATT_BK], dp[ATT_BK];
    for (int w = 0; w < W; ++w) acc_k[w] = acc_v[w] = (float8)(0.0f);
    for (int i0 = first; i0 < Tq; i0 += ATT_BK) {
        const int ni = min(ATT_BK, Tq - i0);
        /* whether this key is seen by any of the tile's queries (the last sees most) */
        const int seen_here = key && (!causal || j <= i0 + ni - 1 + L - Tq);
        for (int ii = 0; ii < ATT_BK; ++ii) s[ii] = dp[ii] = 0.0f;
        for (int c0 = 0; c0 < Dk; c0 += DC) {
            barrier(CLK_LOCAL_MEM_FENCE);
            att_stage(qt, qh, Dk, i0, ni, c0, min(DC, Dk - c0), W);
            barrier(CLK_LOCAL_MEM_FENCE);
            if (seen_here) {
                att_row(r, kr, c0, Dk, W);
                att_dots(s, r, qt, W);
            }
        }
        for (int c0 = 0; c0 < Dv; c0 += DC) {
            barrier(CLK_LOCAL_MEM_FENCE);
            att_stage(ot, doh, Dv, i0, ni, c0, min(DC, Dv - c0), W);
            barrier(CLK_LOCAL_MEM_FENCE);
            if (seen_here) {
                att_row(r, vr, c0, Dv, W);
                att_dots(dp, r, ot, W);
            }
        }
        if (Dk > DC || Dv > DC) { /* the tiles hold the last chunks: stage the output's */
            barrier(CLK_LOCAL_MEM_FENCE);
            att_stage(qt, qh, Dk, i0, ni, c_out, min(DC, Dk - c_out), W);
            att_stage(ot, doh, Dv, i0, ni, c_out, min(DC, Dv - c_out), W);
            barrier(CLK_LOCAL_MEM_FENCE);
        }
        if (seen_here) {
            /* P_ij of the tile's queries at once (one float16 exp); hidden ones -inf -> 0. */
            float lv[ATT_BK];
            for (int ii = 0; ii < ATT_BK; ++ii) {
                const int i = i0 + ii;
                const float lse_i = ii < ni ? lse[lse_off + bh * Tq + i] : -INFINITY;
                const int seen = ii < ni && !(causal && j > i + L - Tq) && lse_i > -INFINITY;
                s[ii] = seen ? scale * s[ii] + (has_mask ? mh[i * msq] : 0.0f) : -INFINITY;
                lv[ii] = seen ? lse_i : 0.0f;
            }
            vstore16(exp(vload16(0, s) - vload16(0, lv)), 0, s);
            for (int ii = 0; ii < ni; ++ii) {
                const float pij = s[ii];
                if (pij == 0.0f) continue;
                const int i = i0 + ii;
                const float mij = att_drop(p, seed, drop_base + (ulong)i * (ulong)L, keep_scale);
                const float pm = pij * mij, ds = pij * (mij * dp[ii] - dsum[bh * Tq + i]);
                for (int w = 0; w < W; ++w) {
                    acc_v[w] += pm * ot[ii * W + w];
                    acc_k[w] += ds * qt[ii * W + w];
                }
            }
        }
    }
    if (!in_range) return;
    __global float* dkr = dk + dk_off + (bh * Tk + j) * Dk + c_out;
    __global float* dvr = dv + dv_off + (bh * Tk + j) * Dv + c_out;
    float out_k[8 * ATT_W], out_v[8 * ATT_W];
    for (int w = 0; w < W; ++w) {
        vstore8(key ? scale * acc_k[w] : (float8)(0.0f), w, out_k);
        vstore8(key ? acc_v[w] : (float8)(0.0f), w, out_v);
    }
    for (int dd = 0; dd < min(DC, Dk - c_out); ++dd) dkr[dd] = out_k[dd];
    for (int dd = 0; dd < min(DC, Dv - c_out); ++dd) dvr[dd] = out_v[dd];
}

__kernel void attn_bwd_dkdv_32(ATT_DKV_ARGS) {
    __local float8 qt[ATT_BK * 4], ot[ATT_BK * 4];
    attn_bwd_dkdv_body(4, qt, ot, ATT_DKV_PASS);
}
__kernel void attn_bwd_dkdv_64(ATT_DKV_ARGS) {
    __local float8 qt[ATT_BK * 8], ot[ATT_BK * 8];
    attn_bwd_dkdv_body(8, qt, ot, ATT_DKV_PASS);
}

/* ---- masked_softmax: attention's P without dropout, one work-item per row of X [batch, Tq, L]
 * (batch = B*H for 4-D X; n = b*heads + h picks the mask's broadcast). Y may be X exactly: each
 * element is read before it is written. */
__kernel void masked_softmax(__global const float* x, int x_off, __global float* y, int y_off, int has_lse,
                             __global float* lse, int lse_off, int rows, int Tq, int L, int heads, float scale,
                             int causal, __global const float* mask, int mask_off, int has_mask, int msb, int msh,
                             int msq) {
    FOR_EACH(r, rows) {
        const int n = r / Tq, i = r - n * Tq;
        __global const float* xr = x + x_off + r * L;
        __global float* yr = y + y_off + r * L;
        __global const float* mr = mask + mask_off + (n / heads) * msb + (n % heads) * msh + i * msq;
        const int end = att_visible_end(i, L, Tq, causal);
        float m = -INFINITY;
        for (int j = 0; j < end; ++j) m = fmax(m, scale * xr[j] + (has_mask ? mr[j] : 0.0f));
        const int none = m == -INFINITY;
        float sum = 0.0f;
        if (!none)
            for (int j = 0; j < end; ++j) sum += exp(scale * xr[j] + (has_mask ? mr[j] : 0.0f) - m);
        for (int j = 0; j < L; ++j)
            yr[j] = none || j >= end ? 0.0f : exp(scale * xr[j] + (has_mask ? mr[j] : 0.0f) - m) / sum;
        if (has_lse) lse[lse_off + r] = none ? -INFINITY : m + log(sum);
    }
}

/* ---- permute: Y[t] = X at the index whose digits over Y's dims weigh X's strides (the host's
 * PermuteShape), up to 8 dims. Whole 4-byte words. One item per run of Y's last dim: its digits
 * once, then the run as float16-sized copies when X's last stride is 1 (attention's head splits
 * and merges), else word by word. */
__kernel void permute(__global const uint* x, int x_off, __global uint* y, int y_off, int runs, int ndim, int8 dims8,
                      int8 strides8) {
    const int dims[8] = {dims8.s0, dims8.s1, dims8.s2, dims8.s3, dims8.s4, dims8.s5, dims8.s6, dims8.s7};
    const int strides[8] = {strides8.s0, strides8.s1, strides8.s2, strides8.s3,
                            strides8.s4, strides8.s5, strides8.s6, strides8.s7};
    const int last = dims[ndim - 1], step = strides[ndim - 1];
    FOR_EACH(r, runs) {
        int rest = r, src = 0;
        for (int d = ndim - 2; d >= 0; --d) {
            const int q = rest / dims[d];
            src += (rest - q * dims[d]) * strides[d];
            rest = q;
        }
        __global const uint* xs = x + x_off + src;
        __global uint* yd = y + y_off + r * last;
        if (step == 1) {
            int j = 0;
            for (; j + 16 <= last; j += 16) vstore16(vload16(0, xs + j), 0, yd + j);
            for (; j < last; ++j) yd[j] = xs[j];
        } else {
            for (int j = 0; j < last; ++j) yd[j] = xs[j * step];
        }
    }
}
