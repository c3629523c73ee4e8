// Loading a run's data sets and holding out the validation set.
#include "xylem/train/run_data.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>

#include "xylem/error.h"
#include "xylem/layers/embedding.h"
#include "xylem/layers/recurrent.h"

namespace xylem::train {
namespace {

// The images of `from` at `rows`, as a dataset of their own.
io::Dataset take_rows(const io::Dataset& from, const std::vector<int64_t>& rows) {
    io::Dataset d = from.empty_like();
    d.count = static_cast<int64_t>(rows.size());
    const size_t per = static_cast<size_t>(from.sample_size());
    d.images.resize(rows.size() * per);
    d.labels.resize(rows.size());
    for (size_t i = 0; i < rows.size(); ++i) {
        const size_t r = static_cast<size_t>(rows[i]);
        std::memcpy(d.images.data() + i * per, from.images.data() + r * per, per * sizeof(float));
        d.labels[i] = from.labels[r];
    }
    return d;
}

}  // namespace

namespace {

RunData load_text_run_data(const RunConfig& c) {
    TextData t = load_text_data(c);
    RunData data;
    data.train = std::move(t.train);
    data.validation = std::move(t.validation);
    data.windows = std::move(t.windows);
    data.vocabulary = std::move(t.vocabulary);
    data.description = std::to_string(t.chars) + " characters of text from " + std::to_string(t.files.size()) +
                       " file(s), a vocabulary of " + std::to_string(data.vocabulary.size()) + "; ";
    if (data.windowed())
        data.description += std::to_string(data.windows.count()) + " windows of " + std::to_string(c.block_size) +
                            " characters, one at every offset of the training text, drawn at random each epoch";
    else
        data.description += std::to_string(c.batch_size) + " streams of " + std::to_string(data.train.count / c.batch_size) +
                            " sequences of " + std::to_string(c.seq_len) + " characters";
    if (data.validation.count) {
        data.description += ", the last " + std::to_string(t.validation_chars) + " characters held out for validation";
        if (data.windowed()) data.description += " (" + std::to_string(data.validation.count) + " non-overlapping windows)";
    }
    return data;
}

}  // namespace

RunData load_run_data(const RunConfig& c) {
    if (c.is_text()) return load_text_run_data(c);
    RunData data;
    io::Dataset all = io::load_mnist_dir(c.data_dir, true);
    data.test = io::load_mnist_dir(c.data_dir, false);
    // An empty set never gets here: io::load_mnist rejects it, naming the file (train or t10k).
    if (data.test.sample_shape() != all.sample_shape()) {
        const auto [train_images, train_labels] = io::mnist_files(c.data_dir, true);
        const auto [test_images, test_labels] = io::mnist_files(c.data_dir, false);
        throw Error(c.source + ": key 'data.dir' (" + c.data_dir + "): the training images are " +
                    to_string(all.sample_shape()) + " (channels, rows, cols) in " + train_images + ", the test images " +
                    to_string(data.test.sample_shape()) + " in " + test_images + ": one model takes one shape");
    }

    int64_t held = c.validation_count;
    if (c.validation_fraction > 0) held = static_cast<int64_t>(std::llround(c.validation_fraction * static_cast<double>(all.count)));
    if (c.validation_fraction > 0 && held == 0) held = 1;  // a fraction asks for a validation set: never an empty one
    if (held >= all.count)
        throw Error(c.source + ": key 'data.validation' holds out " + std::to_string(held) + " of the " +
                    std::to_string(all.count) + " training images, leaving none to train on");
    if (held == 0) {
        data.train = std::move(all);
        return data;
    }
    // Its own generator: the split depends on the seed only, not on how the shuffle stream is used.
    std::mt19937_64 rng(c.seed ^ 0x9E3779B97F4A7C15ull);
    std::vector<int64_t> rows(static_cast<size_t>(all.count));
    std::iota(rows.begin(), rows.end(), 0);
    std::shuffle(rows.begin(), rows.end(), rng);
    std::vector<int64_t> val(rows.begin(), rows.begin() + held), train(rows.begin() + held, rows.end());
    std::sort(val.begin(), val.end());
    std::sort(train.begin(), train.end());
    data.validation = take_rows(all, val);
    data.train = take_rows(all, train);
    return data;
}

void check_model_fits_data(const RunConfig& c, Net& model, const RunData& data) {
    if (data.is_text()) {
        check_text_model(c, model, data.vocabulary, "the text");
        if (data.windowed()) check_window_model(c, model);
        return;
    }
    if (model.input_dtype() == DType::I32)
        throw Error(c.source + ": model.layers[0] (" + model.layer(0).kind() +
                    ") takes token indices, which only text data gives: set [data] text");
}

void check_text_model(const RunConfig& c, Net& model, const Vocabulary& vocabulary, const std::string& whose) {
    const std::string first = "model.layers[0] (" + model.layer(0).kind() + ")";
    if (model.input_dtype() != DType::I32)
        throw Error(c.source + ": a text model starts with an embedding or one_hot layer (token indices in), but " + first +
                    " takes float32 inputs");
    const auto* lookup = dynamic_cast<const TokenLookup*>(&model.layer(0));
    const int64_t vocab = vocabulary.size();
    if (lookup && lookup->vocab() < vocab)
        throw Error(c.source + ": key 'model.layers[0].vocab' is " + std::to_string(lookup->vocab()) + " but " + whose +
                    " has a vocabulary of " + std::to_string(vocab) + " characters (leave vocab out to take it from the data)");
    const Shape& out = model.output_sample_shape();
    if (out.size() != 2 || out.back() != vocab)
        throw Error(c.source + ": the model outputs " + to_string(out) + " per sequence, but a character model of " + whose +
                    " outputs [steps, " + std::to_string(vocab) + "]: one score per vocabulary entry per step (the last "
                    "layer's out = \"vocab\" sizes it to the data)");
}

void check_window_model(const RunConfig& c, Net& model) {
    for (size_t i = 0; i < model.size(); ++i)
        if (dynamic_cast<const Recurrent*>(&model.layer(i)))
            throw Error(c.source + ": " + model.layer(i).label() + " carries its state from one batch to the next, "
                        "but data.sampling = \"windows\" draws unrelated windows at random: use data.sampling = "
                        "\"streams\" for a recurrent model");
}

void check_resumed_vocabulary(const std::string& checkpoint, const RunData& data) {
    const Vocabulary saved = read_vocabulary(checkpoint);
    if (saved == data.vocabulary) return;
    auto what = [](const Vocabulary& v) {
        return v.empty() ? std::string("no vocabulary (images)") : "a vocabulary of " + std::to_string(v.size()) + " characters";
    };
    // Which characters differ, so a same-size change (one character swapped for another) is visible.
    auto listed = [](const Vocabulary& in, const Vocabulary& notin) {
        std::string s;
        int n = 0;
        for (uint8_t b : in.bytes())
            if (notin.token(b) < 0 && n++ < 5) s += (s.empty() ? "" : ", ") + describe_byte(b);
        return n > 5 ? s + " and " + std::to_string(n - 5) + " more" : s;
    };
    std::string diff;
    if (!saved.empty() && !data.vocabulary.empty()) {
        const std::string added = listed(data.vocabulary, saved), gone = listed(saved, data.vocabulary);
        if (!added.empty()) diff += "; new in the data: " + added;
        if (!gone.empty()) diff += "; no longer in the data: " + gone;
    }
    throw Error(checkpoint + ": the run trained with " + what(saved) + ", the data now gives " + what(data.vocabulary) +
                diff + " (data.text changed?)");
}

}  // namespace xylem::train
