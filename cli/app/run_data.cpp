// Loading a run's data sets and holding out the validation set.
#include "app/run_data.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>

#include "xylem/error.h"

namespace xylem::app {
namespace {

// The images of `from` at `rows`, as a dataset of their own.
io::Dataset take_rows(const io::Dataset& from, const std::vector<int64_t>& rows) {
    io::Dataset d;
    d.count = static_cast<int64_t>(rows.size());
    d.rows = from.rows;
    d.cols = from.cols;
    const size_t pixels = static_cast<size_t>(from.rows * from.cols);
    d.images.resize(rows.size() * pixels);
    d.labels.resize(rows.size());
    for (size_t i = 0; i < rows.size(); ++i) {
        const size_t r = static_cast<size_t>(rows[i]);
        std::memcpy(d.images.data() + i * pixels, from.images.data() + r * pixels, pixels * sizeof(float));
        d.labels[i] = from.labels[r];
    }
    return d;
}

}  // namespace

RunData load_run_data(const RunConfig& c) {
    RunData data;
    io::Dataset all = io::load_mnist_dir(c.data_dir, true);
    data.test = io::load_mnist_dir(c.data_dir, false);
    if (all.count == 0) throw Error(c.data_dir + ": the training set has no images: there is nothing to train on");
    if (data.test.count == 0) throw Error(c.data_dir + ": the test set has no images");

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

}  // namespace xylem::app
