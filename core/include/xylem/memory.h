// Memory sizes: what the machine has available, and byte counts as people read them.
#pragma once

#include <cstdint>
#include <string>

namespace xylem {

// Bytes of host memory available to a new allocation without swapping: Linux's MemAvailable
// (/proc/meminfo), else the free physical pages; 0 when neither can be read.
uint64_t host_available_bytes();

// "9.43 GiB", "2.00 MiB", "1.5 KiB".
std::string bytes_text(double bytes);

}  // namespace xylem
