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

namespace xylem::train {

// What one sample of a data set gives the model: its input shape and type (an image [1, rows,
// cols] f32, or a token set's [steps] int32 tokens) and its target's shape (a label [], or one
// label per token [steps]).
Shape input_sample_shape(const io::Dataset& data);
DType input_dtype(const io::Dataset& data);
Shape target_sample_shape(const io::Dataset& data);

// Copies samples [first, first+count) in `order` into batch tensors [count, input sample shape]
// and [count, target sample shape].
void fill_batch(const io::Dataset& data, const std::vector<int64_t>& order, int64_t first, Tensor& inputs,
                Tensor& labels);
// The same into raw host memory: n inputs (f32 images or int32 tokens; none if `inputs` is null),
// and their int32 labels or n one-hot rows of `classes` floats (images only).
void gather_host(const io::Dataset& data, const std::vector<int64_t>& order, int64_t first, int64_t n, void* inputs,
                 void* targets, DType target_dtype, int64_t classes);

// A dataset's inputs [count, input sample shape] and targets on one device, uploaded once: int32
// labels [count, target sample shape], or one-hot f32 [count, classes] for regression losses.
struct ResidentData {
    Tensor images, targets;  // `images`: the inputs, images or tokens
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
        std::vector<float> x_stage, y_stage;  // staged host path (holding i32 bits for tokens and labels)
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

}  // namespace xylem::train
