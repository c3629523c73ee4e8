// `xylem sample`: text from a character model's checkpoint, one drawn character at a time.
#include <cstdio>
#include <string>

#include "xylem/train/backend_select.h"
#include "xylem/train/checkpoint.h"
#include "xylem/train/model_builder.h"
#include "xylem/train/run_data.h"
#include "xylem/train/sample.h"
#include "commands.h"
#include "xylem/error.h"

namespace xylem::cli {

int run_sample(const Args& a) {
    if (a.config.empty()) throw UsageError{"sample needs --config FILE", "sample"};
    if (a.checkpoint.empty()) throw UsageError{"sample needs --checkpoint FILE", "sample"};
    const RunConfig c = load_config(a.config);
    // The tokens are the checkpoint's: the model may sample anywhere, without the text it learnt from.
    const train::Vocabulary vocab = train::read_vocabulary(a.checkpoint);
    if (vocab.empty())
        throw Error(a.checkpoint + ": has no vocabulary (metadata '" + train::kVocabularyKey +
                    "'): it was not trained on text data ([data] text), so there is nothing to sample");
    Registry registry;
    const BackendChoice choice = choose_backend(registry, c, a);
    auto dev = choice.backend->device(choice.device);
    // One step per call (the state carries the history), one sequence.
    auto model = train::build_inference_model(c, *dev, {1}, 1, vocab.size());
    train::check_text_model(c, *model, vocab, a.checkpoint);
    train::load_checkpoint(a.checkpoint, *model);
    for (Param* p : model->state()) p->value.upload(*dev);

    train::SampleOptions o;
    o.prime = a.prime.value_or("");
    o.length = a.length.value_or(500);
    o.temperature = a.temperature.value_or(1.0);  // parse_args holds it to the flag's range
    o.top_k = a.top_k.value_or(0);
    o.seed = a.seed.value_or(c.seed);
    o.output = train::output_kind(c);
    const std::string text = train::sample_text(*model, *dev, vocab, o);
    std::fwrite(text.data(), 1, text.size(), stdout);
    if (text.empty() || text.back() != '\n') std::fputc('\n', stdout);
    return 0;
}

}  // namespace xylem::cli
