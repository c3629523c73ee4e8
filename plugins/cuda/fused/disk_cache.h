// fused_elementwise's compiled kernels on disk, so a second process skips NVRTC: one file per
// (program, target architecture, NVRTC version) in $XDG_CACHE_HOME/xylem/cuda-fused (or
// ~/.cache/xylem/cuda-fused). A file records the recipe it was built from (the compile options
// and the whole source) and a checksum of its image; a file that is short, corrupt, or from
// another recipe (a hash collision, or another build's generator) is ignored and rebuilt.
// Failures never throw: an unreadable or unwritable cache only means compiling again.
#pragma once

#include <string>
#include <vector>

namespace xylem::cuda::fused {

// The folder, or "" when neither XDG_CACHE_HOME (absolute) nor HOME names one. Read at each call.
std::string cache_dir();

// "xylem_fused_<key>-sm_90-nvrtc13.0.bin".
std::string cache_file_name(const std::string& kernel_name, const std::string& arch_option, int nvrtc_major,
                            int nvrtc_minor);

// What a cached image must have been built from: the options, then the source.
std::string cache_recipe(const std::vector<std::string>& options, const std::string& source);

// The image in `path` when the file is whole, of `recipe`, and of the kind asked for (cubin or PTX).
bool cache_read(const std::string& path, const std::string& recipe, bool cubin, std::vector<char>* image);

// Writes `dir`/`file` atomically (a temporary file renamed over it), creating `dir` if needed.
// False when it could not (then nothing is left behind).
bool cache_write(const std::string& dir, const std::string& file, const std::string& recipe, bool cubin,
                 const std::vector<char>& image);

}  // namespace xylem::cuda::fused
