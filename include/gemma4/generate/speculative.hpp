// Speculative decoding: a drafter proposes k ids, the target runs [last, d1 … dk] as one forward
// step (the weights are streamed once for all k + 1 rows) and samples each row with the
// request's own sampler, in order. It keeps a draft while the sample equals it and emits the
// first sample that differs, or a bonus id when all k were kept; the KV cache then forgets the
// positions of the rejected drafts (KVCache::truncate).
//
// This is speculative sampling with a one-hot draft distribution, so it is lossless: each
// emitted id is a sample of the target's own distribution given the ids before it, drawn with
// the same random draws in the same order as plain decoding. With equal logits (our batched
// rows equal single rows bit for bit) the output is the plain decode's, token for token, for
// greedy and sampled decoding alike.
#pragma once

#include <gemma4/abi.hpp>

#include <gemma4/config.hpp>
#include <gemma4/error.hpp>
#include <gemma4/generate/drafter.hpp>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

namespace gemma4 {
inline namespace GEMMA4_ABI {

struct SpeculativeOptions {
    /// Proposes the ids to verify; null: plain decoding. Not owned.
    Drafter* drafter = nullptr;
    /// Ids drafted per step at most (k). The step costs about one decode step for small k.
    std::int64_t draft_max = 3;
    /// A draft shorter than this is not verified: the step decodes one id as usual.
    std::int64_t draft_min = 0;
    /// Passed to the drafter: it stops drafting where its top-1 probability falls below this.
    double p_min = 0;

    bool enabled() const { return drafter != nullptr; }

    /// InvalidArgument naming the field.
    void validate() const {
        if (!drafter) return;
        if (draft_max < 1) throw InvalidArgument("speculative decoding: draft_max (--draft-max) must be >= 1, got " + std::to_string(draft_max));
        if (draft_min < 0 || draft_min > draft_max)
            throw InvalidArgument("speculative decoding: draft_min (--draft-min) must be in [0, draft_max = " + std::to_string(draft_max) +
                                  "], got " + std::to_string(draft_min));
        if (!(p_min >= 0.0 && p_min <= 1.0))
            throw InvalidArgument("speculative decoding: p_min (--draft-p-min) must be in [0, 1], got " + std::to_string(p_min));
    }
};

namespace detail {

/// How many ids a step may draft: at most draft_max, and no more than could be emitted (k drafts
/// emit up to k + 1 of the `ids_left` ids max_new_tokens allows) or written (k + 1 of the
/// `positions_left` positions the context has left).
inline std::int64_t draft_budget(const SpeculativeOptions& options, std::int64_t ids_left, std::int64_t positions_left) {
    return std::min({options.draft_max, ids_left - 1, positions_left - 1});
}

/// The ids of a draft the target can verify: at most `budget` of them, cut before the first
/// image/audio placeholder (it stands for a soft token that a draft cannot supply, and is never
/// sampled); none at all when fewer than draft_min remain. An id outside the vocabulary is a
/// drafter's bug: InvalidArgument.
inline void trim_draft(std::vector<std::int32_t>& draft, std::int64_t budget, const SpeculativeOptions& options,
                       const Gemma4Config& c) {
    if (static_cast<std::int64_t>(draft.size()) > budget) draft.resize(static_cast<std::size_t>(std::max<std::int64_t>(budget, 0)));
    for (std::size_t i = 0; i < draft.size(); ++i) {
        const std::int32_t id = draft[i];
        if (id < 0 || id >= c.vocab_size)
            throw InvalidArgument("speculative decoding: the drafter proposed id " + std::to_string(id) + ", outside the vocabulary [0, " +
                                  std::to_string(c.vocab_size) + ")");
        if (id == c.tokens.image || id == c.tokens.audio || id == c.tokens.video) {
            draft.resize(i);
            break;
        }
    }
    if (static_cast<std::int64_t>(draft.size()) < options.draft_min) draft.clear();
}

}  // namespace detail

}  // namespace GEMMA4_ABI
}  // namespace gemma4
