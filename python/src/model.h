// The model a Python caller holds: a config, the backend it chose, and the Net, loss and solver
// the training library builds from it. The Net is built at its first use, when the arrays give the
// sample shape (a config's [data] section is not read: the arrays are the data).
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>

#include "binding.h"
#include "xylem/config.h"
#include "xylem/layers/loss.h"
#include "xylem/layers/net.h"
#include "xylem/registry.h"
#include "xylem/solvers/solver.h"
#include "xylem/train/text_data.h"

namespace xylem::python {

class Model {
public:
    Model(RunConfig config, const std::string& backend, const std::vector<std::string>& plugin_path);

    // Builds the model for samples of `sample` (once; later calls must give the same shape).
    void ensure_built(const Shape& sample);
    // A model of several inputs (an ONNX graph's): one sample shape per input.
    void ensure_built(std::span<const Shape> samples);
    bool built() const { return built_; }
    const Shape& sample() const { return samples_.at(0); }  // one sample's shape, once built
    // The model's inputs (known before it is built: the config names them) and whether input k
    // takes int32 token ids.
    const std::vector<std::string>& input_names() const { return net_->input_names(); }
    bool input_takes_tokens(size_t k) const { return net_->input_dtype(k) == DType::I32; }
    std::vector<std::string> output_names() const { return net_->output_names(); }
    Net& net();
    Device& device() { return *dev_; }
    const RunConfig& config() const { return config_; }
    // The config's loss, checked against the model's output (ValueError) at each use: fit and
    // evaluate need it, predict does not (an ONNX graph whose outputs are feature maps runs).
    Loss& loss();
    Solver& solver() { return *solver_; }
    int64_t classes() const;
    bool takes_tokens() const;
    // A checkpoint to load once the model is built (Model.load before any array was seen).
    void set_pending_checkpoint(std::string path) { pending_ = std::move(path); }
    train::Vocabulary vocabulary;  // a text model's, from its checkpoint (generate)
    std::string backend_name() const;
    // The safetensors metadata of the files it writes: the config, the backend, a text model's vocabulary.
    std::map<std::string, std::string> checkpoint_metadata() const;
    std::string backend_choice;  // how the backend was chosen, as `xylem train` prints it

private:
    RunConfig config_;
    Registry registry_;
    std::shared_ptr<Backend> backend_;
    std::shared_ptr<Device> dev_;
    std::unique_ptr<Net> net_;
    std::unique_ptr<Loss> loss_;
    std::unique_ptr<Solver> solver_;
    bool built_ = false;
    std::vector<Shape> samples_;
    std::string pending_;
};

}  // namespace xylem::python
