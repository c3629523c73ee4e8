// Model checkpoints as safetensors, named like a PyTorch nn.Sequential state_dict.
#pragma once

#include <map>
#include <string>

#include "xylem/layers/sequential.h"

namespace xylem::app {

// Written atomically: a crash mid-write leaves the previous checkpoint in place.
void save_checkpoint(const std::string& path, Sequential& model, const std::map<std::string, std::string>& metadata);
// Validates names, dtypes and shapes against the model before changing any parameter.
void load_checkpoint(const std::string& path, Sequential& model);

}  // namespace xylem::app
