// A run folder belongs to one run: a lock held for the run's life, and the folder's record (run.json)
// that every checkpoint of the run repeats, with the fingerprints of its data.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "xylem/config.h"

namespace xylem::train {

// An exclusive lock on DIR/.xylem-lock, held while this object lives: flock on the open file, which
// the kernel drops when the process ends however it ends (kill -9 leaves no stale lock). The file
// holds the holder's pid, so a second run in the folder is refused naming it.
class RunFolderLock {
public:
    explicit RunFolderLock(const std::string& dir);  // Error naming the folder and the holder's pid
    ~RunFolderLock();
    RunFolderLock(const RunFolderLock&) = delete;
    RunFolderLock& operator=(const RunFolderLock&) = delete;

private:
    int fd_ = -1;
};

// Who a run is: written to DIR/run.json when it starts and into every checkpoint it writes
// (safetensors metadata "xylem.run"), so that a resume can tell its own checkpoint from another's.
struct RunRecord {
    std::string id;       // random, made when the run starts
    std::string config;   // checksum of the config text the run started with
    std::string started;  // UTC, ISO 8601
    nlohmann::json data = nlohmann::json::object();  // every data file the run reads -> checksum of its bytes

    nlohmann::json to_json() const;
    // An Error naming `where` when a field is missing or of the wrong type.
    static RunRecord from_json(const nlohmann::json& j, const std::string& where);
    static RunRecord fresh(const std::string& config_text, nlohmann::json data);
};

// The run's data files (the four IDX files of data.dir, or data.text's files) and the checksum of
// each one's bytes (io::hash_file, XXH64).
nlohmann::json data_fingerprints(const RunConfig& config);
// "" when `now` fingerprints the data `was` recorded, else the first file that changed, was added or is gone.
std::string changed_data(const nlohmann::json& was, const nlohmann::json& now);

// DIR/run.json, or a null record when the folder has none (a folder of an older xylem).
std::optional<RunRecord> read_folder_record(const std::string& dir);
void write_folder_record(const std::string& dir, const RunRecord& record);

// A new run into a folder that holds another run's files moves them (run.json, the checkpoints,
// metrics.json, log.csv, curves.png, predictions.csv) into DIR/earlier.N, the first free N, and
// returns that folder ("" if there was nothing to move). The earlier run stays resumable there.
std::string move_earlier_run_aside(const std::string& dir);

// After a run that failed before writing anything (a config, data or model error found while
// preparing), removes the out dir it created: a folder holding nothing but the lock file, which
// is taken again first (a folder another run holds, or one with any other entry, stays). A failed
// `xylem train --out NEW` then leaves no empty folder behind.
void remove_unused_run_folder(const std::string& dir);

// The folders that making `dir` (std::filesystem::create_directories) will create, in the order it
// creates them: each missing component of the path as written, so `--out keep/new/../run` lists
// keep/new and keep/new/../run. A symbolic link, dangling or not, is never listed (never removed).
std::vector<std::string> folders_to_make(const std::string& dir);
// After a run that failed before writing anything: removes the folders folders_to_make listed
// before it started, last first, each only while empty (the run folder itself through
// remove_unused_run_folder). Nothing that existed before the run is touched.
void remove_made_folders(const std::vector<std::string>& made);

}  // namespace xylem::train
