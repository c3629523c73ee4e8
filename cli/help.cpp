// The command table: what each command is for, its usage line(s), every flag it takes with one
// line each, and notes. parse_args accepts exactly these flags, and every help text and usage
// line is made from this table, so a flag is described in one place only.
#include <algorithm>
#include <cctype>
#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

#include "commands.h"
#include "xylem/plugin_api.h"

#ifndef XYLEM_VERSION
#error "XYLEM_VERSION comes from the CMake project version (cli/CMakeLists.txt)"
#endif

namespace xylem::cli {
namespace {

struct Flag {
    const char* name;  // "--config"
    const char* arg;   // "FILE", "[RUN_DIR]" or "" for a switch
    const char* text;  // one line
};

struct Command {
    const char* name;
    std::vector<const char*> usage;  // after "xylem "; [OPTIONS] stands for the flags below
    const char* summary;
    std::vector<Flag> flags;
    const char* notes;  // "" or a paragraph
    int operands;       // words besides flags the command takes (plot's RUN_DIR, help's COMMAND)
};

// Flags several commands share, written once.
const Flag kBackend{"--backend", "NAME", "backend to run on, or auto (else XYLEM_BACKEND, else the config's backend key)"};
const Flag kPluginPath{"--plugin-path", "DIR", "also look for plugins in DIR (repeatable; searched first)"};
const Flag kTrustPlugins{"--trust-config-plugins", "",
                         "also search the config's plugin_path for plugins (their code runs: only for a config you trust)"};
const Flag kProfile{"--profile", "", "print time per op kind and per layer, and the host<->device transfers"};
const Flag kConfig{"--config", "FILE", "the run's TOML config (model, data, solver, training loop)"};
const Flag kCheckpoint{"--checkpoint", "FILE", "a .safetensors checkpoint of that model (model, last or best)"};

const char* kEnvironment =
    "Backend choice: --backend, else XYLEM_BACKEND, else the config's `backend` key (default \"auto\": the best\n"
    "device found, a discrete GPU over an integrated one or an accelerator, over the native CPU backend, over a\n"
    "CPU reached through OpenCL; a named backend must be available, there is no silent fallback).\n"
    "Plugin folders: --plugin-path, XYLEM_PLUGIN_PATH, the config's plugin_path (only with --trust-config-plugins),\n"
    "the installed plugins; a named backend probes only its own file, libxylem_NAME.so.\n"
    "Environment: every XYLEM_* variable (XYLEM_NUM_THREADS, XYLEM_FUSION, ...) is checked like a config key;\n"
    "docs/environment.md lists them with their values.\n";

const std::vector<Command>& commands() {
    static const std::vector<Command> table = {
        {"backends",
         {"backends [OPTIONS]"},
         "list every plugin file found, its devices, and why one is unavailable",
         {kPluginPath},
         "",
         0},
        {"train",
         {"train --config FILE [OPTIONS]", "train --resume [RUN_DIR] [OPTIONS]"},
         "train a config's model; checkpoints, metrics.json and log.csv go to its out dir",
         {kConfig,
          {"--resume", "[RUN_DIR]",
           "continue an interrupted run from RUN_DIR/last.safetensors (default: the config's out dir)"},
          kBackend,
          {"--epochs", "N", "epochs to train; with --resume, counts the whole run (the epochs done included)"},
          {"--batch-size", "N", "images per training step (train.batch_size)"},
          {"--lr", "X", "learning rate (solver.lr)"},
          {"--seed", "N", "seed of the initial weights, the shuffle and the validation split (train.seed)"},
          {"--max-steps", "N", "stop after N training steps in total over the whole run, not per epoch (0: no limit)"},
          {"--out", "DIR", "the run's out dir (default: the config's train.out, else runs/<config name>)"},
          {"--init", "FILE", "start from this checkpoint's weights instead of the seeded init (train.init: fine-tuning)"},
          {"--accept-changed-data", "", "with --resume: train on even if a data file changed since the checkpoint"},
          kProfile,
          kPluginPath,
          kTrustPlugins},
         "A resumed run keeps its config and the flags it started with; flags given with --resume\n"
         "apply on top. Ctrl-C finishes the step, writes last.safetensors and prints the command\n"
         "that resumes.",
         0},
        {"eval",
         {"eval --config FILE --checkpoint FILE [OPTIONS]"},
         "the test set accuracy of a checkpoint (text: its validation loss per character), and how fast it runs",
         {kConfig, kCheckpoint, kBackend, kProfile, kPluginPath, kTrustPlugins},
         "",
         0},
        {"predict",
         {"predict --config FILE --checkpoint FILE [OPTIONS]"},
         "the top classes of each image of an IDX file, printed and written to a CSV file",
         {kConfig,
          kCheckpoint,
          {"--input", "FILE", "IDX image file (plain or .gz) to classify (default: the config's test set)"},
          {"--top", "K", "classes per image, most probable first (default: 3, or fewer if the model has fewer)"},
          {"--out", "CSV", "where to write every image's prediction (default: predictions.csv beside the checkpoint)"},
          kBackend,
          kPluginPath,
          kTrustPlugins},
         "Probabilities are the softmax of the model's outputs (or the outputs themselves when the\n"
         "model ends in softmax, their exp when it ends in log_softmax). The terminal shows the first\n"
         "10 images; the CSV holds all of them: image, label (when known), then top1_class,\n"
         "top1_name, top1_prob, ... for each of the K classes.",
         0},
        {"sample",
         {"sample --config FILE --checkpoint FILE [OPTIONS]"},
         "generate text with a character model trained on text data ([data] text)",
         {kConfig,
          kCheckpoint,
          {"--prime", "TEXT", "text fed to the model first; the output starts with it (default: none)"},
          {"--length", "N", "characters to generate after the prime (default: 500)"},
          {"--temperature", "T", "divides the outputs before the softmax: below 1 safer, above 1 more varied (1e-6 to 1e6, default: 1)"},
          {"--top-k", "K", "draw among the K most likely characters only (1 to 2^31-1, default: all)"},
          {"--seed", "N", "seed of the draws (default: the config's train.seed)"},
          kBackend,
          kPluginPath,
          kTrustPlugins},
         "The model runs one character at a time (batch 1, one step), carrying its recurrent state;\n"
         "each next character is drawn on the host from softmax(output / T). Without --prime the first\n"
         "character is drawn uniformly from the vocabulary. The vocabulary is the checkpoint's (the bytes\n"
         "of the text it was trained on); the generated text alone goes to stdout.",
         0},
        {"plot",
         {"plot RUN_DIR [OPTIONS]"},
         "draw a run's loss, accuracy and learning-rate curves to a PNG",
         {{"--out", "FILE.png", "where to write the picture (default: RUN_DIR/curves.png)"}},
         "Reads RUN_DIR/log.csv and RUN_DIR/metrics.json and draws them with the xylem-plot.py script\n"
         "installed beside xylem, run by /usr/bin/python3 (or XYLEM_PYTHON) with matplotlib\n"
         "(Debian: apt-get install python3-matplotlib).",
         1},
        {"run",
         {"run MODEL.onnx --input FILE.npy [--input FILE.npy ...] [OPTIONS]"},
         "run an ONNX model on a backend: its outputs as .npy, shapes and timing",
         {{"--input", "FILE.npy", "a model input, float32 [N, ...] (or integer token ids); once per graph input, in the "
                                  "graph's order (or each as NAME=FILE.npy, by the input's name, in any order), each "
                                  "holding the same N samples"},
          {"--out", "DIR", "where to write the outputs, <output name>.npy each (default: the current folder)"},
          kBackend,
          kProfile,
          kPluginPath},
         "The model is imported into xylem's own model graph (docs/onnx.md lists the ops and how each\n"
         "maps to a layer) and run in inference mode, twice: the first run's time includes the\n"
         "backend's warm-up. A model with an op xylem lacks is refused before any work, naming every\n"
         "such op and its nodes. Needs a build with libonnx-dev.",
         1},
        {"import",
         {"import MODEL.onnx --out DIR"},
         "turn an ONNX model into a config and a safetensors checkpoint every command takes",
         {{"--out", "DIR", "the folder for MODEL.toml (the config) and MODEL.safetensors (the weights)"}},
         "The config holds the model's layers, wired by name, and defaults for data, loss, solver and\n"
         "training to edit (docs/onnx.md); xylem eval, predict and train read it with the checkpoint.\n"
         "Needs a build with libonnx-dev.",
         1},
        {"export",
         {"export --config FILE --checkpoint FILE --out MODEL.onnx [OPTIONS]"},
         "write a trained model as an ONNX model (opset 17) that ONNX Runtime and xylem run import",
         {kConfig,
          kCheckpoint,
          {"--out", "MODEL.onnx", "the ONNX file to write (atomically: a temporary file renamed over it)"},
          {"--input", "FILE.npy", "also run the model on FILE (float32 [N, ...]; a text model's token ids: int32, int64 or "
                                  "whole float32 numbers) and write its output to MODEL.output.npy"},
          kBackend,
          kPluginPath,
          kTrustPlugins},
         "Inference form: batch norms use their running statistics, dropout is left out and the loss is\n"
         "not exported (the output is the model's forward: logits). The input's first axis is \"batch\";\n"
         "a text model's sequence length is data.seq_len (data.block_size for windows). A layer type\n"
         "the exporter has no mapping for is refused before anything is written, naming each such layer\n"
         "(docs/onnx-export.md lists the mapping). Needs a build with libonnx-dev.",
         0},
        {"help", {"help [COMMAND]"}, "this overview, or a command's options (also: xylem COMMAND --help)", {}, "", 1},
        {"version", {"version"}, "xylem's version, plugin ABI and build type (also: xylem --version)", {}, "", 0},
    };
    return table;
}

const Command* find(const std::string& name) {
    for (const Command& c : commands())
        if (name == c.name) return &c;
    return nullptr;
}

}  // namespace

bool is_command(const std::string& name) { return find(name) != nullptr; }

bool takes_flag(const std::string& command, const std::string& flag) {
    const Command* c = find(command);
    return c && std::any_of(c->flags.begin(), c->flags.end(), [&](const Flag& f) { return flag == f.name; });
}

bool is_flag(const std::string& flag) {
    return std::any_of(commands().begin(), commands().end(), [&](const Command& c) { return takes_flag(c.name, flag); });
}

int max_operands(const std::string& command) {
    const Command* c = find(command);
    return c ? c->operands : 0;
}

std::string usage_lines(const std::string& command) {
    std::string s;
    const Command* c = find(command);
    if (!c) return s;
    for (size_t i = 0; i < c->usage.size(); ++i) s += std::string(i ? "       xylem " : "usage: xylem ") + c->usage[i] + "\n";
    return s;
}

std::string command_help(const std::string& command) {
    const Command* c = find(command);
    if (!c) return "";
    std::string summary = c->summary;  // a sentence here, a table cell in the overview
    summary[0] = static_cast<char>(std::toupper(static_cast<unsigned char>(summary[0])));
    std::string s = usage_lines(command) + "\n" + summary + ".\n";
    if (!c->flags.empty()) {
        size_t width = 0;
        for (const Flag& f : c->flags) width = std::max(width, std::string(f.name).size() + 1 + std::string(f.arg).size());
        s += "\noptions:\n";
        for (const Flag& f : c->flags) {
            std::string left = std::string(f.name) + (f.arg[0] ? " " : "") + f.arg;
            s.append("  ").append(left).append(width - left.size() + 2, ' ').append(f.text).append("\n");
        }
    }
    if (c->notes[0]) s.append("\n").append(c->notes).append("\n");
    const bool uses_backends = takes_flag(command, "--backend") || takes_flag(command, "--plugin-path");
    if (uses_backends) s.append("\n").append(kEnvironment);
    return s;
}

std::string overview() {
    std::string s = "xylem: a deep-learning framework whose compute backends are plugins.\n\n"
                    "usage: xylem COMMAND [OPTIONS]\n\ncommands:\n";
    for (const Command& c : commands()) {
        std::string name = c.name;
        s.append("  ").append(name).append(10 - name.size(), ' ').append(c.summary).append("\n");
    }
    s.append("\nRun 'xylem help COMMAND' or 'xylem COMMAND --help' for a command's options.\n").append(kEnvironment);
    return s;
}

std::string version_text() {
    std::string v = "xylem " XYLEM_VERSION " (plugin ABI ";
    v.append(std::to_string(XYLEM_ABI_MAJOR)).append(".").append(std::to_string(XYLEM_ABI_MINOR)).append(", ");
    return v.append(XYLEM_BUILD_TYPE[0] ? XYLEM_BUILD_TYPE : "no build type").append(" build)\n");
}

int run_help(const Args& a) {
    if (a.operands.empty()) {
        std::cout << overview();
        return 0;
    }
    std::cout << command_help(a.operands[0]);
    return 0;
}

int run_version(const Args&) {
    std::cout << version_text();
    return 0;
}

}  // namespace xylem::cli
