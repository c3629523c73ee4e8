// `xylem predict`: the top classes of each image of an IDX file (or the config's test set),
// the first few on the terminal and all of them in a CSV file.
#include <cstdio>
#include <filesystem>
#include <string>

#include "xylem/train/backend_select.h"
#include "xylem/train/checkpoint.h"
#include "xylem/train/model_builder.h"
#include "xylem/train/predict.h"
#include "commands.h"
#include "xylem/error.h"
#include "xylem/io/idx.h"

namespace xylem::cli {
namespace {
namespace fs = std::filesystem;

constexpr int64_t kShown = 10;  // images printed; the CSV has every one
constexpr int kDefaultTop = 3;

}  // namespace

// Only what the images' shape can cause is blamed on them: a layer refusing it while the model is
// built, or a checkpoint tensor of another shape than the model built for them has. A damaged
// checkpoint, a missing tensor or NaN weights are the file's own error, as the file says it.
std::unique_ptr<Net> load_image_model(const RunConfig& c, const std::string& checkpoint, Device& dev,
                                      const io::Dataset& data, const std::string& what, int64_t& batch) {
    auto do_not_fit = [&](const Error& e) {
        return Error(what + ": images of " + to_string(data.sample_shape()) +
                     " (channels, rows, cols) do not fit the model of " + c.source + " and " + checkpoint + ": " + e.what());
    };
    std::unique_ptr<Net> model;
    try {
        model = train::build_run_model(c, dev, data.sample_shape(), batch);
    } catch (const Error& e) {
        throw do_not_fit(e);
    }
    try {
        train::load_checkpoint(checkpoint, *model);
    } catch (const train::CheckpointShapeError& e) {
        throw do_not_fit(e);
    }
    return model;
}

namespace {

// Builds the model for the images' size and loads the checkpoint. When an --input file's images
// do not fit the model (the checkpoint's shapes say so, or a layer does), the error names that
// file, both sample shapes (the file's and the config's own data's, if it can be read) and, in
// the layer's or checkpoint's own words, the tensor that does not fit.
std::unique_ptr<Net> load_model(const RunConfig& c, const Args& a, Device& dev, const io::Dataset& data,
                                int64_t& batch) {
    if (!a.input.empty()) {
        try {
            return load_image_model(c, a.checkpoint, dev, data, a.input, batch);
        } catch (const Error& e) {
            io::Dataset own;
            try {
                own = io::load_idx_images(io::mnist_files(c.data_dir, false).first);
            } catch (const Error&) {
                throw e;  // nothing to compare with: the error as it is
            }
            if (own.sample_shape() == data.sample_shape()) throw;
            throw Error(std::string(e.what()) + "; " + c.source + " (key 'data.dir' = " + c.data_dir + ") has images of " +
                        to_string(own.sample_shape()) + " (channels, rows, cols)");
        }
    }
    return load_image_model(c, a.checkpoint, dev, data, "the test set of " + c.data_dir, batch);
}

}  // namespace

int run_predict(const Args& a) {
    if (a.config.empty()) throw UsageError{"predict needs --config FILE", "predict"};
    if (a.checkpoint.empty()) throw UsageError{"predict needs --checkpoint FILE", "predict"};
    const RunConfig c = load_config(a.config);
    if (c.is_text())
        throw Error(c.source + ": a character model ([data] text) predicts text, not image classes: use xylem sample "
                    "to generate text, or xylem eval for its validation loss");
    Registry registry;
    const BackendChoice choice = choose_backend(registry, c, a);
    auto backend = choice.backend;
    auto dev = backend->device(choice.device);
    const bool test_set = a.input.empty();
    io::Dataset data = test_set ? io::load_mnist_dir(c.data_dir, false) : io::load_idx_images(a.input);
    if (!test_set) data.labels.assign(static_cast<size_t>(data.count), 0);  // unknown; the batches carry some
    const std::string what = test_set ? "the test set of " + c.data_dir : a.input;

    int64_t batch = 0;
    auto model = load_model(c, a, *dev, data, batch);
    const int64_t classes = model->output_sample_shape().empty() ? 0 : model->output_sample_shape()[0];
    if (a.top && *a.top > classes)
        throw UsageError{"--top " + std::to_string(*a.top) + " asks for more classes than the model's " +
                             std::to_string(classes),
                         "predict"};
    const train::Predictions p =
        train::predict(*model, *dev, data, train::output_kind(c), a.top ? *a.top : std::min<int64_t>(kDefaultTop, classes),
                       batch);
    const std::vector<std::string> names = train::class_names(c, p.classes);
    const std::string out = !a.out.empty() ? a.out : (fs::path(a.checkpoint).parent_path() / "predictions.csv").string();
    train::write_predictions_csv(out, p, names, test_set ? &data.labels : nullptr);

    std::printf("%lld images of %s (%s pixels), backend %s\n", static_cast<long long>(p.count), what.c_str(),
                data.sample_text().c_str(), backend->name().c_str());
    int64_t correct = 0;
    for (int64_t i = 0; i < p.count; ++i) {
        const int32_t label = test_set ? data.labels[static_cast<size_t>(i)] : -1;
        correct += test_set && p.top[static_cast<size_t>(i * p.k)] == label;
        if (i >= kShown) continue;
        std::string line = "  " + std::to_string(i) + ":";
        for (int64_t r = 0; r < p.k; ++r) {
            const size_t at = static_cast<size_t>(i * p.k + r);
            char prob[32];
            std::snprintf(prob, sizeof prob, " %.1f%%", 100 * p.prob[at]);
            line += (r ? ", " : " ") + names[static_cast<size_t>(p.top[at])] + prob;
        }
        if (test_set)
            line += "   (label: " + (label >= 0 && label < classes ? names[static_cast<size_t>(label)] : std::to_string(label)) +
                    (p.top[static_cast<size_t>(i * p.k)] == label ? ")" : ", missed)");
        std::printf("%s\n", line.c_str());
    }
    if (p.count > kShown) std::printf("  ... %lld more in the CSV\n", static_cast<long long>(p.count - kShown));
    if (test_set)
        std::printf("top-1 accuracy %.2f%% against the test set's labels\n",
                    100.0 * static_cast<double>(correct) / static_cast<double>(p.count));
    std::printf("predictions: %s\n", out.c_str());
    return 0;
}

}  // namespace xylem::cli
