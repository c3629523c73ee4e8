// Evaluation loops over host or device-resident data sets.
#include "xylem/train/evaluate.h"

#include <algorithm>
#include <map>
#include <numeric>

#include "xylem/error.h"
#include "xylem/fusion.h"
#include "xylem/op_calls.h"

namespace xylem::train {

namespace {
void check_stop(const StopCheck& stop) {
    if (!stop) return;
    if (const int sig = stop()) throw Interrupted(sig);
}
}  // namespace

void for_each_batch(Net& model, Device& dev, BatchSource& source, int64_t batch_size, const BatchFn& fn,
                    const StopCheck& stop) {
    std::vector<int64_t> order(static_cast<size_t>(source.size()));
    std::iota(order.begin(), order.end(), 0);
    source.begin_epoch(order);
    fusion::ForwardFusion fusion(dev);  // a batch source's batches of one size share their buffers
    for (int64_t first = 0; first < source.size(); first += batch_size) {
        check_stop(stop);
        const int64_t n = std::min(batch_size, source.size() - first);
        source.stage(first, n);
        auto [x, y] = source.enqueue(first, n);
        const Tensor* output = nullptr;
        fusion.run([&] { output = &model.forward(dev, x, false); });
        fn(first, n, y, *output);
    }
}

void for_each_batch(Net& model, Device& dev, const io::Dataset& data, int64_t batch_size, const BatchFn& fn,
                    const StopCheck& stop) {
    HostBatches source(data, dev, DType::I32, 0, /*staged=*/false);  // the training loop's, uploaded per batch
    for_each_batch(model, dev, source, batch_size, fn, stop);
}

namespace {
// Scoring accumulates on the device: say so, rather than a bare "op fill is not supported".
void require_scoring_ops(Device& dev) {
    for (uint32_t op : {XYLEM_OP_FILL, XYLEM_OP_ACCURACY}) dev.backend().require(op, "evaluation");
}
// One count per label: per sample, or per time step of a sequence (loss.h's class rows).
void count_correct(Device& dev, const Tensor& output, const Tensor& labels, Tensor& correct) {
    const ClassRows r = class_rows(output, labels, "accuracy");
    ops::accuracy(dev, r.scores, r.labels, correct);
}
}  // namespace

int64_t run_batch(Net& model, std::span<const Shape> input_samples, Device& dev) {
    if (!dev.on_host()) return kEvaluationBatch;
    const uint64_t per_sample = sizeof(float) * static_cast<uint64_t>(model.footprint(input_samples).run_outputs_per_sample);
    if (per_sample == 0) return kEvaluationBatch;
    return std::clamp<int64_t>(static_cast<int64_t>(kRunCacheBytes / per_sample), kMinRunBatch, kEvaluationBatch);
}

double evaluate(Net& model, Device& dev, BatchSource& source, int64_t batch_size, const StopCheck& stop) {
    require_scoring_ops(dev);
    Tensor correct({1}, DType::F32, dev);
    ops::fill(dev, correct, 0.0f);
    int64_t labels = 0;
    for_each_batch(model, dev, source, batch_size, [&](int64_t, int64_t, const Tensor& y, const Tensor& output) {
        if (y.dtype() != DType::I32) throw Error("evaluate: the batch source's targets are not int32 labels");
        count_correct(dev, output, y, correct);
        labels += y.numel();
    }, stop);
    return labels ? correct.to_vector()[0] / static_cast<double>(labels) : 0.0;
}

double evaluate(Net& model, Device& dev, const io::Dataset& data, int64_t batch_size, const StopCheck& stop) {
    HostBatches source(data, dev, DType::I32, 0, /*staged=*/false);
    return evaluate(model, dev, source, batch_size, stop);
}

double evaluate(Net& model, Device& dev, const ResidentData& data, int64_t batch_size, const StopCheck& stop) {
    require_scoring_ops(dev);
    const int64_t count = data.images.dim(0);
    Tensor correct({1}, DType::F32, dev);
    ops::fill(dev, correct, 0.0f);
    for (int64_t first = 0; first < count; first += batch_size) {
        check_stop(stop);
        const int64_t n = std::min(batch_size, count - first);
        const Tensor x = data.images.rows(first, n), y = data.targets.rows(first, n);
        count_correct(dev, model.forward(dev, x, false), y, correct);
    }
    return count ? correct.to_vector()[0] / static_cast<double>(data.targets.numel()) : 0.0;
}

Scores score(Net& model, Loss& loss, Device& dev, const io::Dataset& data, int64_t classes, int64_t batch_size,
             const StopCheck& stop) {
    require_scoring_ops(dev);
    std::vector<int64_t> order(static_cast<size_t>(data.count));  // for_each_batch's order: the data's own
    std::iota(order.begin(), order.end(), 0);
    Tensor loss_sum({1}, DType::F32, dev), correct({1}, DType::F32, dev);
    ops::fill(dev, loss_sum, 0.0f);
    ops::fill(dev, correct, 0.0f);
    std::map<int64_t, Tensor> onehot;  // regression losses compare with one-hot rows, accuracy with labels
    for_each_batch(model, dev, data, batch_size, [&](int64_t first, int64_t n, const Tensor& y, const Tensor& output) {
        if (loss.target_dtype() == DType::I32) {
            loss.forward(dev, output, y, loss_sum);
        } else {
            auto it = onehot.find(n);
            if (it == onehot.end()) it = onehot.emplace(n, Tensor({n, classes}, DType::F32, dev)).first;
            gather_host(data, order, first, n, nullptr, it->second.host_write<float>(), DType::F32, classes);
            it->second.upload(dev);
            loss.forward(dev, output, it->second, loss_sum);
        }
        count_correct(dev, output, y, correct);
    }, stop);
    // Each sample's loss is already its mean per label (per character of a sequence).
    const double count = static_cast<double>(data.count), labels = static_cast<double>(data.labels.size());
    return {loss_sum.to_vector()[0] / count, correct.to_vector()[0] / labels};
}

}  // namespace xylem::train
