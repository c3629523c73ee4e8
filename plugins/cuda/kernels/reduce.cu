// Reductions whose result stays on the device: the bias gradient and the accuracy count.
#include "common.cuh"

namespace xylem::cuda::kernels {

namespace {

// db = beta*db + acc, without reading db when beta == 0 (it may hold NaN).
__device__ inline float blend(float beta, float db, double acc) {
    return beta == 0.0f ? static_cast<float>(acc) : static_cast<float>(beta * db + acc);
}

// [N,C]: one thread per column walks the rows; neighbouring threads read neighbouring floats.
__global__ void bias_grad_cols_k(const float* dy, float* db, int64_t n, int64_t c, float beta) {
    XYLEM_GRID_STRIDE(j, c) {
        double acc = 0.0;
        for (int64_t r = 0; r < n; ++r) acc += dy[r * c + j];
        db[j] = blend(beta, db[j], acc);
    }
}

// [N,C,H,W...]: one block per channel sums its N contiguous planes (the Flux #558 reduction).
__global__ void bias_grad_planes_k(const float* dy, float* db, int64_t n, int64_t c, int64_t inner, float beta) {
    const int64_t ch = blockIdx.x;
    double acc = 0.0;
    for (int64_t r = 0; r < n; ++r) {
        const float* plane = dy + (r * c + ch) * inner;
        for (int64_t i = threadIdx.x; i < inner; i += blockDim.x) acc += plane[i];
    }
    acc = block_sum(acc);
    if (threadIdx.x == 0) db[ch] = blend(beta, db[ch], acc);
}

// One thread per row; ties keep the first maximum, as on the CPU. A bad label counts as wrong.
__global__ void accuracy_k(const float* x, const int32_t* labels, float* correct, int64_t n, int64_t c,
                           unsigned* flags, unsigned bit) {
    unsigned hits = 0;
    for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
         i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
        const float* row = x + i * c;
        int64_t best = 0;
        for (int64_t j = 1; j < c; ++j)
            if (row[j] > row[best]) best = j;
        const int32_t label = labels[i];
        if (label < 0 || label >= c) atomicOr(flags, bit);
        hits += best == label;
    }
    hits = block_sum(hits);
    if (threadIdx.x == 0 && hits) atomicAdd(correct, static_cast<float>(hits));  // integer counts add exactly
}

}  // namespace

void bias_grad(const float* dy, float* db, int64_t n, int64_t c, int64_t inner, float beta, cudaStream_t s) {
    if (!c) return;
    if (inner == 1) bias_grad_cols_k<<<grid_for(c), kThreads, 0, s>>>(dy, db, n, c, beta);
    else bias_grad_planes_k<<<static_cast<unsigned>(c), kThreads, 0, s>>>(dy, db, n, c, inner, beta);
}

void accuracy(const float* logits, const int32_t* labels, float* correct, int64_t n, int64_t c, unsigned* flags,
              unsigned bit, cudaStream_t s) {
    if (n) accuracy_k<<<grid_for(n), kThreads, 0, s>>>(logits, labels, correct, n, c, flags, bit);
}

}  // namespace xylem::cuda::kernels
