// Data sets from arrays in memory (a program's own data, the Python API's NumPy arrays) instead of
// IDX files or text: the same io::Dataset the configured run loads, so every batch source, score
// and prediction path of the library takes it unchanged, and a run over the same values gives the
// same bits as one over the files.
#pragma once

#include <cstdint>
#include <string>

#include <map>
#include <vector>

#include "xylem/backend.h"
#include "xylem/io/idx.h"
#include "xylem/shape.h"
#include "xylem/tensor.h"
#include "xylem/train/batch_source.h"

namespace xylem::train {

// Images: `count` samples of `sample` floats each, row-major, and their int32 labels (null: none,
// every label 0, for prediction). A sample shape [C, H, W] is a C-channel H x W image, [H, W] a
// one-channel one ([1, H, W]); [F] is a 1 x F image (the model sees [1, 1, F]: start it with a
// flatten layer). `what` names the array in
// errors. Labels must lie in [0, classes) when classes > 0. Errors name the shape that does not fit.
io::Dataset image_dataset(const float* x, int64_t count, const Shape& sample, const int32_t* labels, int64_t classes,
                          const std::string& what);

// The empty image set (count 0) whose samples an array's `sample` shape gives, by image_dataset's
// rule: its sample_shape() is what the model sees ([F] -> [1, 1, F], [H, W] -> [1, H, W]).
io::Dataset image_layout(const Shape& sample, const std::string& what);

// Token sequences: `count` samples of `steps` int32 tokens and `steps` int32 labels each (the next
// token of each position, for a character model), as text data gives them.
io::Dataset token_dataset(const int32_t* tokens, int64_t count, int64_t steps, const int32_t* labels,
                          const std::string& what);

// The last `held` samples of `all` as a set of their own, and `all` keeps the rest (Keras's
// validation_split: the tail, before any shuffling). Error when nothing would be left to train on.
io::Dataset split_tail(io::Dataset& all, int64_t held);

// Batches of samples of any shape read from caller-owned host memory, without copying them into
// an io::Dataset: `count` samples of `sample`, f32 or i32, row-major, each batch gathered on the host and uploaded like HostBatches. The targets are
// int32 zeros [n]: for prediction, where for_each_batch wants some. `x` must outlive the source.
class ArrayBatches final : public BatchSource {
public:
    ArrayBatches(const void* x, DType dtype, int64_t count, Shape sample, Device& dev);
    int64_t size() const override { return count_; }
    void begin_epoch(const std::vector<int64_t>& order) override { order_ = &order; }
    void stage(int64_t first, int64_t n) override;
    Batch enqueue(int64_t first, int64_t n) override;

private:
    struct Slot {
        Tensor x, y;
    };
    Slot& slot(int64_t n);

    const char* x_;
    DType dtype_;
    int64_t count_;
    Shape sample_;
    size_t sample_bytes_;
    Device& dev_;
    const std::vector<int64_t>* order_ = nullptr;
    std::map<int64_t, Slot> slots_;
};

}  // namespace xylem::train
