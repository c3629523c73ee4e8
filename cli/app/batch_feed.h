// Where a training step's batch comes from: gathered on the host and uploaded each step, or
// gathered on the device from a dataset uploaded once (data.resident, the Theano "shared
// variable" scenario). Both give the same batches for the same shuffled order.
#pragma once

#include <cstdint>
#include <map>
#include <vector>

#include "xylem/backend.h"
#include "xylem/io/idx.h"
#include "xylem/tensor.h"

namespace xylem::app {

// Copies images [first, first+count) in `order` into a batch tensor laid out [count, 1, rows, cols].
void fill_batch(const io::Dataset& data, const std::vector<int64_t>& order, int64_t first, Tensor& images,
                Tensor& labels);
// The same into raw host memory: n images (none if `images` is null), and n int32 labels or n
// one-hot rows of `classes` floats.
void gather_host(const io::Dataset& data, const std::vector<int64_t>& order, int64_t first, int64_t n, float* images,
                 void* targets, DType target_dtype, int64_t classes);

// A dataset's images [count, 1, rows, cols] f32 and targets on one device, uploaded once:
// int32 labels [count], or one-hot f32 [count, classes] for regression losses.
struct ResidentData {
    Tensor images, targets;
};
ResidentData upload_dataset(const io::Dataset& d, Device& dev, DType target_dtype, int64_t classes);

class BatchFeed {
public:
    // `staged`: the host path copies through fixed host staging areas with upload_from, so a
    // captured step re-reads them at every launch (train.capture).
    BatchFeed(const io::Dataset& data, Device& dev, DType target_dtype, int64_t classes, bool resident, bool staged);

    // Once per epoch, before its steps: the resident path uploads the shuffled order (the
    // epoch's only transfer); the host path keeps a reference to it.
    void begin_epoch(const std::vector<int64_t>& order);
    // Host-side work for batch [first, first + n): fills host tensors or staging areas, or (resident
    // and staged) copies the step's indices into a fixed device tensor with one device op.
    void stage(int64_t first, int64_t n);
    // Device-side work, recordable by a capture: the upload or the two gathers. Returns (x, y).
    std::pair<const Tensor&, const Tensor&> enqueue(int64_t first, int64_t n);

private:
    struct Slot {
        Tensor x, y, idx;                   // batch tensors and (resident, staged) fixed indices
        std::vector<float> x_stage, y_stage;  // staged host path (y_stage holds i32 bits for labels)
    };
    Slot& slot(int64_t n);

    const io::Dataset& data_;
    Device& dev_;
    DType target_dtype_;
    int64_t classes_;
    bool resident_, staged_;
    const std::vector<int64_t>* order_ = nullptr;
    ResidentData resident_data_;
    Tensor perm_;  // resident: the epoch's order as int32 [count] on the device
    std::vector<int32_t> perm_host_;
    std::map<int64_t, Slot> slots_;  // the full batch size and the epoch's tail
};

}  // namespace xylem::app
