// The layer registry: every layer type a config can name, each with its config keys, a strict
// reader of its [[model.layers]] table into its own options, and a factory that builds the Layer.
// A layer type registers itself from its own .cpp file (a LayerRegistration at namespace scope),
// so adding one touches neither the core nor the program that builds models
// (docs/adding-a-layer.md). The registry installs itself as the core's layer-table reader, so
// parse_config checks every layer's keys when the config is loaded, before any training.
// The op list of a layer is its Layer::ops_needed (checked against the backend at model build).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "xylem/config.h"
#include "xylem/error.h"
#include "xylem/layers/layer.h"

namespace xylem {

// The ranges of the built-in layers' integer keys (IntRange: xylem/config_section.h).
namespace ranges {
inline constexpr IntRange features{1, kInt32Max};   // linear and conv2d `out`, reshape entries (or -1)
inline constexpr IntRange kernel{1, kInt32Max};     // conv2d and pool kernel, each side
inline constexpr IntRange stride{1, kInt32Max};
inline constexpr IntRange dilation{1, kInt32Max};
inline constexpr IntRange groups{1, kInt32Max};
inline constexpr IntRange padding{0, kInt32Max / 2};  // the shape rules compute 2 * padding in int32
}  // namespace ranges

// What a factory gets besides its layer's options, the same for every layer of one model.
class LayerContext {
public:
    // `vocabulary`: the size of the data's vocabulary (text data: the distinct bytes of the
    // corpus, or of a checkpoint's), 0 when the data has none (images).
    LayerContext(std::string source, uint64_t run_seed, int64_t vocabulary = 0)
        : source_(std::move(source)), next_seed_(run_seed * 0x9E3779B97F4A7C15ull), vocabulary_(vocabulary) {}
    const std::string& source() const { return source_; }  // the config file, for messages
    // A seed of its own for a layer that draws random numbers while it runs (dropout's masks):
    // the run's seed times the golden ratio for the first such layer of the model, then +1 each.
    uint64_t next_seed() { return next_seed_++; }
    // The data's vocabulary size, for sizes a config leaves to the data (embedding's `vocab`,
    // linear's out = "vocab"); an Error naming `what` when the data has none.
    int64_t vocabulary(const std::string& what) const {
        if (vocabulary_ <= 0)
            throw Error(source_ + ": " + what + " takes its size from the data's vocabulary, and only text data " +
                        "([data] text) has one; give the size in the config");
        return vocabulary_;
    }

private:
    std::string source_;
    uint64_t next_seed_;
    int64_t vocabulary_;
};

// One layer type, type-erased (register through LayerRegistration<Options> below).
struct LayerType {
    std::string name;               // the config's `type`
    std::vector<std::string> keys;  // every key of its table besides `type`; any other is refused
    // Reads the table's keys (allow() has already run) into options: required keys, ranges and
    // value rules, each error naming its key through the section.
    std::function<std::shared_ptr<const LayerOptions>(const ConfigSection&)> parse;
    std::function<std::unique_ptr<Layer>(const LayerOptions&, LayerContext&)> build;
};

// Adds a type; an Error if its name is taken or a function is missing.
void register_layer_type(LayerType type);
const LayerType* find_layer_type(const std::string& name);  // nullptr if unknown
std::vector<std::string> layer_type_names();                // sorted

// One [[model.layers]] table to its spec: `type` is required and must be registered, every other
// key must be one of the type's keys, then the type's reader runs. parse_config calls this.
LayerSpec parse_layer(const ConfigSection& table);
// The layer a spec describes; an Error naming the type if it is unknown or has no options.
std::unique_ptr<Layer> build_layer(const LayerSpec& spec, LayerContext& context);

// The options a layer type's reader returned, typed.
template <class Options> struct TypedLayerOptions : LayerOptions {
    explicit TypedLayerOptions(Options o) : value(std::move(o)) {}
    Options value;
};

// A spec's options as `Options`: an Error if the spec's type parses into another options type.
template <class Options> const Options& layer_options(const LayerSpec& spec) {
    if (!spec.options) throw Error("layer type '" + spec.type + "' has no options (it was not parsed from a config)");
    const auto* typed = dynamic_cast<const TypedLayerOptions<Options>*>(spec.options.get());
    if (!typed) throw Error("layer type '" + spec.type + "': its options are not of the type asked for");
    return typed->value;
}

// Registers a layer type whose options are a plain struct. At namespace scope in the layer's file:
//   const LayerRegistration<LinearOptions> kLinear{"linear", {"out", "bias"}, parse, build};
// A type with no options uses NoLayerOptions and no parser.
struct NoLayerOptions {};

template <class Options> struct LayerRegistration {
    using Parse = std::function<Options(const ConfigSection&)>;
    using Build = std::function<std::unique_ptr<Layer>(const Options&, LayerContext&)>;

    LayerRegistration(std::string name, std::vector<std::string> keys, Parse parse, Build build) {
        LayerType t;
        t.name = std::move(name);
        t.keys = std::move(keys);
        t.parse = [parse = std::move(parse)](const ConfigSection& s) -> std::shared_ptr<const LayerOptions> {
            return std::make_shared<TypedLayerOptions<Options>>(parse ? parse(s) : Options{});
        };
        if (build)
            t.build = [build = std::move(build), name = t.name](const LayerOptions& o, LayerContext& c) {
                const auto* typed = dynamic_cast<const TypedLayerOptions<Options>*>(&o);
                if (!typed) throw Error("layer type '" + name + "': its options are not of its own type");
                return build(typed->value, c);
            };
        register_layer_type(std::move(t));
    }
};

}  // namespace xylem
