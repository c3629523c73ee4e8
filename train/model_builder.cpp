// Config -> layers, loss and solver.
#include "xylem/train/model_builder.h"

#include "xylem/error.h"
#include "xylem/layers/registry.h"
#include "xylem/train/evaluate.h"
#include "xylem/train/memory_plan.h"

namespace xylem::train {

std::unique_ptr<Net> build_model(const RunConfig& c, int64_t vocabulary) {
    if (c.layers.empty()) throw Error(c.source + ": the model has no layers ([[model.layers]])");
    auto model = std::make_unique<Net>();
    if (!c.model_inputs.empty()) model->set_inputs(c.model_inputs);
    if (!c.model_outputs.empty()) model->set_outputs(c.model_outputs);
    LayerContext context(c.source, c.seed, vocabulary);
    for (const LayerSpec& l : c.layers) {
        if (l.name.empty()) model->add(build_layer(l, context));  // a spec made in code: the next link of a chain
        else model->add(l.name, l.inputs, build_layer(l, context), l.shares);
    }
    return model;
}

namespace {

std::unique_ptr<Net> build_to_run(std::unique_ptr<Net> model, const RunConfig& c, Device& dev,
                                  std::span<const Shape> input_samples, int64_t batch) {
    check_memory_fits(inference_memory(*model, input_samples, batch, 0), dev, c.source, "running this model");
    model->build(dev, input_samples, c.seed, /*training=*/false);  // every caller loads the parameters next
    return model;
}

}  // namespace

std::unique_ptr<Net> build_inference_model(const RunConfig& c, Device& dev, std::span<const Shape> input_samples,
                                           int64_t batch, int64_t vocabulary) {
    return build_to_run(build_model(c, vocabulary), c, dev, input_samples, batch);
}

std::unique_ptr<Net> build_run_model(const RunConfig& c, Device& dev, const Shape& input_sample, int64_t& batch) {
    std::unique_ptr<Net> model = build_model(c);
    batch = run_batch(*model, input_sample, dev);
    return build_to_run(std::move(model), c, dev, std::span<const Shape>(&input_sample, 1), batch);
}

std::unique_ptr<Net> build_inference_model(const RunConfig& c, Device& dev, const Shape& input_sample, int64_t batch,
                                           int64_t vocabulary) {
    return build_inference_model(c, dev, std::span<const Shape>(&input_sample, 1), batch, vocabulary);
}

std::unique_ptr<Solver> build_solver(const RunConfig& c) {
    const SolverSpec& s = c.solver;
    std::unique_ptr<Solver> solver;
    if (s.type == "sgd") solver = std::make_unique<Sgd>(SgdOptions{s.lr, s.momentum, s.dampening, s.weight_decay, s.nesterov});
    else if (s.type == "adam") solver = std::make_unique<Adam>(AdamOptions{s.lr, s.beta1, s.beta2, s.eps, s.weight_decay});
    else if (s.type == "adamw") solver = std::make_unique<AdamW>(AdamWOptions{s.lr, s.beta1, s.beta2, s.eps, s.weight_decay});
    else if (s.type == "rmsprop")
        solver = std::make_unique<Rmsprop>(RmspropOptions{s.lr, s.alpha, s.eps, s.weight_decay, s.momentum, s.centered});
    else throw Error(c.source + ": unknown solver '" + s.type + "'");
    solver->set_clipping(ClipOptions{s.clip_value, s.clip_norm});
    solver->set_no_decay_bias(s.no_decay_bias);
    return solver;
}

}  // namespace xylem::train
