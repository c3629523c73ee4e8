// Regular files only, and only what fits in memory (xylem/io/input_file.h).
#include "xylem/io/input_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <system_error>

#include "xylem/error.h"
#include "xylem/memory.h"

namespace xylem::io {
namespace {

std::string errno_text(int err) { return std::generic_category().message(err); }

const char* kind_of(mode_t mode) {
    if (S_ISDIR(mode)) return "a directory";
    if (S_ISCHR(mode)) return "a character device";
    if (S_ISBLK(mode)) return "a block device";
    if (S_ISFIFO(mode)) return "a FIFO (named pipe)";
    if (S_ISSOCK(mode)) return "a socket";
    return "a special file";
}

}  // namespace

int open_regular_file(const std::string& path, const std::string& what, uint64_t* size) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) {
        const int err = errno;
        throw Error(path + ": cannot open: " + errno_text(err));
    }
    struct stat st {};
    if (::fstat(fd, &st) != 0) {
        const int err = errno;
        ::close(fd);
        throw Error(path + ": cannot stat: " + errno_text(err));
    }
    if (!S_ISREG(st.st_mode)) {
        ::close(fd);
        const std::string kind = kind_of(st.st_mode);
        throw Error(path + ": is " + kind + ", not a regular file: xylem reads " + what + " from regular files only");
    }
    try {
        check_fits_in_memory(path, static_cast<uint64_t>(st.st_size), what);
    } catch (...) {
        ::close(fd);
        throw;
    }
    ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);  // regular files never block; reads as usual
    *size = static_cast<uint64_t>(st.st_size);
    return fd;
}

void check_fits_in_memory(const std::string& path, uint64_t bytes, const std::string& what) {
    const uint64_t available = host_available_bytes();
    if (available && bytes > available)
        throw Error(path + ": its " + bytes_text(static_cast<double>(bytes)) + " do not fit in the " +
                    bytes_text(static_cast<double>(available)) + " of memory available (xylem holds " + what +
                    " in memory whole)");
}

std::string read_regular_file(const std::string& path, const std::string& what) {
    uint64_t size = 0;
    const int fd = open_regular_file(path, what, &size);
    std::string bytes;
    try {
        bytes.resize(static_cast<size_t>(size));
        size_t got = 0;
        while (got < bytes.size()) {  // a file that shrinks meanwhile ends early; one that grows is read to its size
            const ssize_t r = ::read(fd, bytes.data() + got, std::min(bytes.size() - got, size_t{1} << 30));
            if (r < 0 && errno == EINTR) continue;
            if (r < 0) throw Error(path + ": read error: " + errno_text(errno));
            if (r == 0) break;
            got += static_cast<size_t>(r);
        }
        bytes.resize(got);
    } catch (...) {
        ::close(fd);
        throw;
    }
    ::close(fd);
    return bytes;
}

}  // namespace xylem::io
