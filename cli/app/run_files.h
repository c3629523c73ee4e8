// The files one training run keeps in its out dir, and the CSV log written as it goes.
#pragma once

#include <fstream>
#include <string>
#include <vector>

namespace xylem::app {

struct RunFiles {
    std::string dir;
    std::string last;     // last.safetensors: resumable, every epoch and every train.checkpoint_every steps
    std::string best;     // best.safetensors: resumable, the epoch with the best train.best_metric
    std::string model;    // model.safetensors: the final parameters only (a PyTorch state_dict)
    std::string metrics;  // metrics.json
    std::string log;      // log.csv
};

// Creates `out_dir`, proves it writable before any training (a temp file written, synced and
// removed), and removes temp files that killed runs left there. Error naming the folder if not.
// `removed` receives the stale temp files deleted.
RunFiles prepare_run_dir(const std::string& out_dir, std::vector<std::string>* removed = nullptr);

// log.csv: one row per progress line, flushed as written so it can be watched live. A resumed run
// appends; a new run moves an earlier run's log aside (log.1.csv, log.2.csv, ...) only when it
// has its first row to write, so a run that fails before then leaves the old log as it was.
class RunLog {
public:
    RunLog(std::string path, bool append) : path_(std::move(path)), append_(append) {}
    void row(int epoch, long long step, double loss, double images_per_second, double elapsed_seconds);
    const std::string& path() const { return path_; }

private:
    void open();
    std::string path_;
    bool append_;
    std::ofstream out_;
};

}  // namespace xylem::app
