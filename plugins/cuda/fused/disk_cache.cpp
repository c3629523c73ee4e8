// The disk cache of fused kernels (disk_cache.h). File layout, little-endian as the host writes it:
//   "XYLEMFK1", u32 kind (1 cubin, 0 PTX), u32 0, u64 recipe bytes, u64 image bytes,
//   u64 FNV-1a of the image, the recipe, the image.
#include "fused/disk_cache.h"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <system_error>

namespace xylem::cuda::fused {

namespace {

constexpr char kMagic[8] = {'X', 'Y', 'L', 'E', 'M', 'F', 'K', '1'};
constexpr uint64_t kMaxFile = 256ull << 20;  // a larger file is not ours

struct Header {
    char magic[8];
    uint32_t kind, zero;
    uint64_t recipe_bytes, image_bytes, image_hash;
};
static_assert(sizeof(Header) == 40, "the header is packed by construction");

uint64_t fnv1a(const char* p, size_t n) {
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; ++i) h = (h ^ static_cast<unsigned char>(p[i])) * 1099511628211ull;
    return h;
}

}  // namespace

std::string cache_dir() {
    const char* xdg = std::getenv("XDG_CACHE_HOME");
    if (xdg && xdg[0] == '/') return std::string(xdg) + "/xylem/cuda-fused";  // the spec ignores relative ones
    const char* home = std::getenv("HOME");
    if (home && home[0]) return std::string(home) + "/.cache/xylem/cuda-fused";
    return {};
}

std::string cache_file_name(const std::string& kernel_name, const std::string& arch_option, int nvrtc_major,
                            int nvrtc_minor) {
    return kernel_name + "-" + arch_option + "-nvrtc" + std::to_string(nvrtc_major) + "." +
           std::to_string(nvrtc_minor) + ".bin";
}

std::string cache_recipe(const std::vector<std::string>& options, const std::string& source) {
    std::string r;
    for (const std::string& o : options) r += o + "\n";
    return r + "\n" + source;
}

bool cache_read(const std::string& path, const std::string& recipe, bool cubin, std::vector<char>* image) {
    FILE* f = std::fopen(path.c_str(), "rb");
    if (!f) return false;
    Header h{};
    bool ok = std::fread(&h, sizeof h, 1, f) == 1 && std::memcmp(h.magic, kMagic, sizeof kMagic) == 0 &&
              h.kind == (cubin ? 1u : 0u) && h.zero == 0 && h.recipe_bytes == recipe.size() && h.image_bytes > 0 &&
              h.image_bytes <= kMaxFile;
    std::string stored;
    std::vector<char> data;
    if (ok) {
        stored.resize(h.recipe_bytes);
        data.resize(h.image_bytes);
        ok = std::fread(&stored[0], 1, stored.size(), f) == stored.size() && stored == recipe &&
             std::fread(data.data(), 1, data.size(), f) == data.size() && std::fgetc(f) == EOF &&
             fnv1a(data.data(), data.size()) == h.image_hash;
    }
    std::fclose(f);
    if (ok && !cubin) ok = data.back() == '\0';  // PTX is loaded as a C string
    if (ok) *image = std::move(data);
    return ok;
}

bool cache_write(const std::string& dir, const std::string& file, const std::string& recipe, bool cubin,
                 const std::vector<char>& image) {
    if (dir.empty() || image.empty()) return false;
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    if (ec) return false;
    static std::atomic<unsigned> counter{0};
    const std::string path = dir + "/" + file;
    const std::string tmp = path + ".tmp." + std::to_string(getpid()) + "." + std::to_string(counter++);
    // A new file of our own (O_EXCL: never a file or link someone planted at the name), 0644 less
    // the umask; the rename below replaces whatever is at `path`, a link included, without
    // writing through it.
    const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (fd < 0) return false;
    FILE* f = ::fdopen(fd, "wb");
    if (!f) {
        ::close(fd);
        std::remove(tmp.c_str());
        return false;
    }
    Header h{};
    std::memcpy(h.magic, kMagic, sizeof kMagic);
    h.kind = cubin ? 1u : 0u;
    h.recipe_bytes = recipe.size();
    h.image_bytes = image.size();
    h.image_hash = fnv1a(image.data(), image.size());
    bool ok = std::fwrite(&h, sizeof h, 1, f) == 1 && std::fwrite(recipe.data(), 1, recipe.size(), f) == recipe.size() &&
              std::fwrite(image.data(), 1, image.size(), f) == image.size();
    ok = std::fclose(f) == 0 && ok;
    // rename replaces the file at once: a reader sees the old file, the new one, or none, never half.
    if (ok) ok = std::rename(tmp.c_str(), path.c_str()) == 0;
    if (!ok) std::remove(tmp.c_str());
    return ok;
}

}  // namespace xylem::cuda::fused
