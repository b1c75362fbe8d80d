// Token sampling from one step's logits: penalties, suppressed ids, temperature, top-k, top-p,
// min-p, then a draw from a seeded generator whose output is fixed by this header alone, so a
// seed reproduces the same tokens on every platform and standard library.
//
// The order of operations follows the Hugging Face logits processors and warpers:
// repetition penalty → presence/frequency penalty → suppress_tokens → temperature → top-k →
// top-p → min-p → draw.
#pragma once

#include <gemma4/abi.hpp>

#include <gemma4/detail/random.hpp>
#include <gemma4/error.hpp>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace gemma4 {
inline namespace GEMMA4_ABI {

/// How to pick the next token. Every field's neutral value switches that step off.
struct SamplingParams {
    double temperature = 1.0;         ///< 0 = greedy argmax (lowest id among equal maxima)
    std::int32_t top_k = 0;           ///< keep exactly the k most likely (lower ids win ties); 0 = off
    double top_p = 1.0;               ///< keep the smallest set with probability mass >= p; 1 = off
    double min_p = 0.0;               ///< drop tokens less likely than min_p × the best; 0 = off
    double repetition_penalty = 1.0;  ///< HF: positive logits ÷, negative ×, over prompt + generated
    double presence_penalty = 0.0;    ///< OpenAI: minus this once for every generated token id
    double frequency_penalty = 0.0;   ///< OpenAI: minus this × how often the id was generated
    std::uint64_t seed = 0;
    std::vector<std::int32_t> suppress_tokens{};  ///< never sampled (logit set to -inf)
};

namespace detail {

/// The token ids the penalties look at: every id of the prompt and of the reply so far (for the
/// repetition penalty) and how often each id was generated (for presence/frequency). Dense
/// tables indexed by id plus the list of ids in them, so that recording an id allocates nothing
/// once reserve() has sized them for the vocabulary.
class TokenHistory {
public:
    /// Records an id of the prompt or the reply.
    void see(std::int32_t id) {
        grow(id);
        if (!seen_flag_[static_cast<std::size_t>(id)]) {
            seen_flag_[static_cast<std::size_t>(id)] = 1;
            seen_.push_back(id);
        }
    }
    /// Records an id of the reply (see() it as well).
    void generate(std::int32_t id) {
        see(id);
        if (count_[static_cast<std::size_t>(id)]++ == 0) generated_.push_back(id);
    }
    /// Distinct ids seen, in the order first seen.
    const std::vector<std::int32_t>& seen() const { return seen_; }
    /// Distinct ids generated, in the order first generated.
    const std::vector<std::int32_t>& generated() const { return generated_; }
    std::int32_t generated_count(std::int32_t id) const {
        return static_cast<std::size_t>(id) < count_.size() ? count_[static_cast<std::size_t>(id)] : 0;
    }
    /// Room for every id below `vocab`.
    void reserve(std::size_t vocab) {
        if (seen_flag_.size() < vocab) {
            seen_flag_.resize(vocab);
            count_.resize(vocab);
        }
        seen_.reserve(vocab);
        generated_.reserve(vocab);
    }
    void clear() {
        for (const std::int32_t id : seen_) seen_flag_[static_cast<std::size_t>(id)] = 0;
        for (const std::int32_t id : generated_) count_[static_cast<std::size_t>(id)] = 0;
        seen_.clear();
        generated_.clear();
    }

private:
    void grow(std::int32_t id) {
        const auto need = static_cast<std::size_t>(id) + 1;
        if (seen_flag_.size() < need) {
            const std::size_t size = std::max(need, 2 * seen_flag_.size());
            seen_flag_.resize(size);
            count_.resize(size);
        }
    }

    std::vector<std::uint8_t> seen_flag_;
    std::vector<std::int32_t> count_;
    std::vector<std::int32_t> seen_, generated_;
};

inline void check_token_id(std::int32_t id, std::size_t vocab, const char* what) {
    if (id < 0 || static_cast<std::size_t>(id) >= vocab)
        throw InvalidArgument(std::string("Sampler: ") + what + " token id " + std::to_string(id) +
                              " is outside the vocabulary of " + std::to_string(vocab) + " logits");
}

/// Applies the repetition, presence and frequency penalties to `scores` in place. Ids beyond
/// the vocabulary are an error: they mean the history belongs to another model.
inline void apply_penalties(std::span<float> scores, const SamplingParams& params,
                            const TokenHistory& history) {
    if (params.repetition_penalty != 1.0) {
        const double penalty = params.repetition_penalty;
        for (const std::int32_t id : history.seen()) {
            check_token_id(id, scores.size(), "seen");
            float& s = scores[static_cast<std::size_t>(id)];
            // Dividing a negative logit would raise it; HF multiplies so both signs move down.
            s = static_cast<float>(s < 0 ? s * penalty : s / penalty);
        }
    }
    if (params.presence_penalty != 0.0 || params.frequency_penalty != 0.0) {
        for (const std::int32_t id : history.generated()) {
            const std::int32_t count = history.generated_count(id);
            check_token_id(id, scores.size(), "generated");
            float& s = scores[static_cast<std::size_t>(id)];
            s = static_cast<float>(s - params.presence_penalty - params.frequency_penalty * count);
        }
    }
}

/// Sets the logits of `suppress_tokens` to -inf. Ids beyond the vocabulary are skipped, as
/// HF's SuppressTokensLogitsProcessor does, so a checkpoint's list also fits smaller test models.
inline void apply_suppression(std::span<float> scores, std::span<const std::int32_t> suppress_tokens) {
    for (const std::int32_t id : suppress_tokens)
        if (id >= 0 && static_cast<std::size_t>(id) < scores.size())
            scores[static_cast<std::size_t>(id)] = -std::numeric_limits<float>::infinity();
}

/// A token still in the running, with its unnormalised probability exp((score − max) / T).
struct Candidate {
    std::int32_t id;
    float score;
    double weight;
};

/// Most likely first; equal logits keep the lower id first so every cut is deterministic.
inline bool more_likely(const Candidate& a, const Candidate& b) {
    return a.score != b.score ? a.score > b.score : a.id < b.id;
}

/// Index of the largest score, the lowest such id on ties. Throws on NaN or +inf (a broken
/// forward pass) and when every score is -inf (nothing left to sample).
inline std::size_t argmax_checked(std::span<const float> scores) {
    if (scores.empty()) throw InvalidArgument("Sampler: logits are empty");
    std::size_t best = 0;
    float best_score = -std::numeric_limits<float>::infinity();
    for (std::size_t i = 0; i < scores.size(); ++i) {
        const float s = scores[i];
        // One comparison per logit (a step of 16 sequences scans 4 M of them): true for a new
        // maximum and for NaN, which then alone pay the checks. Not `<`: the first (lowest) id
        // of equal maxima stays.
        if (!(s <= best_score)) [[unlikely]] {
            if (std::isnan(s) || s == std::numeric_limits<float>::infinity())
                throw InvalidArgument("Sampler: logit of token " + std::to_string(i) + " is " +
                                      (std::isnan(s) ? "NaN" : "+inf"));
            best = i;
            best_score = s;
        }
    }
    if (best_score == -std::numeric_limits<float>::infinity())
        throw InvalidArgument("Sampler: every token is suppressed or has logit -inf; nothing to sample");
    return best;
}

/// The k most likely of `scores` into `out`, most likely first (lower ids win ties). A min-heap
/// of the k best seen so far: most tokens fail the single comparison with its root, so this is
/// one pass over the vocabulary with no index buffer and no sort of it.
inline void top_k_candidates(std::span<const float> scores, std::size_t k, std::vector<Candidate>& out) {
    out.reserve(k);
    for (std::size_t i = 0; i < scores.size(); ++i) {
        const float s = scores[i];
        if (s == -std::numeric_limits<float>::infinity()) continue;
        if (out.size() < k) {
            out.push_back({static_cast<std::int32_t>(i), s, 0.0});
            std::push_heap(out.begin(), out.end(), more_likely);
        } else if (s > out.front().score) {  // ids ascend, so an equal score never wins
            std::pop_heap(out.begin(), out.end(), more_likely);
            out.back() = {static_cast<std::int32_t>(i), s, 0.0};
            std::push_heap(out.begin(), out.end(), more_likely);
        }
    }
    std::sort(out.begin(), out.end(), more_likely);
}

/// Keeps the smallest most-likely-first prefix of `out` whose weight reaches top_p of the total.
/// The first `sorted` candidates are already in order; the rest is sorted only as far as the
/// nucleus reaches, in nth_element chunks.
inline void keep_nucleus(std::vector<Candidate>& out, double top_p, std::size_t sorted) {
    double total = 0.0;
    for (const auto& c : out) total += c.weight;
    const double target = top_p * total;
    std::size_t chunk = 1024;
    double mass = 0.0;
    std::size_t keep = out.size();
    for (std::size_t i = 0; i < out.size(); ++i) {
        if (i == sorted) {
            const std::size_t end = std::min(out.size(), sorted + chunk);
            std::nth_element(out.begin() + static_cast<std::ptrdiff_t>(sorted), out.begin() + static_cast<std::ptrdiff_t>(end - 1),
                             out.end(), more_likely);
            std::sort(out.begin() + static_cast<std::ptrdiff_t>(sorted), out.begin() + static_cast<std::ptrdiff_t>(end), more_likely);
            sorted = end;
            chunk *= 4;
        }
        mass += out[i].weight;
        if (mass >= target) {
            keep = i + 1;
            break;
        }
    }
    out.resize(keep);
}

/// The candidates that survive temperature, top-k, top-p and min-p, with their weights.
/// Requires temperature > 0. When top_p or top_k is on, `out` is ordered most likely first.
inline void filter_candidates(std::span<const float> scores, const SamplingParams& params,
                              std::vector<Candidate>& out) {
    const std::size_t best = argmax_checked(scores);
    const float max_score = scores[best];
    // Divide rather than multiply by 1/T: for a subnormal T the reciprocal overflows and the
    // best token's weight would become 0 × inf = NaN.
    const double temperature = params.temperature;
    const auto weight_of = [&](float s) {
        return std::exp((static_cast<double>(s) - max_score) / temperature);
    };
    const std::size_t vocab = scores.size();

    out.clear();
    const bool top_k_on = params.top_k > 0 && static_cast<std::size_t>(params.top_k) < vocab;
    if (top_k_on) {
        top_k_candidates(scores, static_cast<std::size_t>(params.top_k), out);
        for (auto& c : out) c.weight = weight_of(c.score);
    } else {
        out.reserve(vocab);
        for (std::size_t i = 0; i < vocab; ++i) {
            const float s = scores[i];
            if (s == -std::numeric_limits<float>::infinity()) continue;
            out.push_back({static_cast<std::int32_t>(i), s, weight_of(s)});
        }
    }
    // Weights that underflow to 0 can never be drawn; dropping them keeps the lists short.
    out.erase(std::remove_if(out.begin(), out.end(), [](const Candidate& c) { return c.weight <= 0.0; }),
              out.end());
    if (params.top_p < 1.0) keep_nucleus(out, params.top_p, top_k_on ? out.size() : 0);
    if (params.min_p > 0.0) {
        // The best token has weight exp(0) = 1, so min_p × p_best is min_p in weight units.
        out.erase(std::remove_if(out.begin(), out.end(),
                                 [&](const Candidate& c) { return c.weight < params.min_p; }),
                  out.end());
    }
}

inline void validate(const SamplingParams& p) {
    const auto fail = [](const char* name, double value, const char* rule) {
        char text[32];
        std::snprintf(text, sizeof text, "%g", value);
        throw InvalidArgument(std::string("SamplingParams: ") + name + " = " + text + " " + rule);
    };
    if (!(p.temperature >= 0.0) || std::isinf(p.temperature))
        fail("temperature", p.temperature, "must be finite and >= 0");
    if (p.top_k < 0) fail("top_k", p.top_k, "must be >= 0");
    if (!(p.top_p > 0.0 && p.top_p <= 1.0)) fail("top_p", p.top_p, "must be in (0, 1]");
    if (!(p.min_p >= 0.0 && p.min_p <= 1.0)) fail("min_p", p.min_p, "must be in [0, 1]");
    if (!(p.repetition_penalty > 0.0) || std::isinf(p.repetition_penalty))
        fail("repetition_penalty", p.repetition_penalty, "must be finite and > 0");
    if (!std::isfinite(p.presence_penalty)) fail("presence_penalty", p.presence_penalty, "must be finite");
    if (!std::isfinite(p.frequency_penalty)) fail("frequency_penalty", p.frequency_penalty, "must be finite");
    for (const std::int32_t id : p.suppress_tokens)
        if (id < 0) fail("suppress_tokens", id, "contains a negative token id");
}

}  // namespace detail

/// Picks tokens from logits according to SamplingParams. One Sampler follows one generation:
/// give it the prompt (set_prompt), sample, and accept() each token that is kept.
class Sampler {
public:
    explicit Sampler(SamplingParams params = {}) : params_(std::move(params)), rng_(params_.seed) {
        detail::validate(params_);
    }

    const SamplingParams& params() const { return params_; }

    /// The context the reply continues; replaces any earlier prompt and forgets generated ids.
    void set_prompt(std::span<const std::int32_t> prompt_ids) {
        history_.clear();
        for (const std::int32_t id : prompt_ids) {
            check_non_negative(id);
            history_.see(id);
        }
    }

    /// Records a token that became part of the reply.
    void accept(std::int32_t id) {
        check_non_negative(id);
        history_.generate(id);
    }

    /// The random generator's state, to continue its sequence in another Sampler (a Session
    /// carries it from one call to the next, and into its saved file).
    std::array<std::uint64_t, 4> rng_state() const { return rng_.state(); }
    void set_rng_state(const std::array<std::uint64_t, 4>& state) { rng_.set_state(state); }

    /// Forgets prompt and reply and restarts the random sequence from the seed.
    void reset() {
        history_.clear();
        rng_.reseed(params_.seed);
    }

    /// The next token for these logits (one per vocabulary entry). Does not accept() it.
    std::int32_t sample(std::span<const float> logits) {
        std::span<const float> scores = logits;
        history_.reserve(logits.size());  // once: later ids are recorded without allocating
        if (needs_transform()) {
            transformed_.assign(logits.begin(), logits.end());
            detail::apply_penalties(transformed_, params_, history_);
            detail::apply_suppression(transformed_, params_.suppress_tokens);
            scores = transformed_;
        }
        if (params_.temperature == 0.0) return static_cast<std::int32_t>(detail::argmax_checked(scores));

        detail::filter_candidates(scores, params_, candidates_);
        double total = 0.0;
        for (const auto& c : candidates_) total += c.weight;
        const double u = rng_.uniform() * total;
        double cumulative = 0.0;
        for (const auto& c : candidates_) {
            cumulative += c.weight;
            if (u < cumulative) return c.id;
        }
        return candidates_.back().id;  // u rounded up to the total: the last token is the fair pick
    }

    /// The same for double logits (Model<double>): sampled from their float values.
    std::int32_t sample(std::span<const double> logits) {
        as_float_.assign(logits.begin(), logits.end());
        return sample(std::span<const float>(as_float_));
    }

private:
    bool needs_transform() const {
        return params_.repetition_penalty != 1.0 || params_.presence_penalty != 0.0 ||
               params_.frequency_penalty != 0.0 || !params_.suppress_tokens.empty();
    }
    static void check_non_negative(std::int32_t id) {
        if (id < 0) throw InvalidArgument("Sampler: token id " + std::to_string(id) + " is negative");
    }

    SamplingParams params_;
    detail::Xoshiro256 rng_;
    detail::TokenHistory history_;
    std::vector<float> transformed_;
    std::vector<float> as_float_;
    std::vector<detail::Candidate> candidates_;
};

}  // namespace GEMMA4_ABI
}  // namespace gemma4
