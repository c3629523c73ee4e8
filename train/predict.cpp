// Top-k classes and their probabilities over evaluate.cpp's batches, and the predictions CSV.
#include "xylem/train/predict.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <limits>
#include <numeric>

#include "xylem/train/evaluate.h"
#include "xylem/error.h"
#include "xylem/io/atomic_file.h"

namespace xylem::train {

OutputKind output_kind(const RunConfig& c) {
    if (!c.layers.empty() && c.layers.back().type == "softmax") return OutputKind::probabilities;
    if (!c.layers.empty() && c.layers.back().type == "log_softmax") return OutputKind::log_probabilities;
    return OutputKind::logits;
}

void probabilities(const float* x, int64_t classes, OutputKind kind, double* p) {
    if (kind == OutputKind::probabilities) {
        for (int64_t j = 0; j < classes; ++j) p[j] = x[j];
        return;
    }
    if (kind == OutputKind::log_probabilities) {
        for (int64_t j = 0; j < classes; ++j) p[j] = std::exp(static_cast<double>(x[j]));
        return;
    }
    // Softmax in double, shifted by the largest output so that no exp overflows.
    const double top = *std::max_element(x, x + classes);
    double sum = 0;
    for (int64_t j = 0; j < classes; ++j) sum += p[j] = std::exp(static_cast<double>(x[j]) - top);
    for (int64_t j = 0; j < classes; ++j) p[j] /= sum;
}

Predictions predict(Net& model, Device& dev, BatchSource& source, OutputKind kind, int64_t k, int64_t batch_size) {
    const Shape& out = model.output_sample_shape();
    if (out.size() != 1)
        throw Error("the model's output per image is " + to_string(out) + ", not a vector of class scores");
    Predictions p;
    p.count = source.size();
    p.classes = out[0];
    p.k = std::min<int64_t>(k, p.classes);
    p.top.resize(static_cast<size_t>(p.count * p.k));
    p.prob.resize(p.top.size());
    std::vector<int32_t> order(static_cast<size_t>(p.classes));
    std::vector<double> probs(order.size());
    for_each_batch(model, dev, source, batch_size, [&](int64_t first, int64_t n, const Tensor&, const Tensor& output) {
        const float* rows = output.host_read<float>();  // the batch's one device read
        for (int64_t i = 0; i < n; ++i) {
            const float* x = rows + i * p.classes;
            // A NaN ranks last (it would break the ordering); the first max wins, as in ops::accuracy.
            auto key = [&](int32_t j) { return std::isnan(x[j]) ? -std::numeric_limits<float>::infinity() : x[j]; };
            std::iota(order.begin(), order.end(), 0);
            std::partial_sort(order.begin(), order.begin() + p.k, order.end(),
                              [&](int32_t a, int32_t b) { return key(a) > key(b) || (key(a) == key(b) && a < b); });
            probabilities(x, p.classes, kind, probs.data());
            for (int64_t r = 0; r < p.k; ++r) {
                const size_t at = static_cast<size_t>((first + i) * p.k + r);
                p.top[at] = order[static_cast<size_t>(r)];
                p.prob[at] = probs[static_cast<size_t>(order[static_cast<size_t>(r)])];
            }
        }
    });
    return p;
}

Predictions predict(Net& model, Device& dev, const io::Dataset& data, OutputKind kind, int64_t k, int64_t batch_size) {
    HostBatches source(data, dev, DType::I32, 0, /*staged=*/false);
    return predict(model, dev, source, kind, k, batch_size);
}

std::vector<std::string> class_names(const RunConfig& c, int64_t classes) {
    static const char* const kFashionMnist[10] = {"T-shirt/top", "Trouser", "Pullover", "Dress", "Coat",
                                                  "Sandal",      "Shirt",   "Sneaker",  "Bag",   "Ankle boot"};
    std::filesystem::path dir(c.data_dir);
    if (!dir.has_filename()) dir = dir.parent_path();  // ".../fashion-mnist/"
    const bool fashion = classes == 10 && dir.filename() == "fashion-mnist";
    std::vector<std::string> names;
    for (int64_t j = 0; j < classes; ++j) names.push_back(fashion ? kFashionMnist[j] : std::to_string(j));
    return names;
}

void write_predictions_csv(const std::string& path, const Predictions& p, const std::vector<std::string>& names,
                           const std::vector<int32_t>* labels) {
    std::string csv = "image,label";
    for (int64_t r = 1; r <= p.k; ++r) {
        const std::string n = "top" + std::to_string(r);
        csv.append(",").append(n).append("_class,").append(n).append("_name,").append(n).append("_prob");
    }
    csv += "\n";
    char prob[32];
    for (int64_t i = 0; i < p.count; ++i) {
        csv += std::to_string(i) + ",";
        if (labels) csv += std::to_string((*labels)[static_cast<size_t>(i)]);
        for (int64_t r = 0; r < p.k; ++r) {
            const size_t at = static_cast<size_t>(i * p.k + r);
            std::snprintf(prob, sizeof prob, "%.6g", p.prob[at]);
            csv.append(",").append(std::to_string(p.top[at])).append(",").append(names[static_cast<size_t>(p.top[at])]);
            csv.append(",").append(prob);
        }
        csv += "\n";
    }
    io::write_file_atomic(path, csv);  // errors name the file
}

}  // namespace xylem::train
