// The files one training run keeps in its out dir, and the CSV log written as it goes.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "xylem/io/atomic_file.h"

namespace xylem::train {

class RunFolderLock;  // run_folder.h

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
    // Held by the process that writes the folder, for the run's life (prepare_run_dir takes it).
    std::shared_ptr<RunFolderLock> lock;
};

// The file names of a run in `out_dir`, with write = false and the folder untouched.
RunFiles run_file_names(const std::string& out_dir);

// Creates `out_dir`, locks it for this run (an Error naming the pid of another run holding it),
// proves it writable before any training (a temp file written, synced and removed), and removes
// temp files that killed runs left there. Error naming the folder if not.
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
// the same losses in bits per character: written as they come so it can be watched live, never
// through a symbolic link (io::AppendFile). A new run starts the file with its header (an earlier
// run's log was moved aside with its other files, run_folder.h). A resumed run first rewrites the
// log, atomically, to the rows up to its checkpoint's position (keep_until): rows a killed run
// logged after its last checkpoint, and a row cut short by a kill or a full disk, are dropped, so
// the log reads as one uninterrupted run's. A new run's file is touched only when its first row comes.
class RunLog {
public:
    RunLog(std::string path, bool append, bool bits_per_char = false)
        : path_(std::move(path)), append_(append), bits_per_char_(bits_per_char) {}
    // A resumed run's position, epoch `epoch` (1-based) at step `step`: rewrites the log now, rows
    // past the position cut (an Error naming the file when a link or a non-file sits at its name).
    void keep_until(int epoch, int64_t step) {
        keep_epoch_ = epoch;
        keep_step_ = step;
        open();
    }
    void row(const LogRow& r);
    const std::string& path() const { return path_; }
    std::string header() const;

private:
    void open();
    std::string path_;
    bool append_, bits_per_char_;
    int keep_epoch_ = 0;
    int64_t keep_step_ = 0;
    std::unique_ptr<io::AppendFile> out_;
};

}  // namespace xylem::train
