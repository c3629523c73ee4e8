// Sampling text from a character-level language model, one character at a time: the model runs
// on its backend at batch 1, one step per call, carrying its state from call to call (a recurrent
// model's hidden state; a transformer's keys and values, in the attention layers' cache, so the
// prefix is never recomputed); the draw is on the host, from softmax(output / temperature) over
// the top_k most likely characters, with its own seeded generator, so a seed gives the same text
// on every backend whose outputs agree.
#pragma once

#include <cstdint>
#include <string>

#include "xylem/train/predict.h"
#include "xylem/train/text_data.h"
#include "xylem/layers/net.h"

namespace xylem::train {

struct SampleOptions {
    std::string prime;         // fed to the model first, and the start of the text
    int64_t length = 500;      // characters drawn after the prime
    double temperature = 1.0;  // > 0; below 1 sharpens the distribution, above 1 flattens it
    int64_t top_k = 0;         // > 0: draw among the k most likely characters only (0: all)
    uint64_t seed = 1;
    OutputKind output = OutputKind::logits;  // what the model's last layer gives (predict.h)
};

// The prime followed by `length` drawn characters. `model` is built for one step per sample
// (input [1] per sample, output [1, vocab]) and holds the trained weights; its state is reset
// first. Without a prime the first character is drawn uniformly (char-rnn's rule). A model with a
// context limit (Net::max_positions: a transformer's position table) decodes with its key/value
// cache; when the text reaches the limit the cache restarts from the last half of the context
// (recomputed once per half context, where a model without a cache recomputes it every character).
// An Error names a prime character outside the vocabulary, a prime longer than the context, or the
// step whose outputs are not finite.
std::string sample_text(Net& model, Device& dev, const Vocabulary& vocabulary, const SampleOptions& options);

}  // namespace xylem::train
