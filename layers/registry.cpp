// The layer registry and the core's [[model.layers]] reader that it installs.
#include "xylem/layers/registry.h"

#include <map>
#include <mutex>

namespace xylem {
namespace {

struct Registry {
    std::mutex mutex;
    std::map<std::string, LayerType> types;  // std::map: entries never move, find() hands out pointers
};

// Built on first use: the layer files register during static initialisation, in link order.
Registry& registry() {
    static Registry r;
    return r;
}

}  // namespace

void register_layer_type(LayerType type) {
    if (type.name.empty() || !type.parse || !type.build)
        throw Error("layer type '" + type.name + "' needs a name, a parser and a factory to be registered");
    Registry& r = registry();
    {
        std::lock_guard<std::mutex> lock(r.mutex);
        const std::string name = type.name;
        if (!r.types.emplace(name, std::move(type)).second)
            throw Error("layer type '" + name + "' is registered twice");
    }
    // From now on parse_config reads layers through this registry.
    set_layer_table_parser(&parse_layer);
}

const LayerType* find_layer_type(const std::string& name) {
    Registry& r = registry();
    std::lock_guard<std::mutex> lock(r.mutex);
    const auto it = r.types.find(name);
    return it == r.types.end() ? nullptr : &it->second;
}

std::vector<std::string> layer_type_names() {
    Registry& r = registry();
    std::lock_guard<std::mutex> lock(r.mutex);
    std::vector<std::string> names;
    for (const auto& [name, type] : r.types) names.push_back(name);
    return names;
}

LayerSpec parse_layer(const ConfigSection& s) {
    LayerSpec l;
    if (!s.has("type")) s.fail("type", "is required");
    s.get("type", l.type);
    const LayerType* type = find_layer_type(l.type);
    if (!type) {
        std::string known;
        for (const std::string& n : layer_type_names()) known += (known.empty() ? "" : ", ") + n;
        s.fail("type", "names an unknown layer type '" + l.type + "' (known: " + known + ")");
    }
    std::vector<std::string> keys{"type"};
    keys.insert(keys.end(), layer_wiring_keys().begin(), layer_wiring_keys().end());  // read by parse_config
    keys.insert(keys.end(), type->keys.begin(), type->keys.end());
    s.allow(keys);
    l.options = type->parse(s);
    return l;
}

std::unique_ptr<Layer> build_layer(const LayerSpec& spec, LayerContext& context) {
    const LayerType* type = find_layer_type(spec.type);
    if (!type) throw Error(context.source() + ": unknown layer type '" + spec.type + "'");
    if (!spec.options)
        throw Error(context.source() + ": layer type '" + spec.type + "' has no options (it was not parsed from a config)");
    return type->build(*spec.options, context);
}

}  // namespace xylem
