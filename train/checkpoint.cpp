// Checkpoint save/load over the safetensors reader and writer.
#include "xylem/train/checkpoint.h"

#include <cmath>
#include <cstring>
#include <limits>

#include "xylem/error.h"
#include "xylem/io/safetensors.h"
#include "xylem/train/run_report.h"

namespace xylem::train {
namespace {

const std::string kStatePrefix = "xylem.", kSolverPrefix = "xylem.solver.", kOrderName = "xylem.train.order",
                  kCarriedPrefix = "xylem.carried.", kStateKey = "xylem.training_state";
constexpr int kStateVersion = 1;

bool is_training_state(const std::string& name) { return name.rfind(kStatePrefix, 0) == 0; }

}  // namespace

void save_checkpoint(const std::string& path, Net& model, const std::map<std::string, std::string>& metadata) {
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

// Checks every model tensor in `file` against the model, then copies them in.
void apply_model_tensors(const std::string& path, const io::Safetensors& file, Net& model) {
    std::vector<Param*> params = model.state();
    for (Param* p : params) {
        auto it = file.tensors.find(p->name);
        if (it == file.tensors.end()) throw Error(path + ": checkpoint has no tensor '" + p->name + "' that the model needs");
        if (it->second.dtype != "F32")
            throw Error(path + ": tensor '" + p->name + "' has dtype " + it->second.dtype + ", expected F32");
        if (it->second.shape != p->value.shape())
            throw CheckpointShapeError(path + ": tensor '" + p->name + "' has shape " + to_string(it->second.shape) +
                                       ", the model expects " + to_string(p->value.shape()));
    }
    if (file.tensors.size() != params.size()) {
        for (const auto& [name, t] : file.tensors) {
            if (is_training_state(name)) continue;
            bool used = false;
            for (Param* p : params) used |= p->name == name;
            if (!used) throw Error(path + ": checkpoint tensor '" + name + "' does not belong to this model");
        }
    }
    check_finite(path, file, params);
    const std::string problem = model.buffer_value_problem([&](const Param& p) {
        const std::vector<uint8_t>& bytes = file.tensors.at(p.name).data;
        std::vector<float> v(bytes.size() / sizeof(float));
        std::memcpy(v.data(), bytes.data(), v.size() * sizeof(float));  // the data need not be aligned
        return v;
    });
    if (!problem.empty()) throw Error(path + ": " + problem);
    for (Param* p : params)  // everything validated: now copy
        std::memcpy(p->value.host_write<float>(), file.tensors.at(p->name).data.data(), p->value.bytes());
}

}  // namespace

void load_checkpoint(const std::string& path, Net& model) { apply_model_tensors(path, io::read_safetensors(path), model); }

std::map<std::string, SavedTensor> carried_snapshot(Net& model) {
    std::map<std::string, SavedTensor> out;
    for (const auto& [name, t] : model.carried_state()) {
        const float* v = t->host_read<float>();
        out[name] = SavedTensor{t->shape(), std::vector<float>(v, v + t->numel())};
    }
    return out;
}

void save_training_checkpoint(const std::string& path, Net& model, Solver& solver, Device& dev,
                              const TrainingState& st, const std::map<std::string, std::string>& metadata) {
    std::vector<Param*> params = model.params();
    std::vector<io::TensorView> views;
    for (Param* p : model.state())
        views.push_back({p->name, "F32", p->value.shape(), p->value.host_read<float>(), p->value.bytes()});
    for (const Solver::StateSlot& slot : solver.state_slots(dev, params))
        for (size_t i = 0; i < params.size(); ++i) {
            const Tensor& t = (*slot.tensors)[i];
            views.push_back({kSolverPrefix + slot.name + "." + params[i]->name, "F32", t.shape(), t.host_read<float>(), t.bytes()});
        }
    views.push_back({kOrderName, "I32", {static_cast<int64_t>(st.order.size())}, st.order.data(),
                     st.order.size() * sizeof(int32_t)});
    for (const auto& [name, t] : st.carried)
        views.push_back({kCarriedPrefix + name, "F32", t.shape, t.values.data(), t.values.size() * sizeof(float)});

    nlohmann::json j;
    j["version"] = kStateVersion;
    j["epoch"] = st.epoch;
    j["step"] = st.step;
    j["global_step"] = st.global_step;
    j["shuffle_rng"] = st.shuffle_rng;
    j["loss_sum"] = st.loss_sum;
    j["seen"] = st.seen;
    j["seen_at_print"] = st.seen_at_print;
    j["loss_at_print"] = st.loss_at_print;
    j["epochs"] = st.epochs;
    j["best_metric"] = st.best_metric;
    if (st.has_best) j["best_value"] = st.best_value;
    j["config_text"] = st.config_text;
    j["config_source"] = st.config_source;
    j["overrides"] = st.overrides;
    j["solver"] = {{"kind", solver.kind()}, {"steps", solver.steps()}};
    nlohmann::json counters = nlohmann::json::object();
    for (auto& [name, value] : model.counters()) counters[name] = *value;
    j["counters"] = counters;
    std::map<std::string, std::string> meta = metadata;
    meta[kStateKey] = j.dump();
    io::write_safetensors(path, views, meta);
}

namespace {

TrainingState read_training_state(const std::string& path, const io::Safetensors& file) {
    auto meta = file.metadata.find(kStateKey);
    if (meta == file.metadata.end())
        throw Error(path + ": not a training checkpoint (no '" + kStateKey + "' metadata): it holds a model only and "
                    "cannot be resumed");
    TrainingState st;
    try {
        const nlohmann::json j = nlohmann::json::parse(meta->second);
        if (!j.is_object()) throw Error("not a JSON object");
        // Whole numbers only (nlohmann casts a float such as 1e30 to int unchecked, and a negative
        // integer to uint64_t), within range for the field.
        auto whole = [](const nlohmann::json& v, const std::string& key, bool non_negative) -> const nlohmann::json& {
            if (!v.is_number_integer() || (non_negative && !v.is_number_unsigned()))
                throw Error("'" + key + "' is " + v.dump() + ", not " + (non_negative ? "a non-negative" : "an") +
                            " integer");
            return v;
        };
        if (whole(j.at("version"), "version", false).get<int64_t>() != kStateVersion)
            throw Error("training state version " + j.at("version").dump() + ", this xylem reads version " +
                        std::to_string(kStateVersion));
        if (whole(j.at("epoch"), "epoch", true).get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int>::max()))
            throw Error("position out of range");
        st.epoch = j.at("epoch").get<int>();
        st.step = whole(j.at("step"), "step", true).get<int64_t>();
        st.global_step = whole(j.at("global_step"), "global_step", true).get<uint64_t>();
        st.shuffle_rng = j.at("shuffle_rng").get<std::string>();
        st.loss_sum = j.at("loss_sum").get<float>();
        st.seen = whole(j.at("seen"), "seen", true).get<int64_t>();
        st.seen_at_print = whole(j.at("seen_at_print"), "seen_at_print", true).get<int64_t>();
        st.loss_at_print = j.at("loss_at_print").get<double>();
        st.epochs = j.at("epochs");
        st.best_metric = j.at("best_metric").get<std::string>();
        st.has_best = j.contains("best_value");
        if (st.has_best) st.best_value = j.at("best_value").get<double>();
        st.config_text = j.at("config_text").get<std::string>();
        st.config_source = j.at("config_source").get<std::string>();
        st.overrides = j.at("overrides");
        if (!st.epochs.is_array() || !st.overrides.is_object()) throw Error("bad field types");
        for (const nlohmann::json& e : st.epochs) epoch_metrics_from_json(e);  // each a complete record
        // What load_training_checkpoint reads besides: the solver and the layers' counters.
        const nlohmann::json& solver = j.at("solver");
        if (!solver.is_object() || !solver.at("kind").is_string()) throw Error("'solver' has no kind");
        whole(solver.at("steps"), "solver.steps", true);
        if (!j.at("counters").is_object()) throw Error("'counters' is not a JSON object");
        for (const auto& [name, value] : j.at("counters").items()) whole(value, "counters." + name, true);
        if (st.epoch < 1 || st.step < 0 || st.seen < 0 || st.seen_at_print < 0 || st.seen_at_print > st.seen ||
            st.global_step > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) ||
            st.global_step < static_cast<uint64_t>(st.step))  // max_steps is an int64; the epoch's steps count too
            throw Error("position out of range");
        if (auto run = file.metadata.find(kRunRecordKey); run != file.metadata.end()) {
            st.run_record = nlohmann::json::parse(run->second);
            if (!st.run_record.is_object()) throw Error(std::string("'") + kRunRecordKey + "' is not a JSON object");
        }
    } catch (const Error& e) {
        throw Error(path + ": corrupt training state: " + e.what());
    } catch (const std::exception& e) {  // nlohmann's parse and type errors
        throw Error(path + ": corrupt training state: " + e.what());
    }
    st.checksummed = file.checksummed;
    auto order = file.tensors.find(kOrderName);
    if (order == file.tensors.end() || order->second.dtype != "I32" || order->second.shape.size() != 1)
        throw Error(path + ": corrupt training state: tensor '" + kOrderName + "' missing or not a 1-d I32 tensor");
    st.order.resize(static_cast<size_t>(order->second.shape[0]));
    if (!st.order.empty()) std::memcpy(st.order.data(), order->second.data.data(), order->second.data.size());
    for (const auto& [name, t] : file.tensors) {
        if (name.rfind(kCarriedPrefix, 0) != 0) continue;
        if (t.dtype != "F32")
            throw Error(path + ": corrupt training state: carried state tensor '" + name + "' is " + t.dtype + ", not F32");
        SavedTensor& s = st.carried[name.substr(kCarriedPrefix.size())];
        s.shape = t.shape;
        s.values.resize(t.data.size() / sizeof(float));
        if (!s.values.empty()) std::memcpy(s.values.data(), t.data.data(), s.values.size() * sizeof(float));
    }
    return st;
}

}  // namespace

TrainingState read_training_state(const std::string& path) { return read_training_state(path, io::read_safetensors(path)); }

TrainingState load_training_checkpoint(const std::string& path, Net& model, Solver& solver, Device& dev) {
    const io::Safetensors file = io::read_safetensors(path);
    TrainingState st = read_training_state(path, file);
    const nlohmann::json j = nlohmann::json::parse(file.metadata.at(kStateKey));
    // Validate everything before changing anything.
    const std::string kind = j.at("solver").at("kind").get<std::string>();
    if (kind != solver.kind())
        throw Error(path + ": the run was trained with solver '" + kind + "', the config now says '" + solver.kind() + "'");
    std::vector<Param*> params = model.params();
    std::vector<Solver::StateSlot> slots = solver.state_slots(dev, params);
    for (const Solver::StateSlot& slot : slots)
        for (size_t i = 0; i < params.size(); ++i) {
            const std::string name = kSolverPrefix + slot.name + "." + params[i]->name;
            auto it = file.tensors.find(name);
            if (it == file.tensors.end()) throw Error(path + ": training checkpoint has no solver tensor '" + name + "'");
            if (it->second.dtype != "F32" || it->second.shape != params[i]->value.shape())
                throw Error(path + ": solver tensor '" + name + "' is " + it->second.dtype + " " +
                            to_string(it->second.shape) + ", expected F32 " + to_string(params[i]->value.shape()));
        }
    const nlohmann::json& counters = j.at("counters");
    for (auto& [name, value] : model.counters())
        if (!counters.contains(name) || !counters.at(name).is_number_unsigned())
            throw Error(path + ": training checkpoint has no counter '" + name + "' that the model needs");
    try {  // checks the names and shapes; installs them for the next forward (the trainer re-installs after its reset)
        model.restore_carried_state(st.carried);
    } catch (const Error& e) {
        throw Error(path + ": " + e.what());
    }
    apply_model_tensors(path, file, model);  // validates the model's tensors before writing them
    for (const Solver::StateSlot& slot : slots)
        for (size_t i = 0; i < params.size(); ++i) {
            Tensor& t = (*slot.tensors)[i];
            std::memcpy(t.host_write<float>(), file.tensors.at(kSolverPrefix + slot.name + "." + params[i]->name).data.data(),
                        t.bytes());
            t.upload(dev);
        }
    solver.set_steps(j.at("solver").at("steps").get<uint64_t>());
    for (auto& [name, value] : model.counters()) *value = counters.at(name).get<uint64_t>();
    return st;
}

}  // namespace xylem::train
