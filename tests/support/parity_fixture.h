// A parity fixture: the safetensors file a PyTorch peer script writes for a parity test (initial
// parameters, batches, expected tensors, and the recipe as JSON metadata), read once, with errors
// that name the file and the missing entry. bench/torch_resnet.py and bench/torch_gpt.py write them.
#pragma once

#include <cstring>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "support/backends.h"
#include "xylem/error.h"
#include "xylem/io/safetensors.h"

namespace xylem::test {

class ParityFixture {
public:
    explicit ParityFixture(std::string path) : path_(std::move(path)), file_(io::read_safetensors(path_)) {}

    const io::Safetensors& file() const { return file_; }
    const io::LoadedTensor& tensor(const std::string& name) const {
        const auto it = file_.tensors.find(name);
        if (it == file_.tensors.end()) throw Error(path_ + ": no tensor '" + name + "'");
        return it->second;
    }
    std::vector<double> f32_values(const std::string& name) const {
        const io::LoadedTensor& t = tensor(name);
        if (t.dtype != "F32") throw Error(path_ + ": '" + name + "' is " + t.dtype + ", expected F32");
        std::vector<float> v(t.data.size() / sizeof(float));
        std::memcpy(v.data(), t.data.data(), t.data.size());
        return to_double(v);
    }
    // The recipe: a metadata entry, a JSON value as the script wrote it.
    double meta(const std::string& key) const {
        const auto it = file_.metadata.find(key);
        if (it == file_.metadata.end()) throw Error(path_ + ": no metadata '" + key + "'");
        return nlohmann::json::parse(it->second).get<double>();
    }

private:
    std::string path_;
    io::Safetensors file_;
};

}  // namespace xylem::test
