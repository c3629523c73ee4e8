// Crash-safe file replacement: write a temp file beside the target, fsync it, rename it over the target.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace xylem::io {

// The mode every file xylem creates asks for: the user's umask applies, and others never get
// write permission even under umask 000.
inline constexpr unsigned kFileMode = 0664;

// Replaces `path` so that readers (and a machine that loses power) see either the old contents or
// the new ones, never a mix. Data goes to `path + ".tmp.<pid>"` in the same directory (rename is
// only atomic within one filesystem); commit() fsyncs and closes it, renames it over `path` and
// fsyncs the directory so the rename itself survives a crash. The temp file is opened O_NOFOLLOW
// and the rename replaces a link at `path` rather than writing through it. Until commit() renames, `path` is
// never touched; an AtomicFile destroyed uncommitted, or whose write()/commit() threw, removes its
// temp file. Two AtomicFiles for the same path in one process at once share the temp name: don't.
class AtomicFile {
public:
    explicit AtomicFile(const std::string& path);  // creates the temp file; throws xylem::Error
    ~AtomicFile();
    AtomicFile(const AtomicFile&) = delete;
    AtomicFile& operator=(const AtomicFile&) = delete;

    void write(const void* data, size_t bytes);  // appends; throws (and discards the temp) on failure
    void commit();                               // fsync, close, rename over path(), fsync the directory

    const std::string& path() const { return path_; }
    const std::string& temp_path() const { return temp_path_; }

private:
    [[noreturn]] void fail(const std::string& what, int err);
    void discard() noexcept;

    std::string path_;
    std::string temp_path_;
    int fd_ = -1;
    bool temp_exists_ = false;
    int live_slot_ = -1;  // this temp file's entry in the signal-safe table of live temp files
};

// A file written by appending (log.csv): opened O_APPEND | O_NOFOLLOW, so a symbolic link planted
// at `path` is an error naming it, never a write to the link's target; a FIFO or device is refused.
class AppendFile {
public:
    explicit AppendFile(const std::string& path);  // creates the file if it is missing; throws xylem::Error
    ~AppendFile();
    AppendFile(const AppendFile&) = delete;
    AppendFile& operator=(const AppendFile&) = delete;
    void write(const std::string& text);  // all of it, or an Error naming the file (disk full)

private:
    std::string path_;
    int fd_ = -1;
};

// The contents of a file xylem wrote earlier (a log it rewrites), refusing a symbolic link or a
// non-regular file at `path` with an Error naming it.
std::string read_own_file(const std::string& path);

// Writes `contents` to `path` through an AtomicFile (used for checkpoints and metrics.json alike).
void write_file_atomic(const std::string& path, const std::string& contents);

// Unlinks the temp files of every AtomicFile alive in this process. Async-signal-safe: a signal
// handler that must exit at once (a second Ctrl-C) calls it before _exit, so no `*.tmp.<pid>` is
// left behind (the final names are untouched, as always before commit).
void remove_live_temp_files() noexcept;

// Removes `<name>.tmp.<pid>` files in `dir` left by processes that no longer exist (kill -9,
// power loss); a live process's temp file is left alone. Returns the paths removed.
std::vector<std::string> remove_stale_temp_files(const std::string& dir);

}  // namespace xylem::io
