// Readers for IDX files (the MNIST / Fashion-MNIST format), plain or gzipped, and MNIST-style datasets.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace xylem::io {

// One IDX array of unsigned bytes (element type 0x08), dims outermost first, data row-major.
struct IdxArray {
    std::vector<int64_t> dims;
    std::vector<uint8_t> data;
};

// Reads a whole IDX file; gzip is detected by its 1f 8b magic. Validates the magic, the dims and
// that the payload is exactly complete. Throws xylem::Error naming the file; never returns partial data.
IdxArray read_idx(const std::string& path);

// The same from bytes in memory (plain or gzipped), `name` standing for the path in messages.
// read_idx is this parser over a file; the fuzz target (fuzz/idx_fuzz.cpp) calls it directly.
IdxArray parse_idx(const uint8_t* data, size_t size, const std::string& name);

// An image classification set: images are count*rows*cols floats in [0, 1], row-major per image.
// Or a token set (text, train/include/xylem/train/text_data.h): steps > 0, each sample is `steps` int32 tokens in
// `tokens` (count*steps) and `labels` holds every token's target (count*steps); images stay empty.
struct Dataset {
    int64_t count = 0, rows = 0, cols = 0;
    std::vector<float> images;  // count*rows*cols, scaled to [0,1]
    std::vector<int32_t> labels;
    int64_t steps = 0;             // tokens per sample; 0: an image set
    std::vector<int32_t> tokens;   // count*steps
    bool is_tokens() const { return steps > 0; }
};

// The images of a 3-D IDX file, scaled to [0, 1], at least one image of at least one pixel (else an
// Error naming the file); `labels` stays empty.
Dataset load_idx_images(const std::string& images_path);

// Pairs a 3-D image file with a 1-D label file of the same count, at least one image of at least
// one pixel. Labels are any byte value; checking them against the number of classes is the model's job.
Dataset load_mnist(const std::string& images_path, const std::string& labels_path);

// Loads {train,t10k}-{images-idx3,labels-idx1}-ubyte from `dir`, plain or with a .gz suffix.
Dataset load_mnist_dir(const std::string& dir, bool train);
// The image and label files load_mnist_dir reads (the plain name if present, else the .gz one).
std::pair<std::string, std::string> mnist_files(const std::string& dir, bool train);

}  // namespace xylem::io
