// The data of one training run: the training set, a validation set held out of it (data.validation),
// and the test set, each checked to be non-empty. Text data ([data] text, xylem/train/text_data.h) is token
// sets instead, with its vocabulary and no test set.
#pragma once

#include <string>

#include "xylem/train/batch_source.h"
#include "xylem/train/text_data.h"
#include "xylem/config.h"
#include "xylem/io/idx.h"
#include "xylem/layers/net.h"

namespace xylem::train {

struct RunData {
    io::Dataset train, validation, test;  // validation.count == 0 when none is held out; test: none for text
    // Text windows (data.sampling = "windows"): the training text, sampled per batch; `train` then
    // holds no samples, only their shape (steps = block_size).
    TextWindows windows;
    Vocabulary vocabulary;                // text data's; empty for images
    std::string description;              // one line for the banner: what the sets hold
    bool is_text() const { return train.is_tokens(); }
    bool windowed() const { return windows.block_size > 0; }
    // Samples in one epoch of training: images, stream chunks or windows.
    int64_t train_count() const { return windowed() ? windows.count() : train.count; }
    // Text streams: batches follow each other in every stream (a recurrent model carries its
    // state along them), so the order stays as laid out; images and text windows are shuffled
    // every epoch.
    bool shuffled() const { return !is_text() || windowed(); }
    // The batch size its held-out sets are scored in: text keeps the training batch (streams
    // their layout; windows a batch that training's memory plan covers).
    int64_t eval_batch(int64_t train_batch) const { return is_text() ? train_batch : 1000; }
};

// Loads the config's data dir and holds out the validation images: a fixed, seeded choice, so a
// resumed run, and every backend, see the same split. Error naming the file or key when a set is empty.
// Text data: xylem/train/text_data.h's load_text_data.
RunData load_run_data(const RunConfig& config);

// Whether a built model takes this data: its input type (int32 tokens for text, float images) and,
// for text, a first layer whose vocabulary covers the data's and an output of one score per
// vocabulary entry per step, and for text windows no recurrent layer (its state would carry from
// one random window to an unrelated one). An Error naming the key that does not fit.
void check_model_fits_data(const RunConfig& config, Net& model, const RunData& data);
// The text half of it, for a vocabulary from the data or from a checkpoint (`whose`: "the text",
// "checkpoint.safetensors"): int32 input, a first layer covering the vocabulary, [steps, vocab] out.
void check_text_model(const RunConfig& config, Net& model, const Vocabulary& vocabulary, const std::string& whose);

// The windows half of it: no layer that carries state between batches (lstm, gru).
void check_window_model(const RunConfig& config, Net& model);

// A resumed run's checkpoint must hold the vocabulary the data gives now (none for images): else
// its tokens would mean other characters. An Error naming the checkpoint.
void check_resumed_vocabulary(const std::string& checkpoint, const RunData& data);

}  // namespace xylem::train
