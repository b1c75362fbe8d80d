// Drafters for speculative decoding: a drafter proposes the next few ids of a sequence, the
// target model checks them all in one forward step, and every id the target itself would have
// sampled is kept (generate/speculative.hpp). Drafting is cheap guessing; only the target
// decides what is emitted, so a bad drafter costs speed, never correctness.
//
// Three drafters: prompt lookup (no second model: continue the latest earlier occurrence of the
// context's last n-gram), the oracle (replays a known continuation, for tests and benchmarks),
// and the MTP assistant (generate/mtp_drafter.hpp), which reads the target's hidden state and KV
// cache: what a drafter may read of the target is passed in DraftRequest::target.
#pragma once

#include <gemma4/abi.hpp>

#include <gemma4/error.hpp>
#include <gemma4/generate/sampler.hpp>
#include <gemma4/kv/kv_cache.hpp>
#include <gemma4/model/model.hpp>

#include <algorithm>
#include <cstdint>
#include <span>
#include <string>
#include <utility>
#include <variant>
#include <vector>

namespace gemma4 {
inline namespace GEMMA4_ABI {

/// The target's state behind one draft request, for drafters that read it (the MTP assistant).
template <class T>
struct DraftTarget {
    const Model<T>* model = nullptr;
    const KVCache<T>* cache = nullptr;
    SeqId seq = -1;             ///< the sequence in `cache`: the context's ids but its last
    std::span<const T> hidden;  ///< final-normed hidden state at the cache's last position
};

/// One sequence to draft for.
struct DraftRequest {
    /// Every id of the sequence so far; the last one is sampled and not yet in the target's cache.
    std::span<const std::int32_t> context;
    /// Propose at most this many ids (>= 1).
    std::int64_t max_tokens = 1;
    /// Drafters that know their own probabilities stop before an id whose probability is below it.
    double p_min = 0;
    std::variant<std::monostate, DraftTarget<float>, DraftTarget<double>> target{};
};

/// Proposes continuations. A drafter is used by one generating thread at a time.
class Drafter {
public:
    virtual ~Drafter() = default;
    /// drafts[i] = up to requests[i].max_tokens ids that may follow requests[i].context (none
    /// is fine: the step then decodes one token as usual). All requests of one call are for
    /// distinct sequences decoded in the same step, so a drafter may batch them.
    virtual void draft(std::span<const DraftRequest> requests, std::span<std::vector<std::int32_t>> drafts) = 0;
};

/// Prompt lookup: finds the latest earlier occurrence of the context's last n ids, for the
/// largest n in [1, max_ngram] that has one, and proposes the ids that followed it. No model,
/// no probabilities: it pays off when the output repeats its input (code edits, quotes,
/// summaries) and costs one verification row per wrong guess otherwise.
class PromptLookupDrafter final : public Drafter {
public:
    explicit PromptLookupDrafter(std::int64_t max_ngram = 3) : max_ngram_(max_ngram) {
        if (max_ngram < 1) throw InvalidArgument("prompt lookup: the n-gram size (--lookup) must be >= 1, got " + std::to_string(max_ngram));
    }

    void draft(std::span<const DraftRequest> requests, std::span<std::vector<std::int32_t>> drafts) override {
        for (std::size_t i = 0; i < requests.size(); ++i) drafts[i] = lookup(requests[i].context, requests[i].max_tokens);
    }

    /// The continuation after the latest earlier match of the context's longest matching suffix.
    std::vector<std::int32_t> lookup(std::span<const std::int32_t> context, std::int64_t max_tokens) const {
        const auto n = static_cast<std::int64_t>(context.size());
        for (std::int64_t g = std::min(max_ngram_, n - 1); g >= 1; --g) {
            const auto suffix = context.subspan(static_cast<std::size_t>(n - g));
            // Latest start first: recent text predicts the next ids best. A match must end
            // before the suffix itself so that at least one id follows it.
            for (std::int64_t start = n - g - 1; start >= 0; --start) {
                if (!std::equal(suffix.begin(), suffix.end(), context.begin() + start)) continue;
                // Copy what followed; past the context's end the copy reads its own output, so
                // a repeating pattern continues for the whole draft (an overlapping copy).
                std::vector<std::int32_t> draft;
                for (std::int64_t i = start + g; static_cast<std::int64_t>(draft.size()) < max_tokens; ++i)
                    draft.push_back(i < n ? context[static_cast<std::size_t>(i)] : draft[static_cast<std::size_t>(i - n)]);
                return draft;
            }
        }
        return {};
    }

private:
    std::int64_t max_ngram_;
};

/// Replays a known id sequence: for a context that is a prefix of `expected`, it proposes the
/// ids that follow in `expected`, each one right with probability `accept` (a wrong one is
/// replaced by another id), so the target accepts a chosen share of the drafts. Tests use it at
/// accept = 1 (every draft accepted); the bench uses it to measure the mechanism at a given
/// acceptance rate, since random weights make a real drafter's acceptance meaningless.
class OracleDrafter final : public Drafter {
public:
    explicit OracleDrafter(std::vector<std::int32_t> expected, double accept = 1.0, std::uint64_t seed = 1)
        : expected_(std::move(expected)), accept_(accept), random_(seed) {
        if (!(accept >= 0.0 && accept <= 1.0)) throw InvalidArgument("oracle drafter: accept must be in [0, 1], got " + std::to_string(accept));
    }

    void draft(std::span<const DraftRequest> requests, std::span<std::vector<std::int32_t>> drafts) override {
        for (std::size_t i = 0; i < requests.size(); ++i) {
            const auto context = requests[i].context;
            drafts[i].clear();
            if (context.size() >= expected_.size() || !std::equal(context.begin(), context.end(), expected_.begin())) continue;
            const auto end = std::min(expected_.size(), context.size() + static_cast<std::size_t>(requests[i].max_tokens));
            for (std::size_t j = context.size(); j < end; ++j) {
                const std::int32_t id = expected_[j];
                drafts[i].push_back(random_.uniform() < accept_ ? id : (id == 0 ? 1 : id - 1));
            }
        }
    }

private:
    std::vector<std::int32_t> expected_;
    double accept_;
    /// Its own stream: the choice of right and wrong ids must not move the sampler's.
    detail::Xoshiro256 random_;
};

}  // namespace GEMMA4_ABI
}  // namespace gemma4
