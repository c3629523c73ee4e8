// Checkpoints as safetensors. A model checkpoint holds the parameters and buffers named like a
// PyTorch nn.Sequential state_dict. A training checkpoint is the same file plus what a resumed run
// needs to continue exactly: solver state as extra tensors ("xylem.solver.<slot>.<param>", e.g.
// "xylem.solver.momentum_buffer.1.weight"), the epoch's shuffled order ("xylem.train.order"),
// mid-epoch the recurrent layers' carried state ("xylem.carried.<layer>.<name>", e.g.
// "xylem.carried.1.h_l0"), and the rest (position, RNG, counters, metrics so far, the config) as JSON in the metadata
// key "xylem.training_state". Other tools read it as a state_dict with a few extra keys.
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "xylem/error.h"
#include "xylem/layers/net.h"
#include "xylem/solvers/solver.h"

namespace xylem::train {

// Written atomically: a crash mid-write leaves the previous checkpoint in place.
void save_checkpoint(const std::string& path, Net& model, const std::map<std::string, std::string>& metadata);
// Validates names, dtypes and shapes against the model before changing any parameter. Training
// state tensors ("xylem.*") are ignored, so a training checkpoint loads as a model checkpoint.
void load_checkpoint(const std::string& path, Net& model);
// What load_checkpoint throws when a tensor's shape differs from the model's: the one checkpoint
// error that a model built for other input shapes causes (eval and predict name the images then);
// a damaged file, a missing or extra tensor, a wrong dtype or NaN weights throw plain Error.
class CheckpointShapeError : public Error {
public:
    using Error::Error;
};

// Where a run stands, and everything besides tensors that resuming it needs.
struct TrainingState {
    int epoch = 1;             // the epoch to run next (1-based)
    int64_t step = 0;          // its next step; > 0 means the epoch's order is already shuffled
    uint64_t global_step = 0;  // steps done over the whole run
    std::string shuffle_rng;   // the shuffle generator's state (std::mt19937_64 text form)
    std::vector<int32_t> order;  // the training order in force (this epoch's once step > 0)
    // The epoch so far: loss sum (as the device accumulated it), samples seen, and the loss
    // window of the last progress line.
    float loss_sum = 0;
    int64_t seen = 0, seen_at_print = 0;
    double loss_at_print = 0;
    nlohmann::json epochs = nlohmann::json::array();  // metrics of the finished epochs
    std::string best_metric;  // what "best" is judged by, and its best value so far
    double best_value = 0;
    bool has_best = false;
    std::string config_text, config_source;   // the run's config, as first given
    nlohmann::json overrides = nlohmann::json::object();  // command-line overrides it ran with
    // The recurrent layers' state at this position (Net::carried_state, host copies): a run
    // resumed mid-epoch continues its text streams from it. Empty at an epoch's start.
    std::map<std::string, SavedTensor> carried;
    // The run that wrote it (metadata kRunRecordKey: run_folder.h's RunRecord as JSON), null in a
    // checkpoint of an older xylem; and whether its tensors carried checksums (all verified on reading).
    nlohmann::json run_record;
    bool checksummed = false;
};

// The safetensors metadata key of a checkpoint's run record (id, config and data fingerprints).
inline constexpr const char* kRunRecordKey = "xylem.run";

// Host copies of the model's carried state (reads device tensors: call it between steps).
std::map<std::string, SavedTensor> carried_snapshot(Net& model);

// Saves the model, the solver's state and `state`. Reads device tensors (a sync): call it
// between steps.
void save_training_checkpoint(const std::string& path, Net& model, Solver& solver, Device& dev,
                              const TrainingState& state, const std::map<std::string, std::string>& metadata);
// Reads a training checkpoint's state without touching any model (to learn its config first).
TrainingState read_training_state(const std::string& path);
// Restores the model, the solver and the layers' counters from a training checkpoint written
// for the same model and solver; everything is validated before anything changes.
TrainingState load_training_checkpoint(const std::string& path, Net& model, Solver& solver, Device& dev);

}  // namespace xylem::train
