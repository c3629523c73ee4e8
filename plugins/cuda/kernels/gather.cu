// GATHER_ROWS on 32-bit words (f32 and i32 alike); a bad index flags the stream.
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

}  // namespace

void gather_rows(const uint32_t* src, const int32_t* idx, uint32_t* out, int64_t n_idx, int64_t rows,
                 int64_t row_words, uint32_t poison, unsigned* flags, unsigned bit, cudaStream_t s) {
    const int64_t n = n_idx * row_words;
    if (n) gather_rows_k<<<grid_for(n), kThreads, 0, s>>>(src, idx, out, n_idx, rows, row_words, poison, flags, bit);
}

}  // namespace xylem::cuda::kernels
