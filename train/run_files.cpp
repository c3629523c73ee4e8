// Out dir preparation and the live CSV log.
#include "xylem/train/run_files.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <sstream>

#include "xylem/error.h"
#include "xylem/io/atomic_file.h"
#include "xylem/train/run_folder.h"

namespace xylem::train {
namespace fs = std::filesystem;

double bits_per_char(double nats) { return nats / std::log(2.0); }

RunFiles prepare_run_dir(const std::string& out_dir, std::vector<std::string>* removed) {
    std::error_code ec;
    // A folder made here gets the user's umask but never others' write permission (as files do).
    if (fs::create_directories(out_dir, ec)) fs::permissions(out_dir, fs::perms::others_write, fs::perm_options::remove, ec);
    if (ec) {
        // A dangling symbolic link on the way reads as "File exists": name it and where it points.
        std::error_code ec2;
        fs::path p;
        for (const fs::path& part : fs::path(out_dir)) {
            p /= part;
            if (fs::is_symlink(p, ec2) && !fs::exists(p, ec2))
                throw Error("out dir " + out_dir + ": " + p.string() + " is a symbolic link to " +
                            fs::read_symlink(p, ec2).string() + ", which does not exist");
        }
        throw Error("out dir " + out_dir + ": cannot create it: " + ec.message());
    }
    if (!fs::is_directory(out_dir, ec)) throw Error("out dir " + out_dir + ": exists and is not a folder");
    auto lock = std::make_shared<RunFolderLock>(out_dir);  // before anything in the folder changes
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
    f.lock = std::move(lock);
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

std::string RunLog::header() const {
    return std::string("epoch,step,loss,images_per_second,elapsed_seconds,lr,val_loss,val_accuracy,kind") +
           (bits_per_char_ ? ",loss_bpc,val_loss_bpc" : "") + "\n";
}

namespace {

// Whether a log row comes before a resumed run's position (epoch, step): the rows a run that was
// never stopped has logged by then. A row that is not whole (a kill mid-write, a full disk) is not.
bool row_is_kept(const std::string& line, size_t columns, int epoch, int64_t step) {
    size_t commas = 0;
    for (char ch : line) commas += ch == ',';
    if (commas + 1 != columns) return false;
    int e = 0;
    long long s = 0;
    char comma = 0;
    if (std::sscanf(line.c_str(), "%d,%lld%c", &e, &s, &comma) != 3 || comma != ',') return false;
    return e < epoch || (e == epoch && s <= step);
}

}  // namespace

void RunLog::open() {
    std::string text = header();
    if (append_) {
        // Resuming: the rows up to the checkpoint, atomically, then append (a link at path_ is refused).
        std::error_code ec;
        if (fs::exists(fs::symlink_status(path_, ec))) {
            std::istringstream old(io::read_own_file(path_));
            std::string line;
            const size_t columns = static_cast<size_t>(std::count(text.begin(), text.end(), ',')) + 1;
            bool first = true;
            while (std::getline(old, line)) {
                const bool whole = !old.eof();  // the last line without its newline was cut short
                if (first) {
                    first = false;
                    if (line + "\n" == text) continue;  // the header; an older or foreign header is replaced
                }
                if (whole && row_is_kept(line, columns, keep_epoch_, keep_step_)) text += line + "\n";
            }
        }
    }
    io::write_file_atomic(path_, text);
    out_ = std::make_unique<io::AppendFile>(path_);
}

void RunLog::row(const LogRow& r) {
    if (!out_) open();
    std::ostringstream line;
    line << r.epoch << "," << r.step << "," << r.loss << "," << r.images_per_second << "," << r.elapsed_seconds << ","
         << r.lr << ",";
    if (r.has_validation) line << r.val_loss << "," << r.val_accuracy;
    else line << ",";
    line << "," << r.kind;
    if (bits_per_char_) {
        line << "," << bits_per_char(r.loss) << ",";
        if (r.has_validation) line << bits_per_char(r.val_loss);
    }
    line << "\n";
    try {
        out_->write(line.str());
    } catch (const Error& e) {
        throw Error(std::string(e.what()) + " (the training log; disk full?)");
    }
}

}  // namespace xylem::train
