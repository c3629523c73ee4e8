// Config -> layers, loss and solver.
#include "app/model_builder.h"

#include "xylem/error.h"
#include "xylem/layers/batchnorm.h"
#include "xylem/layers/conv.h"
#include "xylem/layers/elementwise.h"
#include "xylem/layers/linear.h"
#include "xylem/layers/reshape.h"

namespace xylem::app {

std::unique_ptr<Sequential> build_model(const RunConfig& c) {
    if (c.layers.empty()) throw Error(c.source + ": the model has no layers ([[model.layers]])");
    auto model = std::make_unique<Sequential>();
    uint64_t dropout_seed = c.seed * 0x9E3779B97F4A7C15ull;
    for (const LayerSpec& l : c.layers) {
        std::unique_ptr<Layer> layer;
        if (l.type == "linear") layer = std::make_unique<Linear>(l.out, l.bias);
        else if (l.type == "relu") layer = std::make_unique<Activation>(XYLEM_ACT_RELU);
        else if (l.type == "sigmoid") layer = std::make_unique<Activation>(XYLEM_ACT_SIGMOID);
        else if (l.type == "tanh") layer = std::make_unique<Activation>(XYLEM_ACT_TANH);
        else if (l.type == "softmax") layer = std::make_unique<Softmax>(false);
        else if (l.type == "log_softmax") layer = std::make_unique<Softmax>(true);
        else if (l.type == "flatten") layer = std::make_unique<Reshape>(Shape{-1}, "flatten");
        else if (l.type == "reshape") layer = std::make_unique<Reshape>(l.shape);
        else if (l.type == "dropout") layer = std::make_unique<Dropout>(l.p, dropout_seed++);
        else if (l.type == "conv2d")
            layer = std::make_unique<Conv2d>(Conv2dOptions{l.out, l.kernel_h, l.kernel_w, l.stride ? l.stride : 1,
                                                           l.padding, l.dilation, l.groups, l.bias});
        else if (l.type == "maxpool2d" || l.type == "avgpool2d") {
            if (l.kernel_h != l.kernel_w) throw Error(c.source + ": " + l.type + " needs a square kernel");
            layer = std::make_unique<Pool2d>(Pool2dOptions{l.type == "maxpool2d" ? XYLEM_POOL_MAX : XYLEM_POOL_AVG,
                                                           l.kernel_h, l.stride, l.padding, l.count_include_pad});
        } else if (l.type == "batchnorm") layer = std::make_unique<BatchNorm>(l.eps, l.momentum);
        else throw Error(c.source + ": unknown layer type '" + l.type + "'");
        model->add(std::move(layer));
    }
    return model;
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

}  // namespace xylem::app
