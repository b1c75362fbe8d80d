// Reads tokenizer.json with nlohmann's SAX interface. The two huge members, model.vocab
// (262k entries) and model.merges (515k pairs), stream straight into flat arrays; everything
// else becomes an ordinary nlohmann::json document. Skipping the DOM for those two members is
// what makes the 33 MB Gemma file load in a fraction of a second.
#pragma once

#include <gemma4/abi.hpp>

#include <gemma4/error.hpp>

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace gemma4::inline GEMMA4_ABI::detail {

struct StringRef {
    std::uint32_t offset;
    std::uint32_t length;
};

struct RawVocabEntry {
    StringRef piece;
    std::int64_t id;
};

struct RawMerge {
    StringRef left;
    StringRef right;
};

/// tokenizer.json split into the streamed parts and the rest.
struct RawTokenizerJson {
    nlohmann::json document;  ///< with model.vocab / model.merges replaced by `null` when streamed
    std::string strings;      ///< bytes of every streamed piece
    std::vector<RawVocabEntry> vocab;
    std::vector<RawMerge> merges;
    bool vocab_streamed = false;
    bool merges_streamed = false;

    std::string_view text(StringRef r) const { return {strings.data() + r.offset, r.length}; }
};

class TokenizerJsonSax {
public:
    using json = nlohmann::json;

    TokenizerJsonSax(RawTokenizerJson& out, std::string source) : out_(out), source_(std::move(source)) {}

    bool null() { return value(nullptr); }
    bool boolean(bool v) { return value(v); }
    bool number_integer(json::number_integer_t v) {
        if (mode_ == Mode::Vocab) return vocab_id(v);
        return value(v);
    }
    bool number_unsigned(json::number_unsigned_t v) {
        if (mode_ == Mode::Vocab)
            return vocab_id(v > static_cast<json::number_unsigned_t>(INT64_MAX) ? INT64_MAX
                                                                                 : static_cast<std::int64_t>(v));
        return value(v);
    }
    bool number_float(json::number_float_t v, const std::string&) { return value(v); }
    bool binary(json::binary_t&) { return value(nullptr); }

    bool string(std::string& s) {
        if (mode_ == Mode::Merges) {
            const auto space = s.find(' ');
            if (space == std::string::npos || s.find(' ', space + 1) != std::string::npos)
                fail("model.merges[" + std::to_string(out_.merges.size()) +
                     "]: expected \"left right\" with exactly one space, got \"" + s + "\"");
            const std::string_view sv(s);
            out_.merges.push_back(RawMerge{store(sv.substr(0, space)), store(sv.substr(space + 1))});
            return true;
        }
        if (mode_ == Mode::MergePair) {
            if (pair_count_ == 0) pending_left_ = store(s);
            else if (pair_count_ == 1) pending_right_ = store(s);
            ++pair_count_;
            return true;
        }
        return value(s);
    }

    bool key(std::string& k) {
        if (mode_ == Mode::Vocab) {
            pending_piece_ = store(k);
            return true;
        }
        key_ = k;
        expect_ = Expect::Nothing;
        if (!stack_.empty() && stack_.back().is_model) {
            if (k == "vocab") expect_ = Expect::Vocab;
            else if (k == "merges") expect_ = Expect::Merges;
        }
        return true;
    }

    bool start_object(std::size_t) {
        if (mode_ == Mode::Vocab) fail(vocab_path() + ": expected an integer id, got an object");
        if (mode_ == Mode::Merges || mode_ == Mode::MergePair) fail(merge_path() + ": expected a pair of strings");
        if (expect_ == Expect::Vocab) {
            expect_ = Expect::Nothing;
            place(json(nullptr));
            mode_ = Mode::Vocab;
            out_.vocab_streamed = true;
            return true;
        }
        const bool is_model = stack_.size() == 1 && key_ == "model";
        return open(json::object(), is_model);
    }

    bool end_object() {
        if (mode_ == Mode::Vocab) {
            mode_ = Mode::Dom;
            return true;
        }
        stack_.pop_back();
        return true;
    }

    bool start_array(std::size_t) {
        if (mode_ == Mode::Vocab) fail(vocab_path() + ": expected an integer id, got an array");
        if (mode_ == Mode::MergePair) fail(merge_path() + ": expected a pair of strings, got a nested array");
        if (mode_ == Mode::Merges) {
            mode_ = Mode::MergePair;
            pair_count_ = 0;
            return true;
        }
        if (expect_ == Expect::Merges) {
            expect_ = Expect::Nothing;
            place(json(nullptr));
            mode_ = Mode::Merges;
            out_.merges_streamed = true;
            return true;
        }
        return open(json::array(), false);
    }

    bool end_array() {
        if (mode_ == Mode::MergePair) {
            if (pair_count_ != 2)
                fail(merge_path() + ": expected a pair of strings, got " + std::to_string(pair_count_) + " strings");
            out_.merges.push_back(RawMerge{pending_left_, pending_right_});
            mode_ = Mode::Merges;
            return true;
        }
        if (mode_ == Mode::Merges) {
            mode_ = Mode::Dom;
            return true;
        }
        stack_.pop_back();
        return true;
    }

    bool parse_error(std::size_t position, const std::string&, const nlohmann::detail::exception& e) {
        throw TokenizerError(source_ + ": not valid JSON (byte " + std::to_string(position) + "): " + e.what());
    }

private:
    enum class Mode : std::uint8_t { Dom, Vocab, Merges, MergePair };
    enum class Expect : std::uint8_t { Nothing, Vocab, Merges };
    struct Frame {
        json* node;
        bool is_model;
    };

    [[noreturn]] void fail(const std::string& what) const { throw TokenizerError(source_ + ": " + what); }

    std::string vocab_path() const { return "model.vocab[\"" + std::string(out_.text(pending_piece_)) + "\"]"; }
    std::string merge_path() const { return "model.merges[" + std::to_string(out_.merges.size()) + "]"; }

    StringRef store(std::string_view s) {
        const StringRef r{static_cast<std::uint32_t>(out_.strings.size()), static_cast<std::uint32_t>(s.size())};
        out_.strings.append(s);
        return r;
    }

    bool vocab_id(std::int64_t id) {
        out_.vocab.push_back(RawVocabEntry{pending_piece_, id});
        return true;
    }

    template <class T>
    bool value(T&& v) {
        if (mode_ == Mode::Vocab) fail(vocab_path() + ": expected an integer id");
        if (mode_ == Mode::Merges || mode_ == Mode::MergePair) fail(merge_path() + ": expected a pair of strings");
        expect_ = Expect::Nothing;
        place(json(std::forward<T>(v)));
        return true;
    }

    json* place(json&& v) {
        if (stack_.empty()) {
            out_.document = std::move(v);
            return &out_.document;
        }
        json& parent = *stack_.back().node;
        if (parent.is_array()) {
            parent.push_back(std::move(v));
            return &parent.back();
        }
        json& slot = parent[key_];
        slot = std::move(v);
        return &slot;
    }

    bool open(json&& container, bool is_model) {
        expect_ = Expect::Nothing;
        json* node = place(std::move(container));
        stack_.push_back(Frame{node, is_model});
        return true;
    }

    RawTokenizerJson& out_;
    std::string source_;
    std::vector<Frame> stack_;
    std::string key_;
    Mode mode_ = Mode::Dom;
    Expect expect_ = Expect::Nothing;
    StringRef pending_piece_{0, 0};
    StringRef pending_left_{0, 0};
    StringRef pending_right_{0, 0};
    int pair_count_ = 0;
};

/// Parses `text` (the bytes of a tokenizer.json); `source` names the file in error messages.
inline RawTokenizerJson read_tokenizer_json(std::string_view text, const std::string& source) {
    RawTokenizerJson out;
    // Unescaped strings are never longer than their JSON spelling, so this never reallocates.
    out.strings.reserve(text.size());
    TokenizerJsonSax sax(out, source);
    nlohmann::json::sax_parse(text.data(), text.data() + text.size(), &sax);
    return out;
}

}  // namespace gemma4::detail
