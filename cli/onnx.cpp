// `xylem run MODEL.onnx` and `xylem import MODEL.onnx`: an ONNX model through the importer
// (onnx/, docs/onnx.md) into xylem's own model graph, then run on a backend or written as a
// config and a checkpoint. Without libonnx-dev at build time both say so.
#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <iostream>

#include "commands.h"
#include "xylem/error.h"
#include "xylem/fusion.h"

#ifdef XYLEM_HAVE_ONNX
#include "xylem/io/atomic_file.h"
#include "xylem/onnx/importer.h"
#include "xylem/onnx/npy.h"
#include "xylem/profiler.h"
#include "xylem/train/backend_select.h"
#include "xylem/train/checkpoint.h"
#include "xylem/train/model_builder.h"
#endif

namespace xylem::cli {
namespace {
namespace fs = std::filesystem;

const std::string& model_operand(const Args& a) {
    if (a.operands.empty()) throw UsageError{a.command + " needs an ONNX model file (MODEL.onnx)", a.command};
    return a.operands[0];
}

#ifdef XYLEM_HAVE_ONNX
using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t0) {
    return std::chrono::duration<double>(Clock::now() - t0).count();
}

// The output file of a tensor name: its characters a file name takes, the rest '_'.
std::string file_stem(const std::string& name) {
    std::string s;
    for (char ch : name)
        s += std::isalnum(static_cast<unsigned char>(ch)) || ch == '-' || ch == '_' || ch == '.' ? ch : '_';
    while (!s.empty() && s.front() == '.') s.erase(s.begin());
    return s.empty() ? "output" : s;
}

std::string io_text(const std::vector<onnx_import::ModelIO>& v, const char* one, const char* several) {
    std::string s = v.size() == 1 ? one : several;
    for (size_t k = 0; k < v.size(); ++k) s += (k ? ", '" : " '") + v[k].name + "' " + to_string(v[k].sample);
    return s;
}

void print_notes(const onnx_import::Imported& m) {
    std::printf("%s: ONNX opset %lld%s, %zu layers, %zu tensors; %s; %s per sample\n", m.source.c_str(),
                static_cast<long long>(m.opset), m.producer.empty() ? "" : (" from " + m.producer).c_str(),
                m.layers.size(), m.params.size(), io_text(m.inputs, "input", "inputs").c_str(),
                io_text(m.outputs, "output", "outputs").c_str());
}

// The --input files in the graph's input order: given in that order, or each as NAME=FILE with
// NAME a graph input's name (any order; a path with '=' in it is a path unless the text before the
// first '=' names an input). Mixed forms, unknown or repeated names are usage errors.
std::vector<std::string> input_files(const Args& a, const onnx_import::Imported& m) {
    std::string names;
    for (const auto& in : m.inputs) names += (names.empty() ? "'" : ", '") + in.name + "'";
    auto named = [&](const std::string& arg) -> size_t {  // the input NAME=FILE names, or m.inputs.size()
        const size_t eq = arg.find('=');
        if (eq == std::string::npos) return m.inputs.size();
        for (size_t k = 0; k < m.inputs.size(); ++k)
            if (m.inputs[k].name == arg.substr(0, eq)) return k;
        return m.inputs.size();
    };
    size_t by_name = 0;
    for (const std::string& arg : a.inputs) by_name += named(arg) < m.inputs.size();
    if (by_name == 0) {
        if (a.inputs.size() != m.inputs.size())
            throw UsageError{"the model takes " + std::to_string(m.inputs.size()) + " input(s) (" + names +
                                 ", in this order), " + std::to_string(a.inputs.size()) + " --input file(s) given",
                             "run"};
        return a.inputs;
    }
    if (by_name != a.inputs.size())
        throw UsageError{"--input: give every file as NAME=FILE (the model's inputs: " + names + ") or none", "run"};
    std::vector<std::string> files(m.inputs.size());
    for (const std::string& arg : a.inputs) {
        const size_t k = named(arg);
        if (!files[k].empty()) throw UsageError{"--input: '" + m.inputs[k].name + "' is given twice", "run"};
        files[k] = arg.substr(arg.find('=') + 1);
    }
    for (size_t k = 0; k < files.size(); ++k)
        if (files[k].empty())
            throw UsageError{"--input: no file for the model's input '" + m.inputs[k].name + "' (its inputs: " + names + ")",
                             "run"};
    return files;
}

// The --input files, one per graph input, each checked against its input before anything is
// built: shape, element type, and one batch for all.
std::vector<npy::Array> read_inputs(const std::vector<std::string>& files, const onnx_import::Imported& m) {
    std::vector<npy::Array> xs;
    for (size_t k = 0; k < m.inputs.size(); ++k) {
        const onnx_import::ModelIO& in = m.inputs[k];
        const std::string& file = files[k];
        npy::Array x = npy::read(file);
        if (x.shape.size() != in.sample.size() + 1 || !std::equal(in.sample.begin(), in.sample.end(), x.shape.begin() + 1) ||
            x.shape[0] < 1)
            throw Error(file + ": array of shape " + to_string(x.shape) + " does not fit the model's input '" + in.name +
                        "', [N, " + to_string(in.sample).substr(1) + " with N >= 1");
        if (x.integer != in.tokens)
            throw Error(file + ": the model's input '" + in.name + "' takes " +
                        (in.tokens ? "integer token ids ('<i8' or '<i4')" : "float32 ('<f4')") + ", the file holds " +
                        (x.integer ? "integers" : "float32"));
        if (k > 0 && x.shape[0] != xs[0].shape[0])
            throw Error(file + ": " + std::to_string(x.shape[0]) + " samples, " + files[0] + " holds " +
                        std::to_string(xs[0].shape[0]) + " (every input holds the same samples)");
        xs.push_back(std::move(x));
    }
    return xs;
}
#endif

}  // namespace

int run_onnx_run(const Args& a) {
    const std::string& path = model_operand(a);
    if (a.inputs.empty()) throw UsageError{"run needs --input FILE.npy (one per model input)", "run"};
#ifndef XYLEM_HAVE_ONNX
    (void)path;
    throw Error(
        "xylem was built without ONNX support: install libonnx-dev and libprotobuf-dev (scripts/install-deps.sh) "
        "and build again");
#else
    auto t0 = Clock::now();
    const onnx_import::Imported m = onnx_import::import_file(path);
    const double import_s = seconds_since(t0);
    const std::vector<std::string> files = input_files(a, m);
    const std::vector<npy::Array> xs = read_inputs(files, m);
    const std::vector<Shape> samples = m.input_samples();
    RunConfig c = onnx_import::run_config(m);
    Registry registry;
    const BackendChoice choice = choose_backend(registry, c, a);
    auto dev = choice.backend->device(choice.device);
    t0 = Clock::now();
    auto model = train::build_inference_model(c, *dev, samples, xs[0].shape[0]);
    onnx_import::load_parameters(*model, m);
    for (size_t k = 0; k < xs.size(); ++k)
        if (xs[k].integer)
            model->check_token_ids(k, xs[k].tokens.data(), static_cast<int64_t>(xs[k].tokens.size()), files[k]);
    std::vector<Tensor> ins;
    std::vector<const Tensor*> in_ptrs;
    for (const npy::Array& x : xs) {
        ins.emplace_back(x.shape, x.integer ? DType::I32 : DType::F32, *dev);
        ins.back().upload_from(*dev, x.integer ? static_cast<const void*>(x.tokens.data())
                                               : static_cast<const void*>(x.values.data()));
    }
    for (const Tensor& t : ins) in_ptrs.push_back(&t);
    dev->sync();
    const double build_s = seconds_since(t0);
    // An ONNX model is a function of its inputs: recurrent layers start each pass from zeros (the
    // initial states the importer takes), not from the state the last pass left.
    // The first pass is recorded for step fusion, the second runs the fused plan.
    fusion::ForwardFusion fusion(*dev);
    auto pass = [&] {
        model->reset_state();
        fusion.run([&] { model->forward(*dev, in_ptrs, false); });
        for (size_t k = 0; k < model->output_count(); ++k) model->output(k).download();
    };
    t0 = Clock::now();
    pass();
    const double first_s = seconds_since(t0);
    // --profile times the second pass, the steady state (the first pays for first-touch pages,
    // scratch growth and the backend's kernel builds).
    profiler::enable(a.profile);
    t0 = Clock::now();
    pass();
    const double second_s = seconds_since(t0);
    profiler::enable(false);
    print_notes(m);
    const fs::path out = a.out.empty() ? fs::path(".") : fs::path(a.out);
    std::error_code ec;
    fs::create_directories(out, ec);
    if (ec) throw Error(out.string() + ": cannot create the output folder: " + ec.message());
    for (size_t k = 0; k < m.inputs.size(); ++k)
        std::printf("input '%s' %s from %s\n", m.inputs[k].name.c_str(), to_string(xs[k].shape).c_str(),
                    files[k].c_str());
    std::vector<fs::path> written;
    for (size_t k = 0; k < m.outputs.size(); ++k) {
        // Two output names may clean to one file name: the later gets its place appended.
        fs::path file = out / (file_stem(m.outputs[k].name) + ".npy");
        for (size_t r = k; std::find(written.begin(), written.end(), file) != written.end(); ++r)
            file = out / (file_stem(m.outputs[k].name) + "_" + std::to_string(r) + ".npy");
        written.push_back(file);
        const Tensor& y = model->output(k);
        npy::write(file.string(), y.shape(), y.to_vector().data());
        std::printf("output '%s' %s -> %s\n", m.outputs[k].name.c_str(), to_string(y.shape()).c_str(),
                    file.string().c_str());
    }
    std::printf("backend %s: import %.3f s, build %.3f s, forward %.6f s (first), %.6f s (second)\n",
                choice.backend->name().c_str(), import_s, build_s, first_s, second_s);
    if (a.profile) profiler::print(std::cout);
    return 0;
#endif
}

int run_import(const Args& a) {
    const std::string& path = model_operand(a);
    if (a.out.empty()) throw UsageError{"import needs --out DIR", "import"};
#ifndef XYLEM_HAVE_ONNX
    (void)path;
    throw Error(
        "xylem was built without ONNX support: install libonnx-dev and libprotobuf-dev (scripts/install-deps.sh) "
        "and build again");
#else
    const onnx_import::Imported m = onnx_import::import_file(path);
    const RunConfig c = onnx_import::run_config(m);
    // The parameters go through a model built on the native backend, so the checkpoint is what
    // `xylem eval`/`predict`/`train` load: the same names, shapes and checks.
    Registry registry;
    Args native = a;
    if (native.backend.empty()) native.backend = "native";
    const BackendChoice choice = choose_backend(registry, c, native);
    auto dev = choice.backend->device(choice.device);
    auto model = train::build_inference_model(c, *dev, m.input_samples(), 1);
    onnx_import::load_parameters(*model, m);
    const fs::path out(a.out);
    std::error_code ec;
    fs::create_directories(out, ec);
    if (ec) throw Error(out.string() + ": cannot create the output folder: " + ec.message());
    const std::string stem = file_stem(fs::path(path).stem().string());
    const fs::path config = out / (stem + ".toml"), checkpoint = out / (stem + ".safetensors");
    {
        io::AtomicFile f(config.string());
        const std::string text = onnx_import::config_text(m);
        f.write(text.data(), text.size());
        f.commit();
    }
    train::save_checkpoint(checkpoint.string(), *model, {{"xylem.onnx_source", path}});
    print_notes(m);
    for (const std::string& note : m.notes) std::printf("  %s\n", note.c_str());
    std::printf("config: %s\ncheckpoint: %s\n", config.string().c_str(), checkpoint.string().c_str());
    if (m.inputs.size() > 1) {  // the data-fed commands feed one input (Net::build says so too)
        std::printf("the model takes %zu inputs: run it with xylem run %s --input A.npy --input B.npy ... (eval, predict and "
                    "train feed one input)\n", m.inputs.size(), path.c_str());
        return 0;
    }
    std::printf("try: xylem eval --config %s --checkpoint %s\n", config.string().c_str(), checkpoint.string().c_str());
    std::printf("fine-tune: xylem train --config %s --init %s\n", config.string().c_str(), checkpoint.string().c_str());
    return 0;
#endif
}

}  // namespace xylem::cli
