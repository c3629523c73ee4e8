// Reads [model]: its layers and blocks, expanded into one list of wired layers (model_config.cpp).
#pragma once

#include <vector>

#include "toml_section.h"
#include "xylem/config.h"

namespace xylem {

// Fills c.layers, c.model_inputs and c.model_outputs.
void parse_model(const Section& model, LayerTableParser parse_layer_table, RunConfig& c);

}  // namespace xylem
