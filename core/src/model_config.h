// Reads [model]: its layers and blocks, expanded into one list of wired layers (model_config.cpp).
#pragma once

#include <vector>

#include "toml_section.h"
#include "xylem/config.h"

namespace xylem {

std::vector<LayerSpec> parse_model(const Section& model, LayerTableParser parse_layer_table);

}  // namespace xylem
