// Checks a plugin file before the dynamic loader sees it. glibc's dlopen trusts the file: a
// truncated copy makes it map segments past the end of the file, and the first touch of such a
// page is a SIGBUS that no caller can catch. The check reads the file with pread only (never
// mmap), so nothing in the file can fault this process.
#pragma once

#include <string>

namespace xylem::detail {

// Why `path` cannot be a shared library for this process ("" when the check passes): not a
// regular file, not an ELF file, another class, byte order or machine, not ET_DYN, program
// headers, a PT_LOAD or the PT_DYNAMIC segment, the tables the dynamic section points to, or
// the section header table reaching past the end of the file. One line, naming the part.
std::string elf_problem(const std::string& path);

}  // namespace xylem::detail
