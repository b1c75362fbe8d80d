// Token sampling from one step's logits: penalties, logit biases, suppressed ids, temperature,
// top-k, top-p, min-p, then a draw from a seeded generator whose output is fixed by this header
// alone, so a seed reproduces the same tokens on every platform and standard library.
//
// The order of operations follows the Hugging Face logits processors and warpers:
//   1. repetition penalty (HF's RepetitionPenaltyLogitsProcessor): each distinct id among the
//      last repeat_last_n ids of prompt + reply (llama.cpp's window; -1: all of them) has its
//      logit l divided by the penalty if l > 0, multiplied if l < 0;
//   2. presence/frequency penalty (OpenAI): l − presence·[c > 0] − frequency·c, where c counts
//      the id in the reply (not the prompt, not windowed);
//   3. logit_bias (OpenAI): l + bias, bias in [−100, 100];
//   4. suppress_tokens, the ids of Sampler::suppress_next, and those a grammar's mask
//      (Sampler::allow_only_next) leaves out: l = −inf;
//   5. temperature → top-k → top-p → min-p → draw.
// Each value is computed in double from the float logit and stored back as float.
//
// Log-probabilities (Sampler::set_logprobs) are the log-softmax, in double, of the scores after
// steps 1–4 and before step 5: log p(i) = s_i − max − log Σ_j exp(s_j − max). Temperature and the
// top-k/top-p/min-p cuts do not change them, so a greedy request and a sampled one report the same
// numbers for the same logits, and an id that steps 1–4 set to −inf (suppressed, outside a
// grammar's mask) has log p = −inf and is never among the top alternatives.
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

/// A bias added to one token's logit (SamplingParams::logit_bias).
struct TokenBias {
    std::int32_t id;
    double bias;  ///< in [-100, 100]; as in OpenAI, -100 bans the id and +100 forces it in practice
};

/// An id with its log-probability (Sampler::set_logprobs).
struct IdLogprob {
    std::int32_t id;
    double logprob;
};

/// The most top alternatives a sampler reports per sampled id (OpenAI's top_logprobs bound).
inline constexpr std::int32_t kMaxTopLogprobs = 20;

/// The longest repetition window (SamplingParams::repeat_last_n): its ring of ids is allocated
/// whole when the sampler is made. Longer than any Gemma 4 context.
inline constexpr std::int32_t kMaxRepeatLastN = 1 << 20;

/// How to pick the next token. Every field's neutral value switches that step off.
struct SamplingParams {
    double temperature = 1.0;         ///< 0 = greedy argmax (lowest id among equal maxima)
    std::int32_t top_k = 0;           ///< keep exactly the k most likely (lower ids win ties); 0 = off
    double top_p = 1.0;               ///< keep the smallest set with probability mass >= p; 1 = off
    double min_p = 0.0;               ///< drop tokens less likely than min_p × the best; 0 = off
    double repetition_penalty = 1.0;  ///< HF: positive logits ÷, negative ×, once per distinct id of the window
    /// llama.cpp's window of the repetition penalty: the last N ids of prompt + reply; -1 = all
    /// of them (HF's rule), 0 = no id (the penalty is off)
    std::int32_t repeat_last_n = -1;
    double presence_penalty = 0.0;    ///< OpenAI: minus this once for every generated token id
    double frequency_penalty = 0.0;   ///< OpenAI: minus this × how often the id was generated
    std::vector<TokenBias> logit_bias{};  ///< OpenAI: added to the ids' logits; an id listed twice gets both
    std::uint64_t seed = 0;
    std::vector<std::int32_t> suppress_tokens{};  ///< never sampled (logit set to -inf)
};

namespace detail {

/// The token ids the penalties look at: every id of the prompt and of the reply so far, or the
/// last `window` of them (for the repetition penalty), and how often each id was generated (for
/// presence/frequency). Dense tables indexed by id plus the list of ids in them, and a ring of
/// the window's ids allocated whole by set_window, so that recording an id allocates nothing
/// once reserve() has sized the tables for the vocabulary.
class TokenHistory {
public:
    /// Records an id of the prompt or the reply.
    void see(std::int32_t id) {
        grow(id);
        if (!seen_flag_[static_cast<std::size_t>(id)]) {
            seen_flag_[static_cast<std::size_t>(id)] = 1;
            seen_.push_back(id);
        }
        if (window_ > 0) {
            ring_[static_cast<std::size_t>(position_ % window_)] = id;
            last_at_[static_cast<std::size_t>(id)] = position_;
        }
        ++position_;
    }
    /// Records an id of the reply (see() it as well).
    void generate(std::int32_t id) {
        see(id);
        if (count_[static_cast<std::size_t>(id)]++ == 0) generated_.push_back(id);
    }
    /// Distinct ids seen, in the order first seen.
    const std::vector<std::int32_t>& seen() const { return seen_; }
    /// Keeps the last `n` ids seen for for_each_recent(); -1: every id, 0: none. Forgets the history.
    void set_window(std::int32_t n) {
        clear();
        window_ = n;
        ring_.assign(static_cast<std::size_t>(std::max(n, 0)), 0);
        if (n > 0) last_at_.assign(seen_flag_.size(), 0);
    }
    /// Calls `f(id)` once for each distinct id among the last `window` ids seen (all of them
    /// without a window, in the order first seen).
    template <class F>
    void for_each_recent(F&& f) const {
        if (window_ < 0) {
            for (const std::int32_t id : seen_) f(id);
            return;
        }
        for (std::int64_t p = position_ - std::min<std::int64_t>(position_, window_); p < position_; ++p) {
            const std::int32_t id = ring_[static_cast<std::size_t>(p % window_)];
            if (last_at_[static_cast<std::size_t>(id)] == p) f(id);  // its latest place in the window: once per id
        }
    }
    /// Distinct ids generated, in the order first generated.
    const std::vector<std::int32_t>& generated() const { return generated_; }
    std::int32_t generated_count(std::int32_t id) const {
        return static_cast<std::size_t>(id) < count_.size() ? count_[static_cast<std::size_t>(id)] : 0;
    }
    /// Room for every id below `vocab`.
    void reserve(std::size_t vocab) {
        if (seen_flag_.size() < vocab) resize_tables(vocab);
        seen_.reserve(vocab);
        generated_.reserve(vocab);
    }
    /// Forgets every id; the window stays.
    void clear() {
        for (const std::int32_t id : seen_) seen_flag_[static_cast<std::size_t>(id)] = 0;
        for (const std::int32_t id : generated_) count_[static_cast<std::size_t>(id)] = 0;
        seen_.clear();
        generated_.clear();
        // The ring's older entries and last_at_ need no reset: for_each_recent reads only the
        // positions written since, each of which set its id's last_at_.
        position_ = 0;
    }

private:
    void grow(std::int32_t id) {
        const auto need = static_cast<std::size_t>(id) + 1;
        if (seen_flag_.size() < need) resize_tables(std::max(need, 2 * seen_flag_.size()));
    }
    void resize_tables(std::size_t size) {
        seen_flag_.resize(size);
        count_.resize(size);
        if (window_ > 0) last_at_.resize(size);
    }

    std::vector<std::uint8_t> seen_flag_;
    std::vector<std::int32_t> count_;
    std::vector<std::int32_t> seen_, generated_;
    std::int32_t window_ = -1;
    std::int64_t position_ = 0;         ///< ids seen since clear()
    std::vector<std::int32_t> ring_;    ///< id seen at position p, at p % window_
    std::vector<std::int64_t> last_at_; ///< each id's latest position (window_ > 0 only)
};

inline void check_token_id(std::int32_t id, std::size_t vocab, const char* what) {
    if (id < 0 || static_cast<std::size_t>(id) >= vocab)
        throw InvalidArgument(std::string("Sampler: ") + what + " token id " + std::to_string(id) +
                              " is outside the vocabulary of " + std::to_string(vocab) + " logits");
}

/// Applies the repetition, presence and frequency penalties to `scores` in place. The
/// repetition penalty's window is the history's (the Sampler sets it from repeat_last_n). Ids
/// beyond the vocabulary are an error: they mean the history belongs to another model.
inline void apply_penalties(std::span<float> scores, const SamplingParams& params,
                            const TokenHistory& history) {
    if (params.repetition_penalty != 1.0) {
        const double penalty = params.repetition_penalty;
        history.for_each_recent([&](std::int32_t id) {
            check_token_id(id, scores.size(), "seen");
            float& s = scores[static_cast<std::size_t>(id)];
            // Dividing a negative logit would raise it; HF multiplies so both signs move down.
            s = static_cast<float>(s < 0 ? s * penalty : s / penalty);
        });
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

/// Adds each bias to its id's logit. An id beyond the vocabulary is an error naming it: the
/// bias was meant for another model's tokens.
inline void apply_logit_bias(std::span<float> scores, std::span<const TokenBias> logit_bias) {
    for (const TokenBias& b : logit_bias) {
        check_token_id(b.id, scores.size(), "logit_bias");
        float& s = scores[static_cast<std::size_t>(b.id)];
        s = static_cast<float>(s + b.bias);
    }
}

/// Sets the logits of `suppress_tokens` to -inf. Ids beyond the vocabulary are skipped, as
/// HF's SuppressTokensLogitsProcessor does, so a checkpoint's list also fits smaller test models.
inline void apply_suppression(std::span<float> scores, std::span<const std::int32_t> suppress_tokens) {
    for (const std::int32_t id : suppress_tokens)
        if (id >= 0 && static_cast<std::size_t>(id) < scores.size())
            scores[static_cast<std::size_t>(id)] = -std::numeric_limits<float>::infinity();
}

/// Sets to -inf the logit of every id whose bit in `allowed` is clear (a grammar's mask). Whole
/// words at a time: most words of a mask are all ones or all zeros.
inline void apply_allowed_mask(std::span<float> scores, std::span<const std::uint64_t> allowed) {
    constexpr float kBanned = -std::numeric_limits<float>::infinity();
    for (std::size_t w = 0; w * 64 < scores.size(); ++w) {
        const std::uint64_t word = w < allowed.size() ? allowed[w] : 0;
        if (word == ~std::uint64_t{0}) continue;
        const std::size_t end = std::min(scores.size(), w * 64 + 64);
        if (word == 0) {
            std::fill(scores.begin() + static_cast<std::ptrdiff_t>(w * 64), scores.begin() + static_cast<std::ptrdiff_t>(end), kBanned);
            continue;
        }
        for (std::size_t i = w * 64; i < end; ++i)
            if (!((word >> (i - w * 64)) & 1)) scores[i] = kBanned;
    }
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

/// log Σ_j exp(s_j) over `scores`, whose largest value is `max` (finite): the normalizer of the
/// log-softmax, summed in double after subtracting the maximum so that nothing overflows. A −inf
/// score adds exp(−inf) = 0.
inline double log_sum_exp(std::span<const float> scores, float max) {
    double sum = 0.0;
    for (const float s : scores) sum += std::exp(static_cast<double>(s) - max);
    return max + std::log(sum);
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
    const auto fail = [](const std::string& name, double value, const std::string& rule) {
        char text[32];
        std::snprintf(text, sizeof text, "%g", value);
        throw InvalidArgument("SamplingParams: " + name + " = " + text + " " + rule);
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
    if (p.repeat_last_n < -1 || p.repeat_last_n > kMaxRepeatLastN)
        fail("repeat_last_n", p.repeat_last_n, "must be -1 (every id), 0 (off) or a window of at most " + std::to_string(kMaxRepeatLastN) + " ids");
    for (const TokenBias& b : p.logit_bias) {
        if (b.id < 0) fail("logit_bias", b.id, "contains a negative token id");
        if (!(b.bias >= -100.0 && b.bias <= 100.0))
            fail("logit_bias of token " + std::to_string(b.id), b.bias, "must be in [-100, 100]");
    }
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
        history_.set_window(params_.repeat_last_n);
    }

    const SamplingParams& params() const { return params_; }

    /// Ids that the next sample() also suppresses, besides suppress_tokens (the generation
    /// holds back its end ids this way until GenerateOptions::min_tokens). `ids` must stay
    /// valid until that call, which then forgets them.
    void suppress_next(std::span<const std::int32_t> ids) { suppress_next_ = ids; }
    /// The next sample() draws only among the ids whose bit is set in `mask` (bit i%64 of word
    /// i/64; ids past its end are not allowed): a grammar's mask, applied before every other
    /// step. `mask` must stay valid until then.
    void allow_only_next(std::span<const std::uint64_t> mask) { allow_only_next_ = mask; }

    /// From now on, every sample() also computes log-probabilities (the header's definition): of
    /// the sampled id (logprob()), and with `top` > 0 of the `top` most likely ids
    /// (top_logprobs()). -1 turns them off (the default: no cost at all); InvalidArgument outside
    /// -1..kMaxTopLogprobs.
    void set_logprobs(std::int32_t top) {
        if (top < -1 || top > kMaxTopLogprobs)
            throw InvalidArgument("Sampler: logprobs = " + std::to_string(top) + " must be -1 (off), 0 (the sampled id's) or up to " +
                                  std::to_string(kMaxTopLogprobs) + " top alternatives");
        logprobs_top_ = top;
        top_candidates_.reserve(static_cast<std::size_t>(std::max(top, 0)));  // once: sampling then allocates nothing
        top_logprobs_.reserve(static_cast<std::size_t>(std::max(top, 0)));
    }
    std::int32_t logprobs() const { return logprobs_top_; }
    /// After a sample() with log-probabilities on: the sampled id's.
    double logprob() const { return logprob_; }
    /// After a sample() with top alternatives on: the most likely ids, most likely first (lower ids
    /// first among equals), fewer than asked when fewer ids have a finite score.
    std::span<const IdLogprob> top_logprobs() const { return top_logprobs_; }

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
        const std::span<const float> scores = processed(logits);
        const std::int32_t id = params_.temperature == 0.0 ? static_cast<std::int32_t>(detail::argmax_checked(scores)) : draw(scores);
        if (logprobs_top_ >= 0) compute_logprobs(scores, id);
        return id;
    }

    /// The same for double logits (Model<double>): sampled from their float values.
    std::int32_t sample(std::span<const double> logits) {
        as_float_.assign(logits.begin(), logits.end());
        return sample(std::span<const float>(as_float_));
    }

private:
    /// The logits after steps 1–4 (the penalties, biases, suppression and mask of this sample):
    /// `logits` itself when none applies.
    std::span<const float> processed(std::span<const float> logits) {
        history_.reserve(logits.size());  // once: later ids are recorded without allocating
        const std::span<const std::int32_t> suppress_also = std::exchange(suppress_next_, {});
        const std::span<const std::uint64_t> allowed = std::exchange(allow_only_next_, {});
        if (!needs_transform() && suppress_also.empty() && allowed.empty()) return logits;
        transformed_.assign(logits.begin(), logits.end());
        if (!allowed.empty()) detail::apply_allowed_mask(transformed_, allowed);
        detail::apply_penalties(transformed_, params_, history_);
        detail::apply_logit_bias(transformed_, params_.logit_bias);
        detail::apply_suppression(transformed_, params_.suppress_tokens);
        detail::apply_suppression(transformed_, suppress_also);
        return transformed_;
    }

    /// Step 5 with temperature > 0: the cuts, then a draw from what is left.
    std::int32_t draw(std::span<const float> scores) {
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

    /// The log-softmax of `scores` at `id` and at the top alternatives: one pass for the maximum
    /// (the heap of the top ids finds it on the way), one for the sum of exponentials. The
    /// sampled id's value and its entry among the top are the same expression, so they are equal.
    void compute_logprobs(std::span<const float> scores, std::int32_t id) {
        top_candidates_.clear();
        top_logprobs_.clear();
        float max = 0;
        if (logprobs_top_ > 0) {
            detail::top_k_candidates(scores, static_cast<std::size_t>(logprobs_top_), top_candidates_);
            max = top_candidates_.front().score;  // not empty: the sampled id's score is finite
        } else {
            max = *std::max_element(scores.begin(), scores.end());
        }
        const double log_z = detail::log_sum_exp(scores, max);
        logprob_ = static_cast<double>(scores[static_cast<std::size_t>(id)]) - log_z;
        for (const detail::Candidate& c : top_candidates_) top_logprobs_.push_back({c.id, static_cast<double>(c.score) - log_z});
    }

    bool needs_transform() const {
        return params_.repetition_penalty != 1.0 || params_.presence_penalty != 0.0 ||
               params_.frequency_penalty != 0.0 || !params_.logit_bias.empty() || !params_.suppress_tokens.empty();
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
    std::int32_t logprobs_top_ = -1;  ///< set_logprobs
    double logprob_ = 0;
    std::vector<detail::Candidate> top_candidates_;
    std::vector<IdLogprob> top_logprobs_;
    std::span<const std::int32_t> suppress_next_;
    std::span<const std::uint64_t> allow_only_next_;
};

}  // namespace GEMMA4_ABI
}  // namespace gemma4
