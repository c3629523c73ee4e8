// AtomicFile: temp file + fsync + rename + directory fsync, the POSIX recipe for crash-safe replacement.
#include "xylem/io/atomic_file.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <climits>
#include <cstring>
#include <filesystem>
#include <system_error>

#include "xylem/error.h"

namespace xylem::io {
namespace {

std::string errno_text(int err) { return std::generic_category().message(err); }

// Why open(O_NOFOLLOW) failed on a file xylem writes: ELOOP means a symbolic link sits there.
std::string open_failure(const std::string& verb, const std::string& path, int err) {
    if (err == ELOOP)
        return path + " is a symbolic link: xylem does not write through a link it did not make (remove it, or "
                      "write elsewhere)";
    return "cannot " + verb + " " + path + ": " + errno_text(err);
}

std::string parent_dir(const std::string& path) {
    size_t slash = path.find_last_of('/');
    if (slash == std::string::npos) return ".";
    if (slash == 0) return "/";
    return path.substr(0, slash);
}

// Live temp files, readable from a signal handler: fixed storage, a slot is claimed with an
// atomic flag and its path written before it is marked ready. More files at once than slots
// only means those few are not cleaned on an immediate exit.
constexpr int kLiveSlots = 16;
struct LiveSlot {
    std::atomic<int> state{0};  // 0 free, 1 being written, 2 ready
    char path[PATH_MAX];
};
LiveSlot g_live[kLiveSlots];

int claim_live_slot(const std::string& path) {
    if (path.size() >= PATH_MAX) return -1;
    for (int i = 0; i < kLiveSlots; ++i) {
        int expected = 0;
        if (g_live[i].state.compare_exchange_strong(expected, 1)) {
            std::memcpy(g_live[i].path, path.c_str(), path.size() + 1);
            g_live[i].state.store(2);
            return i;
        }
    }
    return -1;
}

void release_live_slot(int slot) {
    if (slot >= 0) g_live[slot].state.store(0);
}

// "<anything>.tmp.<digits>" -> the pid, else 0.
pid_t temp_file_pid(const std::string& name) {
    const size_t at = name.rfind(".tmp.");
    if (at == std::string::npos || at + 5 >= name.size()) return 0;
    pid_t pid = 0;
    for (size_t i = at + 5; i < name.size(); ++i) {
        if (name[i] < '0' || name[i] > '9' || pid > 100000000) return 0;
        pid = pid * 10 + (name[i] - '0');
    }
    return pid;
}

}  // namespace

void remove_live_temp_files() noexcept {
    for (LiveSlot& s : g_live)
        if (s.state.load() == 2) ::unlink(s.path);
}

std::vector<std::string> remove_stale_temp_files(const std::string& dir) {
    namespace fs = std::filesystem;
    std::vector<std::string> removed;
    std::error_code ec;
    for (const auto& entry : fs::directory_iterator(dir, ec)) {
        const pid_t pid = temp_file_pid(entry.path().filename().string());
        if (pid <= 0 || pid == ::getpid() || !entry.is_regular_file(ec)) continue;
        if (::kill(pid, 0) == 0 || errno != ESRCH) continue;  // alive (or not ours to judge): leave it
        if (fs::remove(entry.path(), ec)) removed.push_back(entry.path().string());
    }
    return removed;
}

namespace {

// "<name>.tmp.<pid>" beside `path`, its name cut to fit NAME_MAX: any name that is valid for the
// file itself gets a temporary one (a 254-byte name was refused for its suffix).
std::string temp_path_for(const std::string& path) {
    const std::string suffix = ".tmp." + std::to_string(::getpid());
    const size_t slash = path.find_last_of('/');
    const size_t name_at = slash == std::string::npos ? 0 : slash + 1;
    const size_t keep = std::min(path.size() - name_at, size_t{NAME_MAX} - suffix.size());
    return path.substr(0, name_at + keep) + suffix;
}

// A folder is no file name: say so before a temporary file lands inside it ("cannot rename ...: Not
// a directory" did not).
void check_file_name(const std::string& path) {
    struct stat st {};
    if (!path.empty() && path.back() == '/')
        throw Error(path + ": ends with '/', so it names a folder; a file name is needed here (e.g. " + path + "NAME)");
    if (::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode))
        throw Error(path + ": is a folder; a file name is needed here (e.g. " + path + "/NAME)");
}

}  // namespace

AtomicFile::AtomicFile(const std::string& path) : path_(path), temp_path_((check_file_name(path), temp_path_for(path))) {
    // O_TRUNC: a leftover temp with our pid can only come from a dead process that reused it.
    // O_NOFOLLOW: never write through a symlink someone planted at the predictable temp name.
    fd_ = ::open(temp_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, kFileMode);
    if (fd_ < 0) {
        int err = errno;
        throw Error(path_ + ": cannot create temporary file " + temp_path_ + ": " + errno_text(err));
    }
    temp_exists_ = true;
    live_slot_ = claim_live_slot(temp_path_);
}

AtomicFile::~AtomicFile() { discard(); }

void AtomicFile::discard() noexcept {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
    if (temp_exists_) ::unlink(temp_path_.c_str());
    temp_exists_ = false;
    release_live_slot(live_slot_);
    live_slot_ = -1;
}

void AtomicFile::fail(const std::string& what, int err) {
    discard();
    throw Error(path_ + ": " + what + ": " + errno_text(err));
}

void AtomicFile::write(const void* data, size_t bytes) {
    if (fd_ < 0) throw Error(path_ + ": write after the temporary file was committed or discarded");
    const char* p = static_cast<const char*>(data);
    while (bytes > 0) {
        ssize_t n = ::write(fd_, p, std::min<size_t>(bytes, size_t{1} << 30));
        if (n < 0) {
            if (errno == EINTR) continue;
            fail("cannot write temporary file " + temp_path_, errno);
        }
        p += n;
        bytes -= static_cast<size_t>(n);
    }
}

void AtomicFile::commit() {
    if (fd_ < 0) throw Error(path_ + ": commit after the temporary file was committed or discarded");
    // fsync before rename: otherwise a crash can leave the new name pointing at unwritten blocks.
    if (::fsync(fd_) != 0) fail("cannot sync temporary file " + temp_path_, errno);
    int rc = ::close(fd_);
    int err = errno;
    fd_ = -1;  // closed even when close() reports an error
    if (rc != 0) fail("cannot close temporary file " + temp_path_, err);
    if (::rename(temp_path_.c_str(), path_.c_str()) != 0) fail("cannot rename " + temp_path_ + " over it", errno);
    temp_exists_ = false;  // it is path_ now
    release_live_slot(live_slot_);
    live_slot_ = -1;

    // The rename lives in the directory; sync it so the new name survives a crash too.
    std::string dir = parent_dir(path_);
    int dir_fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dir_fd < 0) {
        err = errno;
        throw Error(path_ + ": written, but cannot open its directory " + dir + " to sync it: " + errno_text(err));
    }
    rc = ::fsync(dir_fd);
    err = errno;
    ::close(dir_fd);
    // Some filesystems cannot fsync directories (EINVAL); the rename is as durable as they allow.
    if (rc != 0 && err != EINVAL) throw Error(path_ + ": written, but cannot sync directory " + dir + ": " + errno_text(err));
}

AppendFile::AppendFile(const std::string& path) : path_(path) {
    // O_NONBLOCK: a FIFO at the name fails or opens at once (and is refused below), never waits.
    fd_ = ::open(path.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK, kFileMode);
    if (fd_ < 0) {
        const int err = errno;
        throw Error(open_failure("append to", path, err));
    }
    struct stat st {};
    if (::fstat(fd_, &st) != 0 || !S_ISREG(st.st_mode)) {  // a FIFO or a device named like the file
        ::close(fd_);
        fd_ = -1;
        throw Error(path + ": not a regular file: xylem appends only to files it made");
    }
    ::fcntl(fd_, F_SETFL, O_APPEND);  // back to blocking writes: a regular file
}

AppendFile::~AppendFile() {
    if (fd_ >= 0) ::close(fd_);
}

void AppendFile::write(const std::string& text) {
    const char* p = text.data();
    size_t left = text.size();
    while (left > 0) {
        const ssize_t n = ::write(fd_, p, left);
        if (n < 0) {
            if (errno == EINTR) continue;
            const int err = errno;
            throw Error(path_ + ": cannot write: " + errno_text(err));
        }
        p += n;
        left -= static_cast<size_t>(n);
    }
}

std::string read_own_file(const std::string& path) {
    // O_NONBLOCK: opening a FIFO planted at the name must not wait for a writer.
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
    if (fd < 0) {
        const int err = errno;
        throw Error(open_failure("read", path, err));
    }
    struct stat st {};
    if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        ::close(fd);
        throw Error(path + ": not a regular file: xylem reads back only files it made");
    }
    std::string text;
    char buf[1 << 16];
    for (;;) {
        const ssize_t n = ::read(fd, buf, sizeof buf);
        if (n == 0) break;
        if (n < 0) {
            if (errno == EINTR) continue;
            const int err = errno;
            ::close(fd);
            throw Error(path + ": cannot read: " + errno_text(err));
        }
        text.append(buf, static_cast<size_t>(n));
    }
    ::close(fd);
    return text;
}

void write_file_atomic(const std::string& path, const std::string& contents) {
    AtomicFile file(path);
    file.write(contents.data(), contents.size());
    file.commit();
}

}  // namespace xylem::io
