// Checkpoint save/load over the safetensors reader and writer.
#include "app/checkpoint.h"

#include <cstring>

#include "xylem/error.h"
#include "xylem/io/safetensors.h"

namespace xylem::app {

void save_checkpoint(const std::string& path, Sequential& model, const std::map<std::string, std::string>& metadata) {
    std::vector<io::TensorView> views;
    for (Param* p : model.state())
        views.push_back({p->name, "F32", p->value.shape(), p->value.host_read<float>(), p->value.bytes()});
    io::write_safetensors(path, views, metadata);
}

void load_checkpoint(const std::string& path, Sequential& model) {
    io::Safetensors file = io::read_safetensors(path);
    std::vector<Param*> params = model.state();
    for (Param* p : params) {
        auto it = file.tensors.find(p->name);
        if (it == file.tensors.end()) throw Error(path + ": checkpoint has no tensor '" + p->name + "' that the model needs");
        if (it->second.dtype != "F32")
            throw Error(path + ": tensor '" + p->name + "' has dtype " + it->second.dtype + ", expected F32");
        if (it->second.shape != p->value.shape())
            throw Error(path + ": tensor '" + p->name + "' has shape " + to_string(it->second.shape) +
                        ", the model expects " + to_string(p->value.shape()));
    }
    if (file.tensors.size() != params.size()) {
        for (const auto& [name, t] : file.tensors) {
            bool used = false;
            for (Param* p : params) used |= p->name == name;
            if (!used) throw Error(path + ": checkpoint tensor '" + name + "' does not belong to this model");
        }
    }
    for (Param* p : params)  // everything validated: now copy
        std::memcpy(p->value.host_write<float>(), file.tensors.at(p->name).data.data(), p->value.bytes());
}

}  // namespace xylem::app
