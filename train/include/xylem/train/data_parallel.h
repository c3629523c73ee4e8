// Data-parallel training: PyTorch DDP's scheme with Caffe's contiguous gradient buffers. Every rank
// holds the whole model, starts from rank 0's parameters, runs forward and backward on its shard of
// each global batch, and applies the same update from the same summed gradients, so the ranks'
// parameters stay bit-identical. Gradients live in a few contiguous buckets (each parameter's
// gradient is a view into one), filled in reverse parameter order; a bucket's sum starts as soon as
// the layers writing it are done with backward, while the rest of backward continues.
//   Host path (native, opencl, any plugin): MPI sums the bucket in host memory. On a host-memory
//   backend that memory is the device buffer itself (no copy); otherwise one counted copy each way.
//   Device path (a plugin with the ABI 1.6 collectives on every rank: CUDA with NCCL): the plugin
//   sums the device buffer on its stream; the communicator's id travels over MPI.
// fit() calls this at fixed points that every rank reaches in the same order.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "xylem/train/batch_source.h"
#include "xylem/train/distributed.h"
#include "xylem/train/evaluate.h"
#include "xylem/error.h"
#include "xylem/io/idx.h"
#include "xylem/layers/loss.h"
#include "xylem/layers/net.h"
#include "xylem/registry.h"
#include "xylem/solvers/solver.h"

namespace xylem::train {

// An error every rank raises at the same point (ranks that disagree at start, a non-finite global
// loss): rank 0 reports it and every rank ends normally, so the job ends without MPI_Abort.
class RanksAgreeError : public Error {
public:
    using Error::Error;
};

// FNV-1a over bytes, continuing from `h` (the fingerprints ranks compare).
uint64_t fingerprint(const void* data, size_t bytes, uint64_t h = 14695981039346656037ull);
inline uint64_t fingerprint(const std::string& s, uint64_t h = 14695981039346656037ull) {
    return fingerprint(s.data(), s.size(), h);
}

// The device a rank uses: its local rank's turn among the chosen backend's devices of the chosen
// device's kind (rank 0 of a node on the chosen device), so one GPU per rank on a multi-GPU node.
uint32_t device_for_rank(const Registry& registry, const BackendChoice& choice, int local_rank);

class DataParallel {
public:
    DataParallel(Collectives& ranks, Device& dev);
    ~DataParallel();
    DataParallel(const DataParallel&) = delete;
    DataParallel& operator=(const DataParallel&) = delete;

    int rank() const { return ranks_.rank(); }
    int size() const { return ranks_.size(); }
    bool root() const { return rank() == 0; }

    // What every rank must share before the first step: the config (text and overrides), the data
    // sets' sizes, and where the run stands (a resume from the same checkpoint).
    struct Identity {
        uint64_t config = 0, data = 0, position = 0;
        std::string backend;  // the backend this rank runs on: every rank must run the same one
    };
    // Before the first step, with the parameters on the device: refuses ranks whose backend, config,
    // data, model (parameter names and shapes) or position differ from rank 0's (a RanksAgreeError naming
    // the rank and what differs); copies rank 0's parameters, buffers and solver state to every
    // rank; lays the gradients out in buckets and hooks the reduction into model.backward.
    void start(const Identity& id, Net& model, Solver& solver, int64_t batch_size);
    // One line for the banner: ranks, MPI library, batch per rank, buckets and how they are summed.
    std::string describe(int64_t batch_size) const;

    // This rank's contiguous part of the global batch [first, first + n) (sizes differ by at most
    // one image); its gradients enter the sum weighted by count / n, so uneven shards still give
    // the gradient of the global batch's mean loss. May be empty when n < size().
    struct Shard {
        int64_t first = 0, count = 0;
    };
    Shard begin_step(int64_t first, int64_t n);
    // The step of a rank whose shard is empty: it adds zero gradients to the sum.
    void step_without_samples();

    // Every rank leaves with the same flags: `stop` if any rank's is set (a signal reached it), `show`
    // as rank 0 decided (it alone prints, and chooses when by the clock).
    void agree(bool& show, bool& stop);
    // The global loss sum from this rank's device scalar; each rank's share of a global sum that
    // is restored into the scalar (rank 0 holds it, the others 0).
    float global_sum(const Tensor& local);
    float share_of(float global) const { return root() ? global : 0.0f; }

    // Evaluation over this rank's contiguous part of a data set (images, or a token set's
    // sequences), summed over the ranks; `score` in batches of batch_size.
    io::Dataset shard_of(const io::Dataset& d) const;
    Scores score(Net& model, Loss& loss, Device& dev, const io::Dataset& shard, int64_t total, int64_t classes,
                 int64_t batch_size = kEvaluationBatch);
    double accuracy(Net& model, Device& dev, const io::Dataset& shard, int64_t total);
    double accuracy(Net& model, Device& dev, const ResidentData& shard, int64_t total);

    // Buffers (batch-norm running statistics) become their mean over the ranks: before evaluating and
    // before rank 0 saves a checkpoint. No-op for a model without buffers.
    void average_buffers(Net& model);
    // At the end: a RanksAgreeError unless every rank's parameters and buffers are bit-identical.
    void check_identical(Net& model);

    // The run's reduction cost, for the final report: "gradient allreduce: 0.31 ms per step ...".
    std::string summary() const;

private:
    struct Bucket {
        Tensor flat;               // the gradients, contiguous, on the device
        int64_t elements = 0;
        size_t ready_layer = 0;    // the layer whose backward completes it (the lowest of its params')
        bool started = false;
    };
    void layout_buckets(Net& model);
    void after_layer(size_t layer);
    void launch(Bucket& b);
    void finish();
    void copy_from_root(Tensor& t, const char* what);

    Collectives& ranks_;
    Device& dev_;
    bool device_path_ = false;  // the plugin sums device buffers (ABI 1.6); else MPI on host memory
    bool comm_joined_ = false;
    std::vector<Bucket> buckets_;
    size_t last_layer_ = 0;     // the lowest ready_layer: its hook ends backward
    float weight_ = 1.0f;       // this step's count / n
    int64_t grad_elements_ = 0;
    // Cost accounting: time inside the reduction (starting, waiting, copies) and waiting alone.
    double reduce_seconds_ = 0, wait_seconds_ = 0;
    int64_t steps_ = 0;
};

}  // namespace xylem::train
