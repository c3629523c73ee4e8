// The data of one training run: the training set, a validation set held out of it (data.validation),
// and the test set, each checked to be non-empty.
#pragma once

#include "xylem/config.h"
#include "xylem/io/idx.h"

namespace xylem::app {

struct RunData {
    io::Dataset train, validation, test;  // validation.count == 0 when none is held out
};

// Loads the config's data dir and holds out the validation images: a fixed, seeded choice, so a
// resumed run, and every backend, see the same split. Error naming the file or key when a set is empty.
RunData load_run_data(const RunConfig& config);

}  // namespace xylem::app
