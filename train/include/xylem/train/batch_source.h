// Where a training step's batch comes from. BatchSource is what fit() reads; its two
// implementations serve a data set (io::Dataset: images, or token sequences for text): gathered on
// the host and uploaded each step, or gathered on the device from a copy uploaded once
// (data.resident, the Theano "shared variable" scenario). Both give the same batches for the same order.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <vector>

#include "xylem/backend.h"
#include "xylem/io/idx.h"
#include "xylem/tensor.h"
#include "xylem/train/text_data.h"

namespace xylem::train {

// What one sample of a data set gives the model: its input shape and type (an image [channels,
// rows, cols] f32, or a token set's [steps] int32 tokens: io::Dataset::sample_shape) and its
// target's shape (a label [], or one label per token [steps]).
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

// One batch on the device: inputs [n, ...] and targets (int32 labels, or one-hot f32 rows).
struct Batch {
    const Tensor& x;
    const Tensor& y;
};

// The batches of size() samples, taken in an order the loop chooses (fit shuffles it every epoch
// and keeps it in checkpoints). A batch's work comes in two halves so that a captured step
// (train.capture) replays only the device half: stage() runs on the host before the step,
// enqueue() inside it; a capture records enqueue() once and replays it, so for a given n it must
// issue the same device work into the same tensors every time.
class BatchSource {
public:
    virtual ~BatchSource() = default;
    virtual int64_t size() const = 0;  // samples in one epoch
    // Before an epoch's batches: the order of its samples, a permutation of [0, size()), which
    // stays alive and unchanged until the next call.
    virtual void begin_epoch(const std::vector<int64_t>& order) = 0;
    // The host's part of batch [first, first + n) of the order.
    virtual void stage(int64_t first, int64_t n) = 0;
    // The device's part (uploads or gathers). The tensors stay valid until the next call for the same n.
    virtual Batch enqueue(int64_t first, int64_t n) = 0;
};

// Batches gathered on the host and uploaded each step (on a host-memory backend nothing moves).
// `staged`: through fixed host staging areas copied with upload_from, so a captured step re-reads
// them at every launch (train.capture).
class HostBatches final : public BatchSource {
public:
    HostBatches(const io::Dataset& data, Device& dev, DType target_dtype, int64_t classes, bool staged);
    int64_t size() const override { return data_.count; }
    void begin_epoch(const std::vector<int64_t>& order) override { order_ = &order; }
    void stage(int64_t first, int64_t n) override;
    Batch enqueue(int64_t first, int64_t n) override;

private:
    struct Slot {
        Tensor x, y;
        std::vector<float> x_stage, y_stage;  // staged: host copies (holding i32 bits for tokens and labels)
    };
    Slot& slot(int64_t n);

    const io::Dataset& data_;
    Device& dev_;
    DType target_dtype_;
    int64_t classes_;
    bool staged_;
    const std::vector<int64_t>* order_ = nullptr;
    std::map<int64_t, Slot> slots_;  // the full batch size and the epoch's tail
};

// Batches gathered on the device, with two gather_rows ops, from the whole data set uploaded once;
// the epoch's order is its one upload. `staged`: each step's indices are first copied by a device
// op into a fixed tensor, which a captured step's gathers read.
class ResidentBatches final : public BatchSource {
public:
    ResidentBatches(const io::Dataset& data, Device& dev, DType target_dtype, int64_t classes, bool staged);
    int64_t size() const override { return count_; }
    void begin_epoch(const std::vector<int64_t>& order) override;
    void stage(int64_t first, int64_t n) override;
    Batch enqueue(int64_t first, int64_t n) override;

private:
    struct Slot {
        Tensor x, y, idx;  // idx: staged only
    };
    Slot& slot(int64_t n);

    Device& dev_;
    int64_t count_;
    bool staged_;
    ResidentData data_;
    Tensor perm_;  // the epoch's order as int32 [count] on the device
    std::vector<int32_t> perm_host_;
    std::map<int64_t, Slot> slots_;
};

// Text windows (data.sampling = "windows", text_data.h): batch [first, first + n) of the order is
// the windows at those offsets, inputs [n, block_size] int32 and labels [n, block_size] int32 (the
// next token of each), gathered on the host and uploaded each step like HostBatches (`staged`
// likewise: fixed host staging areas a captured step re-reads at every launch).
class WindowBatches final : public BatchSource {
public:
    WindowBatches(const TextWindows& windows, Device& dev, bool staged);
    int64_t size() const override { return windows_.count(); }
    void begin_epoch(const std::vector<int64_t>& order) override { order_ = &order; }
    void stage(int64_t first, int64_t n) override;
    Batch enqueue(int64_t first, int64_t n) override;

private:
    struct Slot {
        Tensor x, y;
        std::vector<int32_t> x_stage, y_stage;  // staged only
    };
    Slot& slot(int64_t n);

    const TextWindows& windows_;
    Device& dev_;
    bool staged_;
    const std::vector<int64_t>* order_ = nullptr;
    std::map<int64_t, Slot> slots_;
};

// Text windows with data.resident: the token array uploaded once, [tokens, 1] int32, and each
// batch gathered from it on the device by two gather_rows ops (inputs at the windows' token
// positions, labels at the same positions one row on). No op computes the positions o + t of a
// window from its offset o on the device, so the host writes them and uploads them each step,
// n*block_size int32 (half of what WindowBatches uploads); `staged` as HostBatches: through a
// fixed staging area that a captured step re-reads at every launch.
class ResidentWindowBatches final : public BatchSource {
public:
    ResidentWindowBatches(const TextWindows& windows, Device& dev, bool staged);
    int64_t size() const override { return count_; }
    void begin_epoch(const std::vector<int64_t>& order) override { order_ = &order; }
    void stage(int64_t first, int64_t n) override;
    Batch enqueue(int64_t first, int64_t n) override;
    // What it keeps on the device besides the batches: the token array.
    static uint64_t resident_bytes(const TextWindows& windows) { return windows.tokens.size() * sizeof(int32_t); }

private:
    struct Slot {
        Tensor xg, yg, idx;  // the gathers' outputs [n*block_size, 1]; idx: their token positions [n*block_size]
        Tensor x, y;         // xg and yg as [n, block_size]
        std::vector<int32_t> idx_stage;  // staged only
    };
    Slot& slot(int64_t n);

    Device& dev_;
    int64_t count_, block_size_;
    bool staged_;
    Tensor tokens_;  // [tokens, 1]: a row per token, gather_rows' unit
    Tensor labels_;  // its rows from 1 on: the token after each position
    const std::vector<int64_t>* order_ = nullptr;
    std::map<int64_t, Slot> slots_;
};

// The training run's source for `data`: ResidentBatches when `resident`, else HostBatches.
std::unique_ptr<BatchSource> make_batch_source(const io::Dataset& data, Device& dev, DType target_dtype,
                                               int64_t classes, bool resident, bool staged);
// For text windows: ResidentWindowBatches when `resident`, else WindowBatches.
std::unique_ptr<BatchSource> make_window_source(const TextWindows& windows, Device& dev, bool resident, bool staged);

}  // namespace xylem::train
