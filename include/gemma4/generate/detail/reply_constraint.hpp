// A reply's grammar constraint as the generation core applies it: the matcher's mask before each
// sample, the sampled id after, a thought channel left free, and drafts cut where the grammar
// stops them.
#pragma once

#include <gemma4/abi.hpp>

#include <gemma4/generate/generate_options.hpp>
#include <gemma4/generate/sampler.hpp>
#include <gemma4/grammar/constraint.hpp>

#include <array>
#include <cstdint>
#include <span>
#include <vector>

namespace gemma4 {
inline namespace GEMMA4_ABI {
namespace detail {

class ReplyConstraint {
public:
    /// `end_ids`: the ids that end the reply, allowed where the grammar is complete.
    ReplyConstraint(const GenerateOptions& options, std::vector<std::int32_t> end_ids)
        : matcher_(options.constraint, std::move(end_ids)), channel_(options.thought_channel) {
        if ((channel_[0] < 0) != (channel_[1] < 0))
            throw InvalidArgument("GenerateOptions::thought_channel: give both ids (start, end) or neither");
        for (const std::int32_t id : options.constraint_prefix) {
            if (!matcher_.allows(id))
                throw GrammarError("GenerateOptions::constraint_prefix: the grammar does not allow id " + std::to_string(id) + " there");
            matcher_.accept(id);
        }
        if (!options.constraint_prefix.empty()) channel_used_ = true;  // the answer has begun
    }

    /// Restricts the sampler's next draw to what the grammar allows (and, before anything else,
    /// the start of a thought channel); inside the channel, nothing is restricted.
    void restrict(Sampler& sampler) {
        if (in_channel_) return;
        const bool may_open = channel_[0] >= 0 && !channel_used_ && matcher_.accepted() == 0;
        sampler.allow_only_next(matcher_.allowed(may_open ? std::span<const std::int32_t>(channel_.data(), 1) : std::span<const std::int32_t>{}));
    }

    /// Advances over the sampled id.
    void accept(std::int32_t id) {
        if (in_channel_) {
            in_channel_ = id != channel_[1];
        } else if (id == channel_[0] && !channel_used_ && matcher_.accepted() == 0) {
            in_channel_ = channel_used_ = true;
        } else {
            matcher_.accept(id);
        }
    }

    /// Whether the grammar can go on with more text (false: only an end id may come).
    bool can_continue() const { return in_channel_ || matcher_.can_continue(); }

    /// Cuts `draft` before its first id that the grammar would refuse: the target's masked
    /// sample can never equal it, so verifying it and what follows would be wasted.
    void trim(std::vector<std::int32_t>& draft) {
        if (in_channel_) return;
        std::size_t kept = 0;
        while (kept < draft.size() && matcher_.allows(draft[kept]) && !matcher_.ended()) matcher_.accept(draft[kept++]);
        matcher_.rollback(kept);
        draft.resize(kept);
    }

private:
    GrammarMatcher matcher_;
    std::array<std::int32_t, 2> channel_;
    bool in_channel_ = false, channel_used_ = false;
};

}  // namespace detail
}  // namespace GEMMA4_ABI
}  // namespace gemma4
