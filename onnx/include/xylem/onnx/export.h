// The ONNX exporter: a built xylem model (a Net of the config's layers, its parameters loaded)
// becomes an ONNX model (opset 17) that ONNX Runtime runs to the same outputs and that the importer
// (importer.h) reads back. Inference form: batch norms use their running statistics, dropout is
// left out, the loss is not part of the model (its output is what forward gives: logits).
//
// Every layer type has one entry in the exporter's table (mapped_layers(), docs/onnx-export.md);
// a model with a layer the table lacks is refused before anything is written, naming every such
// layer and its type.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "xylem/config.h"
#include "xylem/layers/net.h"

namespace xylem::onnx_export {

// The opset of the default domain the exporter writes (17: LayerNormalization is an op there).
inline constexpr int64_t kOpset = 17;
// Names of the graph's input and output; their first axis is the symbolic "batch".
inline constexpr const char* kInputName = "input";
inline constexpr const char* kOutputName = "output";
inline constexpr const char* kBatchAxis = "batch";

// One layer type the exporter writes and the ONNX nodes it becomes.
struct LayerMapping {
    const char* layer;
    const char* onnx;
};
const std::vector<LayerMapping>& mapped_layers();

// What to export. `model` is built (Net::build) with `input_sample` and holds the weights to
// export; `layers` are the specs it was built from (RunConfig::layers: each layer's options).
struct Source {
    Net* model = nullptr;
    const std::vector<LayerSpec>* layers = nullptr;
    Shape input_sample;  // per sample: [1, 28, 28], or [T] token indices for a text model
    std::string name;    // the graph's name (the config's stem)
};

// The model as a serialized ModelProto. An Error, before any work, naming every layer whose type
// has no mapping; an Error naming the layer for an option the mapping cannot express.
std::string export_bytes(const Source& source);
// The same, written atomically to `path` (a temporary file renamed over it, as checkpoints are).
void export_file(const Source& source, const std::string& path);

}  // namespace xylem::onnx_export
