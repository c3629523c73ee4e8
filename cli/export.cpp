// `xylem export --config C --checkpoint K --out M.onnx`: a trained model as an ONNX model (opset
// 17) through the exporter (onnx/export.h, docs/onnx-export.md); with --input X.npy it also runs
// xylem's own model on X and writes the output beside M, the reference ONNX Runtime must give.
// Without libonnx-dev at build time it says so.
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <optional>

#include "commands.h"
#include "xylem/error.h"

#ifdef XYLEM_HAVE_ONNX
#include "xylem/io/idx.h"
#include "xylem/onnx/export.h"
#include "xylem/onnx/npy.h"
#include "xylem/train/checkpoint.h"
#include "xylem/train/model_builder.h"
#include "xylem/train/text_data.h"
#endif

namespace xylem::cli {
namespace {
namespace fs = std::filesystem;

#ifdef XYLEM_HAVE_ONNX
// One sample's input shape: a text model's sequence (data.seq_len, or block_size for windows) of
// token indices; an image model's [channels, rows, cols] of its data's test set (io::Dataset::sample_shape).
Shape input_sample(const RunConfig& c) {
    if (c.is_text()) return {c.windows() ? c.block_size : c.seq_len};
    return io::load_idx_images(io::mnist_files(c.data_dir, false).first).sample_shape();
}

// --input's array as the model's input batch on `dev` (a text model's token ids as int32/int64, or
// as whole float32 numbers), checked before anything is written.
struct ReferenceInput {
    std::vector<float> values;
    std::vector<int32_t> tokens;  // alive until the forward has read them: an upload may copy them later
    Tensor batch;
};

ReferenceInput read_reference_input(const Net& model, Device& dev, const Shape& sample, const std::string& input) {
    npy::Array x = npy::read(input);
    if (x.shape.size() != sample.size() + 1 || x.shape[0] < 1 ||
        !std::equal(sample.begin(), sample.end(), x.shape.begin() + 1))
        throw Error(input + ": array of shape " + to_string(x.shape) + " does not fit the model's input, [N, " +
                    to_string(sample).substr(1) + " with N >= 1");
    ReferenceInput r;
    const DType type = model.input_dtype();
    r.batch = Tensor(x.shape, type, dev);
    if (type != DType::I32) {
        if (x.integer) throw Error(input + ": holds integers; the model's input is float32");
        r.values = std::move(x.values);
        r.batch.upload_from(dev, r.values.data());
        return r;
    }
    if (x.integer) {
        r.tokens = std::move(x.tokens);
    } else {
        r.tokens.resize(x.values.size());
        for (size_t k = 0; k < r.tokens.size(); ++k) {
            const float v = x.values[k];
            if (!(v >= 0 && v < 2147483648.0f) || std::floor(v) != v)
                throw Error(input + ": value " + std::to_string(v) + " at " + std::to_string(k) +
                            " is not a token index (a whole number >= 0)");
            r.tokens[k] = static_cast<int32_t>(v);
        }
    }
    r.batch.upload_from(dev, r.tokens.data());
    return r;
}

// The model's forward on it, written as M.output.npy: the reference ONNX Runtime must give.
std::string write_reference(Net& model, Device& dev, const ReferenceInput& in, const fs::path& onnx) {
    const Tensor& y = model.forward(dev, in.batch, false);
    fs::path out = onnx;
    out.replace_extension(".output.npy");
    npy::write(out.string(), y.shape(), y.to_vector().data());
    return out.string();
}
#endif

}  // namespace

int run_export(const Args& a) {
    if (a.config.empty()) throw UsageError{"export needs --config FILE", "export"};
    if (a.checkpoint.empty()) throw UsageError{"export needs --checkpoint FILE", "export"};
    if (a.out.empty()) throw UsageError{"export needs --out MODEL.onnx", "export"};
#ifndef XYLEM_HAVE_ONNX
    throw Error(
        "xylem was built without ONNX support: install libonnx-dev and libprotobuf-dev (scripts/install-deps.sh) "
        "and build again");
#else
    const RunConfig c = load_config(a.config);
    const int64_t vocabulary = c.is_text() ? static_cast<int64_t>(train::read_vocabulary(a.checkpoint).size()) : 0;
    if (c.is_text() && vocabulary == 0)
        throw Error(a.checkpoint + ": has no vocabulary (metadata '" + train::kVocabularyKey +
                    "'), and the config's model reads text: was it trained with this config?");
    const Shape sample = input_sample(c);
    Registry registry;
    const BackendChoice choice = choose_backend(registry, c, a);
    auto dev = choice.backend->device(choice.device);
    auto model = train::build_inference_model(c, *dev, sample, 1, vocabulary);
    train::load_checkpoint(a.checkpoint, *model);
    std::optional<ReferenceInput> reference;
    if (!a.input.empty()) reference = read_reference_input(*model, *dev, sample, a.input);
    onnx_export::Source src;
    src.model = model.get();
    src.layers = &c.layers;
    src.input_sample = sample;
    src.name = fs::path(a.config).stem().string();
    onnx_export::export_file(src, a.out);
    std::printf("%s: ONNX opset %lld, %zu layers; input '%s' [batch, %s %s, output '%s' [batch, %s\n", a.out.c_str(),
                static_cast<long long>(onnx_export::kOpset), model->size(), onnx_export::kInputName,
                to_string(sample).substr(1).c_str(), c.is_text() ? "int64 token indices" : "float32",
                onnx_export::kOutputName, to_string(model->output_sample_shape()).substr(1).c_str());
    if (reference) {
        const std::string ref = write_reference(*model, *dev, *reference, a.out);
        std::printf("xylem's output on %s (backend %s): %s\n", a.input.c_str(), choice.backend->name().c_str(),
                    ref.c_str());
    }
    return 0;
#endif
}

}  // namespace xylem::cli
