// What each token id adds to a reply's text, as bytes, and those byte strings as a trie: the form
// in which a grammar's matcher tests the whole vocabulary at once. Built once per tokenizer and
// shared by every constraint over it.
#pragma once

#include <gemma4/abi.hpp>

#include <gemma4/error.hpp>
#include <gemma4/tokenizer/tokenizer.hpp>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <numeric>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace gemma4 {
inline namespace GEMMA4_ABI {

/// The token byte strings in depth-first (preorder) order. Node 0 is the root; node i > 0 is
/// reached by byte `label[i]` from its parent, is `depth[i]` bytes deep, and its subtree ends
/// before node `subtree_end[i]`. The ids whose text ends at node i are
/// `ids[ids_begin[i] .. ids_begin[i + 1])`. A walk that finds a node's prefix impossible skips
/// straight to subtree_end.
struct TokenTrie {
    std::vector<std::uint8_t> label;
    std::vector<std::uint32_t> depth;
    std::vector<std::uint32_t> subtree_end;
    std::vector<std::uint32_t> ids_begin;
    std::vector<std::int32_t> ids;
    std::uint32_t max_depth = 0;

    std::size_t nodes() const { return label.size(); }
};

class TokenVocabulary {
public:
    /// `bytes[id]` is the text of id. Ids with `is_text[id]` false are special tokens: `bytes[id]`
    /// is then their own text ("<|tool_call>"), which a grammar names to match them
    /// (gbnf.hpp); they never match text. Ids with empty text match nothing.
    TokenVocabulary(std::vector<std::string> bytes, std::vector<bool> is_text) : bytes_(std::move(bytes)), is_text_(std::move(is_text)) {
        if (bytes_.size() != is_text_.size())
            throw InvalidArgument("TokenVocabulary: " + std::to_string(bytes_.size()) + " byte strings but " +
                                  std::to_string(is_text_.size()) + " text flags");
        for (std::size_t id = 0; id < bytes_.size(); ++id) {
            if (bytes_[id].empty()) is_text_[id] = false;
            else if (!is_text_[id]) special_ids_.try_emplace(bytes_[id], static_cast<std::int32_t>(id));
        }
        build_trie();
    }

    /// The text each id of `tokenizer` adds in the middle of a reply: a byte-fallback piece adds
    /// its one byte, any other piece or non-special added token what the decoder makes of it
    /// after earlier text. Special tokens are not text.
    static std::shared_ptr<const TokenVocabulary> from_tokenizer(const Tokenizer& tokenizer) {
        const std::size_t n = tokenizer.vocab_size();
        std::vector<std::string> bytes(n);
        std::vector<bool> is_text(n, false);
        for (std::size_t i = 0; i < n; ++i) {
            const auto id = static_cast<std::int32_t>(i);
            if (!tokenizer.contains_id(id)) continue;
            if (tokenizer.is_special(id)) {
                bytes[i] = std::string(tokenizer.id_to_token(id));
                continue;
            }
            is_text[i] = true;
            const int byte = detail::Decoder::byte_of_piece(tokenizer.id_to_token(id));
            if (byte >= 0 && tokenizer.decoder_has_byte_fallback()) {
                bytes[i] = std::string(1, static_cast<char>(byte));
            } else {
                const std::int32_t one[] = {id};
                bytes[i] = tokenizer.decode_impl(one, false, false);
            }
        }
        return std::make_shared<const TokenVocabulary>(std::move(bytes), std::move(is_text));
    }

    std::size_t size() const { return bytes_.size(); }
    const std::string& bytes(std::int32_t id) const { return bytes_[static_cast<std::size_t>(id)]; }
    bool is_text(std::int32_t id) const { return id >= 0 && static_cast<std::size_t>(id) < size() && is_text_[static_cast<std::size_t>(id)]; }
    const TokenTrie& trie() const { return trie_; }
    /// The special token spelled `text`, or -1.
    std::int32_t special_id(std::string_view text) const {
        const auto it = special_ids_.find(std::string(text));
        return it == special_ids_.end() ? -1 : it->second;
    }

private:
    /// Inserts the text ids in byte order: each shares the path of its longest common prefix
    /// with the previous one, so the nodes come out in preorder.
    void build_trie() {
        std::vector<std::int32_t> order;
        for (std::size_t id = 0; id < size(); ++id)
            if (is_text_[id]) order.push_back(static_cast<std::int32_t>(id));
        std::sort(order.begin(), order.end(), [&](std::int32_t a, std::int32_t b) { return bytes(a) < bytes(b); });
        TokenTrie& t = trie_;
        const auto add_node = [&](std::uint8_t label, std::uint32_t depth) {
            t.label.push_back(label);
            t.depth.push_back(depth);
            t.subtree_end.push_back(0);
            t.ids_begin.push_back(static_cast<std::uint32_t>(t.ids.size()));
            t.max_depth = std::max(t.max_depth, depth);
        };
        add_node(0, 0);
        std::vector<std::uint32_t> path{0};  // path[d]: the node at depth d of the previous text
        std::string_view previous;
        for (const std::int32_t id : order) {
            const std::string_view text = bytes(id);
            std::size_t common = 0;
            while (common < previous.size() && common < text.size() && previous[common] == text[common]) ++common;
            close_path(path, common + 1);
            for (std::size_t d = common; d < text.size(); ++d) {
                path.push_back(static_cast<std::uint32_t>(t.label.size()));
                add_node(static_cast<std::uint8_t>(text[d]), static_cast<std::uint32_t>(d + 1));
            }
            t.ids.push_back(id);  // its node is the newest: equal texts are adjacent
            previous = text;
        }
        close_path(path, 0);
        t.ids_begin.push_back(static_cast<std::uint32_t>(t.ids.size()));
    }

    /// Ends the subtrees of the path's nodes below depth `keep`.
    void close_path(std::vector<std::uint32_t>& path, std::size_t keep) {
        while (path.size() > keep) {
            trie_.subtree_end[path.back()] = static_cast<std::uint32_t>(trie_.label.size());
            path.pop_back();
        }
    }

    std::vector<std::string> bytes_;
    std::vector<bool> is_text_;
    std::unordered_map<std::string, std::int32_t> special_ids_;
    TokenTrie trie_;
};

}  // namespace GEMMA4_ABI
}  // namespace gemma4
