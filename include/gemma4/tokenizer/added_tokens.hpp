// Added tokens (special and not) are found in the text before BPE, as whole units, wherever
// they occur: leftmost match first, longest match at that position (the Aho-Corasick
// "leftmost-longest" rule of Hugging Face `tokenizers`). A byte trie with a 256-way root keeps
// the scan at about one table lookup per input byte.
#pragma once

#include <gemma4/abi.hpp>

#include <algorithm>
#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace gemma4::inline GEMMA4_ABI::detail {

struct AddedToken {
    std::string content;
    std::int32_t id = -1;
    bool special = false;
    bool lstrip = false;      ///< also swallows whitespace on its left
    bool rstrip = false;      ///< also swallows whitespace on its right
    bool normalized = false;  ///< matched in the normalized text instead of the raw text
};

class AddedTokenMatcher {
public:
    /// Builds the trie from the tokens whose `normalized` flag equals `normalized`.
    void build(const std::vector<AddedToken>& tokens, bool normalized) {
        root_.fill(-1);
        nodes_.clear();
        edges_.clear();
        std::vector<std::vector<std::pair<unsigned char, std::int32_t>>> children;
        const auto child = [&](std::int32_t node, unsigned char byte) {
            for (const auto& [b, n] : children[static_cast<std::size_t>(node)])
                if (b == byte) return n;
            return std::int32_t{-1};
        };
        for (std::size_t t = 0; t < tokens.size(); ++t) {
            const AddedToken& token = tokens[t];
            if (token.normalized != normalized || token.content.empty()) continue;
            const auto first = static_cast<unsigned char>(token.content[0]);
            std::int32_t node = root_[first];
            if (node < 0) {
                node = new_node(children);
                root_[first] = node;
            }
            for (std::size_t i = 1; i < token.content.size(); ++i) {
                const auto byte = static_cast<unsigned char>(token.content[i]);
                std::int32_t next = child(node, byte);
                if (next < 0) {
                    next = new_node(children);
                    children[static_cast<std::size_t>(node)].emplace_back(byte, next);
                }
                node = next;
            }
            // Two added tokens with the same content: the later one wins, as in a hash map.
            Node& end = nodes_[static_cast<std::size_t>(node)];
            end.token = static_cast<std::int32_t>(t);
            end.lstrip = token.lstrip;
            end.rstrip = token.rstrip;
        }
        for (std::size_t n = 0; n < nodes_.size(); ++n) {
            auto& list = children[n];
            std::sort(list.begin(), list.end());
            nodes_[n].first_edge = static_cast<std::uint32_t>(edges_.size());
            nodes_[n].edge_count = static_cast<std::uint32_t>(list.size());
            for (const auto& [b, next] : list) edges_.push_back(Edge{b, next});
        }
    }

    bool empty() const { return nodes_.empty(); }

    /// Walks `text`, calling `on_text(std::string_view)` for the stretches between matches and
    /// `on_token(std::size_t index)` (index into the vector given to `build`) for each match, in order. Empty stretches are not reported.
    template <class OnText, class OnToken>
    void split(std::string_view text, OnText&& on_text, OnToken&& on_token) const {
        std::size_t emitted = 0;  // text before this offset has been handed out
        std::size_t i = 0;
        while (i < text.size()) {
            if (root_[static_cast<unsigned char>(text[i])] < 0) {
                ++i;
                continue;
            }
            const auto [node_index, end] = longest_match(text, i);
            if (node_index < 0) {
                ++i;
                continue;
            }
            const Node& match = nodes_[static_cast<std::size_t>(node_index)];
            std::size_t start = i;
            std::size_t stop = end;
            if (match.lstrip)
                while (start > emitted && is_space(text[start - 1])) --start;
            if (match.rstrip)
                while (stop < text.size() && is_space(text[stop])) ++stop;
            if (start > emitted) on_text(text.substr(emitted, start - emitted));
            on_token(static_cast<std::size_t>(match.token));
            emitted = i = stop;
        }
        if (emitted < text.size()) on_text(text.substr(emitted));
    }

private:
    struct Node {
        std::int32_t token = -1;
        bool lstrip = false;
        bool rstrip = false;
        std::uint32_t first_edge = 0;
        std::uint32_t edge_count = 0;
    };
    struct Edge {
        unsigned char byte;
        std::int32_t node;
    };

    static bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; }

    std::int32_t new_node(std::vector<std::vector<std::pair<unsigned char, std::int32_t>>>& children) {
        nodes_.push_back(Node{});
        children.emplace_back();
        return static_cast<std::int32_t>(nodes_.size() - 1);
    }

    std::pair<std::int32_t, std::size_t> longest_match(std::string_view text, std::size_t start) const {
        std::int32_t best = -1;
        std::size_t best_end = start;
        std::int32_t node = root_[static_cast<unsigned char>(text[start])];
        std::size_t pos = start + 1;
        while (true) {
            const Node& n = nodes_[static_cast<std::size_t>(node)];
            if (n.token >= 0) {
                best = node;
                best_end = pos;
            }
            if (pos == text.size() || n.edge_count == 0) break;
            const auto byte = static_cast<unsigned char>(text[pos]);
            const Edge* first = edges_.data() + n.first_edge;
            const Edge* last = first + n.edge_count;
            const Edge* e = std::lower_bound(first, last, byte, [](const Edge& edge, unsigned char b) { return edge.byte < b; });
            if (e == last || e->byte != byte) break;
            node = e->node;
            ++pos;
        }
        return {best, best_end};
    }

    std::array<std::int32_t, 256> root_{};
    std::vector<Node> nodes_;
    std::vector<Edge> edges_;
};

}  // namespace gemma4::detail
