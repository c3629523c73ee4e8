// The files one training run keeps in its out dir, and the CSV log written as it goes.
#pragma once

#include <fstream>
#include <string>
#include <vector>

namespace xylem::train {

struct RunFiles {
    std::string dir;
    std::string last;     // last.safetensors: resumable, every epoch and every train.checkpoint_every steps
    std::string best;     // best.safetensors: resumable, the epoch with the best train.best_metric
    std::string model;    // model.safetensors: the final parameters only (a PyTorch state_dict)
    std::string metrics;  // metrics.json
    std::string log;      // log.csv
    // False on the ranks other than 0 of a distributed run: they write nothing (rank 0 writes the
    // checkpoints, the log and the metrics for the whole run).
    bool write = true;
};

// The file names of a run in `out_dir`, with write = false and the folder untouched.
RunFiles run_file_names(const std::string& out_dir);

// Creates `out_dir`, proves it writable before any training (a temp file written, synced and
// removed), and removes temp files that killed runs left there. Error naming the folder if not.
// `removed` receives the stale temp files deleted.
RunFiles prepare_run_dir(const std::string& out_dir, std::vector<std::string>* removed = nullptr);

// A loss in nats (per character) as bits per character: nats / ln 2.
double bits_per_char(double nats);

// One row of log.csv. "interval" rows come every train.print_every steps (the loss of those
// steps, img/s and time since the epoch began); an "epoch" row closes each epoch (its mean train
// loss, img/s and time, and the validation scores).
struct LogRow {
    int epoch = 0;
    long long step = 0;  // steps into the epoch
    double loss = 0, images_per_second = 0, elapsed_seconds = 0, lr = 0;
    bool has_validation = false;
    double val_loss = 0, val_accuracy = 0;
    const char* kind = "interval";
};

// log.csv, columns epoch,step,loss,images_per_second,elapsed_seconds,lr,val_loss,val_accuracy,kind
// and, for a text run (`bits_per_char`: its losses are nats per character), loss_bpc,val_loss_bpc,
// the same losses in bits per character: flushed as written so it can be watched live. A resumed
// run appends; a new run moves an earlier run's log aside (log.1.csv, log.2.csv, ...) only when it
// has its first row to write, so a run that fails before then leaves the old log as it was.
class RunLog {
public:
    RunLog(std::string path, bool append, bool bits_per_char = false)
        : path_(std::move(path)), append_(append), bits_per_char_(bits_per_char) {}
    void row(const LogRow& r);
    const std::string& path() const { return path_; }

private:
    void open();
    std::string path_;
    bool append_, bits_per_char_;
    std::ofstream out_;
};

}  // namespace xylem::train
