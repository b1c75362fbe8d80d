// gemma4::Constraint — a grammar compiled against a vocabulary, shared by every reply it
// constrains — and GrammarMatcher, one reply's position in it. At each step the matcher gives the
// ids that may come next as a bit mask over the vocabulary (applied to the logits before any
// sampling step), advances on the sampled id, and can roll back (docs/structured-output.md).
#pragma once

#include <gemma4/abi.hpp>

#include <gemma4/error.hpp>
#include <gemma4/grammar/automaton.hpp>
#include <gemma4/grammar/gbnf.hpp>
#include <gemma4/grammar/json_schema.hpp>
#include <gemma4/grammar/token_vocabulary.hpp>

#include <nlohmann/json.hpp>

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace gemma4 {
inline namespace GEMMA4_ABI {

class Constraint {
public:
    /// A GBNF grammar (gbnf.hpp) over `vocabulary`.
    static std::shared_ptr<const Constraint> from_gbnf(std::string_view gbnf, std::shared_ptr<const TokenVocabulary> vocabulary,
                                                       const AutomatonLimits& limits = {}) {
        return std::shared_ptr<const Constraint>(new Constraint(parse_gbnf(gbnf), std::string(gbnf), std::move(vocabulary), limits));
    }

    /// JSON that validates against `schema` (json_schema.hpp); an ordered_json keeps the
    /// properties in the order written.
    template <class Json>
    static std::shared_ptr<const Constraint> from_json_schema(const Json& schema, std::shared_ptr<const TokenVocabulary> vocabulary,
                                                              const JsonSchemaOptions& options = {}) {
        return from_gbnf(json_schema_to_gbnf(schema, options), std::move(vocabulary));
    }

    /// The grammar's text (for a schema, the grammar compiled from it).
    const std::string& gbnf() const { return gbnf_; }
    const TokenVocabulary& vocabulary() const { return automaton_->vocabulary(); }
    detail::GrammarAutomaton& automaton() const { return *automaton_; }

private:
    Constraint(Grammar grammar, std::string gbnf, std::shared_ptr<const TokenVocabulary> vocabulary, const AutomatonLimits& limits)
        : gbnf_(std::move(gbnf)) {
        if (!vocabulary) throw InvalidArgument("Constraint: no vocabulary");
        std::vector<std::int32_t> token_ids = resolve_tokens(grammar, *vocabulary);
        automaton_ = std::make_unique<detail::GrammarAutomaton>(std::move(grammar), std::move(vocabulary), std::move(token_ids), limits);
    }

    /// The id each token reference of the grammar names: <[N]> is id N, <…> the special token
    /// of that text.
    static std::vector<std::int32_t> resolve_tokens(const Grammar& grammar, const TokenVocabulary& vocabulary) {
        std::vector<std::int32_t> ids;
        for (const std::string& text : grammar.tokens) {
            std::int32_t id = -1;
            if (text.size() > 4 && text[1] == '[') {
                const long long n = std::stoll(text.substr(2, text.size() - 4));
                if (n < static_cast<long long>(vocabulary.size())) id = static_cast<std::int32_t>(n);
                if (id < 0) throw GrammarError("grammar: token " + text + " is outside the vocabulary of " + std::to_string(vocabulary.size()) + " ids");
            } else {
                id = vocabulary.special_id(text);
                if (id < 0) throw GrammarError("grammar: " + text + " is not a special token of the vocabulary");
            }
            ids.push_back(id);
        }
        return ids;
    }

    std::string gbnf_;
    std::unique_ptr<detail::GrammarAutomaton> automaton_;
};

/// One reply's progress through a Constraint. `end_ids` (the reply's end tokens) are allowed
/// exactly where the grammar may end; after one of them nothing is.
class GrammarMatcher {
public:
    GrammarMatcher(std::shared_ptr<const Constraint> constraint, std::vector<std::int32_t> end_ids)
        : constraint_(std::move(constraint)), end_ids_(std::move(end_ids)) {
        if (!constraint_) throw InvalidArgument("GrammarMatcher: no constraint");
        states_.push_back(detail::GrammarAutomaton::kStart);
        mask_.resize((constraint_->vocabulary().size() + 63) / 64);
    }

    /// The ids allowed next, one bit each (bit i%64 of word i/64), with the ids of `also` added.
    /// GrammarError when none is: the grammar needs text that no token spells.
    std::span<const std::uint64_t> allowed(std::span<const std::int32_t> also = {}) {
        if (ended_) {
            std::fill(mask_.begin(), mask_.end(), 0);
        } else {
            constraint_->automaton().fill_mask(states_.back(), mask_);
            const bool end = can_end();
            for (const std::int32_t id : end_ids_) set_bit(id, end);
            for (const std::int32_t id : also) set_bit(id, true);
        }
        if (std::all_of(mask_.begin(), mask_.end(), [](std::uint64_t w) { return w == 0; }))
            throw GrammarError(ended_ ? "grammar: the reply has already ended" : "grammar: no token of the vocabulary can continue the text here");
        return mask_;
    }

    bool allows(std::int32_t id) const {
        if (ended_) return false;
        if (is_end(id)) return can_end();
        return constraint_->automaton().walk_id(states_.back(), id) != detail::GrammarAutomaton::kDead;
    }

    /// Advances over `id`; GrammarError when the grammar does not allow it here.
    void accept(std::int32_t id) {
        if (!allows(id))
            throw GrammarError("grammar: token " + std::to_string(id) + " is not allowed here" + (ended_ ? " (the reply has ended)" : ""));
        if (is_end(id)) {
            ended_ = true;
            ended_at_ = states_.size();
            states_.push_back(states_.back());
            return;
        }
        states_.push_back(static_cast<std::uint32_t>(constraint_->automaton().walk_id(states_.back(), id)));
    }

    /// Forgets the last `n` accepted ids.
    void rollback(std::size_t n) {
        if (n > accepted())
            throw InvalidArgument("GrammarMatcher: cannot roll back " + std::to_string(n) + " ids, only " + std::to_string(accepted()) +
                                  " were accepted");
        states_.resize(states_.size() - n);
        if (ended_ && states_.size() <= ended_at_) ended_ = false;
    }

    std::size_t accepted() const { return states_.size() - 1; }
    /// Whether the text so far is a complete sentence of the grammar.
    bool can_end() const { return !ended_ && constraint_->automaton().can_end(states_.back()); }
    /// Whether some character may still follow (false: the reply can only end here).
    bool can_continue() const { return !ended_ && constraint_->automaton().can_continue(states_.back()); }
    bool ended() const { return ended_; }
    const Constraint& constraint() const { return *constraint_; }

private:
    bool is_end(std::int32_t id) const { return std::find(end_ids_.begin(), end_ids_.end(), id) != end_ids_.end(); }
    void set_bit(std::int32_t id, bool on) {
        if (id < 0 || static_cast<std::size_t>(id) >= mask_.size() * 64) return;
        const std::uint64_t bit = std::uint64_t{1} << (id & 63);
        auto& word = mask_[static_cast<std::size_t>(id) >> 6];
        word = on ? word | bit : word & ~bit;
    }

    std::shared_ptr<const Constraint> constraint_;
    std::vector<std::int32_t> end_ids_;
    std::vector<std::uint32_t> states_;  ///< the state before any id, then after each accepted one
    std::vector<std::uint64_t> mask_;
    bool ended_ = false;
    std::size_t ended_at_ = 0;
};

}  // namespace GEMMA4_ABI
}  // namespace gemma4
