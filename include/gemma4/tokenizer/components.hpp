// The pipeline components of tokenizer.json that the Gemma family uses, read from JSON:
//   normalizer     Replace (string pattern), Prepend, Sequence
//   pre_tokenizer  Split (string pattern, all five behaviours), Sequence
//   post_processor TemplateProcessing (single-sequence template)
//   decoder        Replace (string pattern), ByteFallback, Fuse, Strip, Sequence
// Anything else is rejected with a TokenizerError naming the type and its JSON path.
#pragma once

#include <gemma4/abi.hpp>

#include <gemma4/tokenizer/json_fields.hpp>
#include <gemma4/tokenizer/utf8.hpp>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace gemma4::inline GEMMA4_ABI::detail {

inline std::string require_type(const JsonSource& src, const json& node, const std::string& path) {
    src.expect_object(node, path);
    return src.require_string(node, "type", path);
}

[[noreturn]] inline void unsupported_type(const JsonSource& src, const std::string& path, std::string_view kind,
                                          const std::string& type, std::string_view supported) {
    src.fail(member_path(path, "type"), "unsupported " + std::string(kind) + " type \"" + type +
                                            "\" (supported: " + std::string(supported) + ")");
}

/// Replaces every non-overlapping occurrence of `pattern`, scanning left to right.
inline void replace_all(std::string_view in, std::string_view pattern, std::string_view content, std::string& out) {
    std::size_t pos = 0;
    while (true) {
        const std::size_t hit = pattern.size() == 1 ? in.find(pattern[0], pos) : in.find(pattern, pos);
        if (hit == std::string_view::npos) break;
        out.append(in.substr(pos, hit - pos));
        out.append(content);
        pos = hit + pattern.size();
    }
    out.append(in.substr(pos));
}

// ---------------------------------------------------------------------------------------------

class Normalizer {
public:
    static Normalizer from_json(const JsonSource& src, const json* node, const std::string& path) {
        Normalizer n;
        if (node) n.add(src, *node, path);
        return n;
    }

    bool empty() const { return steps_.empty(); }

    /// Writes the normalized form of `in` to `out` (cleared first).
    void apply(std::string_view in, std::string& out) const {
        out.assign(in);
        std::string scratch;
        for (const Step& step : steps_) {
            if (step.kind == Step::Kind::Prepend) {
                if (!out.empty()) out.insert(0, step.content);
                continue;
            }
            if (out.find(step.pattern) == std::string::npos) continue;
            scratch.clear();
            replace_all(out, step.pattern, step.content, scratch);
            out.swap(scratch);
        }
    }

private:
    struct Step {
        enum class Kind : std::uint8_t { Replace, Prepend } kind;
        std::string pattern;
        std::string content;
    };

    void add(const JsonSource& src, const json& node, const std::string& path) {
        const std::string type = require_type(src, node, path);
        if (type == "Sequence") {
            const json& list = src.require_array(node, "normalizers", path);
            for (std::size_t i = 0; i < list.size(); ++i)
                add(src, list[i], element_path(member_path(path, "normalizers"), i));
        } else if (type == "Replace") {
            steps_.push_back({Step::Kind::Replace, src.string_pattern(node, path), src.require_string(node, "content", path)});
        } else if (type == "Prepend") {
            steps_.push_back({Step::Kind::Prepend, {}, src.require_string(node, "prepend", path)});
        } else {
            unsupported_type(src, path, "normalizer", type, "Replace, Prepend, Sequence");
        }
    }

    std::vector<Step> steps_;
};

// ---------------------------------------------------------------------------------------------

/// A pre-token is a byte range of the normalized text; the supported pre-tokenizers only split.
struct TextRange {
    std::size_t begin;
    std::size_t end;
};

class PreTokenizer {
public:
    enum class Behavior : std::uint8_t { Removed, Isolated, MergedWithPrevious, MergedWithNext, Contiguous };

    static PreTokenizer from_json(const JsonSource& src, const json* node, const std::string& path) {
        PreTokenizer p;
        if (node) p.add(src, *node, path);
        return p;
    }

    bool empty() const { return splits_.empty(); }

    /// Splits `text` into pre-tokens (non-empty ranges, in order), written to `out`.
    void apply(std::string_view text, std::vector<TextRange>& out, std::vector<TextRange>& scratch) const {
        out.clear();
        if (text.empty()) return;
        out.push_back({0, text.size()});
        for (const SplitStep& step : splits_) {
            scratch.clear();
            for (const TextRange r : out) split(text, r, step, scratch);
            out.swap(scratch);
        }
    }

private:
    struct SplitStep {
        std::string pattern;
        Behavior behavior;
    };

    void add(const JsonSource& src, const json& node, const std::string& path) {
        const std::string type = require_type(src, node, path);
        if (type == "Sequence") {
            const json& list = src.require_array(node, "pretokenizers", path);
            for (std::size_t i = 0; i < list.size(); ++i)
                add(src, list[i], element_path(member_path(path, "pretokenizers"), i));
        } else if (type == "Split") {
            if (src.optional_bool(node, "invert", path, false))
                src.fail(member_path(path, "invert"), "inverted Split patterns are not supported");
            const std::string behavior = src.require_string(node, "behavior", path);
            Behavior b;
            if (behavior == "Removed") b = Behavior::Removed;
            else if (behavior == "Isolated") b = Behavior::Isolated;
            else if (behavior == "MergedWithPrevious") b = Behavior::MergedWithPrevious;
            else if (behavior == "MergedWithNext") b = Behavior::MergedWithNext;
            else if (behavior == "Contiguous") b = Behavior::Contiguous;
            else src.fail(member_path(path, "behavior"), "unknown Split behavior \"" + behavior + "\"");
            splits_.push_back({src.string_pattern(node, path), b});
        } else {
            unsupported_type(src, path, "pre_tokenizer", type, "Split, Sequence");
        }
    }

    // Mirrors `SplitDelimiterBehavior` of Hugging Face `tokenizers`.
    static void split(std::string_view text, TextRange range, const SplitStep& step, std::vector<TextRange>& out) {
        const std::string_view piece = text.substr(range.begin, range.end - range.begin);
        if (piece.find(step.pattern) == std::string_view::npos) {
            out.push_back(range);
            return;
        }
        struct Part {
            TextRange r;
            bool is_match;
        };
        std::vector<Part> parts;
        std::size_t pos = 0;
        while (true) {
            const std::size_t hit = piece.find(step.pattern, pos);
            if (hit == std::string_view::npos) break;
            if (hit > pos) parts.push_back({{range.begin + pos, range.begin + hit}, false});
            parts.push_back({{range.begin + hit, range.begin + hit + step.pattern.size()}, true});
            pos = hit + step.pattern.size();
        }
        if (pos < piece.size()) parts.push_back({{range.begin + pos, range.end}, false});

        std::vector<TextRange> result;
        bool previous_match = false;
        switch (step.behavior) {
            case Behavior::Removed:
                for (const Part& p : parts)
                    if (!p.is_match) result.push_back(p.r);
                break;
            case Behavior::Isolated:
                for (const Part& p : parts) result.push_back(p.r);
                break;
            case Behavior::MergedWithPrevious:
                for (const Part& p : parts) {
                    if (p.is_match && !previous_match && !result.empty()) result.back().end = p.r.end;
                    else result.push_back(p.r);
                    previous_match = p.is_match;
                }
                break;
            case Behavior::MergedWithNext:
                for (auto it = parts.rbegin(); it != parts.rend(); ++it) {
                    if (it->is_match && !previous_match && !result.empty()) result.back().begin = it->r.begin;
                    else result.push_back(it->r);
                    previous_match = it->is_match;
                }
                std::reverse(result.begin(), result.end());
                break;
            case Behavior::Contiguous:
                for (std::size_t i = 0; i < parts.size(); ++i) {
                    if (i > 0 && parts[i].is_match == previous_match) result.back().end = parts[i].r.end;
                    else result.push_back(parts[i].r);
                    previous_match = parts[i].is_match;
                }
                break;
        }
        for (const TextRange r : result)
            if (r.end > r.begin) out.push_back(r);
    }

    std::vector<SplitStep> splits_;
};

// ---------------------------------------------------------------------------------------------

/// The single-sequence template of TemplateProcessing: ids before and after the text.
struct TemplateIds {
    std::vector<std::int32_t> prefix;
    std::vector<std::int32_t> suffix;
};

inline TemplateIds read_post_processor(const JsonSource& src, const json* node, const std::string& path,
                                       const std::function<bool(std::int32_t)>& is_known_id) {
    TemplateIds ids;
    if (!node) return ids;
    const std::string type = require_type(src, *node, path);
    if (type != "TemplateProcessing") unsupported_type(src, path, "post_processor", type, "TemplateProcessing");
    const json& single = src.require_array(*node, "single", path);
    const std::string single_path = member_path(path, "single");
    const json* specials = src.find(*node, "special_tokens");
    const std::string specials_path = member_path(path, "special_tokens");
    if (specials) src.expect_object(*specials, specials_path);
    bool seen_sequence = false;
    for (std::size_t i = 0; i < single.size(); ++i) {
        const std::string item_path = element_path(single_path, i);
        const json& item = single[i];
        src.expect_object(item, item_path);
        if (const json* seq = src.find(item, "Sequence")) {
            src.expect_object(*seq, member_path(item_path, "Sequence"));
            if (seen_sequence) src.fail(item_path, "the single template names the sequence twice");
            seen_sequence = true;
            continue;
        }
        const json* special = src.find(item, "SpecialToken");
        if (!special) src.fail(item_path, "expected {\"SpecialToken\": ...} or {\"Sequence\": ...}");
        const std::string special_path = member_path(item_path, "SpecialToken");
        src.expect_object(*special, special_path);
        const std::string name = src.require_string(*special, "id", special_path);
        const json* entry = specials ? src.find(*specials, name) : nullptr;
        if (!entry) src.fail(member_path(special_path, "id"), "\"" + name + "\" is not in " + specials_path);
        const std::string entry_path = specials_path + "[\"" + name + "\"]";
        src.expect_object(*entry, entry_path);
        const json& list = src.require_array(*entry, "ids", entry_path);
        for (std::size_t k = 0; k < list.size(); ++k) {
            const std::string id_path = element_path(member_path(entry_path, "ids"), k);
            if (!list[k].is_number_integer()) src.fail(id_path, std::string("expected an integer, got ") + list[k].type_name());
            const auto id = list[k].get<std::int64_t>();
            if (id < 0 || id > INT32_MAX || !is_known_id(static_cast<std::int32_t>(id)))
                src.fail(id_path, "id " + std::to_string(id) + " is not in the vocabulary");
            (seen_sequence ? ids.suffix : ids.prefix).push_back(static_cast<std::int32_t>(id));
        }
    }
    if (!seen_sequence) src.fail(single_path, "the single template has no {\"Sequence\": ...} entry");
    return ids;
}

// ---------------------------------------------------------------------------------------------

/// The decoder chain, run on the list of token strings as Hugging Face `tokenizers` does; the
/// pieces are concatenated at the end (joined with spaces when tokenizer.json has no decoder).
class Decoder {
public:
    struct Step {
        enum class Kind : std::uint8_t { Replace, ByteFallback, Fuse, Strip } kind;
        std::string pattern;       // Replace
        std::string content;       // Replace: replacement; Strip: the character to strip
        std::size_t start = 0;     // Strip
        std::size_t stop = 0;      // Strip
        bool after_fuse = false;   // the step sees the whole text as one piece
    };

    static Decoder from_json(const JsonSource& src, const json* node, const std::string& path) {
        Decoder d;
        if (node) {
            d.present_ = true;
            d.add(src, *node, path);
        }
        return d;
    }

    bool present() const { return present_; }
    bool has_byte_fallback() const {
        for (const Step& s : steps_)
            if (s.kind == Step::Kind::ByteFallback) return true;
        return false;
    }
    const std::vector<Step>& steps() const { return steps_; }

    /// The byte of a "<0xNN>" piece, or -1.
    static int byte_of_piece(std::string_view piece) {
        if (piece.size() != 6 || piece.substr(0, 3) != "<0x" || piece[5] != '>') return -1;
        const auto hex = [](char c) {
            if (c >= '0' && c <= '9') return c - '0';
            if (c >= 'A' && c <= 'F') return c - 'A' + 10;
            if (c >= 'a' && c <= 'f') return c - 'a' + 10;
            return -1;
        };
        const int hi = hex(piece[3]), lo = hex(piece[4]);
        return hi < 0 || lo < 0 ? -1 : hi * 16 + lo;
    }

    /// `at_text_start` is false when decoding a continuation (streaming): steps after Fuse that
    /// strip the start of the text then leave it alone.
    std::string run(std::vector<std::string> pieces, bool at_text_start) const {
        if (!present_) {
            std::string out;
            for (std::size_t i = 0; i < pieces.size(); ++i) {
                if (i > 0 || !at_text_start) out.push_back(' ');
                out += pieces[i];
            }
            return out;
        }
        std::vector<std::string> next;
        for (const Step& step : steps_) {
            switch (step.kind) {
                case Step::Kind::Replace:
                    for (std::string& p : pieces) {
                        if (p.find(step.pattern) == std::string::npos) continue;
                        std::string replaced;
                        replace_all(p, step.pattern, step.content, replaced);
                        p.swap(replaced);
                    }
                    break;
                case Step::Kind::ByteFallback: {
                    // Unlike Hugging Face (which turns every byte of a run holding any invalid
                    // sequence into U+FFFD), only the bytes that are not part of a valid
                    // character become U+FFFD. This keeps decoding local, so streamed output
                    // always equals the batch result.
                    next.clear();
                    std::string bytes;
                    bool in_run = false;
                    for (std::string& p : pieces) {
                        const int b = byte_of_piece(p);
                        if (b >= 0) {
                            bytes.push_back(static_cast<char>(b));
                            in_run = true;
                            continue;
                        }
                        if (in_run) {
                            next.emplace_back();
                            append_utf8_lossy(bytes, next.back());
                            bytes.clear();
                            in_run = false;
                        }
                        next.push_back(std::move(p));
                    }
                    if (in_run) {
                        next.emplace_back();
                        append_utf8_lossy(bytes, next.back());
                    }
                    pieces.swap(next);
                    break;
                }
                case Step::Kind::Fuse: {
                    std::string all;
                    for (const std::string& p : pieces) all += p;
                    pieces.assign(1, std::move(all));
                    break;
                }
                case Step::Kind::Strip:
                    for (std::string& p : pieces) strip(p, step, at_text_start || !step.after_fuse);
                    break;
            }
        }
        std::string out;
        for (const std::string& p : pieces) out += p;
        return out;
    }

private:
    void add(const JsonSource& src, const json& node, const std::string& path) {
        const std::string type = require_type(src, node, path);
        if (type == "Sequence") {
            const json& list = src.require_array(node, "decoders", path);
            for (std::size_t i = 0; i < list.size(); ++i)
                add(src, list[i], element_path(member_path(path, "decoders"), i));
            return;
        }
        Step step{};
        if (type == "Replace") {
            step.kind = Step::Kind::Replace;
            step.pattern = src.string_pattern(node, path);
            step.content = src.require_string(node, "content", path);
        } else if (type == "ByteFallback") {
            step.kind = Step::Kind::ByteFallback;
        } else if (type == "Fuse") {
            step.kind = Step::Kind::Fuse;
            fused_ = true;
        } else if (type == "Strip") {
            step.kind = Step::Kind::Strip;
            step.content = src.require_string(node, "content", path);
            if (step.content.empty() || next_utf8(step.content, 0).length != step.content.size())
                src.fail(member_path(path, "content"), "expected a single character");
            const auto count = [&](std::string_view key) {
                const std::int64_t v = src.require_integer(node, key, path);
                if (v < 0) src.fail(member_path(path, key), "must not be negative");
                return static_cast<std::size_t>(v);
            };
            step.start = count("start");
            step.stop = count("stop");
        } else {
            unsupported_type(src, path, "decoder", type, "Replace, ByteFallback, Fuse, Strip, Sequence");
        }
        step.after_fuse = fused_;
        steps_.push_back(std::move(step));
    }

    // Mirrors the Strip decoder: up to `start` leading and `stop` trailing copies of the
    // character are removed from each piece.
    static void strip(std::string& piece, const Step& step, bool strip_start) {
        const std::string_view c = step.content;
        std::size_t begin = 0, end = piece.size();
        if (strip_start)
            for (std::size_t k = 0; k < step.start && std::string_view(piece).substr(begin, c.size()) == c; ++k)
                begin += c.size();
        for (std::size_t k = 0; k < step.stop && end >= begin + c.size() &&
                                std::string_view(piece).substr(end - c.size(), c.size()) == c;
             ++k)
            end -= c.size();
        piece = piece.substr(begin, end - begin);
    }

    std::vector<Step> steps_;
    bool present_ = false;
    bool fused_ = false;
};

}  // namespace gemma4::detail
