// The BPE model of tokenizer.json: merges applied by rank with a min-heap over a linked list of
// symbols (O(n log n) in the word length, so a 100 KB word without spaces is fine), byte
// fallback to <0xNN> pieces, and the unk token with optional fusing of unknown runs.
#pragma once

#include <gemma4/abi.hpp>

#include <gemma4/error.hpp>
#include <gemma4/tokenizer/hash_tables.hpp>
#include <gemma4/tokenizer/utf8.hpp>

#include <algorithm>
#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace gemma4::inline GEMMA4_ABI::detail {

/// "▁" (U+2581), the word-boundary marker of SentencePiece-derived vocabularies.
inline constexpr std::string_view kMetaspace = "\xE2\x96\x81";

/// Buffers reused across words so encoding does not allocate per word.
struct BpeScratch {
    struct Symbol {
        std::int32_t id;
        std::int32_t prev;
        std::int32_t next;
        bool alive;
    };
    struct Candidate {
        std::int32_t rank;
        std::int32_t pos;
        std::int32_t merged_id;
    };
    std::vector<Symbol> symbols;
    std::vector<Candidate> heap;
};

class BpeModel {
public:
    PieceTable vocab;
    MergeTable merges;
    std::array<std::int32_t, 256> byte_ids{};  ///< id of <0xNN>, or -1
    std::array<std::int32_t, 128> ascii_ids{};  ///< id of each one-byte piece, or -1
    std::int32_t unk_id = -1;
    bool byte_fallback = false;
    bool fuse_unk = false;
    bool ignore_merges = false;

    /// Fills the lookup tables that depend on the vocabulary and merges; call once after both are
    /// loaded. `glue_before_metaspace` lists the characters after which some merge can join a
    /// following "▁" piece; everywhere else a word can be cut before "▁" without changing the
    /// result, which lets the tokenizer cache sub-words of long pre-tokens.
    void finish(std::vector<char32_t> glue_before_metaspace) {
        static constexpr char kHex[] = "0123456789ABCDEF";
        for (int b = 0; b < 256; ++b) {
            const char piece[] = {'<', '0', 'x', kHex[b >> 4], kHex[b & 15], '>'};
            byte_ids[static_cast<std::size_t>(b)] = vocab.find(std::string_view(piece, 6));
        }
        for (int c = 0; c < 128; ++c) {
            const char ch = static_cast<char>(c);
            ascii_ids[static_cast<std::size_t>(c)] = vocab.find(std::string_view(&ch, 1));
        }
        std::sort(glue_before_metaspace.begin(), glue_before_metaspace.end());
        glue_before_metaspace_ = std::move(glue_before_metaspace);
        can_split_at_metaspace_ = !ignore_merges && vocab.find(kMetaspace) >= 0;
    }

    /// True when a word may be cut just before the "▁" at byte `pos` (pos > 0, valid UTF-8).
    bool is_cut_point(std::string_view word, std::size_t pos) const {
        if (!can_split_at_metaspace_) return false;
        const std::size_t prev = previous_char_start(word, pos);
        const std::string_view before = word.substr(prev, pos - prev);
        if (before == kMetaspace) return false;
        const char32_t cp = next_utf8(before, 0).code_point;
        return !std::binary_search(glue_before_metaspace_.begin(), glue_before_metaspace_.end(), cp);
    }

    /// Appends the ids of one pre-tokenized word (valid UTF-8, not empty).
    void encode_word(std::string_view word, std::vector<std::int32_t>& out, BpeScratch& scratch) const {
        if (ignore_merges) {
            if (const std::int32_t id = vocab.find(word); id >= 0) {
                out.push_back(id);
                return;
            }
        }
        auto& symbols = scratch.symbols;
        symbols.clear();
        bool previous_was_unk = false;
        const auto push = [&](std::int32_t id) {
            const auto n = static_cast<std::int32_t>(symbols.size());
            symbols.push_back({id, n - 1, n + 1, true});
        };
        for (std::size_t i = 0; i < word.size();) {
            const unsigned char lead = static_cast<unsigned char>(word[i]);
            const std::size_t length = lead < 0x80 ? 1 : lead < 0xE0 ? 2 : lead < 0xF0 ? 3 : 4;
            const std::string_view ch = word.substr(i, length);
            i += length;
            const std::int32_t id = lead < 0x80 ? ascii_ids[lead] : vocab.find(ch);
            if (id >= 0) {
                push(id);
                previous_was_unk = false;
            } else if (byte_fallback && std::all_of(ch.begin(), ch.end(), [&](char b) {
                           return byte_ids[static_cast<unsigned char>(b)] >= 0;
                       })) {
                for (const char b : ch) push(byte_ids[static_cast<unsigned char>(b)]);
                previous_was_unk = false;
            } else if (unk_id >= 0) {
                if (!(fuse_unk && previous_was_unk)) push(unk_id);
                previous_was_unk = true;
            } else {
                throw TokenizerError("tokenizer: no vocabulary piece for the character \"" + std::string(ch) +
                                     "\", and the model has neither byte fallback nor an unk token");
            }
        }
        if (symbols.empty()) return;
        symbols.back().next = -1;
        if (symbols.size() > 1) merge_all(scratch);
        for (std::int32_t i = 0; i >= 0; i = symbols[static_cast<std::size_t>(i)].next)
            out.push_back(symbols[static_cast<std::size_t>(i)].id);
    }

private:
    // Mirrors `Word::merge_all` of Hugging Face `tokenizers`: lowest rank first, leftmost on ties;
    // stale candidates (a side already merged away) are skipped when popped.
    void merge_all(BpeScratch& scratch) const {
        auto& symbols = scratch.symbols;
        auto& heap = scratch.heap;
        heap.clear();
        const auto later = [](const BpeScratch::Candidate& a, const BpeScratch::Candidate& b) {
            return a.rank != b.rank ? a.rank > b.rank : a.pos > b.pos;
        };
        const auto consider = [&](std::int32_t left) {
            const auto& l = symbols[static_cast<std::size_t>(left)];
            if (l.next < 0) return;
            if (const MergeResult* m = merges.find(l.id, symbols[static_cast<std::size_t>(l.next)].id)) {
                heap.push_back({m->rank, left, m->merged_id});
                std::push_heap(heap.begin(), heap.end(), later);
            }
        };
        for (std::size_t i = 0; i + 1 < symbols.size(); ++i)
            if (const MergeResult* m = merges.find(symbols[i].id, symbols[i + 1].id))
                heap.push_back({m->rank, static_cast<std::int32_t>(i), m->merged_id});
        std::make_heap(heap.begin(), heap.end(), later);

        while (!heap.empty()) {
            std::pop_heap(heap.begin(), heap.end(), later);
            const BpeScratch::Candidate top = heap.back();
            heap.pop_back();
            auto& left = symbols[static_cast<std::size_t>(top.pos)];
            if (!left.alive || left.next < 0) continue;
            auto& right = symbols[static_cast<std::size_t>(left.next)];
            const MergeResult* m = merges.find(left.id, right.id);
            if (!m || m->merged_id != top.merged_id) continue;
            left.id = top.merged_id;
            right.alive = false;
            left.next = right.next;
            if (right.next >= 0) symbols[static_cast<std::size_t>(right.next)].prev = top.pos;
            if (left.prev >= 0) consider(left.prev);
            consider(top.pos);
        }
    }

    std::vector<char32_t> glue_before_metaspace_;
    bool can_split_at_metaspace_ = false;
};

}  // namespace gemma4::detail
