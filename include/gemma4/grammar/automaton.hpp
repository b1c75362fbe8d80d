// The grammar's pushdown automaton, determinized lazily over bytes: the matcher's engine.
//
// A parse position is a stack of grammar positions, stored as a node (position, parent node);
// nodes are interned, so equal stacks are one id. A state is the set of stacks that the text so
// far leaves open (each topped by a character class or a token the grammar names), whether the text may end here, and the
// bytes of a character not yet complete. States are interned too, and each state's 256 byte
// transitions are computed the first time they are asked for and remembered. Text inside a JSON
// string, say, returns to the same state after each character, so after a few tokens almost
// every step is a table lookup.
//
// The set of tokens a state allows is one walk of the vocabulary's trie through the transition
// table, skipping every subtree whose prefix is already impossible; it is remembered per state.
//
// One automaton serves every matcher of its grammar (all the sequences of an Engine that share
// a schema); a mutex guards it.
#pragma once

#include <gemma4/abi.hpp>

#include <gemma4/error.hpp>
#include <gemma4/grammar/gbnf.hpp>
#include <gemma4/grammar/token_vocabulary.hpp>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace gemma4 {
inline namespace GEMMA4_ABI {

/// Bounds on the automaton a grammar grows while it is used, so that an ambiguous grammar fails
/// with an error rather than exhausting memory.
struct AutomatonLimits {
    std::size_t max_states = 1 << 17;        ///< each holds a 1 KiB transition table
    std::size_t max_nodes = 1 << 22;
    std::size_t max_stacks_per_state = 4096;
    std::size_t mask_cache_bytes = 256 << 20;  ///< remembered token masks; forgotten all at once when full
};

namespace detail {

class GrammarAutomaton {
public:
    static constexpr std::int32_t kDead = -1;
    static constexpr std::uint32_t kStart = 0;

    /// `token_ids[i]` is the id that the grammar's token reference i names.
    GrammarAutomaton(Grammar grammar, std::shared_ptr<const TokenVocabulary> vocabulary, std::vector<std::int32_t> token_ids,
                     const AutomatonLimits& limits = {})
        : grammar_(std::move(grammar)), vocabulary_(std::move(vocabulary)), token_ids_(std::move(token_ids)), limits_(limits) {
        State start;
        for (const std::uint32_t alternative : grammar_.alternatives[grammar_.root])
            expand(intern_node(alternative, kNoParent), start);
        finish_state(start);
        intern_state(std::move(start));
    }

    const Grammar& grammar() const { return grammar_; }
    const TokenVocabulary& vocabulary() const { return *vocabulary_; }

    /// The state after the id `id` from `state`, or kDead: as a token the grammar names where
    /// one fits, else as its text.
    std::int32_t walk_id(std::uint32_t state, std::int32_t id) {
        std::lock_guard lock(mutex_);
        if (std::find(token_ids_.begin(), token_ids_.end(), id) != token_ids_.end()) {
            const std::int32_t s = next_token(state, id);
            if (s != kDead) return s;
        }
        if (!vocabulary_->is_text(id)) return kDead;
        const std::string& bytes = vocabulary_->bytes(id);
        Position at = position_of(state);
        for (const char b : bytes)
            if (!step(at, static_cast<std::uint8_t>(b), at)) return kDead;
        return at.pending == 0 ? static_cast<std::int32_t>(at.state) : intern_partial(at);
    }

    /// Whether the text may end in `state` (its grammar is complete and no character is split).
    bool can_end(std::uint32_t state) {
        std::lock_guard lock(mutex_);
        return states_[state].accepting;
    }

    /// Whether some character may follow in `state` (a stack is open).
    bool can_continue(std::uint32_t state) {
        std::lock_guard lock(mutex_);
        return !states_[state].tops.empty();
    }

    /// Sets in `bits` (one bit per vocabulary id, 64 per word) the text tokens that `state`
    /// allows, and clears the others.
    void fill_mask(std::uint32_t state, std::span<std::uint64_t> bits) {
        std::lock_guard lock(mutex_);
        if (mask_slot_.size() <= state) mask_slot_.resize(state + 1, -1);
        if (mask_slot_[state] < 0) compute_mask(state);
        const auto& mask = masks_[static_cast<std::size_t>(mask_slot_[state])];
        std::copy_n(mask.begin(), std::min(mask.size(), bits.size()), bits.begin());
        std::fill(bits.begin() + static_cast<std::ptrdiff_t>(std::min(mask.size(), bits.size())), bits.end(), 0);
    }

    /// States and remembered masks so far (for the bench and tests).
    std::size_t state_count() {
        std::lock_guard lock(mutex_);
        return states_.size();
    }
    std::size_t mask_count() {
        std::lock_guard lock(mutex_);
        return masks_.size();
    }

private:
    static constexpr std::uint32_t kNoParent = 0xFFFFFFFFu;
    static constexpr std::int32_t kUnknown = -2;
    /// The smallest code point of each UTF-8 length (a shorter encoding of it is overlong).
    static constexpr char32_t kSmallest[] = {0, 0, 0x80, 0x800, 0x10000};
    static constexpr std::int32_t kMixed = -3;  ///< non_ascii_next_: the classes tell non-ASCII characters apart

    struct Node {
        std::uint32_t position;  ///< the next element to match in this frame
        std::uint32_t parent;    ///< the frame to return to, or kNoParent
    };

    /// A set of open stacks (by their top node, sorted), and a character in progress: its value
    /// so far and the continuation bytes still to come (0: none in progress).
    struct State {
        std::vector<std::uint32_t> tops;
        bool accepting = false;
        std::uint8_t pending = 0, length = 0;
        char32_t value = 0;
        std::uint32_t base = 0;  ///< with a character in progress: a state of the same stacks without one
    };

    std::uint32_t intern_node(std::uint32_t position, std::uint32_t parent) {
        const std::uint64_t key = (std::uint64_t{position} << 32) | parent;
        const auto [it, added] = node_ids_.try_emplace(key, static_cast<std::uint32_t>(nodes_.size()));
        if (added) {
            if (nodes_.size() >= limits_.max_nodes)
                throw GrammarError("grammar: more than " + std::to_string(limits_.max_nodes) + " parse stacks; the grammar is too ambiguous");
            nodes_.push_back({position, parent});
        }
        return it->second;
    }

    /// Adds to `out` the stacks that start from node `id` and are topped by a character class;
    /// sets out.accepting when one of them is the empty stack (the grammar is complete).
    void expand(std::uint32_t id, State& out) {
        while (true) {
            const Node node = nodes_[id];
            const Grammar::Element& e = grammar_.elements[node.position];
            if (e.op == Grammar::Op::Chars || e.op == Grammar::Op::Token) {
                out.tops.push_back(id);
                return;
            }
            if (e.op == Grammar::Op::End) {
                if (node.parent == kNoParent) {
                    out.accepting = true;
                    return;
                }
                id = node.parent;
                continue;
            }
            // A rule reference: its frame returns to the element after it. When that is the end
            // of this frame, it returns straight to this frame's parent, so x* (x x* | "") and
            // other right recursion keep a constant stack depth.
            const std::uint32_t after = node.position + 1;
            const std::uint32_t back = grammar_.elements[after].op == Grammar::Op::End ? node.parent : intern_node(after, node.parent);
            for (const std::uint32_t alternative : grammar_.alternatives[e.arg]) expand(intern_node(alternative, back), out);
            return;
        }
    }

    void finish_state(State& s) {
        std::sort(s.tops.begin(), s.tops.end());
        s.tops.erase(std::unique(s.tops.begin(), s.tops.end()), s.tops.end());
        if (s.tops.size() > limits_.max_stacks_per_state)
            throw GrammarError("grammar: more than " + std::to_string(limits_.max_stacks_per_state) +
                               " parses open at once; the grammar is too ambiguous");
    }

    std::uint32_t intern_state(State s) {
        std::string key(reinterpret_cast<const char*>(s.tops.data()), s.tops.size() * sizeof(std::uint32_t));
        key.push_back(static_cast<char>(s.accepting));
        key.push_back(static_cast<char>(s.pending));
        key.push_back(static_cast<char>(s.length));
        key.append(reinterpret_cast<const char*>(&s.value), sizeof s.value);
        const auto [it, added] = state_ids_.try_emplace(std::move(key), static_cast<std::uint32_t>(states_.size()));
        if (added) {
            if (states_.size() >= limits_.max_states)
                throw GrammarError("grammar: more than " + std::to_string(limits_.max_states) + " automaton states; the grammar is too ambiguous");
            states_.push_back(std::move(s));
            transitions_.resize(states_.size() * 256, kUnknown);
        }
        return it->second;
    }

    std::int32_t next(std::uint32_t state, std::uint8_t byte) {
        std::int32_t& cached = transitions_[std::size_t{state} * 256 + byte];
        if (cached != kUnknown) return cached;
        const std::int32_t computed = compute_next(state, byte);
        transitions_[std::size_t{state} * 256 + byte] = computed;  // `cached` may have moved
        return computed;
    }

    /// Byte transitions are the walk's (step), made states: only a token that ends inside a
    /// character leaves a state with one in progress.
    std::int32_t compute_next(std::uint32_t state, std::uint8_t byte) {
        if (states_[state].pending == 0 && byte < 0x80) return advance(std::vector<std::uint32_t>(states_[state].tops), byte);
        Position to;
        if (!step(position_of(state), byte, to)) return kDead;
        return to.pending == 0 ? static_cast<std::int32_t>(to.state) : intern_partial(to);
    }

    /// The state after the complete character `c` from the stacks `tops`.
    std::int32_t advance(const std::vector<std::uint32_t>& tops, char32_t c) {
        State out;
        for (const std::uint32_t top : tops) {
            const Node node = nodes_[top];
            if (grammar_.elements[node.position].op == Grammar::Op::Chars && grammar_.class_at(node.position).contains(c))
                expand(intern_node(node.position + 1, node.parent), out);
        }
        return finish_advance(std::move(out));
    }

    std::int32_t finish_advance(State out) {
        if (out.tops.empty() && !out.accepting) return kDead;
        finish_state(out);
        return static_cast<std::int32_t>(intern_state(std::move(out)));
    }

    /// The state after the token `id` that the grammar names; never inside a character.
    std::int32_t next_token(std::uint32_t state, std::int32_t id) {
        const std::uint64_t key = (std::uint64_t{state} << 32) | static_cast<std::uint32_t>(id);
        if (const auto it = token_transitions_.find(key); it != token_transitions_.end()) return it->second;
        State out;
        if (states_[state].pending == 0) {
            const std::vector<std::uint32_t> tops = states_[state].tops;
            for (const std::uint32_t top : tops) {
                const Node node = nodes_[top];
                const Grammar::Element& e = grammar_.elements[node.position];
                if (e.op == Grammar::Op::Token && token_ids_[e.arg] == id) expand(intern_node(node.position + 1, node.parent), out);
            }
        }
        const std::int32_t next_state = finish_advance(std::move(out));
        token_transitions_.emplace(key, next_state);
        return next_state;
    }

    /// One preorder walk of the trie: a node whose prefix leads nowhere skips its subtree.
    void compute_mask(std::uint32_t state) {
        std::vector<std::uint64_t> bits((vocabulary_->size() + 63) / 64, 0);
        walk_trie(state, bits);
        if (states_[state].pending == 0)
            for (const std::uint32_t top : std::vector<std::uint32_t>(states_[state].tops)) {
                const Grammar::Element& e = grammar_.elements[nodes_[top].position];
                if (e.op != Grammar::Op::Token || next_token(state, token_ids_[e.arg]) == kDead) continue;
                const auto id = static_cast<std::size_t>(token_ids_[e.arg]);
                if (id < vocabulary_->size()) bits[id >> 6] |= std::uint64_t{1} << (id & 63);
            }
        if ((masks_.size() + 1) * bits.size() * sizeof(std::uint64_t) > limits_.mask_cache_bytes) {
            masks_.clear();
            std::fill(mask_slot_.begin(), mask_slot_.end(), -1);
        }
        if (mask_slot_.size() <= state) mask_slot_.resize(state + 1, -1);
        mask_slot_[state] = static_cast<std::int32_t>(masks_.size());
        masks_.push_back(std::move(bits));
    }

    /// Where a walk through a token's bytes is: an interned state with no character split, and
    /// the bytes so far of a character not yet complete (pending: continuation bytes to come).
    /// Kept out of the interned states, so that the characters inside tokens add no states.
    struct Position {
        std::uint32_t state = 0;
        std::uint8_t pending = 0, length = 0;
        char32_t value = 0;
    };

    /// `from` advanced by one byte into `to`; false when no sentence can continue so. A split
    /// character is checked when it completes (and where a token ends inside it: intern_partial
    /// and partial_viable).
    bool step(const Position& from, std::uint8_t byte, Position& to) {
        if (from.pending == 0) {
            if (byte < 0x80) {
                const std::int32_t s = next(from.state, byte);
                if (s == kDead) return false;
                to = Position{static_cast<std::uint32_t>(s)};
                return true;
            }
            const std::uint8_t length = byte >= 0xC2 && byte <= 0xDF ? 2 : byte >= 0xE0 && byte <= 0xEF ? 3 : byte >= 0xF0 && byte <= 0xF4 ? 4 : 0;
            if (length == 0) return false;
            to = Position{from.state, static_cast<std::uint8_t>(length - 1), length, static_cast<char32_t>(byte & (0x7Fu >> length))};
            return true;
        }
        if ((byte & 0xC0) != 0x80) return false;
        const char32_t c = (from.value << 6) | (byte & 0x3Fu);
        if (from.pending > 1) {
            to = Position{from.state, static_cast<std::uint8_t>(from.pending - 1), from.length, c};
            return true;
        }
        if (c < kSmallest[from.length] || c > kMaxCodePoint || (c >= 0xD800 && c <= 0xDFFF)) return false;
        const std::int32_t s = next_code_point(from.state, c);
        if (s == kDead) return false;
        to = Position{static_cast<std::uint32_t>(s)};
        return true;
    }

    /// The state after the complete non-ASCII character `c`. It depends only on which of the
    /// open classes take `c`. In most states every class takes all non-ASCII characters or none
    /// (text inside a string; digits, literals): there one transition serves them all. Other
    /// states remember one transition per set of classes that take the character. A table per
    /// (state, character) would grow with the vocabulary's characters times the states.
    std::int32_t next_code_point(std::uint32_t state, char32_t c) {
        if (non_ascii_next_.size() <= state) non_ascii_next_.resize(states_.size(), kUnknown);
        if (non_ascii_next_[state] == kUnknown) {
            const std::int32_t uniform = uniform_non_ascii(state) ? advance(std::vector<std::uint32_t>(states_[state].tops), c) : kMixed;
            if (non_ascii_next_.size() <= state) non_ascii_next_.resize(states_.size(), kUnknown);
            non_ascii_next_[state] = uniform;
        }
        if (non_ascii_next_[state] != kMixed) return non_ascii_next_[state];
        const std::vector<std::uint32_t> tops = states_[state].tops;
        std::vector<bool> taking(tops.size());
        for (std::size_t i = 0; i < tops.size(); ++i) {
            const std::uint32_t position = nodes_[tops[i]].position;
            taking[i] = grammar_.elements[position].op == Grammar::Op::Chars && grammar_.class_at(position).contains(c);
        }
        const auto [it, added] = class_transitions_.try_emplace({state, std::move(taking)}, kDead);
        if (added) it->second = advance(tops, c);
        return it->second;
    }

    /// Whether each open class of `state` takes every non-ASCII character or none.
    bool uniform_non_ascii(std::uint32_t state) const {
        return std::all_of(states_[state].tops.begin(), states_[state].tops.end(), [&](std::uint32_t top) {
            const std::uint32_t position = nodes_[top].position;
            if (grammar_.elements[position].op != Grammar::Op::Chars) return true;
            const CharClass& k = grammar_.class_at(position);
            const auto covers = [&](char32_t lo, char32_t hi) {
                return std::any_of(k.ranges.begin(), k.ranges.end(), [&](const auto& r) { return r.first <= lo && r.second >= hi; });
            };
            return !k.intersects(0x80, kMaxCodePoint) || (covers(0x80, 0xD7FF) && covers(0xE000, kMaxCodePoint));
        });
    }

    /// The code points a split character may still become.
    static std::pair<char32_t, char32_t> completions(const Position& at) {
        const char32_t lo = std::max<char32_t>(at.value << (6 * at.pending), kSmallest[at.length]);
        const char32_t hi = std::min<char32_t>((at.value << (6 * at.pending)) | ((char32_t{1} << (6 * at.pending)) - 1), kMaxCodePoint);
        return {lo, hi};
    }

    /// Whether some open class of `at.state` takes a completion of its split character.
    bool partial_viable(const Position& at) const {
        const std::pair<char32_t, char32_t> range = completions(at);
        const char32_t lo = range.first, hi = range.second;  // not a structured binding: clang 14 cannot capture one in a lambda
        if (lo > hi) return false;
        return std::any_of(states_[at.state].tops.begin(), states_[at.state].tops.end(), [&](std::uint32_t top) {
            const std::uint32_t position = nodes_[top].position;
            return grammar_.elements[position].op == Grammar::Op::Chars && grammar_.class_at(position).intersects(lo, hi);
        });
    }

    /// The interned state of a token that ends inside a character, or kDead.
    std::int32_t intern_partial(const Position& at) {
        if (!partial_viable(at)) return kDead;
        State split;
        split.tops = states_[at.state].tops;
        split.pending = at.pending;
        split.length = at.length;
        split.value = at.value;
        split.base = at.state;
        return static_cast<std::int32_t>(intern_state(std::move(split)));
    }

    /// An interned state as a walk's position.
    Position position_of(std::uint32_t state) const {
        const State& s = states_[state];
        return s.pending == 0 ? Position{state} : Position{s.base, s.pending, s.length, s.value};
    }

    static void set_ids(const TokenTrie& trie, std::size_t node, std::vector<std::uint64_t>& bits) {
        for (std::uint32_t k = trie.ids_begin[node]; k < trie.ids_begin[node + 1]; ++k) {
            const auto id = static_cast<std::size_t>(trie.ids[k]);
            bits[id >> 6] |= std::uint64_t{1} << (id & 63);
        }
    }

    /// The trie walk: a node whose prefix leads nowhere skips its subtree.
    void walk_trie(std::uint32_t state, std::vector<std::uint64_t>& bits) {
        const TokenTrie& trie = vocabulary_->trie();
        std::vector<Position> at_depth(trie.max_depth + 1);
        at_depth[0] = position_of(state);
        for (std::size_t i = 1; i < trie.nodes();) {
            const std::uint32_t depth = trie.depth[i];
            if (!step(at_depth[depth - 1], trie.label[i], at_depth[depth])) {
                i = trie.subtree_end[i];
                continue;
            }
            if (at_depth[depth].pending == 0 || (trie.ids_begin[i] != trie.ids_begin[i + 1] && partial_viable(at_depth[depth])))
                set_ids(trie, i, bits);
            ++i;
        }
    }

    Grammar grammar_;
    std::shared_ptr<const TokenVocabulary> vocabulary_;
    std::vector<std::int32_t> token_ids_;
    AutomatonLimits limits_;
    std::mutex mutex_;
    std::vector<Node> nodes_;
    std::unordered_map<std::uint64_t, std::uint32_t> node_ids_;
    std::vector<State> states_;
    std::unordered_map<std::string, std::uint32_t> state_ids_;
    std::vector<std::int32_t> transitions_;  ///< 256 per state: kUnknown, kDead or the next state
    std::unordered_map<std::uint64_t, std::int32_t> token_transitions_;  ///< (state, token id) → next state or kDead
    std::vector<std::int32_t> non_ascii_next_;  ///< per state: kUnknown, kMixed, or the state after any non-ASCII character
    std::map<std::pair<std::uint32_t, std::vector<bool>>, std::int32_t> class_transitions_;  ///< (state, which tops take it) → next
    std::vector<std::int32_t> mask_slot_;    ///< per state: its mask in masks_, or -1
    std::vector<std::vector<std::uint64_t>> masks_;
};

}  // namespace detail
}  // namespace GEMMA4_ABI
}  // namespace gemma4
