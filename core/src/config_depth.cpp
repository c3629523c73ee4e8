// A pre-scan of a TOML text's nesting: the depth of each key path (dotted keys, [table] headers,
// inline tables and arrays together), so that toml++ never sees a key deep enough to crash it.
#include "config_depth.h"

#include <vector>

#include "xylem/error.h"

namespace xylem {
namespace {

// A lexer of just what nesting depends on: strings and comments are skipped, a key's dots
// counted, brackets and braces tracked. Malformed text is not judged here (toml++ does that).
class DepthScan {
public:
    DepthScan(const std::string& text, const std::string& source) : t_(text), source_(source) {}

    void run() {
        while (i_ < t_.size()) {
            const char ch = t_[i_];
            if (ch == '\n') {
                ++line_;
                ++i_;
                if (open_.empty()) start_key(false);  // a new line at the top starts a key or a [header]
                continue;
            }
            if (ch == '#') {
                while (i_ < t_.size() && t_[i_] != '\n') ++i_;
                continue;
            }
            if (ch == '"' || ch == '\'') {
                skip_string(ch);
                continue;
            }
            ++i_;
            if (in_key_) key_char(ch);
            else value_char(ch);
        }
    }

private:
    struct Open {
        char kind;  // '[' an array, '{' an inline table
        int depth;  // the depth of the container itself
    };

    void start_key(bool inline_table) {
        in_key_ = true;
        header_ = false;
        key_started_ = false;
        key_base_ = inline_table ? open_.back().depth : table_depth_;
        parts_ = 1;
    }

    void key_char(char ch) {
        if (ch == ' ' || ch == '\t' || ch == '\r') return;
        if (ch == '[' && open_.empty() && !key_started_) {  // [header] or [[header]]: a path from the root
            if (!header_) {
                header_ = true;
                key_base_ = 0;
            }
            return;
        }
        key_started_ = true;
        if (ch == '.') {
            ++parts_;
            check(key_base_ + parts_);
        } else if (ch == '=') {
            in_key_ = false;
            value_depth_ = key_base_ + parts_;
        } else if (ch == ']' && header_) {
            table_depth_ = parts_;
            in_key_ = false;  // the rest of the line: "]" of "[[", a comment
            header_ = false;
        } else if (ch == '}' && !open_.empty() && open_.back().kind == '{') {
            open_.pop_back();  // {} or a trailing comma
            in_key_ = false;
        }
    }

    void value_char(char ch) {
        if (ch == '[' || ch == '{') {
            const int depth = !open_.empty() && open_.back().kind == '[' ? open_.back().depth + 1 : value_depth_;
            check(depth);
            open_.push_back({ch, depth});
            if (ch == '{') start_key(true);
        } else if ((ch == ']' || ch == '}') && !open_.empty()) {
            open_.pop_back();
        } else if (ch == ',' && !open_.empty() && open_.back().kind == '{') {
            start_key(true);
        }
    }

    void skip_string(char quote) {
        if (in_key_) key_started_ = true;
        const bool triple = t_.compare(i_, 3, std::string(3, quote)) == 0;
        i_ += triple ? 3 : 1;
        while (i_ < t_.size()) {
            const char ch = t_[i_];
            if (ch == '\\' && quote == '"') {
                i_ += 2;  // an escape, a line-ending backslash included
                if (i_ <= t_.size() && t_[i_ - 1] == '\n') ++line_;
                continue;
            }
            if (ch == '\n') {
                if (!triple) return;  // unterminated: toml++ says so
                ++line_;
            }
            if (ch == quote && (!triple || t_.compare(i_, 3, std::string(3, quote)) == 0)) {
                i_ += triple ? 3 : 1;
                while (triple && i_ < t_.size() && t_[i_] == quote) ++i_;  // """a"""" ends with a quote inside
                return;
            }
            ++i_;
        }
    }

    void check(int depth) const {
        if (depth <= kMaxTomlDepth) return;
        throw Error(source_ + ":" + std::to_string(line_) + ": the config nests deeper than " +
                    std::to_string(kMaxTomlDepth) +
                    " levels (dotted key parts, [table] header parts, arrays and inline tables together)");
    }

    const std::string& t_;
    const std::string& source_;
    size_t i_ = 0;
    int line_ = 1;
    std::vector<Open> open_;
    bool in_key_ = true, header_ = false, key_started_ = false;
    int table_depth_ = 0;  // parts of the last [header]
    int key_base_ = 0, parts_ = 1, value_depth_ = 0;
};

}  // namespace

void check_toml_depth(const std::string& text, const std::string& source) { DepthScan(text, source).run(); }

}  // namespace xylem
