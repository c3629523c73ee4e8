// Readers for IDX files (the MNIST / Fashion-MNIST format), plain or gzipped, and MNIST-style datasets.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace xylem::io {

// IDX element types read here: unsigned bytes and big-endian IEEE float32.
constexpr uint8_t kIdxUnsignedByte = 0x08;
constexpr uint8_t kIdxFloat = 0x0D;

// One IDX array, dims outermost first, data row-major: unsigned bytes (element type 0x08), or
// float32 (0x0D) held as the file's big-endian bytes, 4 per element (idx_floats decodes them).
struct IdxArray {
    uint8_t type = kIdxUnsignedByte;
    std::vector<int64_t> dims;
    std::vector<uint8_t> data;
    size_t element_size() const { return type == kIdxFloat ? 4 : 1; }
    size_t numel() const { return data.size() / element_size(); }
};

// The elements of an IDX array as floats: bytes as they are (0..255), float32 decoded.
std::vector<float> idx_floats(const IdxArray& a);

// Reads a whole IDX file; gzip is detected by its 1f 8b magic. Validates the magic, the dims and
// that the payload is exactly complete. Throws xylem::Error naming the file; never returns partial data.
IdxArray read_idx(const std::string& path);

// The same from bytes in memory (plain or gzipped), `name` standing for the path in messages.
// read_idx is this parser over a file; the fuzz target (fuzz/idx_fuzz.cpp) calls it directly.
IdxArray parse_idx(const uint8_t* data, size_t size, const std::string& name);

// An image classification set: each image is channels x rows x cols floats, row-major (channel
// planes one after the other, as torch's [N, C, H, W]).
// Or a token set (text, train/include/xylem/train/text_data.h): steps > 0, each sample is `steps` int32 tokens in
// `tokens` (count*steps) and `labels` holds every token's target (count*steps); images stay empty.
//
// sample_shape() and sample_size() are the one home of the shape rule: batch sources, sharding,
// subsets, the model's input shape, predict, eval, export and the Python API all ask them.
struct Dataset {
    int64_t count = 0, channels = 1, rows = 0, cols = 0;
    std::vector<float> images;  // count*sample_size(): bytes scaled to [0,1], or float files' values
    std::vector<int32_t> labels;
    int64_t steps = 0;             // tokens per sample; 0: an image set
    std::vector<int32_t> tokens;   // count*steps
    bool is_tokens() const { return steps > 0; }

    // One sample's shape: an image's [channels, rows, cols], a token set's [steps].
    std::vector<int64_t> sample_shape() const {
        return is_tokens() ? std::vector<int64_t>{steps} : std::vector<int64_t>{channels, rows, cols};
    }
    // Elements of one sample: channels*rows*cols floats, or steps tokens.
    int64_t sample_size() const { return is_tokens() ? steps : channels * rows * cols; }
    // "3x32x32" (channels x rows x cols; "28x28" for one channel), or "64 tokens": for messages.
    std::string sample_text() const;
    // An empty set (count 0) with this one's sample shape: what a subset or a shard starts from.
    Dataset empty_like() const {
        Dataset d;
        d.channels = channels, d.rows = rows, d.cols = cols, d.steps = steps;
        return d;
    }
};

// The images of an IDX file, at least one image of at least one pixel (else an Error naming the
// file); `labels` stays empty. 3 dims [N, H, W] are one-channel images, 4 dims [N, C, H, W] have C
// channels. Unsigned bytes are scaled to [0, 1]; float32 files (type 0x0D) load as they are, and
// must be finite.
Dataset load_idx_images(const std::string& images_path);

// Pairs an image file (as load_idx_images) with a 1-D unsigned byte label file of the same count.
// Labels are any byte value; checking them against the number of classes is the model's job.
Dataset load_mnist(const std::string& images_path, const std::string& labels_path);

// Loads {train,t10k}-{images-idx3,labels-idx1}-ubyte from `dir`, plain or with a .gz suffix.
Dataset load_mnist_dir(const std::string& dir, bool train);
// The image and label files load_mnist_dir reads (the plain name if present, else the .gz one).
std::pair<std::string, std::string> mnist_files(const std::string& dir, bool train);

}  // namespace xylem::io
