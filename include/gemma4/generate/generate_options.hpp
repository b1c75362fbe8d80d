// What a generation call is asked for (GenerateOptions) and what it gives back
// (GenerationResult, FinishReason, GenerationStats): shared by Session, ChatSession and the Engine.
#pragma once

#include <gemma4/abi.hpp>

#include <gemma4/config.hpp>
#include <gemma4/error.hpp>
#include <gemma4/generate/sampler.hpp>
#include <gemma4/generate/speculative.hpp>
#include <gemma4/grammar/constraint.hpp>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace gemma4 {
inline namespace GEMMA4_ABI {

enum class FinishReason : std::uint8_t { EndToken, StopId, StopString, MaxTokens, ContextFull, Cancelled };

constexpr std::string_view finish_reason_name(FinishReason r) {
    switch (r) {
        case FinishReason::EndToken: return "end token";
        case FinishReason::StopId: return "stop id";
        case FinishReason::StopString: return "stop string";
        case FinishReason::MaxTokens: return "max tokens";
        case FinishReason::ContextFull: return "context full";
        case FinishReason::Cancelled: return "cancelled";
    }
    return "?";
}

struct GenerationStats {
    std::int64_t prompt_tokens = 0;     ///< ids prefilled by this call
    std::int64_t generated_tokens = 0;  ///< ids sampled by this call
    double prompt_seconds = 0;          ///< prefill time
    double generation_seconds = 0;      ///< time spent after the first token
    double time_to_first_token = 0;     ///< from the call to the first sampled id
    // Speculative decoding (GenerateOptions::speculative):
    std::int64_t drafted_tokens = 0;   ///< ids the drafter proposed and the target verified
    std::int64_t accepted_tokens = 0;  ///< of those, ids the target sampled too (emitted)
    std::int64_t decode_steps = 0;     ///< forward steps after the prefill

    /// accepted / drafted (0 without drafts).
    double acceptance_rate() const { return drafted_tokens ? static_cast<double>(accepted_tokens) / static_cast<double>(drafted_tokens) : 0; }

    double prompt_tokens_per_s() const { return prompt_seconds > 0 ? static_cast<double>(prompt_tokens) / prompt_seconds : 0; }
    double generation_tokens_per_s() const {
        return generation_seconds > 0 && generated_tokens > 1 ? static_cast<double>(generated_tokens - 1) / generation_seconds : 0;
    }
};

/// A sampled id's log-probability and the most likely alternatives at its step
/// (GenerateOptions::logprobs), from the distribution defined in generate/sampler.hpp: the
/// log-softmax of the logits after the penalties, logit_bias, suppression and a grammar's mask,
/// before temperature and the top-k/top-p/min-p cuts.
struct TokenLogprob {
    std::int32_t id = -1;
    double logprob = 0;
    std::vector<IdLogprob> top;  ///< most likely first; at most GenerateOptions::logprobs of them
};

struct GenerationResult {
    std::vector<std::int32_t> ids;  ///< sampled ids, the end token or stop id included when reached
    std::string text;               ///< their text, cut before a stop string
    /// One per id of `ids`, in order, when GenerateOptions::logprobs >= 0; else empty.
    std::vector<TokenLogprob> logprobs;
    FinishReason finish = FinishReason::MaxTokens;
    GenerationStats stats;
};

struct GenerateOptions {
    std::int64_t max_new_tokens = 256;
    /// The end ids and stop ids cannot be sampled (they are suppressed) until the reply has this
    /// many ids; max_new_tokens, stop strings, cancellation and the context still end it earlier.
    std::int64_t min_tokens = 0;
    SamplingParams sampling{};
    std::vector<std::int32_t> end_ids{};    ///< empty: the model's eos ids (config.json)
    std::vector<std::int32_t> stop_ids{};   ///< further ids that end generation
    std::vector<std::string> stop_strings{};
    /// Called for every sampled id with the text that became complete (may be empty). Return
    /// false to stop (FinishReason::Cancelled).
    std::function<bool(std::int32_t id, std::string_view text)> on_token{};
    /// Log-probabilities of the sampled ids (TokenLogprob): -1 none; 0 each sampled id's; 1 to
    /// kMaxTopLogprobs (20) also that many most likely ids of each step. They cost one pass for
    /// the maximum and one for a sum of exponentials over the vocabulary per sampled id.
    std::int32_t logprobs = -1;
    /// With logprobs >= 0: called with each sampled id's TokenLogprob just before on_token for
    /// that id (the reference is valid during the call only).
    std::function<void(const TokenLogprob&)> on_logprob{};
    /// Checked before every step; set from any thread to cancel.
    const std::atomic<bool>* cancel = nullptr;
    /// Prefill feeds at most this many ids per forward step.
    std::int64_t prefill_chunk = 512;
    /// A drafter and its draft lengths: several ids per forward step, same output.
    SpeculativeOptions speculative{};
    /// The reply is a sentence of this grammar (a GBNF grammar or a JSON Schema compiled against
    /// the tokenizer's vocabulary, grammar/constraint.hpp): before each sample, every id that
    /// cannot continue it is masked out, and the end ids are allowed only where it is complete.
    std::shared_ptr<const Constraint> constraint{};
    /// With a constraint: the ids that open and close a thought channel (<|channel>, <channel|>;
    /// ChatSession sets them when thinking is on). The reply may open with one; the constraint
    /// applies to what follows its close. {-1, -1}: none.
    std::array<std::int32_t, 2> thought_channel{-1, -1};
    /// With a constraint: ids that already begin the reply's sentence, outside the reply (a
    /// prompt that ends by opening the answer, as the server's forced tool call does). The
    /// grammar takes them first; GrammarError if it refuses them.
    std::vector<std::int32_t> constraint_prefix{};
};

/// InvalidArgument naming GenerateOptions::logprobs when it is outside -1..kMaxTopLogprobs.
inline void check_logprobs(const GenerateOptions& options) {
    if (options.logprobs < -1 || options.logprobs > kMaxTopLogprobs)
        throw InvalidArgument("GenerateOptions::logprobs must be -1 (off), 0 (the sampled ids') or at most " + std::to_string(kMaxTopLogprobs) +
                              " (top alternatives), not " + std::to_string(options.logprobs));
}

}  // namespace GEMMA4_ABI
}  // namespace gemma4
