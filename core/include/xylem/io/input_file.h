// Opening a file xylem reads (a config, data, a checkpoint, a log): only a regular file, and no
// more of it than the machine can hold. One rule for every reader, each error naming the file.
#pragma once

#include <cstdint>
#include <string>

namespace xylem::io {

// Opens `path` read-only (without blocking, so a FIFO cannot hang the caller) and returns the
// descriptor, its size in *size. Anything but a regular file is an Error naming the file, what it is
// and what was expected: "/dev/zero: is a character device, not a regular file: xylem reads text
// data from regular files only" (`what`: "text data"); so is a file larger than the memory
// available (check_fits_in_memory): every reader holds the file whole.
int open_regular_file(const std::string& path, const std::string& what, uint64_t* size);

// An Error naming `path` when `bytes` of it would not fit in the memory available now
// (xylem::host_available_bytes; no check where that cannot be read).
void check_fits_in_memory(const std::string& path, uint64_t bytes, const std::string& what);

// The whole of a regular file that fits in memory.
std::string read_regular_file(const std::string& path, const std::string& what);

}  // namespace xylem::io
