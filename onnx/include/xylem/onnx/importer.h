// The ONNX importer: an ONNX model (a ModelProto file) becomes xylem's model graph, the same
// LayerSpecs of registered layer types, wired by name, that a config's [[model.layers]] give
// (layers/include/xylem/layers/net.h), plus the model's initializers as that graph's named
// parameters. There is no second representation and no interpreter: the imported model is
// built, run, evaluated, checkpointed and trained like any config's (docs/onnx.md).
//
// Everything is checked before anything is built: the file must parse as a ModelProto; every op
// must be one the importer maps (else one Error listing every unsupported op type with its node
// names and the opset); the graph must be acyclic, every tensor a node reads must exist, every
// initializer must be whole (its dims sane, its data as long as they say, external data inside
// the model's folder); attributes without a xylem equivalent are refused naming the node.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "xylem/config.h"
#include "xylem/layers/net.h"

namespace xylem::onnx_import {

// The opsets of the default ONNX domain the importer reads.
inline constexpr int64_t kMinOpset = 13, kMaxOpset = 17;

// One op type the importer reads and what it becomes (docs/onnx.md lists the table).
struct OpMapping {
    const char* op;
    const char* becomes;
};
const std::vector<OpMapping>& supported_ops();

// One of the graph's inputs or outputs.
struct ModelIO {
    std::string name;     // ONNX's
    std::string node;     // xylem's: the model input's name (Net::input_names) or the node giving the output
    Shape sample;         // the shape per sample (the tensor's first axis is the batch)
    bool tokens = false;  // an input of integer token ids (an embedding reads it), not float
};

struct Imported {
    std::string source;                   // the file (or a name for bytes)
    int64_t opset = 0;                    // of the default domain
    std::string producer;                 // producer_name producer_version, as the file says
    // The graph's inputs (less initializers) and outputs, in the graph's order: the order
    // `xylem run` takes --input files and writes outputs. A graph of one input names it "input"
    // in xylem; several keep their ONNX names (cleaned as layer names are).
    std::vector<ModelIO> inputs, outputs;
    int64_t batch = 0;                    // the batch the file declares (its first input's); 0 when symbolic
    std::vector<Shape> input_samples() const;  // each input's sample, in order (what Net::build takes)
    // The [[model.layers]] tables of the graph (TOML), and the same parsed by the layer registry.
    std::string layers_toml;
    std::vector<LayerSpec> layers;
    // Every parameter and buffer of the graph under its xylem name ("conv1.weight",
    // "bn1.running_mean"), shaped as the layer holds it.
    std::map<std::string, SavedTensor> params;
    std::vector<std::string> notes;  // nodes skipped or folded, one line each
};

// Reads and imports a model file; external data files are looked up beside it.
Imported import_file(const std::string& path);
// The same from the file's bytes; `dir` is the folder external data must lie in ("" refuses any).
Imported import_bytes(const std::string& bytes, const std::string& source, const std::string& dir);

// A whole config (TOML) of the imported model that every xylem command reads: the layers, and
// defaults for the rest (Fashion-MNIST data, cross-entropy, SGD) to edit before training.
std::string config_text(const Imported& m);
// The RunConfig of config_text, parsed by the same parser as any config file.
RunConfig run_config(const Imported& m);

// Copies the imported parameters into a built model: every name and shape checked first,
// nothing written unless all fit.
void load_parameters(Net& model, const Imported& m);

}  // namespace xylem::onnx_import
