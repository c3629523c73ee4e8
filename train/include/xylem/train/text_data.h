// Text data for character-level language models ([data] text): the corpus read as bytes, its
// byte-level vocabulary (kept in every checkpoint so that eval, sample and resume use the tokens
// training used), and two batch layouts, each character's target the next one:
//   streams (data.sampling = "streams", char-rnn's): the text cut into `streams` contiguous
//     streams read side by side, seq_len characters of each per batch, in order;
//   windows ("windows", nanoGPT's): every offset of the training text starts a window of
//     block_size characters, and an epoch draws them in a random order, without replacement. They
//     are not materialised (a 3 MB text has 3 million overlapping windows): a batch gathers its
//     windows from the token array (WindowBatches, batch_source.h).
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "xylem/config.h"
#include "xylem/io/idx.h"

namespace xylem::train {

// The distinct bytes of a corpus in increasing order: token i stands for bytes()[i].
class Vocabulary {
public:
    Vocabulary() { token_.fill(-1); }
    static Vocabulary of_text(const std::string& text);           // every byte value the text holds
    static Vocabulary of_bytes(const std::vector<uint8_t>& bytes);  // sorted, distinct (a checkpoint's)

    int64_t size() const { return static_cast<int64_t>(bytes_.size()); }
    bool empty() const { return bytes_.empty(); }
    const std::vector<uint8_t>& bytes() const { return bytes_; }
    int32_t token(uint8_t byte) const { return token_[byte]; }  // -1: not in the vocabulary
    char byte(int32_t token) const { return static_cast<char>(bytes_.at(static_cast<size_t>(token))); }
    // The text's tokens; an Error naming `what` and the first byte that is not in the vocabulary.
    std::vector<int32_t> encode(const std::string& text, const std::string& what) const;
    bool operator==(const Vocabulary& o) const { return bytes_ == o.bytes_; }

private:
    std::vector<uint8_t> bytes_;
    std::array<int32_t, 256> token_;
};

// "'a' (0x61)", "'\n' (0x0a)": a byte for messages.
std::string describe_byte(uint8_t byte);

// A checkpoint's vocabulary: the safetensors metadata key and its value, a JSON list of the byte values.
inline constexpr const char* kVocabularyKey = "xylem.vocabulary";
std::string vocabulary_metadata(const Vocabulary& v);
// The vocabulary a checkpoint was trained with; empty when it has none (not trained on text).
// An Error names the file when the entry is malformed.
Vocabulary read_vocabulary(const std::string& checkpoint);

// The files data.text names, in order: each file as given, each folder's files (not recursive,
// symbolic links followed) in sorted name order less those whose name matches a data.text_exclude
// pattern (shell globs: "*.dat"). An Error naming the key and the path when one is missing or a
// folder has no files left.
std::vector<std::string> text_files(const RunConfig& config);
// Those files' bytes, concatenated. An Error naming the key when they hold none.
std::string read_corpus(const RunConfig& config, const std::vector<std::string>& files);

// char-rnn's layout of `tokens`: the first streams*chunks*seq_len + 1 tokens, with chunks as many
// as fit, cut into `streams` contiguous streams of chunks*seq_len inputs each. Sample k*streams + b
// is chunk k of stream b: seq_len inputs and, as labels, the seq_len tokens that follow each one
// (the next stream's first token ends a stream). So batch k of an epoch, samples [k*streams,
// (k+1)*streams) in order, continues batch k - 1 in every stream, and a recurrent model carries its
// state from one to the next. count 0 when the tokens are too few for one chunk.
io::Dataset stream_layout(const std::vector<int32_t>& tokens, int64_t streams, int64_t seq_len);

// nanoGPT's sampling of `tokens`: sample i is the window at offset i, block_size inputs
// tokens[i, i + block_size) and their labels tokens[i + 1, i + block_size + 1), for every i in
// [0, count()). Nothing is copied per window: gather_windows copies a batch's.
struct TextWindows {
    std::vector<int32_t> tokens;
    int64_t block_size = 0;
    int64_t count() const { return std::max<int64_t>(static_cast<int64_t>(tokens.size()) - block_size, 0); }
};
// The windows order[first, first + n) into inputs and labels, n*block_size int32 each, row-major
// ([n, block_size]); `inputs` may be null (labels only).
void gather_windows(const TextWindows& windows, const std::vector<int64_t>& order, int64_t first, int64_t n,
                    int32_t* inputs, int32_t* labels);
// `tokens` cut into non-overlapping windows of block_size, in order: sample k is tokens
// [k*block_size, (k+1)*block_size) and, as labels, the tokens after each one. count
// (tokens - 1) / block_size (the rest is not used); 0 when the tokens are too few for one. The
// held-out text of a windows run, scored the same way every time.
io::Dataset window_layout(const std::vector<int32_t>& tokens, int64_t block_size);

// A text run's data: the vocabulary of the whole corpus, the training text (its start) and the
// validation text (its last data.validation share or count of characters). Streams: both in
// train.batch_size streams of data.seq_len steps (`train`, `validation`). Windows: the training
// text as `windows` (`train` holds no samples, only their shape: steps = block_size), the
// validation text in window_layout's windows.
struct TextData {
    Vocabulary vocabulary;
    io::Dataset train, validation;
    TextWindows windows;  // data.sampling = "windows" only
    std::vector<std::string> files;
    int64_t chars = 0, validation_chars = 0;  // the corpus, and the part held out
};
// Errors name the key: a missing file, an empty corpus, a text (or held-out part) too short for
// one batch of train.batch_size streams of data.seq_len steps, or for one window of
// data.block_size characters (and its next character).
TextData load_text_data(const RunConfig& config);
// The same from a corpus in memory (the Python API's fit on a string): load_text_data is this over
// the files' bytes, so a text gives the same tokens, split and layout either way.
TextData text_data_of(const RunConfig& config, const std::string& text);

}  // namespace xylem::train
