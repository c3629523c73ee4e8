// The run folder's lock, its record (run.json) and moving an earlier run's files aside.
#include "xylem/train/run_folder.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <ctime>
#include <filesystem>
#include <random>
#include <system_error>

#include "xylem/error.h"
#include "xylem/io/atomic_file.h"
#include "xylem/io/checksum.h"
#include "xylem/io/idx.h"
#include "xylem/train/text_data.h"

namespace xylem::train {
namespace fs = std::filesystem;
namespace {

const char* kLockName = ".xylem-lock";
const char* kRecordName = "run.json";
// What a run writes into its folder and a new run moves aside with it.
const char* kRunFiles[] = {"run.json", "last.safetensors", "best.safetensors", "model.safetensors",
                           "metrics.json", "log.csv", "curves.png", "predictions.csv"};

std::string errno_text(int err) { return std::generic_category().message(err); }

}  // namespace

RunFolderLock::RunFolderLock(const std::string& dir) {
    const std::string path = (fs::path(dir) / kLockName).string();
    fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, io::kFileMode);
    if (fd_ < 0) {
        const int err = errno;
        throw Error("out dir " + dir + ": cannot open its lock file " + path + ": " +
                    (err == ELOOP ? std::string("it is a symbolic link") : errno_text(err)));
    }
    if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
        const int err = errno;
        char pid[32] = {0};
        const ssize_t n = ::pread(fd_, pid, sizeof pid - 1, 0);
        ::close(fd_);
        fd_ = -1;
        if (err != EWOULDBLOCK) throw Error("out dir " + dir + ": cannot lock " + path + ": " + errno_text(err));
        std::string holder = n > 0 ? std::string(pid, static_cast<size_t>(n)) : std::string();
        while (!holder.empty() && (holder.back() == '\n' || holder.back() == ' ')) holder.pop_back();
        throw Error("out dir " + dir + " is in use by another xylem run (" +
                    (holder.empty() ? std::string("pid unknown") : "pid " + holder) +
                    "): two runs in one folder would overwrite each other's checkpoints and log; wait for it to end, "
                    "or pass another --out");
    }
    const std::string me = std::to_string(::getpid()) + "\n";
    if (::ftruncate(fd_, 0) != 0 || ::pwrite(fd_, me.data(), me.size(), 0) != static_cast<ssize_t>(me.size())) {
        // The lock holds without the pid; a refused run then says "pid unknown".
    }
}

RunFolderLock::~RunFolderLock() {
    if (fd_ >= 0) ::close(fd_);  // closing the last descriptor releases the flock
}

void remove_unused_run_folder(const std::string& dir) {
    std::error_code ec;
    for (const auto& entry : fs::directory_iterator(dir, ec))
        if (entry.path().filename() != kLockName) return;
    if (ec) return;
    const std::string lock = (fs::path(dir) / kLockName).string();
    const int fd = ::open(lock.c_str(), O_RDWR | O_CLOEXEC | O_NOFOLLOW);
    if (fd >= 0 && ::flock(fd, LOCK_EX | LOCK_NB) != 0) {
        ::close(fd);  // another run holds it now: its folder
        return;
    }
    // Unlinked while held: no other run can be holding this lock file.
    fs::remove(lock, ec);
    fs::remove(dir, ec);  // fails, harmlessly, if something appeared in the meantime
    if (fd >= 0) ::close(fd);
}

std::vector<std::string> folders_to_make(const std::string& dir) {
    std::vector<std::string> made;
    std::error_code ec;
    fs::path p;
    // Below a missing folder the path only resolves lexically ("new/.." is the folder above new,
    // which no link can redirect: new is made as a folder).
    bool below_missing = false;
    for (const fs::path& part : fs::absolute(dir, ec)) {
        p /= part;
        if (part.empty() || part == "." || part == ".." || p == p.root_path()) continue;
        const fs::path q = below_missing ? p.lexically_normal() : p;
        if (fs::exists(q, ec) || fs::is_symlink(q, ec)) continue;
        below_missing = true;
        made.push_back(p.string());
    }
    return made;
}

void remove_made_folders(const std::vector<std::string>& made) {
    if (made.empty()) return;
    remove_unused_run_folder(made.back());
    std::error_code ec;
    for (size_t i = made.size() - 1; i-- > 0;) {
        if (!fs::is_directory(made[i], ec) || fs::is_symlink(made[i], ec) || !fs::is_empty(made[i], ec)) return;
        fs::remove(made[i], ec);
    }
}

nlohmann::json RunRecord::to_json() const {
    return {{"run_id", id}, {"config", config}, {"started", started}, {"data", data}};
}

RunRecord RunRecord::from_json(const nlohmann::json& j, const std::string& where) {
    RunRecord r;
    try {
        r.id = j.at("run_id").get<std::string>();
        r.config = j.at("config").get<std::string>();
        r.started = j.at("started").get<std::string>();
        r.data = j.at("data");
        if (!r.data.is_object()) throw Error("'data' is not an object");
        for (const auto& [file, sum] : r.data.items())
            if (!sum.is_string()) throw Error("the checksum of '" + file + "' is not a string");
    } catch (const Error& e) {
        throw Error(where + ": corrupt run record: " + e.what());
    } catch (const std::exception& e) {  // nlohmann's type errors
        throw Error(where + ": corrupt run record: " + e.what());
    }
    return r;
}

RunRecord RunRecord::fresh(const std::string& config_text, nlohmann::json data) {
    RunRecord r;
    std::random_device rd;
    const uint64_t bits = (static_cast<uint64_t>(rd()) << 32) ^ rd() ^ static_cast<uint64_t>(::getpid()) << 16 ^
                          static_cast<uint64_t>(std::time(nullptr));
    char id[24];
    std::snprintf(id, sizeof id, "%016llx", static_cast<unsigned long long>(bits));
    r.id = id;
    r.config = io::checksum_text(io::xxh64(config_text.data(), config_text.size()));
    char when[32];
    const std::time_t now = std::time(nullptr);
    std::tm utc{};
    gmtime_r(&now, &utc);
    std::strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", &utc);
    r.started = when;
    r.data = std::move(data);
    return r;
}

nlohmann::json data_fingerprints(const RunConfig& c) {
    std::vector<std::string> files;
    if (c.is_text()) {
        files = text_files(c);
    } else {
        for (bool train : {true, false}) {
            const auto [images, labels] = io::mnist_files(c.data_dir, train);
            files.push_back(images);
            files.push_back(labels);
        }
    }
    nlohmann::json out = nlohmann::json::object();
    std::error_code ec;
    for (const std::string& f : files) {  // by absolute path: a resume from another folder names the same files
        const fs::path p = fs::weakly_canonical(fs::absolute(f, ec), ec);
        out[ec ? f : p.string()] = io::checksum_text(io::hash_file(f));
    }
    return out;
}

std::string changed_data(const nlohmann::json& was, const nlohmann::json& now) {
    for (const auto& [file, sum] : was.items()) {
        if (!now.contains(file)) return file + " (read then, not now)";
        if (now.at(file) != sum)
            return file + " (its content changed: " + sum.get<std::string>() + " then, " + now.at(file).get<std::string>() +
                   " now)";
    }
    for (const auto& [file, sum] : now.items())
        if (!was.contains(file)) return file + " (read now, not then)";
    return "";
}

std::optional<RunRecord> read_folder_record(const std::string& dir) {
    const std::string path = (fs::path(dir) / kRecordName).string();
    std::error_code ec;
    if (!fs::exists(fs::symlink_status(path, ec))) return std::nullopt;
    nlohmann::json j;
    try {
        j = nlohmann::json::parse(io::read_own_file(path));
    } catch (const nlohmann::json::exception& e) {
        throw Error(path + ": corrupt run record: " + e.what());
    }
    return RunRecord::from_json(j, path);
}

void write_folder_record(const std::string& dir, const RunRecord& record) {
    io::write_file_atomic((fs::path(dir) / kRecordName).string(), record.to_json().dump(2) + "\n");
}

std::string move_earlier_run_aside(const std::string& dir) {
    std::error_code ec;
    std::vector<fs::path> found;
    for (const char* name : kRunFiles)
        if (fs::exists(fs::symlink_status(fs::path(dir) / name, ec))) found.push_back(fs::path(dir) / name);
    if (found.empty()) return "";
    fs::path aside;
    for (int n = 1;; ++n) {
        aside = fs::path(dir) / ("earlier." + std::to_string(n));
        if (fs::create_directory(aside, ec)) {  // false when it exists: try the next N
            fs::permissions(aside, fs::perms::others_write, fs::perm_options::remove, ec);
            break;
        }
        if (ec && ec != std::errc::file_exists)
            throw Error("out dir " + dir + ": cannot make " + aside.string() + " to keep the earlier run's files: " +
                        ec.message());
    }
    for (const fs::path& f : found) {
        fs::rename(f, aside / f.filename(), ec);  // moves a link as a link
        if (ec)
            throw Error("out dir " + dir + ": cannot move the earlier run's " + f.filename().string() + " to " +
                        aside.string() + ": " + ec.message());
    }
    return aside.string();
}

}  // namespace xylem::train
