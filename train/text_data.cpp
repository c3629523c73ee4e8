// Reading a text corpus, its vocabulary, and the stream layout of its batches.
#include "xylem/train/text_data.h"

#include <fnmatch.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <iterator>
#include <nlohmann/json.hpp>

#include "xylem/error.h"
#include "xylem/io/input_file.h"
#include "xylem/io/safetensors.h"

namespace xylem::train {
namespace fs = std::filesystem;

Vocabulary Vocabulary::of_text(const std::string& text) {
    bool seen[256] = {};
    for (char ch : text) seen[static_cast<uint8_t>(ch)] = true;
    std::vector<uint8_t> bytes;
    for (int b = 0; b < 256; ++b)
        if (seen[b]) bytes.push_back(static_cast<uint8_t>(b));
    return of_bytes(bytes);
}

// The one rule for every vocabulary, the data's and a checkpoint's: distinct bytes in order, and at
// least two of them (a model over one symbol predicts it with certainty: loss 0, nothing learnt).
Vocabulary Vocabulary::of_bytes(const std::vector<uint8_t>& bytes) {
    if (bytes.size() == 1)
        throw Error("it has one distinct character, " + describe_byte(bytes[0]) +
                    ", and a character model needs at least two to predict one from the others");
    Vocabulary v;
    for (size_t i = 0; i < bytes.size(); ++i) {
        if (i && bytes[i] <= bytes[i - 1]) throw Error("a vocabulary's bytes must be distinct and increasing");
        v.token_[bytes[i]] = static_cast<int32_t>(i);
    }
    v.bytes_ = bytes;
    return v;
}

std::string describe_byte(uint8_t b) {
    char buf[32];
    if (b == '\n') std::snprintf(buf, sizeof buf, "'\\n' (0x0a)");
    else if (b == '\t') std::snprintf(buf, sizeof buf, "'\\t' (0x09)");
    else if (b >= 0x20 && b < 0x7f) std::snprintf(buf, sizeof buf, "'%c' (0x%02x)", b, b);
    else std::snprintf(buf, sizeof buf, "byte 0x%02x", b);
    return buf;
}

std::vector<int32_t> Vocabulary::encode(const std::string& text, const std::string& what) const {
    std::vector<int32_t> tokens(text.size());
    for (size_t i = 0; i < text.size(); ++i) {
        const uint8_t b = static_cast<uint8_t>(text[i]);
        if (token_[b] < 0)
            throw Error(what + ": " + describe_byte(b) + " at offset " + std::to_string(i) +
                        " is not in the vocabulary of " + std::to_string(size()) + " characters");
        tokens[i] = token_[b];
    }
    return tokens;
}

std::string vocabulary_metadata(const Vocabulary& v) { return nlohmann::json(v.bytes()).dump(); }

Vocabulary read_vocabulary(const std::string& checkpoint) {
    const io::Safetensors file = io::read_safetensors(checkpoint);
    const auto it = file.metadata.find(kVocabularyKey);
    if (it == file.metadata.end()) return {};
    try {
        const nlohmann::json j = nlohmann::json::parse(it->second);
        std::vector<uint8_t> bytes;
        for (const nlohmann::json& b : j) {
            if (!b.is_number_unsigned() || b.get<uint64_t>() > 255) throw Error("an entry is not a byte value");
            bytes.push_back(static_cast<uint8_t>(b.get<uint64_t>()));
        }
        if (bytes.empty()) throw Error("it is empty");
        return Vocabulary::of_bytes(bytes);
    } catch (const std::exception& e) {
        throw Error(checkpoint + ": corrupt vocabulary (metadata '" + kVocabularyKey + "'): " + e.what());
    }
}

std::vector<std::string> text_files(const RunConfig& c) {
    const std::string key = c.source + ": key 'data.text': ";
    std::vector<std::string> files;
    for (const std::string& entry : c.text_paths) {
        std::error_code ec;
        const fs::file_status st = fs::status(entry, ec);
        if (!fs::exists(st)) throw Error(key + entry + ": no such file or folder");
        if (!fs::is_directory(st)) {
            files.push_back(entry);
            continue;
        }
        std::vector<std::string> names;
        for (const fs::directory_entry& e : fs::directory_iterator(entry, ec)) {
            if (!e.is_regular_file(ec)) continue;  // sub-folders are not read; links to files are
            const std::string name = e.path().filename().string();
            const bool excluded = std::any_of(c.text_exclude.begin(), c.text_exclude.end(),
                                              [&](const std::string& p) { return fnmatch(p.c_str(), name.c_str(), 0) == 0; });
            if (!excluded) names.push_back(name);
        }
        if (ec) throw Error(key + entry + ": cannot list the folder: " + ec.message());
        if (names.empty())
            throw Error(key + entry + ": the folder has no files" + (c.text_exclude.empty() ? "" : " that data.text_exclude leaves"));
        std::sort(names.begin(), names.end());  // byte order, whatever the locale
        for (const std::string& n : names) files.push_back((fs::path(entry) / n).string());
    }
    return files;
}

std::string read_corpus(const RunConfig& c, const std::vector<std::string>& files) {
    std::string text;
    for (const std::string& f : files) {
        try {  // regular files only (not /dev/zero), each fitting in the memory still available
            text += io::read_regular_file(f, "text data");
        } catch (const Error& e) {
            throw Error(c.source + ": key 'data.text': " + e.what());
        }
    }
    if (text.empty())
        throw Error(c.source + ": key 'data.text': the text is empty (" + std::to_string(files.size()) +
                    " file(s), 0 bytes)");
    return text;
}

io::Dataset stream_layout(const std::vector<int32_t>& tokens, int64_t streams, int64_t seq_len) {
    io::Dataset d;
    d.steps = seq_len;
    const int64_t usable = static_cast<int64_t>(tokens.size()) - 1;  // the last token is only a target
    const int64_t chunks = usable > 0 ? usable / (streams * seq_len) : 0;
    if (chunks == 0) return d;
    const int64_t stream_len = chunks * seq_len;
    d.count = chunks * streams;
    d.tokens.resize(static_cast<size_t>(d.count * seq_len));
    d.labels.resize(d.tokens.size());
    for (int64_t k = 0; k < chunks; ++k)
        for (int64_t b = 0; b < streams; ++b) {
            const int64_t from = b * stream_len + k * seq_len, to = (k * streams + b) * seq_len;
            std::copy_n(tokens.begin() + from, seq_len, d.tokens.begin() + to);
            std::copy_n(tokens.begin() + from + 1, seq_len, d.labels.begin() + to);
        }
    return d;
}

void gather_windows(const TextWindows& w, const std::vector<int64_t>& order, int64_t first, int64_t n, int32_t* inputs,
                    int32_t* labels) {
    const size_t block = static_cast<size_t>(w.block_size);
    const int64_t count = w.count();
    for (int64_t i = 0; i < n; ++i) {
        const int64_t at = order[static_cast<size_t>(first + i)];
        if (at < 0 || at >= count) throw Error("gather_windows: window " + std::to_string(at) + " of " + std::to_string(count));
        const int32_t* from = w.tokens.data() + at;
        if (inputs) std::memcpy(inputs + static_cast<size_t>(i) * block, from, block * sizeof(int32_t));
        std::memcpy(labels + static_cast<size_t>(i) * block, from + 1, block * sizeof(int32_t));
    }
}

io::Dataset window_layout(const std::vector<int32_t>& tokens, int64_t block_size) {
    io::Dataset d;
    d.steps = block_size;
    const int64_t usable = static_cast<int64_t>(tokens.size()) - 1;  // the last token is only a target
    d.count = usable > 0 ? usable / block_size : 0;
    const size_t n = static_cast<size_t>(d.count * block_size);
    d.tokens.assign(tokens.begin(), tokens.begin() + static_cast<std::ptrdiff_t>(n));
    d.labels.assign(tokens.begin() + 1, tokens.begin() + 1 + static_cast<std::ptrdiff_t>(n));
    return d;
}

namespace {

std::string too_short_for_a_window(const std::string& what, int64_t chars, int64_t block_size) {
    return what + " has " + std::to_string(chars) + " characters, too few for one window of data.block_size = " +
           std::to_string(block_size) + " characters and the one after it (it needs " + std::to_string(block_size + 1) +
           "): lower data.block_size";
}

// sampling = "windows": the training text as windows at every offset, the held-out end in
// non-overlapping windows.
void lay_out_windows(const RunConfig& c, TextData& t, std::vector<int32_t>&& tokens, int64_t held) {
    const int64_t block = c.block_size;
    std::vector<int32_t> validation(tokens.end() - held, tokens.end());
    tokens.resize(tokens.size() - static_cast<size_t>(held));
    t.windows.tokens = std::move(tokens);
    t.windows.block_size = block;
    t.train.steps = block;  // no samples of its own: the windows are gathered per batch
    if (t.windows.count() == 0)
        throw Error(c.source + ": " +
                    too_short_for_a_window("the training text (data.text less data.validation)", t.chars - held, block) +
                    ", or give more text");
    // A checkpoint keeps the epoch's order as int32 (xylem.train.order).
    if (t.windows.count() > ranges::kInt32Max)
        throw Error(c.source + ": key 'data.text': the training text gives " + std::to_string(t.windows.count()) +
                    " windows, more than a training order holds (" + std::to_string(ranges::kInt32Max) + ")");
    if (held > 0) {
        t.validation = window_layout(validation, block);
        if (t.validation.count == 0)
            throw Error(c.source + ": key 'data.validation': " + too_short_for_a_window("the held-out text", held, block) +
                        ", or hold out more (data.validation = 0 holds out none)");
    }
}

std::string too_short(const std::string& what, int64_t chars, int64_t streams, int64_t seq_len) {
    return what + " has " + std::to_string(chars) + " characters, too few for one batch of train.batch_size = " +
           std::to_string(streams) + " streams of data.seq_len = " + std::to_string(seq_len) + " steps (it needs " +
           std::to_string(streams * seq_len + 1) + "): lower data.seq_len or train.batch_size";
}

}  // namespace

TextData load_text_data(const RunConfig& c) {
    const std::vector<std::string> files = text_files(c);
    TextData t = text_data_of(c, read_corpus(c, files));
    t.files = files;
    return t;
}

TextData text_data_of(const RunConfig& c, const std::string& text) {
    TextData t;
    t.chars = static_cast<int64_t>(text.size());
    try {
        t.vocabulary = Vocabulary::of_text(text);
    } catch (const Error& e) {
        throw Error(c.source + ": key 'data.text': the text of " + std::to_string(t.chars) + " characters cannot be learnt: " +
                    e.what());
    }
    std::vector<int32_t> tokens = t.vocabulary.encode(text, "data.text");

    int64_t held = c.validation_count;
    if (c.validation_fraction > 0) held = std::max<int64_t>(1, std::llround(c.validation_fraction * static_cast<double>(t.chars)));
    if (held >= t.chars)
        throw Error(c.source + ": key 'data.validation' holds out " + std::to_string(held) + " of the text's " +
                    std::to_string(t.chars) + " characters, leaving none to train on");
    t.validation_chars = held;
    if (c.windows()) {
        lay_out_windows(c, t, std::move(tokens), held);
        return t;
    }
    const int64_t streams = c.batch_size, seq_len = c.seq_len;
    const std::vector<int32_t> train(tokens.begin(), tokens.end() - held);
    t.train = stream_layout(train, streams, seq_len);
    if (t.train.count == 0)
        throw Error(c.source + ": " +
                    too_short("the training text (data.text less data.validation)", t.chars - held, streams, seq_len) +
                    ", or give more text");
    if (held > 0) {
        t.validation = stream_layout(std::vector<int32_t>(tokens.end() - held, tokens.end()), streams, seq_len);
        if (t.validation.count == 0)
            throw Error(c.source + ": key 'data.validation': " + too_short("the held-out text", held, streams, seq_len) +
                        ", or hold out more (data.validation = 0 holds out none)");
    }
    return t;
}

}  // namespace xylem::train
