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

// SCATTER_ADD_ROWS without float atomics, as the OpenCL plugin's kernels/gather.cl: the positions
// are sorted by (index, position) as keys index << 32 | position (a bad index flags and, like the
// padding to a power of two, is ~0, sorted last), so each row's sources lie together in position
// order; the block of each row's first key then adds them in that order, out + src[i0] + src[i1]
// + ..., the native plugin's order and bits. Cost: N*row_len adds plus a bitonic sort (N/2
// compare-exchanges in each of log2(N)*(log2(N)+1)/2 steps).
__global__ void scatter_keys_k(const int32_t* idx, int64_t n, int64_t n_pad, int64_t rows, unsigned long long* keys,
                               unsigned* flags, unsigned bit) {
    XYLEM_GRID_STRIDE(i, n_pad) {
        unsigned long long key = ~0ull;
        if (i < n) {
            const int32_t r = idx[i];
            if (r < 0 || r >= rows) atomicOr(flags, bit);
            else key = static_cast<unsigned long long>(r) << 32 | static_cast<unsigned long long>(i);
        }
        keys[i] = key;
    }
}

// Step (k, j) of the bitonic sort into ascending order: each pair (i, i ^ j) once, by its lower index.
__global__ void bitonic_step_k(unsigned long long* keys, int64_t n_pad, int64_t k, int64_t j) {
    XYLEM_GRID_STRIDE(i, n_pad) {
        const int64_t l = i ^ j;
        if (l > i) {
            const unsigned long long a = keys[i], b = keys[l];
            if ((a > b) == ((i & k) == 0)) {
                keys[i] = b;
                keys[l] = a;
            }
        }
    }
}

__device__ inline int64_t key_row(unsigned long long key) { return static_cast<int64_t>(key >> 32); }

// Block e (grid-stride): if sorted key e is its row's first, its threads take columns and add the
// row's sources in position order.
__global__ void scatter_sorted_add_k(const float* src, const unsigned long long* keys, int64_t n, int64_t row_len,
                                     float* out) {
    for (int64_t e = blockIdx.x; e < n; e += gridDim.x) {
        const unsigned long long key = keys[e];
        const int64_t r = key_row(key);
        if (key == ~0ull || (e > 0 && key_row(keys[e - 1]) == r)) continue;
        for (int64_t j = threadIdx.x; j < row_len; j += blockDim.x) {
            float* dst = out + r * row_len + j;
            float acc = *dst;
            for (int64_t f = e; f < n && key_row(keys[f]) == r; ++f)
                acc += src[static_cast<int64_t>(keys[f] & 0xffffffffull) * row_len + j];
            *dst = acc;
        }
    }
}

}  // namespace

int64_t scatter_keys(int64_t n) {
    int64_t n_pad = 1;
    while (n_pad < n) n_pad *= 2;
    return n_pad;
}

void scatter_add_rows(const float* src, const int32_t* idx, float* out, int64_t n, int64_t rows, int64_t row_len,
                      unsigned long long* keys, unsigned* flags, unsigned bit, cudaStream_t s) {
    if (!n) return;
    const int64_t n_pad = scatter_keys(n);
    scatter_keys_k<<<grid_for(n_pad), kThreads, 0, s>>>(idx, n, n_pad, rows, keys, flags, bit);
    if (!row_len) return;
    for (int64_t k = 2; k <= n_pad; k *= 2)
        for (int64_t j = k / 2; j > 0; j /= 2) bitonic_step_k<<<grid_for(n_pad), kThreads, 0, s>>>(keys, n_pad, k, j);
    int threads = 32;  // enough for the columns, at most kThreads
    while (threads < row_len && threads < kThreads) threads *= 2;
    const int64_t blocks = n < 65535 * 8 ? n : 65535 * 8;
    scatter_sorted_add_k<<<static_cast<unsigned>(blocks), threads, 0, s>>>(src, keys, n, row_len, out);
}

void gather_rows(const uint32_t* src, const int32_t* idx, uint32_t* out, int64_t n_idx, int64_t rows,
                 int64_t row_words, uint32_t poison, unsigned* flags, unsigned bit, cudaStream_t s) {
    const int64_t n = n_idx * row_words;
    if (n) gather_rows_k<<<grid_for(n), kThreads, 0, s>>>(src, idx, out, n_idx, rows, row_words, poison, flags, bit);
}

}  // namespace xylem::cuda::kernels
