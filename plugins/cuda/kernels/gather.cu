// GATHER_ROWS on 32-bit words (f32 and i32 alike), and SCATTER_ADD_ROWS, its gradient; a bad index
// flags the stream.
#include "common.cuh"

namespace xylem::cuda::kernels {

namespace {

__global__ void gather_rows_k(const uint32_t* src, const int32_t* idx, uint32_t* out, int64_t n_idx, int64_t rows,
                              int64_t row_words, uint32_t poison, unsigned* flags, unsigned bit) {
    XYLEM_GRID_STRIDE(e, n_idx * row_words) {
        const int64_t i = e / row_words, w = e % row_words;
        const int32_t r = idx[i];
        const bool bad = r < 0 || r >= rows;
        if (bad && w == 0) atomicOr(flags, bit);
        out[e] = bad ? poison : src[r * row_words + w];
    }
}

// SCATTER_ADD_ROWS without float atomics (as the OpenCL plugin's kernels/gather.cl), over two
// scratch words per row of out, owner (the row's first position) and count, in three passes: init;
// claim (a thread per position: a bad index flags, else integer atomicMin / atomicAdd, whose results
// do not depend on the order); add (a block per position, only a row's first goes on: its threads
// take columns and add the row's sources in position order, out + src[i0] + src[i1] + ..., the
// native plugin's order and bits, scanning idx forward until they met the row's count). Cost:
// N*row_len adds plus, per distinct index, a scan from its first to its last position.
__global__ void scatter_init_k(unsigned long long* owner, unsigned long long* count, int64_t rows) {
    XYLEM_GRID_STRIDE(r, rows) {
        owner[r] = ~0ull;
        count[r] = 0;
    }
}

__global__ void scatter_claim_k(const int32_t* idx, int64_t n, int64_t rows, unsigned long long* owner,
                                unsigned long long* count, unsigned* flags, unsigned bit) {
    XYLEM_GRID_STRIDE(i, n) {
        const int32_t r = idx[i];
        if (r < 0 || r >= rows) {
            atomicOr(flags, bit);
        } else {
            atomicMin(owner + r, static_cast<unsigned long long>(i));
            atomicAdd(count + r, 1ull);
        }
    }
}

__global__ void scatter_add_k(const float* src, const int32_t* idx, float* out, int64_t n, int64_t rows,
                              int64_t row_len, const unsigned long long* owner, const unsigned long long* count) {
    for (int64_t i = blockIdx.x; i < n; i += gridDim.x) {
        const int32_t r = idx[i];
        if (r < 0 || r >= rows || owner[r] != static_cast<unsigned long long>(i)) continue;
        const unsigned long long repeats = count[r];
        for (int64_t j = threadIdx.x; j < row_len; j += blockDim.x) {
            float* dst = out + r * row_len + j;
            float acc = *dst + src[i * row_len + j];
            unsigned long long found = 1;
            for (int64_t k = i + 1; found < repeats; ++k)
                if (idx[k] == r) {
                    acc += src[k * row_len + j];
                    ++found;
                }
            *dst = acc;
        }
    }
}

}  // namespace

int64_t scatter_words(int64_t rows) { return 2 * (rows > 0 ? rows : 1); }

void scatter_add_rows(const float* src, const int32_t* idx, float* out, int64_t n, int64_t rows, int64_t row_len,
                      unsigned long long* words, unsigned* flags, unsigned bit, cudaStream_t s) {
    if (!n) return;
    unsigned long long *owner = words, *count = words + (rows > 0 ? rows : 1);
    if (rows) scatter_init_k<<<grid_for(rows), kThreads, 0, s>>>(owner, count, rows);
    scatter_claim_k<<<grid_for(n), kThreads, 0, s>>>(idx, n, rows, owner, count, flags, bit);
    if (!row_len) return;
    int threads = 32;  // enough for the columns, at most kThreads
    while (threads < row_len && threads < kThreads) threads *= 2;
    const int64_t blocks = n < 65535 * 8 ? n : 65535 * 8;
    scatter_add_k<<<static_cast<unsigned>(blocks), threads, 0, s>>>(src, idx, out, n, rows, row_len, owner, count);
}

void gather_rows(const uint32_t* src, const int32_t* idx, uint32_t* out, int64_t n_idx, int64_t rows,
                 int64_t row_words, uint32_t poison, unsigned* flags, unsigned bit, cudaStream_t s) {
    const int64_t n = n_idx * row_words;
    if (n) gather_rows_k<<<grid_for(n), kThreads, 0, s>>>(src, idx, out, n_idx, rows, row_words, poison, flags, bit);
}

}  // namespace xylem::cuda::kernels
