// Out dir preparation and the live CSV log.
#include "xylem/train/run_files.h"

#include <cmath>
#include <filesystem>

#include "xylem/error.h"
#include "xylem/io/atomic_file.h"

namespace xylem::train {
namespace fs = std::filesystem;

double bits_per_char(double nats) { return nats / std::log(2.0); }

RunFiles prepare_run_dir(const std::string& out_dir, std::vector<std::string>* removed) {
    std::error_code ec;
    fs::create_directories(out_dir, ec);
    if (ec) throw Error("out dir " + out_dir + ": cannot create it: " + ec.message());
    if (!fs::is_directory(out_dir, ec)) throw Error("out dir " + out_dir + ": exists and is not a folder");
    std::vector<std::string> stale = io::remove_stale_temp_files(out_dir);
    if (removed) *removed = std::move(stale);
    try {
        // The same create and write a checkpoint needs, without committing: proves the folder takes
        // files now rather than after an epoch of training. The temp file is removed on scope exit.
        io::AtomicFile probe((fs::path(out_dir) / ".xylem-write-check").string());
        probe.write("ok", 2);
    } catch (const Error& e) {
        throw Error("out dir " + out_dir + " is not writable: " + e.what());
    }
    RunFiles f = run_file_names(out_dir);
    f.write = true;
    return f;
}

RunFiles run_file_names(const std::string& out_dir) {
    RunFiles f;
    f.dir = out_dir;
    const fs::path d(out_dir);
    f.last = (d / "last.safetensors").string();
    f.best = (d / "best.safetensors").string();
    f.model = (d / "model.safetensors").string();
    f.metrics = (d / "metrics.json").string();
    f.log = (d / "log.csv").string();
    f.write = false;
    return f;
}

void RunLog::open() {
    std::error_code ec;
    const bool has_rows = fs::exists(path_, ec) && fs::file_size(path_, ec) > 0;
    if (has_rows && !append_) {
        // Keep the earlier run's log: the first free log.N.csv beside it.
        const fs::path p(path_);
        for (int n = 1;; ++n) {
            fs::path aside = p.parent_path() / (p.stem().string() + "." + std::to_string(n) + p.extension().string());
            if (fs::exists(aside, ec)) continue;
            fs::rename(p, aside, ec);
            if (ec) throw Error(path_ + ": cannot move the earlier run's log aside to " + aside.string() + ": " + ec.message());
            break;
        }
    }
    const bool header = !(has_rows && append_);
    out_.open(path_, std::ios::app);
    if (!out_) throw Error(path_ + ": cannot write the training log");
    if (header)
        out_ << "epoch,step,loss,images_per_second,elapsed_seconds,lr,val_loss,val_accuracy,kind"
             << (bits_per_char_ ? ",loss_bpc,val_loss_bpc" : "") << "\n";
}

void RunLog::row(const LogRow& r) {
    if (!out_.is_open()) open();
    out_ << r.epoch << "," << r.step << "," << r.loss << "," << r.images_per_second << "," << r.elapsed_seconds << ","
         << r.lr << ",";
    if (r.has_validation) out_ << r.val_loss << "," << r.val_accuracy;
    else out_ << ",";
    out_ << "," << r.kind;
    if (bits_per_char_) {
        out_ << "," << bits_per_char(r.loss) << ",";
        if (r.has_validation) out_ << bits_per_char(r.val_loss);
    }
    out_ << "\n" << std::flush;
    if (!out_) throw Error(path_ + ": cannot write the training log (disk full?)");
}

}  // namespace xylem::train
