// Broken plugin files for the loader tests, made at run time from the plugins this build made:
// truncated copies, files with one ELF header field changed, junk, a folder with a plugin's name.
#pragma once

#include <elf.h>
#include <link.h>
#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

namespace xylem::test {

namespace fs = std::filesystem;

// A scratch folder, removed at the end of the test.
struct ScratchDir {
    fs::path path;
    explicit ScratchDir(const std::string& tag)
        : path(fs::temp_directory_path() / ("xylem_" + tag + "_" + std::to_string(::getpid()))) {
        fs::remove_all(path);
        fs::create_directories(path);
    }
    ~ScratchDir() {
        std::error_code ec;
        fs::remove_all(path, ec);
    }
};

inline std::vector<char> read_bytes(const fs::path& p) {
    std::ifstream in(p, std::ios::binary);
    return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

inline void write_bytes(const fs::path& p, const char* data, size_t n) {
    std::ofstream out(p, std::ios::binary | std::ios::trunc);
    out.write(data, static_cast<std::streamsize>(n));
}

// The real plugins of this build (native, opencl, cuda: whatever was built).
inline std::vector<fs::path> real_plugins(const std::string& dir) {
    std::vector<fs::path> out;
    for (const auto& e : fs::directory_iterator(dir))
        if (e.path().filename().string().rfind("libxylem_", 0) == 0 && e.path().extension() == ".so")
            out.push_back(e.path());
    std::sort(out.begin(), out.end());
    return out;
}

// The lengths a copy is cut to: empty, inside the ELF header, the header alone, inside the
// program headers or the first segment, half, and one byte short.
inline std::vector<size_t> cut_lengths(size_t size) {
    return {0, 16, 64, 1000, 3000, size / 2, size - 1};
}

struct CutFile {
    fs::path path;
    size_t length;
};

// Truncated copies of `plugin` in `dir`, named libxylem_cut_<stem>_<length>.so.
inline std::vector<CutFile> write_cut_copies(const fs::path& plugin, const fs::path& dir) {
    const std::vector<char> bytes = read_bytes(plugin);
    std::string stem = plugin.stem().string().substr(std::string("libxylem_").size());
    std::vector<CutFile> out;
    for (size_t n : cut_lengths(bytes.size())) {
        fs::path p = dir / ("libxylem_cut_" + stem + "_" + std::to_string(n) + ".so");
        write_bytes(p, bytes.data(), n);
        out.push_back({p, n});
    }
    return out;
}

// A copy of `plugin` with one ELF header field overwritten (offset into Elf64_Ehdr).
inline fs::path write_patched(const fs::path& plugin, const fs::path& out, size_t offset, const void* value, size_t n) {
    std::vector<char> bytes = read_bytes(plugin);
    std::memcpy(bytes.data() + offset, value, n);
    write_bytes(out, bytes.data(), bytes.size());
    return out;
}

// e_machine of another architecture than this process's.
inline uint16_t foreign_machine() {
#if defined(__aarch64__)
    return EM_X86_64;
#else
    return EM_AARCH64;
#endif
}

}  // namespace xylem::test
