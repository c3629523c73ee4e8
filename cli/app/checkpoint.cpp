// Checkpoint save/load over the safetensors reader and writer.
#include "app/checkpoint.h"

#include <cmath>
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

namespace {

// A NaN or inf weight (a diverged run's checkpoint) would evaluate to a meaningless accuracy:
// name the first tensor that has one, in the model's order, and how many values and tensors.
void check_finite(const std::string& path, const io::Safetensors& file, const std::vector<Param*>& params) {
    std::string first;
    int64_t first_bad = 0, first_count = 0, bad_tensors = 0;
    for (Param* p : params) {
        const std::vector<uint8_t>& bytes = file.tensors.at(p->name).data;
        const size_t count = bytes.size() / sizeof(float);
        int64_t bad = 0;
        for (size_t i = 0; i < count; ++i) {
            float v;
            std::memcpy(&v, bytes.data() + i * sizeof(float), sizeof v);  // the data need not be aligned
            bad += !std::isfinite(v);
        }
        if (!bad) continue;
        if (!bad_tensors++) {
            first = p->name;
            first_bad = bad;
            first_count = static_cast<int64_t>(count);
        }
    }
    if (bad_tensors)
        throw Error(path + ": tensor '" + first + "' holds " + std::to_string(first_bad) +
                    " non-finite values (NaN or inf) of " + std::to_string(first_count) + "; " +
                    std::to_string(bad_tensors) + " of the checkpoint's " + std::to_string(params.size()) +
                    " tensors have some, so its weights are unusable");
}

}  // namespace

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
    check_finite(path, file, params);
    for (Param* p : params)  // everything validated: now copy
        std::memcpy(p->value.host_write<float>(), file.tensors.at(p->name).data.data(), p->value.bytes());
}

}  // namespace xylem::app
